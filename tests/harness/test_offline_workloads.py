"""How the offline analyst reads a workload the orchestrator runs: a restart or a back-off
restates a failure and is never its cause; what the orchestrator states as the reason
(OOMKilled, a failed probe) is the diagnosis itself; a state table's row is evidence like a log
line; the workload the question names is held as the subject; and a creation long before the
incident is not "the change". Each on a small incident of its own."""

from __future__ import annotations

from harness.inmemory import InMemoryKnowledge, InMemoryLogs, SqliteSqlSource
from harness.llm.offline.evidence import ChangeRow
from harness.llm.offline.lexicon import ORCHESTRATOR_DIAGNOSIS, RESTATEMENT, related_settings
from harness.llm.offline.reasoning import state_patterns, subject_of
from harness.logs import workload_of
from harness.ports import KnowledgeChunk, LogLine
from tests.harness.test_offline import assert_verified_diagnosis, diagnose
from tests.harness.test_offline_reasoning import burst, sql_ts, traffic

POD = "checkout-api-7d9f8b6c5d-xk2p9"
QUESTION = f"What is the issue with pod {POD} in namespace shop? It started around 10:00 UTC."


def back_off(count: int = 90) -> list[LogLine]:
    """The kubelet's events about the crash-looping pod, from 10:00: loud, and saying nothing new."""
    return burst(
        "checkout-api", "WARN", 120.0, count, "BackOff: Back-off restarting failed container checkout-api", 0.5
    )


def no_tables() -> SqliteSqlSource:
    return SqliteSqlSource({"deployments": (("id", "service", "version", "deployed_at"), [])})


def assert_fallback(run: object) -> None:
    result = run.result  # type: ignore[attr-defined]
    assert result.outcome.value == "fallback", result
    assert result.fallback_reason == "insufficient_evidence"


def test_a_pods_name_is_its_workloads_and_words_are_never_taken_for_generated_suffixes() -> None:
    assert workload_of(POD) == "checkout-api"
    assert workload_of("nightly-export-x7k2q") == "nightly-export"  # a Job's pod
    assert workload_of("redis-0") == "redis"  # a StatefulSet's pod: its name and an ordinal
    assert workload_of("payment-redis") == "payment-redis"  # "redis" has vowels: a word, not a suffix
    assert workload_of("checkout-api") == "checkout-api"
    assert subject_of(QUESTION, {"checkout-api", "fluent-bit", "shop"}) == {"checkout-api", "shop"}
    assert subject_of("Why is checkout-api-v2 slow?", {"checkout-api"}) == frozenset()


def test_restatements_and_diagnoses_are_told_apart() -> None:
    for restated in [
        "BackOff: Back-off restarting failed container app",
        "Job has reached the specified backoff limit",
        "KubePodCrashLooping",
    ]:
        assert RESTATEMENT.search(restated) and not ORCHESTRATOR_DIAGNOSIS.search(restated), restated
    for diagnosis in [
        "OOMKilled",
        "Last State: Terminated, Reason: Error, Exit Code: 137",
        'Back-off pulling image "registry.local/app:1.4.2"',
        "Readiness probe failed: HTTP probe failed with statuscode: 503",
        "FailedScheduling: 0/3 nodes are available: 3 Insufficient memory.",
        "Error: couldn't find key DB_HOST in ConfigMap shop/app-config",
        "pod has unbound immediate PersistentVolumeClaims",
        "The node was low on resource: ephemeral-storage.",
    ]:
        assert ORCHESTRATOR_DIAGNOSIS.search(diagnosis), diagnosis


def test_the_reason_the_container_printed_beats_the_restarts_it_caused() -> None:
    lines = traffic(["checkout-api", "fluent-bit"]) + back_off()
    # The container's own output: one line per start, just before each restart.
    lines += burst(
        "checkout-api", "ERROR", 119.8, 6, "x509: certificate has expired or is not yet valid: payments-gw.shop.svc", 9
    )
    docs = [
        KnowledgeChunk("co#1", "checkout-api", "Dependencies",
                       "checkout-api calls payments-gw over mutual TLS with a certificate from cert-manager.", 0.0),
    ]  # fmt: skip
    run = diagnose(QUESTION, knowledge=InMemoryKnowledge(docs), logs=InMemoryLogs(lines), sql=no_tables())

    assert_verified_diagnosis(run)
    assert "certificate has expired" in run.payload["root_cause"]
    assert "Back-off" not in run.payload["root_cause"]


def test_a_restart_loop_with_no_stated_reason_falls_back() -> None:
    run = diagnose(QUESTION, logs=InMemoryLogs(traffic(["checkout-api"]) + back_off()), sql=no_tables())

    assert_fallback(run)


def test_what_the_orchestrator_states_as_the_reason_is_the_diagnosis() -> None:
    lines = traffic(["checkout-api"])
    lines += burst(
        "checkout-api", "WARN", 120.0, 40, "Unhealthy: Readiness probe failed: HTTP probe failed with statuscode: 503"
    )
    run = diagnose(
        f"The pod {POD} never becomes Ready since 10:00 UTC. Why?", logs=InMemoryLogs(lines), sql=no_tables()
    )

    assert_verified_diagnosis(run)
    assert "Readiness probe failed" in run.payload["root_cause"]


def test_a_state_tables_row_is_evidence_when_no_log_line_gives_the_reason() -> None:
    sql = SqliteSqlSource(
        {
            "pod_status": (
                ("pod", "namespace", "phase", "last_state_reason", "exit_code", "restarts", "observed_at"),
                [
                    ("orders-db-0", "shop", "Running", "", 0, 0, sql_ts(125)),
                    (POD, "shop", "Running", "OOMKilled", 137, 14, sql_ts(125)),
                ],
            ),
            "deployments": (("id", "service", "version", "deployed_at"), []),
        }
    )
    run = diagnose(QUESTION, logs=InMemoryLogs(traffic(["checkout-api"]) + back_off()), sql=sql)

    assert_verified_diagnosis(run)
    assert "OOMKilled" in run.payload["root_cause"]
    quotes = [e["quote"] for f in run.payload["findings"] for e in f["evidence"]]
    assert any("OOMKilled" in q and POD in q for q in quotes), quotes


def test_another_components_warning_is_no_cause_of_the_subject() -> None:
    # The subject logs nothing wrong; a log shipper complains all along, louder from 10:00.
    lines = traffic(["checkout-api", "fluent-bit"])
    lines += burst(
        "fluent-bit", "ERROR", 119.0, 80, "[output:es:es.0] connection refused, retry in 10s: chunk {i}", 0.6
    )
    run = diagnose(QUESTION, logs=InMemoryLogs(lines), sql=no_tables())

    assert_fallback(run)


def test_a_dependency_the_subjects_errors_name_can_be_the_cause() -> None:
    lines = traffic(["checkout-api", "orders-db", "fluent-bit"])
    lines += burst(
        "checkout-api", "ERROR", 121.0, 60, "POST /checkout failed: orders-db query timed out after 5000ms", 0.5
    )
    lines += burst("orders-db", "ERROR", 118.0, 30, "Too many connections: max_connections=150 reached", 1)
    lines += burst("fluent-bit", "ERROR", 117.0, 40, "[output:es:es.0] connection refused, retry in 10s", 1)
    run = diagnose(QUESTION, logs=InMemoryLogs(lines), sql=no_tables())

    assert_verified_diagnosis(run)
    assert "max_connections" in run.payload["root_cause"]
    assert "fluent-bit" not in run.payload["root_cause"]


def test_a_workload_created_hours_before_is_not_the_change() -> None:
    lines = traffic(["checkout-api"])
    lines += burst("checkout-api", "ERROR", 121.0, 60, "Redis connection pool exhausted (max=16), waited 2000ms", 0.5)
    sql = SqliteSqlSource(
        {
            "deployments": (
                ("id", "service", "action", "summary", "deployed_at"),
                [(1, "checkout-api", "created", "checkout-api deployment created in namespace shop", sql_ts(0))],
            )
        }
    )
    run = diagnose(QUESTION, logs=InMemoryLogs(lines), sql=sql)

    assert_verified_diagnosis(run)
    assert "pool exhausted" in run.payload["root_cause"]
    assert "created" not in run.payload["root_cause"]
    # "around 10:00" gives no date: the report says which day it took
    assert any("gives no date" in note and "2026-12-01 10:00 UTC" in note for note in run.payload["limitations"])


def test_the_reason_a_template_would_mask_is_named_in_the_root_cause() -> None:
    # "3 Insufficient cpu": the count is masked in the template, the reason is not lost with it
    lines = traffic(["report-renderer"])
    lines += burst(
        "report-renderer", "WARN", 120.0, 30,
        "FailedScheduling: 0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are available: "
        "3 No preemption victims found for incoming pod.", 1,
    )  # fmt: skip
    run = diagnose(
        "report-renderer-7b9d6c8f5-4wtr8 has been Pending since 10:00 UTC. Why?",
        logs=InMemoryLogs(lines),
        sql=no_tables(),
    )

    assert_verified_diagnosis(run)
    assert "Insufficient cpu" in run.payload["root_cause"]


def test_a_mount_that_timed_out_restates_the_attach_error_beside_it() -> None:
    mount = (
        "FailedMount: Unable to attach or mount volumes: unmounted volumes=[data]: timed out waiting for the condition"
    )
    assert RESTATEMENT.search(mount)
    lines = traffic(["orders-db", "orders-api"])
    lines += burst("orders-db", "WARN", 119.0, 8, 'FailedAttachVolume: Multi-Attach error for volume "pvc-{i}" Volume'
                   " is already exclusively attached to one node and can't be attached to another", 10)  # fmt: skip
    lines += burst("orders-db", "WARN", 121.0, 8, mount, 10)
    # its client fails from earlier and louder, and names no reason of the database's
    lines += burst("orders-api", "ERROR", 115.0, 60, "HikariPool-1 - Connection is not available, request timed out", 2)
    run = diagnose(
        "orders-db-0 has been stuck in ContainerCreating since 10:00 UTC. What is wrong with it?",
        logs=InMemoryLogs(lines),
        sql=no_tables(),
    )

    assert_verified_diagnosis(run)
    assert "Multi-Attach" in run.payload["root_cause"]


def test_a_state_row_is_its_pods_workloads_when_no_service_of_the_logs_is_named() -> None:
    quote = "ledger-worker-7c9d5b8f4-q2mzx CrashLoopBackOff OOMKilled 137 ip-10-20-3-41"
    row = ChangeRow(
        "c1", quote, ["pod", "phase", "reason", "exit_code", "node"], None, frozenset(), False, "pod_status"
    )

    (pattern,) = state_patterns([row], {"push-gateway"})

    # the pod's workload, not the node's name with its last number taken for an ordinal
    assert pattern.services == ("ledger-worker",)


def test_a_warning_of_other_days_that_the_incidents_window_never_shows_is_no_cause() -> None:
    # Other days' probe failures, a day before and a day after, under one template with the
    # orchestrator's reason in it; the window around 10:00, read whole, shows none of them.
    lines = traffic(["ledger-worker"])
    probe = 'Unhealthy: Liveness probe failed: Get "http://10.0.0.{i}:8080/healthz": context deadline exceeded'
    lines += burst("ledger-worker", "WARN", -1440.0, 150, probe, 1)
    lines += burst("ledger-worker", "WARN", 1440.0, 150, probe, 1)
    lines += burst("ledger-worker", "WARN", 119.0, 3, "settlement batch for merchant group {i} skipped", 5)
    lines += burst("ledger-worker", "WARN", 120.0, 30, "BackOff: Back-off restarting failed container worker", 1)
    run = diagnose(
        "KubePodCrashLooping is firing for ledger-worker since about 10:00 UTC on 1 December. Why?",
        logs=InMemoryLogs(lines),
        sql=no_tables(),
    )

    assert "probe" not in str(run.payload.get("root_cause", ""))


def test_an_error_that_names_its_cause_is_not_outranked_by_its_echo_or_by_a_vaguer_warning() -> None:
    lines = traffic(["quote-service", "fx-rates"])
    lines += burst("quote-service", "WARN", 112.0, 2, "promotions lookup slow", 1)
    lines += burst(
        "quote-service", "ERROR", 120.0, 50,
        'fx lookup failed: Get "https://fx-rates.pricing.svc:8443/v1/rates": x509: certificate has expired', 0.5,
    )  # fmt: skip
    # the server sees the same handshakes fail, from half a minute later and as often
    lines += burst(
        "fx-rates", "ERROR", 120.6, 50, "http: TLS handshake error from 10.0.0.{i}:5000: bad certificate", 0.5
    )
    run = diagnose(
        "Since about 10:00 UTC every price quote fails with FX rates unavailable. What's the root cause?",
        logs=InMemoryLogs(lines),
        sql=no_tables(),
    )

    assert_verified_diagnosis(run)
    assert "certificate has expired" in run.payload["root_cause"]


def test_the_change_to_the_setting_an_error_is_about_explains_it() -> None:
    assert "arch" in related_settings("standard_init_linux.go:219: exec user process caused: exec format error")
    lines = traffic(["recommendation-svc"])
    lines += burst("recommendation-svc", "ERROR", 120.0, 20, "exec user process caused: exec format error", 3)
    lines += burst("recommendation-svc", "WARN", 120.5, 40, "BackOff: Back-off restarting failed container svc", 1.5)
    sql = SqliteSqlSource(
        {
            "config_changes": (
                ("id", "object", "field", "old_value", "new_value", "merged_at"),
                [
                    (1, "deployment/recommendation-svc", "env.MODEL_REFRESH_INTERVAL", "6h", "2h", sql_ts(100)),
                    (
                        2,
                        "nodepool/general",
                        "requirements[kubernetes.io/arch]",
                        "[amd64]",
                        "[amd64, arm64]",
                        sql_ts(80),
                    ),
                ],
            )
        }
    )
    run = diagnose(
        "KubePodCrashLooping: recommendation-svc-7c9d8f6b5-x2kqp keeps restarting since 10:00 UTC. What is wrong?",
        logs=InMemoryLogs(lines),
        sql=sql,
    )

    assert_verified_diagnosis(run)
    assert "arm64" in run.payload["root_cause"]


def test_a_server_listening_on_loopback_is_why_its_pods_connections_are_refused() -> None:
    """The probe is refused at the pod's address; the workload's own ordinary start-up line says
    it listens on 127.0.0.1 only: that line, which a search for warnings never returns, is why."""
    lines = traffic(["checkout-api"])
    lines.append(LogLine(ts=sql_ts(119.5).replace(" ", "T") + "Z", service="checkout-api", level="INFO",
                         message="Server listening at http://127.0.0.1:3000"))  # fmt: skip
    lines += burst(
        "checkout-api", "WARN", 120.0, 40,
        'Unhealthy: Readiness probe failed: Get "http://10.244.3.41:3000/health": dial tcp 10.244.3.41:3000: '
        "connect: connection refused", 0.5,
    )  # fmt: skip
    run = diagnose(QUESTION, logs=InMemoryLogs(lines), sql=no_tables())

    assert_verified_diagnosis(run)
    assert "127.0.0.1" in run.payload["root_cause"]


def test_a_setting_written_back_as_it_was_is_no_change() -> None:
    """Two rows of one ticket: the replica limit that grew, and the pool size "changed" from 10
    to 10. Only the first changed anything."""
    lines = traffic(["checkout-api", "orders-db"])
    lines += burst("orders-db", "FATAL", 118.0, 40, "sorry, too many clients already", 0.5)
    lines += burst("checkout-api", "ERROR", 120.0, 40, "FATAL: sorry, too many clients already", 0.5)
    sql = SqliteSqlSource(
        {
            "config_changes": (
                ("id", "workload", "parameter", "before", "after", "changed_at"),
                [
                    (1, "report-worker", "hpa.maxReplicas", "4", "16", sql_ts(112.0)),
                    (2, "report-worker", "DB_POOL_SIZE", "10", "10", sql_ts(112.0)),
                ],
            )
        }
    )
    run = diagnose(QUESTION, logs=InMemoryLogs(lines), sql=sql)

    assert_verified_diagnosis(run)
    assert "too many clients" in run.payload["root_cause"]
    assert "DB_POOL_SIZE" not in run.payload["root_cause"]


def test_a_reason_of_how_the_workload_is_built_is_not_explained_by_another_components_failure() -> None:
    """ "exec format error" (an image for another CPU): the database's readiness blip just before
    it, linked or not, explains nothing of it; the workload's own line is the diagnosis."""
    lines = traffic(["checkout-api", "orders-db"])
    lines += burst(
        "orders-db", "WARN", 117.0, 3, "Unhealthy: Readiness probe failed: 127.0.0.1:5432 - rejecting connections"
    )
    lines += burst("checkout-api", "ERROR", 120.0, 20, "exec /app/bin/checkout-api: exec format error", 0.5)
    lines += back_off(40)
    knowledge = InMemoryKnowledge(
        [KnowledgeChunk("d1", "checkout-api", "checkout-api", "checkout-api stores orders in orders-db.", 1.0)]
    )
    run = diagnose(QUESTION, logs=InMemoryLogs(lines), sql=no_tables(), knowledge=knowledge)

    assert_verified_diagnosis(run)
    assert "exec format error" in run.payload["root_cause"]
