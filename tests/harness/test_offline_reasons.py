"""Why a failure happened, as an on-call engineer reads it: the node a pod runs on is part of
its story, what the team's documents call noise is no cause, a wait that ran out is the
symptom again while a full table or an exceeded watermark says why, a change to the very
setting an error is about explains it, and the system's own words for a reason are only
deepened by what speaks of the same thing. Each on a small incident of its own."""

from __future__ import annotations

from datetime import timedelta

from harness.inmemory import InMemoryKnowledge, InMemoryLogs, SqliteSqlSource
from harness.llm.base import ToolDefinition
from harness.llm.offline.conversation import Conversation, Observation
from harness.llm.offline.evidence import MAX_QUOTE_CHARS, Pattern, named
from harness.llm.offline.lexicon import ANY_REASON, ORCHESTRATOR_DIAGNOSIS, SETTING_NAMED, STATED_REASON
from harness.llm.offline.planning import plan
from harness.llm.offline.reasoning import _reason_before_waits, documented_noise
from harness.logs import log_template
from harness.ports import KnowledgeChunk, LogLine, LogQuery, Scalar
from harness.tools.evidence import QUERY_LOGS
from tests.harness.test_offline import assert_verified_diagnosis, diagnose
from tests.harness.test_offline_reasoning import at, burst, sql_ts, traffic
from tests.harness.test_offline_workloads import assert_fallback, no_tables

POD = "edge-proxy-6c9d7f5b8-q2x7m"
PROBE = 'Unhealthy: Readiness probe failed: Get "http://10.1.4.17:10254/healthz": context deadline exceeded'


def on_logs(question: str, lines: list[LogLine]) -> object:
    """The run of ``question`` over these log lines, with no change recorded."""
    return diagnose(question, logs=InMemoryLogs(lines), sql=no_tables())


def config_changes(*rows: tuple[Scalar, ...]) -> SqliteSqlSource:
    """A config_changes table: (id, target, config_key, old_value, new_value, changed_at)."""
    columns = ("id", "target", "config_key", "old_value", "new_value", "changed_at")
    return SqliteSqlSource({"config_changes": (columns, list(rows))})


def on_host(lines: list[LogLine], host: str) -> list[LogLine]:
    return [LogLine(line.ts, line.service, line.level, line.message, host) for line in lines]


def probe_failures() -> list[LogLine]:
    """The kubelet of node-a tells, from 10:00, that the pod's probe times out."""
    return on_host(burst("edge-proxy", "WARN", 120.5, 30, PROBE, 1.0), "node-a")


def kernel(host: str) -> list[LogLine]:
    """The kernel of ``host`` drops packets from 09:59:40 on (it states no level)."""
    return on_host(burst("kernel", "ERROR", 119.66, 200, "nf_conntrack: table full, dropping packet", 0.1), host)


QUESTION = f"Pod {POD} in namespace edge keeps failing its probes since about 10:00 UTC. What is the root cause?"


def test_what_goes_wrong_on_the_subjects_node_is_why_its_probes_time_out() -> None:
    lines = traffic(["edge-proxy"]) + probe_failures() + kernel("node-a")
    run = diagnose(QUESTION, logs=InMemoryLogs(lines), sql=no_tables())

    assert_verified_diagnosis(run)
    assert "table full" in run.payload["root_cause"]
    assert "probe" not in run.payload["root_cause"].lower()


def test_another_nodes_kernel_is_no_part_of_the_subjects_story() -> None:
    # The same kernel lines, on a node the pod does not run on: nothing ties them to it, and a
    # probe that times out says nothing of why.
    lines = traffic(["edge-proxy"]) + probe_failures() + kernel("node-b")
    run = diagnose(QUESTION, logs=InMemoryLogs(lines), sql=no_tables())

    assert "table full" not in str(run.payload.get("root_cause", ""))


BILLING = "Since about 10:00 UTC invoices from billing-api fail to render. What is the root cause?"


def billing_lines() -> list[LogLine]:
    lines = traffic(["billing-api"])
    lines += burst("billing-api", "ERROR", 121.0, 40, "invoice render failed: template service returned 500", 0.5)
    # loud, a little earlier, and in words of a cause: what the team knows to be harmless
    lines += burst("billing-api", "WARN", 118.0, 30, "fx rate provider unavailable, keeping stale rates for EUR", 0.3)
    return lines


def test_what_the_teams_document_calls_noise_is_no_cause() -> None:
    unnoted = diagnose(BILLING, logs=InMemoryLogs(billing_lines()), sql=no_tables())
    assert "fx rate provider unavailable" in unnoted.payload["root_cause"]  # without the note, it looks like one

    note = KnowledgeChunk(
        "billing#1", "billing-api", "Operations",
        "billing-api renders invoices through the template service. Known noise: fx rate provider "
        "unavailable warnings (its nightly maintenance); retries of the PDF upload.",
        0.0,
    )  # fmt: skip
    noted = diagnose(BILLING, knowledge=InMemoryKnowledge([note]), logs=InMemoryLogs(billing_lines()), sql=no_tables())
    assert "fx rate" not in str(noted.payload.get("root_cause", ""))


def test_a_change_to_the_setting_an_error_is_about_explains_it() -> None:
    lines = traffic(["ingress-nginx", "auth-api"])
    lines += burst(
        "ingress-nginx", "ERROR", 121.0, 12,
        "upstream prematurely closed connection while reading response header from upstream, request: POST /token",
        2.0,
    )  # fmt: skip
    lines += burst("auth-api", "WARN", 100.0, 4, "session store command slow, retrying", 3.0)
    sql = config_changes(
        (1, "auth-api", "BCRYPT_COST", "10", "12", sql_ts(60)),
        (2, "ingress-nginx", "upstream-keepalive-timeout", "4", "60", sql_ts(118)),
    )
    run = diagnose(
        "Since about 10:00 UTC some logins through ingress-nginx fail with 502. What is the root cause?",
        logs=InMemoryLogs(lines),
        sql=sql,
    )

    assert_verified_diagnosis(run)
    assert "upstream-keepalive-timeout" in run.payload["root_cause"]
    assert "BCRYPT" not in run.payload["root_cause"]


def test_the_systems_words_for_a_reason_are_deepened_only_by_what_speaks_of_the_same() -> None:
    untrusted = (
        "failed calling webhook: Post https://cert-webhook.certs.svc:443/mutate: "
        "x509: certificate signed by unknown authority"
    )
    lines = traffic(["deploy-job", "cert-webhook"])
    # the webhook restarted just before: its probe was refused for a moment
    lines += burst(
        "cert-webhook",
        "WARN",
        112.0,
        2,
        'Readiness probe failed: Get "http://10.1.2.3:6080/healthz": connection refused',
    )
    lines += burst("deploy-job", "ERROR", 121.0, 20, untrusted, 1.0)
    run = diagnose(
        "Since about 10:00 UTC deploy-job fails when it applies certificates. What is the root cause?",
        logs=InMemoryLogs(lines),
        sql=no_tables(),
    )

    assert_verified_diagnosis(run)
    assert "unknown authority" in run.payload["root_cause"]
    assert "probe" not in run.payload["root_cause"].lower()


def test_a_long_message_is_named_by_the_clause_that_states_its_reason() -> None:
    message = (
        "[2028-05-23T03:12:45,864][WARN ][o.e.c.r.a.DiskThresholdMonitor] [es-data-1] flood stage disk "
        "watermark [95%] exceeded on [Lq-N3tZ8QY6B648xAA8H0g][es-data-1][/usr/share/elasticsearch/data/nodes/0] "
        "free: 1.9gb[4.2%], all indices on this node will be marked read-only"
    )
    template = (
        "<*> flood stage disk watermark <*> exceeded on <*> free: <*> all indices on this node will be marked read-only"
    )
    assert len(message) > MAX_QUOTE_CHARS
    name = named(template, message, ANY_REASON)
    assert name.startswith("flood stage disk watermark [95%] exceeded") and name in message
    assert named(template, message) == "all indices on this node will be marked read-only"


def test_full_stores_and_reached_limits_are_stated_reasons_and_a_rate_limiter_is_not() -> None:
    for reason in [
        "nf_conntrack: table full, dropping packet",
        "etcdserver: mvcc: database space exceeded",
        "memory resource limit alarm set on node rabbit@rabbitmq-0",
        "OOM command not allowed when used memory > 'maxmemory'",
        "failed to get CPU utilization: missing request for CPU",
        "x509: certificate signed by unknown authority",
        "DB::Exception: Too many parts (300). Merges are processing significantly slower than inserts.",
        "maximum payload exceeded: 1223632 vs 1048576",
        "grpc: received message larger than max (4561623 vs. 4194304)",
        "WARNING: [pool www] server reached pm.max_children setting (8), consider raising it",
        "Code: 503. Errors: * Vault is sealed",
        "PRECONDITION_FAILED - delivery acknowledgement on channel 1 timed out. Timeout value used: 1800000 ms",
        "upstream sent too big header while reading response header from upstream",
        "user=prod-eu: per-user series limit of 1500000 exceeded (err-mimir-max-series-per-user)",
        "Error opening new searcher. exceeded limit of maxWarmingSearchers=2, try again later.",
        "Connection leak detection triggered for org.postgresql.jdbc.PgConnection@762bf6ae on thread exec-3",
        "AADSTS7000222: The provided client secret keys for app '6f1c9a' are expired.",
    ]:
        assert STATED_REASON.search(reason), reason
    assert ORCHESTRATOR_DIAGNOSIS.search("Cannot evict pod as it would violate the pod's disruption budget.")
    for symptom in [
        "rate limit exceeded",
        "rate limit of 100 requests exceeded",
        "time limit of 30s exceeded",
        "429 Too Many Requests",
        "request timed out after 5000 ms",
        "giving up after too many retries",
        "reached the checkout page",
        "response larger than usual",
    ]:
        assert not STATED_REASON.search(symptom), symptom


def test_lines_with_a_host_carry_it_into_their_template() -> None:
    logs = InMemoryLogs(kernel("node-a") + kernel("node-c"))

    (template,) = logs.query(LogQuery("", level="WARN")).templates
    assert template.hosts == ("node-a", "node-c")


def test_a_wait_for_a_lock_does_not_say_who_holds_it() -> None:
    lines = traffic(["schema-migrator", "orders-api"])
    lines += burst(
        "schema-migrator", "ERROR", 121.0, 30, "Error 1205: Lock wait timeout exceeded; try restarting transaction", 1.0
    )
    assert_fallback(
        on_logs(
            "The schema migration keeps failing at cut-over since about 10:00 UTC with lock wait timeouts. "
            "What is holding the lock?",
            lines,
        )
    )


def test_a_consumers_expiring_sessions_are_the_rebalances_again() -> None:
    lines = traffic(["scorer"])
    lines += burst("scorer", "ERROR", 121.0, 20, "Heartbeat failed for group SCORING because it is rebalancing", 2.0)
    lines += burst(
        "scorer",
        "ERROR",
        120.0,
        20,
        "Marking the coordinator dead (node 0) for group SCORING: Heartbeat session expired.",
        2.0,
    )
    assert_fallback(
        on_logs(
            "The SCORING consumer group of scorer keeps rebalancing since about 10:00 UTC. What is causing it?",
            lines,
        )
    )


def test_a_failure_the_question_already_names_is_not_its_own_answer() -> None:
    lines = traffic(["quote-fetcher"])
    lines += burst(
        "quote-fetcher", "WARN", 121.0, 6,
        "request to partner-api.example.com failed, retrying: java.net.UnknownHostException: failed to resolve "
        "'partner-api.example.com'",
        20.0,
    )  # fmt: skip
    asked = "quote-fetcher logs a few 'failed to resolve' warnings a day since 10:00 UTC; retries work. What is the root cause?"
    assert_fallback(diagnose(asked, logs=InMemoryLogs(lines), sql=no_tables()))
    # asked without those words, the failure to resolve is what the evidence shows
    told = diagnose(
        "quote-fetcher has warnings since 10:00 UTC. What is wrong?", logs=InMemoryLogs(lines), sql=no_tables()
    )
    assert "failed to resolve" in told.payload["root_cause"]


def test_a_noise_note_quoting_one_query_does_not_excuse_every_slow_one() -> None:
    def pattern(text: str) -> Pattern:
        return Pattern(text, 3, "WARN", ("orders-db",), None, None, text, "call_1")

    notes = [
        "The finance export logs a few `Query exceeded 2000 ms` lines for `FinanceExport.streamSettled`; expected.",
        "Known noise: `MySQLDialect does not need to be specified` and `open-in-view is enabled by default`.",
        "Known noise: stale fx rate cache warnings; WordPress scanners (404s).",
    ]
    assert not documented_noise(pattern("Query exceeded 2000 ms: OrderRepository.findByStatus, full table scan"), notes)
    assert documented_noise(pattern("Query exceeded 2000 ms: FinanceExport.streamSettled took 2400 ms"), notes)
    assert documented_noise(pattern("spring.jpa.open-in-view is enabled by default"), notes)
    assert documented_noise(pattern("fx rate cache stale for EUR, serving stale rates"), notes)
    assert not documented_noise(pattern("rate limiter rejected request"), notes)


def test_what_the_cloud_records_happening_is_read_as_a_change() -> None:
    lines = traffic(["ledger-api"])
    lines += burst(
        "ledger-api", "ERROR", 121.0, 40, "ledger-db: Failed to acquire connection from pool (ledger-db-secret)", 1.0
    )
    sql = SqliteSqlSource(
        {
            "cloud_events": (
                ("event_time", "source", "event_name", "resource", "detail"),
                [
                    (sql_ts(60), "rds", "RDS-EVENT-0281", "ledger-db", "minor version upgrade completed"),
                    (sql_ts(118), "secretsmanager", "RotationSucceeded", "ledger-db-secret", "AWSCURRENT moved"),
                ],
            )
        }
    )
    run = diagnose(
        "Since about 10:00 UTC ledger-api cannot get database connections. What is the root cause?",
        logs=InMemoryLogs(lines),
        sql=sql,
    )

    assert_verified_diagnosis(run)
    assert "RotationSucceeded" in run.payload["root_cause"]


def test_a_reason_goes_before_the_waits_only_when_it_began_just_before_them() -> None:
    def pattern(text: str, first: float, last: float) -> Pattern:
        return Pattern(text, 9, "ERROR", ("svc",), at(first), at(last), text, "call_1")

    wait = pattern(PROBE, 120.5, 150)
    just_before = pattern("nf_conntrack: table full, dropping packet", 119.6, 150)
    days_before = pattern("nf_conntrack: table full, dropping packet", 120 - 2 * 24 * 60, 125 - 2 * 24 * 60)
    assert just_before.first and days_before.first and days_before.first < just_before.first - timedelta(days=1)

    assert _reason_before_waits([(9.0, wait), (6.0, just_before)])[0][1] is just_before
    assert _reason_before_waits([(9.0, wait), (6.0, days_before)])[0][1] is wait


def test_a_name_that_does_not_resolve_is_the_resolvers_story() -> None:
    lines = traffic(["storefront-api", "coredns"])
    lines += burst(
        "coredns", "FATAL", 119.3, 14, 'plugin/loop: Loop (127.0.0.1:34614 -> :53) detected for zone ".".', 60.0 / 14
    )
    lines += burst(
        "storefront-api",
        "ERROR",
        120.5,
        60,
        "upstream request failed: getaddrinfo EAI_AGAIN payments-api.payments.svc",
        0.5,
    )
    run = diagnose(
        "Since about 10:00 UTC storefront-api cannot reach payments-api and checkout fails. What is the root cause?",
        logs=InMemoryLogs(lines),
        sql=no_tables(),
    )

    assert_verified_diagnosis(run)
    assert "Loop" in run.payload["root_cause"] and "(coredns)" in run.payload["root_cause"]


def test_the_same_events_told_by_two_lines_are_one_symptom() -> None:
    lines = traffic(["thumbnailer"])
    # the pool logs each killed worker, and 60 ms later the task that worker held fails
    lines += burst(
        "thumbnailer", "ERROR", 120.0, 12, "Process 'ForkPoolWorker-2' exited with 'signal 9 (SIGKILL)'", 5.0
    )
    lines += burst(
        "thumbnailer",
        "ERROR",
        120.001,
        12,
        "Task handler raised error: WorkerLostError('Worker exited prematurely')",
        5.0,
    )
    assert_fallback(
        on_logs(
            "Since about 10:00 UTC thumbnailer logs WorkerLostError for some tasks. What is the root cause?",
            lines,
        )
    )


def test_what_the_question_tells_of_is_not_its_own_cause() -> None:
    lines = traffic(["notifier", "rabbitmq"])
    lines += burst("rabbitmq", "WARN", 121.0, 16, "closing AMQP connection <0.{i}.62> (10.0.0.5:5672 -> notifier)", 1.5)
    lines += burst("notifier", "ERROR", 121.1, 16, "Connection shutdown: AMQP close-reason, reconnecting", 1.5)
    sql = config_changes((1, "rabbitmq", "amqp connection collect_statistics_interval", "5000", "10000", sql_ts(118)))
    run = diagnose(
        "Since about 10:00 UTC notifier logs a connection shutdown and reconnects: RabbitMQ keeps closing its AMQP "
        "connections. What is the root cause?",
        logs=InMemoryLogs(lines),
        sql=sql,
    )

    assert_fallback(run)


def test_a_long_message_without_a_stated_reason_is_named_by_its_headline() -> None:
    template = (
        "Wrong mongod version: UPGRADE PROBLEM: Found an invalid featureCompatibilityVersion document (ERROR: <*>: "
        "see the release notes of the compatibility upgrade :: caused by :: Invalid feature compatibility version value"
    )
    example = template.replace("<*>", "Location4926900") + " " + "x" * MAX_QUOTE_CHARS
    assert named(template, example).startswith("Wrong mongod version: UPGRADE PROBLEM")


def test_a_long_message_that_names_a_setting_is_named_by_that_clause() -> None:
    message = (
        "[Consumer clientId=consumer-balance-sync-1, groupId=balance-sync] This member will leave the group "
        "because consumer poll timeout has expired. This means the time between subsequent calls to poll() was "
        "longer than the configured max.poll.interval.ms, which typically implies that the poll loop is spending "
        "too much time processing messages."
    )
    assert len(message) > MAX_QUOTE_CHARS
    name = named(log_template(message), message, ANY_REASON, SETTING_NAMED)
    assert name.startswith("This means the time between") and "max.poll.interval.ms" in name


def test_a_jobs_failure_hours_before_the_alert_is_what_the_alert_is_about() -> None:
    lines = traffic(["geo-api", "geo-refresh"])
    # the nightly import fails at 08:05 and 08:10; the stale-data alert fires two hours later
    lines += burst(
        "geo-refresh",
        "ERROR",
        5.0,
        2,
        "import aborted: SqlError: Got a packet bigger than 'max_allowed_packet' bytes",
        5.0,
    )
    lines += burst("geo-api", "WARN", 130.0, 6, "geo dataset is 26.{i}h old, serving stale country data", 5.0)
    run = diagnose(
        "GeoDatasetStale fired at 10:10 UTC: the geo-refresh job failed earlier and geo-api serves stale data. "
        "What is the root cause?",
        logs=InMemoryLogs(lines),
        sql=no_tables(),
    )

    assert_verified_diagnosis(run)
    assert "max_allowed_packet" in run.payload["root_cause"]


def test_a_refused_loopback_address_is_what_a_change_to_localhost_explains() -> None:
    lines = traffic(["edge-nginx", "social-app"])
    lines += burst(
        "edge-nginx", "ERROR", 121.0, 40,
        'connect() failed (111: Connection refused) while connecting to upstream, upstream: "http://[::1]:8080/api"',
        0.5,
    )  # fmt: skip
    sql = SqliteSqlSource(
        {
            "config_changes": (
                ("id", "target", "summary", "changed_at"),
                [
                    (1, "certbot", "renewal key_type = ecdsa", sql_ts(100)),
                    (2, "social site config", "backend address now localhost (docs example)", sql_ts(119)),
                ],
            )
        }
    )
    run = diagnose(
        "Since about 10:00 UTC edge-nginx answers 502 for the social app. What is the root cause?",
        logs=InMemoryLogs(lines),
        sql=sql,
    )

    assert_verified_diagnosis(run)
    assert "localhost" in run.payload["root_cause"]


def test_a_date_without_a_year_read_empty_once_reads_the_years_before_at_once() -> None:
    question = "Since about 10:00 UTC on 1 December invoices from billing-api fail. What is the root cause?"
    tools = {QUERY_LOGS: ToolDefinition(QUERY_LOGS, "", {})}
    conv = Conversation(question=question, previous_turn=None, system="", tools=tools, tool_steps=2)
    # the busy store's warnings are of 2030; that year's 1 December was read and held nothing
    conv.observations.append(
        Observation(
            "c1",
            QUERY_LOGS,
            {"query": "", "level": "WARN", "limit": 100},
            {
                "total": 500,
                "returned": 100,
                "templates": [
                    {
                        "template": "disk quota exceeded on /data",
                        "count": 500,
                        "level": "ERROR",
                        "services": ["other-api"],
                        "first_ts": "2030-11-20T09:00:00Z",
                        "last_ts": "2030-12-05T09:00:00Z",
                        "example": "disk quota exceeded on /data",
                    },
                ],
            },
        )
    )
    empty = {"query": "", "level": "WARN", "start": "2030-12-01T09:00:00Z", "end": "2030-12-01T10:15:00Z", "limit": 100}
    conv.observations.append(Observation("c2", QUERY_LOGS, empty, {"total": 0, "returned": 0}))

    starts = [args["start"][:10] for tool, args in plan(conv) if tool == QUERY_LOGS and args.get("start")]

    assert starts == ["2029-12-01", "2028-12-01", "2027-12-01", "2026-12-01"]
