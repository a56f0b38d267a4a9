"""What ties a line to the incident asked about, as an on-call engineer weighs it: the error the
question quotes is the symptom whoever logs it, a probe that failed while a pod started and then
passed is no cause, a measure under its threshold ran out of nothing, a change that shares only
a word everything uses explains nothing, a noise note's short quoted word is read as a word, and
a server's own limit logged as a warning weighs as an error.
Each on a small incident of its own (times are minutes after 08:00 UTC)."""

from __future__ import annotations

import pytest

from harness.inmemory import InMemoryKnowledge, InMemoryLogs, SqliteSqlSource
from harness.llm.offline.chat import sentences
from harness.llm.offline.evidence import ChangeRow, Pattern
from harness.llm.offline.lexicon import TIMED_OUT, salient
from harness.llm.offline.reasoning import (
    Evidence,
    _change_support,
    _onset_score,
    _quotes_the_symptom,
    documented_noise,
    quoted_messages,
    rank_causes,
    within_threshold,
)
from harness.ports import KnowledgeChunk, LogLine
from tests.harness.test_offline import assert_verified_diagnosis, diagnose
from tests.harness.test_offline_reasoning import at, burst, sql_ts, traffic, ts
from tests.harness.test_offline_reasons import config_changes
from tests.harness.test_offline_workloads import assert_fallback, no_tables


def deployments(*rows: tuple[str, str, float]) -> SqliteSqlSource:
    """A deployments table: (service, version, minutes after 08:00)."""
    columns = ("id", "service", "version", "finished_at")
    return SqliteSqlSource({"deployments": (columns, [(i, s, v, sql_ts(m)) for i, (s, v, m) in enumerate(rows, 1)])})


def test_a_question_quotes_messages_not_apostrophes() -> None:
    asked = (
        "Since 10:00 the pod's clients fail with 'request timed out: deadline ... elapsed' and `ECONNRESET by peer`."
    )
    assert quoted_messages(asked) == (("request timed out: deadline", "elapsed"), ("econnreset by peer",))
    assert quoted_messages("The team's on-call says it's slow") == ()


def test_the_error_the_question_quotes_is_the_symptom_whichever_workload_logs_it() -> None:
    # The question names the prefill workers (upgraded at 09:50, a startup probe failed once as
    # they came up) but quotes the frontend's error; the broker between them says why.
    lines = traffic(["llm-frontend", "prefill-worker", "nats"])
    lines += burst(
        "prefill-worker", "WARN", 114.0, 1, "Unhealthy: Startup probe failed: HTTP probe failed with statuscode: 503"
    )
    lines += burst(
        "llm-frontend", "ERROR", 122.0, 40,
        "Failed to generate completions: failed to route to prefill worker: NATS request to prefill.generate-{i} "
        "failed: request timed out: deadline has elapsed",
        1.0,
    )  # fmt: skip
    lines += burst(
        "nats", "ERROR", 121.5, 40, "10.42.6.16:38920 - cid:1373 - maximum payload exceeded: 1223632 vs 1048576"
    )
    run = diagnose(
        "Since about 10:00 UTC some chat completions fail with 'request timed out: deadline has elapsed' from the "
        "prefill route. The prefill workers were upgraded at 09:50 — are they too slow now? What is the root cause?",
        logs=InMemoryLogs(lines),
        sql=deployments(("prefill-worker", "0.9.2", 110.0)),
    )

    assert_verified_diagnosis(run)
    assert "maximum payload exceeded" in run.payload["root_cause"]


@pytest.mark.parametrize(
    ("refusals", "step"),
    [
        pytest.param(1, 0.5, id="one-refusal"),
        # probed every ten seconds while it took a minute to start: six refusals, then it passed
        pytest.param(6, 1 / 6, id="six-refusals-in-a-minute"),
    ],
)
def test_a_probe_that_failed_while_the_pod_started_and_then_passed_is_no_cause(refusals: int, step: float) -> None:
    # portal-web 8.4.0 went out at 09:32; its new pod refused the probe while starting. The
    # session-store timeouts from 09:41 say nothing of why.
    lines = traffic(["portal-web"])
    lines += burst(
        "portal-web", "WARN", 91.5, refusals,
        'Unhealthy: Readiness probe failed: Get "https://10.66.3.12:8443/health": dial tcp 10.66.3.12:8443: '
        "connect: connection refused",
        step,
    )  # fmt: skip
    lines += burst(
        "portal-web", "ERROR", 101.4, 8,
        "Could not load session with id {i}: OperationTimeoutException: Timeout waiting for value",
        1.5,
    )  # fmt: skip
    run = diagnose(
        "Since about 09:40 UTC customers get logged out of the portal; portal-web logs 'Timeout waiting for value'. "
        "What is the root cause?",
        logs=InMemoryLogs(lines),
        sql=deployments(("portal-web", "8.4.0", 92.0)),
    )

    assert_fallback(run)


def test_an_item_of_input_passed_over_is_handled_not_a_cause() -> None:
    # order-events 4.12.0 went out at 09:55 and skips a new kind of outbox row; the send timeouts
    # from 10:10 say nothing of why.
    lines = traffic(["order-events"])
    lines += burst(
        "order-events", "WARN", 116.0, 5, "Skipping outbox row 96{i}: unknown event type ORDER_GIFTWRAP", 3.0
    )
    lines += burst(
        "order-events", "ERROR", 130.0, 12,
        "Exception thrown when sending a message to topic order-events: TimeoutException: Expiring 3 record(s) "
        "for order-events-{i}: 30012 ms has passed since batch creation",
        1.5,
    )  # fmt: skip
    run = diagnose(
        "Since about 10:10 UTC order-events keeps failing to send with TimeoutException: Expiring records. The "
        "4.12.0 release went out at 09:55 — is it broken? What is the root cause?",
        logs=InMemoryLogs(lines),
        sql=deployments(("order-events", "4.12.0", 115.0)),
    )

    assert_fallback(run)


def test_a_measure_under_the_threshold_it_quotes_ran_out_of_nothing() -> None:
    assert within_threshold("outbox backlog 38 rows (threshold 500)")
    assert within_threshold("replication lag 30s, limit 60s")
    assert not within_threshold("promotion feed snapshot is 12 minutes old (threshold 10 minutes)")
    assert not within_threshold("quote took 1800 ms (budget 1500 ms)")
    assert not within_threshold("outbox backlog growing")  # no threshold: nothing to hold it to

    lines = traffic(["order-push"])
    lines += [
        LogLine(ts(60 + m), "order-push", "WARN", f"outbox backlog {20 + m % 17} rows (threshold 500)")
        for m in range(0, 110, 10)
    ]
    lines += burst(
        "order-push", "ERROR", 161.0, 12,
        "failed to push order {i}, will retry via outbox: TimeoutException: could not send within given timeout",
        1.0,
    )  # fmt: skip
    run = diagnose(
        "Since about 10:40 UTC order-push intermittently times out sending to the broker. We deployed 5.6.0 at "
        "10:00 — is that it? What is the root cause?",
        logs=InMemoryLogs(lines),
        sql=deployments(("order-push", "5.6.0", 120.0)),
    )

    assert_fallback(run)


def test_a_change_sharing_only_a_word_everything_uses_explains_nothing() -> None:
    # The replica stopped at 06:39 because the source had purged the binary logs it needed: the
    # expiry was cut the evening before. The report cache's TTL, changed eight minutes before,
    # shares nothing with it but "orders", which every line says.
    services = ["orders-report", "orders-api", "orders-mysql"]
    lines = traffic(services)
    lines += burst("orders-api", "WARN", 40.0, 6, "orders slow query on orders_items took {i}01 ms", 12.0)
    lines += burst(
        "orders-mysql", "ERROR", 111.0, 1,
        "Replica I/O for channel '': Got fatal error 13114 from source when reading data from binary log: "
        "'Cannot replicate because the source purged required binary logs.'",
    )  # fmt: skip
    lines += burst(
        "orders-report", "WARN", 115.0, 30, "[ReplicaFreshness] orders replica {i}00 s behind, serving stale orders"
    )
    sql = config_changes(
        (1, "orders-mysql-0", "binlog_expire_logs_seconds", "604800", "14400", "2026-11-30 17:45:00"),
        (2, "orders-report", "orders REPORT_CACHE_TTL", "300s", "60s", sql_ts(103)),
    )
    doc = KnowledgeChunk(
        "orders#1", "orders database", "Architecture",
        "orders-mysql-0 is the source; orders-mysql-1 a replica of the StatefulSet orders-mysql. orders-report "
        "reads from the replica orders-mysql-1.",
        0.0,
    )  # fmt: skip
    run = diagnose(
        "Since about 09:55 UTC the orders reports from orders-report show no new orders. What is the root cause?",
        knowledge=InMemoryKnowledge([doc]),
        logs=InMemoryLogs(lines),
        sql=sql,
    )

    assert_verified_diagnosis(run)
    assert "purged required binary logs" in run.payload["root_cause"]
    assert "binlog_expire_logs_seconds" in run.payload["root_cause"]
    assert "REPORT_CACHE_TTL" not in run.payload["root_cause"]


def test_a_word_nearly_everything_uses_ties_no_change_to_a_line() -> None:
    error = Pattern(
        "orders export failed: report template missing", 3, "ERROR", ("exporter",), at(110), at(120), "", "c1"
    )
    row = ChangeRow("c2", "billing orders REPORT_CACHE_TTL 300s 60s", [], at(100), salient("billing orders ttl"), True)
    ev = Evidence([error], 0, error, [row], set(), frozenset(), rarity={"order": 0.03, "billing": 0.5, "ttl": 0.5})

    assert _change_support(error, ev) == (0.0, None)
    ev.rarity["order"] = 0.3  # a word some lines and changes share: a topic
    assert _change_support(error, ev)[1] is row


def test_a_noise_notes_short_quoted_word_is_a_word_of_its_item() -> None:
    note = (
        "Known noise: invalid `_ga` cookie warnings, the exporter's `unknown key ignored`, image pulls of cms-preview"
    )
    cookie = Pattern(
        "Cookie.logInvalidHeader A cookie header was received [_ga_XYZ=GS1.1.<*>] that contained an invalid cookie.",
        4, "WARN", ("portal-web",), at(90), at(100), "A cookie header was received [_ga_XYZ=GS1.1.17] that contained "
        "an invalid cookie.", "c1",
    )  # fmt: skip
    exporter = Pattern("unknown key ignored: shard_id", 9, "WARN", ("exporter",), at(90), at(100), "", "c1")
    unnamed = Pattern("unknown field in the config ignored", 9, "WARN", ("exporter",), at(90), at(100), "", "c1")

    assert documented_noise(cookie, [note])
    assert documented_noise(exporter, [note])
    assert not documented_noise(unnamed, [note])


def test_a_proxys_lines_for_the_host_the_question_names_are_about_the_subject() -> None:
    # The dashboard itself logs one stale warning; the ingress tells of its virtual host: the
    # 502s, and why (the auth subrequest's answer has too big a header). Another virtual host's
    # refused connections during its own rollout are another site's story.
    lines = traffic(["kubernetes-dashboard", "ingress-nginx"])
    lines += burst("kubernetes-dashboard", "ERROR", 20.0, 1, "Metric client health check failed: the server is unable")
    lines += burst(
        "ingress-nginx", "ERROR", 100.0, 6,
        'connect() failed (111: Connection refused) while connecting to upstream, server: argocd.ops.example.internal',
        0.1,
    )  # fmt: skip
    for i in range(18):
        minute = 124.9 + i * 0.8
        lines += burst(
            "ingress-nginx", "ERROR", minute, 1,
            f'upstream sent too big header while reading response header from upstream, request: "GET /oauth2/auth '
            f'HTTP/1.1", host: "dash.ops.example.internal", client: 10.42.1.{i}',
        )  # fmt: skip
        lines += burst(
            "ingress-nginx", "ERROR", minute, 1,
            f'10.42.1.{i} - - "GET /api/v1/login HTTP/1.1" 502 559 "https://dash.ops.example.internal/" "Mozilla/5.0"',
        )  # fmt: skip
    run = diagnose(
        "Users see 502s on dash.ops.example.internal (Kubernetes Dashboard) a couple of minutes after they log in; "
        "argocd on the same ingress is fine. What is causing it?",
        logs=InMemoryLogs(lines),
        sql=deployments(("argocd-server", "v2.10.9", 99.5)),
    )

    assert_verified_diagnosis(run)
    assert "too big header" in run.payload["root_cause"]


def test_the_other_partys_account_of_the_same_moments_is_no_cause() -> None:
    # The broker closes the client's connections for missed heartbeats; the client says, in the
    # same second, that its connection was shut down. Nothing says why the heartbeats stopped.
    lines = traffic(["rabbitmq", "notification-dispatcher"])
    for minute in (122.75, 125.55, 128.8):
        lines += burst(
            "rabbitmq", "ERROR", minute, 1,
            "closing AMQP connection <0.145.62> (10.42.5.160:56444 -> 10.42.8.124:5672): missed heartbeats from "
            "client, timeout: 60s",
        )  # fmt: skip
    lines += burst(
        "notification-dispatcher", "WARN", 122.75, 1,
        "Connection shutdown: AMQP close-reason, initiated by Library, code=541, text='Unexpected Exception', "
        "cause=System.IO.EndOfStreamException: Reached the end of the stream",
    )  # fmt: skip
    run = diagnose(
        "Since about 10:00 UTC RabbitMQ keeps closing the notification-dispatcher connections with 'missed heartbeats "
        "from client, timeout: 60s'. What is the root cause?",
        logs=InMemoryLogs(lines),
        # (a change just before, to the client's message templates, explains no closed connection)
        sql=config_changes((1, "notification-templates ConfigMap", "templates", "77d0e19", "8f31c2a", sql_ts(115))),
    )

    assert_fallback(run)


def test_a_noise_notes_item_names_its_lines_by_their_words_not_when_they_happen() -> None:
    note = "Known noise: CoreDNS readiness 503s during its own autoscaling, checkout-api load shedding at peak"
    probe = Pattern(
        "Unhealthy: Readiness probe failed: HTTP probe failed with statuscode: <*>", 7, "WARN",
        ("coredns",), at(60), at(130), "Unhealthy: Readiness probe failed: HTTP probe failed with statuscode: 503", "c1",
    )  # fmt: skip
    liveness = Pattern(
        "Unhealthy: Liveness probe failed: HTTP probe failed", 7, "WARN", ("coredns",), None, None, "", "c1"
    )

    assert documented_noise(probe, [note])
    assert not documented_noise(liveness, [note])  # CoreDNS, but not its readiness


def test_what_the_teams_documents_call_noise_is_not_the_symptom_when_something_else_fits() -> None:
    # checkout-api sheds load at every peak (so its document says); the new pods the HPA asked
    # for are stuck creating their sandbox, and the CNI says why.
    lines = traffic(["checkout-api", "aws-node"])
    lines += burst("checkout-api", "WARN", 125.2, 30, "shedding load: inflight requests above limit", 0.5)
    lines += burst(
        "checkout-api", "WARN", 121.5, 25,
        'FailedCreatePodSandBox: Failed to create pod sandbox: failed to setup network for sandbox "{i}": plugin '
        'type="aws-cni" failed (add): failed to assign an IP address to container',
        0.7,
    )  # fmt: skip
    lines += burst(
        "aws-node", "WARN", 121.3, 25, "checkout-api pod IP: no free IP available in the prefix 10.50.62.224", 0.7
    )
    doc = KnowledgeChunk(
        "checkout#1", "checkout-api", "Operations",
        "checkout-api scales with its HPA; each pod takes an IP from the node's prefixes (aws-node). Known noise: "
        "checkout-api load shedding at peak.",
        0.0,
    )  # fmt: skip
    run = diagnose(
        "checkout-api is slow and shedding load since about 10:05 UTC: the HPA scaled it up but the new pods are stuck "
        "in ContainerCreating. What is the root cause?",
        knowledge=InMemoryKnowledge([doc]),
        logs=InMemoryLogs(lines),
        sql=no_tables(),
    )

    assert_verified_diagnosis(run)
    assert "no free IP available" in run.payload["root_cause"]
    assert "FailedCreatePodSandBox" in run.payload["conclusion"]  # what is wrong, not the load shedding


def test_what_begins_just_after_the_symptom_is_a_weaker_candidate_and_later_an_effect() -> None:
    def starting(minutes: float) -> Pattern:
        return Pattern("task killed", 3, "ERROR", ("worker",), at(minutes), at(130), "", "c1")

    began = at(120)
    assert _onset_score(starting(115), began) == 3.0  # minutes before: the usual lead of a cause
    assert _onset_score(starting(120.5), began) == 1.0  # half a minute after: what followed, or skewed clocks
    assert _onset_score(starting(125), began) == -2.0  # minutes after: an effect


def test_a_session_expired_for_a_timeout_is_a_wait_that_ran_out() -> None:
    for wait in [
        "Session timeout has elapsed while SUSPENDED. Injecting a session expiration. Elapsed ms: 30000",
        "Expiring session 0x1008b2, timeout of 30000ms exceeded",
        "lease expiration for member 3",
    ]:
        assert TIMED_OUT.search(wait), wait


def test_a_long_mount_failure_is_named_by_the_reason_at_its_end() -> None:
    # the orchestrator's FailedMount says a mount failed; the provider's error, at the end of its
    # long message, says why
    message = (
        'FailedMount: MountVolume.SetUp failed for volume "vault-secrets" : rpc error: code = Unknown desc = '
        "failed to mount secrets store objects for pod payments/payment-gateway-7c5d8f9b6-2qxkz, err: rpc error: "
        "code = Unknown desc = error making mount request: failed to login: Error making API request. URL: POST "
        "http://vault.vault.svc:8200/v1/auth/kubernetes/login Code: 503. Errors: * Vault is sealed"
    )
    lines = traffic(["payment-gateway"])
    lines += burst("payment-gateway", "WARN", 105.4, 20, message, 1.0)
    run = diagnose(
        "New payment-gateway pods in namespace payments are stuck in ContainerCreating since about 09:45 UTC. "
        "What is the root cause?",
        logs=InMemoryLogs(lines),
        sql=no_tables(),
    )

    assert_verified_diagnosis(run)
    assert "Vault is sealed" in run.payload["root_cause"]


def test_a_noise_note_may_leave_part_of_a_line_out_and_name_lines_by_their_level() -> None:
    text = "Known noise: WeasyPrint `Ignored ... unknown property` and font warnings, Celery clock drift."
    (note,) = sentences(text)  # an ellipsis ends no sentence
    ignored = Pattern(
        "Ignored <*> at <*> unknown property.", 19, "WARN", ("report-worker",), at(6), at(59),
        "Ignored `text-wrap: balance` at 88:3, unknown property.", "c1",
    )  # fmt: skip
    font = Pattern("Font-face 'Inter' cannot be loaded", 8, "WARN", ("report-worker",), at(6), at(46), "", "c1")
    failed = Pattern("Font-face 'Inter' cannot be loaded", 8, "ERROR", ("report-worker",), at(6), at(46), "", "c1")

    assert documented_noise(ignored, [note])
    assert documented_noise(font, [note])  # a font warning
    assert not documented_noise(failed, [note])  # not a font error


def _weighed(level: str, message: str) -> float:
    """The score of a candidate logged at ``level`` by the search cluster, an hour before the
    builds' errors that the cluster then refuses."""
    symptom = Pattern(
        "Search index update failed: Error <*> Forbidden: blocked by: [FORBIDDEN/<*>/index read-only]",
        40, "ERROR", ("docs-builder",), at(100), at(140), "", "c1",
    )  # fmt: skip
    candidate = Pattern(message, 25, level, ("es-data",), at(40), at(140), message, "c1")
    ev = Evidence(
        patterns=[symptom, candidate], ignored=0, symptom=symptom, rows=[], knowledge_words=set(), asked=frozenset()
    )
    return {p.level: score for score, p in rank_causes(ev)}[level]


def test_a_server_s_own_limit_logged_as_a_warning_weighs_as_the_same_line_at_error() -> None:
    # Elasticsearch logs its flood-stage watermark at WARN, RabbitMQ its memory alarm: what the
    # server refuses follows from it as from an error. A failed probe at WARN stays a warning,
    limit = (
        "flood stage disk watermark [95%] exceeded on [es-data-1], all indices on this node will be marked read-only"
    )
    assert _weighed("WARN", limit) == _weighed("ERROR", limit)
    probe = 'Unhealthy: Readiness probe failed: Get "http://10.0.0.5:9200/": context deadline exceeded'
    assert _weighed("WARN", probe) < _weighed("ERROR", probe)
    # nor is a service without endpoints (an ingress says so of a workload rolling out)
    endpoint = 'Service "shop/checkout" does not have any active Endpoint.'
    assert _weighed("WARN", endpoint) < _weighed("ERROR", endpoint)


def test_the_symptom_quoted_inside_another_line_is_the_symptom_again() -> None:
    # The error handler and the health check report the pool's own timeout, a little later than
    # the pool and with a prefix of their own: they say nothing of why the pool ran dry.
    lines = traffic(["loyalty-api"])
    timeout = "HikariPool-1 - Connection is not available, request timed out after 30000ms."
    lines += burst("loyalty-api", "ERROR", 120.0, 60, timeout, 0.5)
    lines += burst(
        "loyalty-api", "ERROR", 120.3, 20,
        f"Error handler threw an exception — java.sql.SQLTransientConnectionException: {timeout}",
        1.5,
    )  # fmt: skip
    lines += burst(
        "loyalty-api",
        "WARN",
        120.6,
        20,
        f"DataSource health check failed — SQLTransientConnectionException: {timeout}",
        1.5,
    )
    run = diagnose(
        "Since about 10:00 UTC loyalty-api answers 500s and its logs say 'Connection is not available'. "
        "What is the root cause?",
        logs=InMemoryLogs(lines),
        sql=no_tables(),
    )

    assert_fallback(run)


def test_a_server_s_line_that_a_client_s_error_quotes_is_no_restatement() -> None:
    said = "upstream request to the ledger timed out after <*> ms while waiting for the reply from the ledger"
    symptom = Pattern(said, 200, "ERROR", ("checkout",), at(60), at(90), "", "c")
    # the ledger gateway's own line, which the client's error quotes, is where it came from
    server = Pattern(f"push error: {said}", 300, "WARN", ("ledger-gateway",), at(59), at(90), "", "c")
    # the client's own error handler telling of it again is the symptom once more
    handler = Pattern(f"Error handler threw an exception: {said}", 20, "ERROR", ("checkout",), at(61), at(90), "", "c")
    assert not _quotes_the_symptom(server, symptom)
    assert _quotes_the_symptom(handler, symptom)
