"""How the offline analyst weighs evidence it has never seen: the reported time anchors the
incident, a proxy's complaint about its upstream points at the upstream, and a change is
credited with what begins right after it — each shown on a small incident of its own."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

from harness.inmemory import InMemoryKnowledge, InMemoryLogs, SqliteSqlSource
from harness.llm.offline.conversation import Conversation, Observation
from harness.llm.offline.evidence import ChangeRow, Pattern, change_rows
from harness.llm.offline.reasoning import Evidence, _blamed_services, _followed_by, _reports_elsewhere
from harness.logs import log_template
from harness.ports import KnowledgeChunk, LogLine
from harness.tools.evidence import QUERY_MYSQL
from tests.harness.test_offline import assert_verified_diagnosis, diagnose

T0 = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def ts(minutes: float) -> str:
    return at(minutes).isoformat().replace("+00:00", "Z")


def sql_ts(minutes: float) -> str:
    return at(minutes).strftime("%Y-%m-%d %H:%M:%S")


def traffic(services: list[str], seed: int = 5) -> list[LogLine]:
    """Three hours of ordinary INFO lines, and a chronic warning that says nothing."""
    rnd = random.Random(seed)
    lines = [
        LogLine(ts(m + rnd.random()), rnd.choice(services), "INFO", f"GET /health 200 in {rnd.randint(1, 9)}ms")
        for m in range(180)
        for _ in range(2)
    ]
    lines += [
        LogLine(ts(m + 0.3), "search-service", "WARN", f"Slow query on the search index took {600 + m}ms")
        for m in range(0, 180, 10)
    ]
    return lines


def burst(service: str, level: str, start: float, count: int, message: str, step: float = 0.5) -> list[LogLine]:
    return [LogLine(ts(start + i * step), service, level, message.format(i=i)) for i in range(count)]


def changes(rows: list[tuple[int, str, str, str, float]]) -> SqliteSqlSource:
    """A deployments table: (id, service, version, summary, minutes after 08:00)."""
    return SqliteSqlSource(
        {
            "deployments": (
                ("id", "service", "version", "change_summary", "deployed_at"),
                [(i, service, version, summary, sql_ts(m)) for i, service, version, summary, m in rows],
            )
        }
    )


# --- follow the blame -----------------------------------------------------------------------

GATEWAY_QUESTION = "Since about 10:00 UTC the gateway answers 502 for /checkout. What is the root cause?"


def gateway_incident() -> dict[str, object]:
    lines = traffic(["api-gateway", "checkout-service"])
    # The gateway tells of its upstream on every request, in words of a cause ("refused"); the
    # upstream itself dies now and then, and says why once each time.
    lines += burst("api-gateway", "ERROR", 120.5, 60, "GET /checkout 502 upstream=checkout-service request {i}", 0.4)
    lines += burst(
        "api-gateway",
        "ERROR",
        120.6,
        60,
        "connect() failed (111: Connection refused) while connecting to upstream {i}",
        0.4,
    )
    lines += burst(
        "checkout-service",
        "FATAL",
        120.0,
        4,
        "FATAL ERROR: Reached heap limit Allocation failed - JavaScript heap out of memory",
        6,
    )
    docs = [
        KnowledgeChunk("co#1", "checkout-service memory", "Symptoms",
                       "When checkout-service runs out of heap memory its pods restart and the gateway answers 502.", 0.0),
    ]  # fmt: skip
    sql = changes([(1, "checkout-service", "7.4.0", "cache rendered carts in process memory", 95)])
    return {"knowledge": InMemoryKnowledge(docs), "logs": InMemoryLogs(lines), "sql": sql}


def test_a_proxy_reporting_its_upstream_points_at_the_upstream() -> None:
    run = diagnose(GATEWAY_QUESTION, **gateway_incident())  # type: ignore[arg-type]

    assert_verified_diagnosis(run)
    root_cause = run.payload["root_cause"]
    assert "heap out of memory" in root_cause
    assert "7.4.0" in root_cause
    assert "Connection refused" not in root_cause


def test_services_named_by_other_services_warnings_are_the_suspects() -> None:
    def pattern(service: str, template: str) -> Pattern:
        return Pattern(template, 5, "ERROR", (service,), at(120), at(130), template, "call_1")

    gateway = pattern("api-gateway", "upstream connect error, upstream=<*>")
    checkout = pattern("checkout-service", "reserve stock failed: inventory-service answered <*>")
    inventory = pattern("inventory-service", "connection pool exhausted")

    blamed = _blamed_services([gateway, checkout, inventory])

    assert blamed == {"inventory-service"}
    assert _reports_elsewhere(gateway, blamed)  # "upstream"
    assert _reports_elsewhere(checkout, blamed)  # names another service
    assert not _reports_elsewhere(inventory, blamed)


# --- what follows a change -------------------------------------------------------------------


def _row(minutes: float, text: str) -> ChangeRow:
    return ChangeRow("call_9", text, ["service", "version"], at(minutes), frozenset(text.split()), True)


def test_a_change_is_credited_with_what_begins_after_it_and_before_the_next() -> None:
    def began(minutes: float) -> Pattern:
        return Pattern(f"error {minutes}", 3, "ERROR", ("svc",), at(minutes), at(minutes + 5), "x", "call_1")

    # new errors at 10:02, 10:03 and 10:20; a chronic warning from the start of the logs
    patterns = [began(122), began(123), began(140), Pattern("chronic", 90, "WARN", ("svc",), at(0), at(179), "x", "c")]
    early, late = _row(110, "svc 1.0"), _row(121, "dns 2.0")
    symptom = patterns[0]
    ev = Evidence(patterns, 0, symptom, [early, late], set(), frozenset())

    assert _followed_by(late, ev) == 2  # 10:02 and 10:03; 10:20 is more than 15 min after it
    assert _followed_by(early, ev) == 0  # the next change came before the errors did


DNS_QUESTION = "Since about 10:05 UTC creating an order answers 503. What is the root cause?"


def test_the_change_the_errors_follow_is_named_over_an_earlier_one_of_the_failing_service() -> None:
    lines = traffic(["order-service", "label-service", "api-gateway"])
    lines += burst("order-service", "ERROR", 121, 30, "route order {i}: lookup tms.dc1.corp.internal: no such host")
    lines += burst(
        "label-service", "ERROR", 120.8, 30, "print label {i}: getaddrinfo ENOTFOUND printer.dc1.corp.internal"
    )
    lines += burst("api-gateway", "ERROR", 121.5, 30, "POST /orders 503 upstream=order-service request {i}")
    sql = SqliteSqlSource(
        {
            "config_changes": (
                ("id", "service", "config_key", "old_value", "new_value", "changed_at"),
                [
                    (1, "order-service", "kafka.consumer.max.poll.records", "500", "200", sql_ts(115)),
                    (2, "kube-system/coredns", "Corefile forward block dc1.corp.internal", "present", "removed", sql_ts(120.5)),
                ],
            )
        }
    )  # fmt: skip
    docs = [
        KnowledgeChunk(
            "dns#1",
            "Cluster DNS",
            "Symptoms",
            "Names under dc1.corp.internal fail with no such host when the forward block is missing.",
            0.0,
        )
    ]

    run = diagnose(DNS_QUESTION, knowledge=InMemoryKnowledge(docs), logs=InMemoryLogs(lines), sql=sql)

    assert_verified_diagnosis(run)
    root_cause = run.payload["root_cause"]
    assert "coredns" in root_cause
    assert "max.poll.records" not in root_cause


# --- the reported time ----------------------------------------------------------------------

BALANCE_QUESTION = "Since about 10:15 UTC on 1 December GET /v1/balance fails for many users. What is the root cause?"


def test_the_reported_time_picks_the_symptom_that_began_then_over_an_older_one_alike() -> None:
    lines = traffic(["mobile-edge", "account-api", "billing-engine"])
    # Far more often, and in the question's words, since 08:50: users refused by the rate limit.
    lines += burst("mobile-edge", "ERROR", 50, 120, "GET /v1/balance failed for user {i}: rate limit exceeded", 1.0)
    # From 10:12, the incident: the executor that calls billing-engine is full.
    lines += burst(
        "mobile-edge", "ERROR", 132, 30, "GET /v1/balance failed for user {i}: account-api rejected the request"
    )
    lines += burst(
        "account-api", "ERROR", 131.5, 30, "RejectedExecutionException: executor billing queue full ({i} waiting)"
    )
    docs = [
        KnowledgeChunk(
            "acc#1",
            "account-api executors",
            "Symptoms",
            "When the billing executor queue is full, account-api rejects balance reads.",
            0.0,
        )
    ]

    run = diagnose(BALANCE_QUESTION, knowledge=InMemoryKnowledge(docs), logs=InMemoryLogs(lines))

    assert_verified_diagnosis(run)
    assert "executor billing queue full" in run.payload["root_cause"]
    assert "rate limit" not in run.published_text()


def test_prefixed_ids_are_masked_in_log_templates() -> None:
    assert log_template("GET /v1/accounts/acc_77568041/balance 503") == "GET /v1/accounts/<*>/balance <*>"
    assert log_template("Booking bk_b67xulzdvp confirmed") == "Booking <*> confirmed"
    assert log_template("max_connections reached") == "max_connections reached"


def test_a_change_row_quote_leaves_out_the_id_and_empty_cells() -> None:
    """A table that holds rows of several shapes has empty cells: the quote is the row's text,
    without its id, whether or not some of its cells are empty."""
    conv = Conversation(question="why?", previous_turn=None, system="", tools={})
    rows = [
        [7, "payment-service", None, "pool.max", "40", "8", "2026-11-03 09:52:10"],
        [8, None, "kube-system/coredns", "Corefile", "a", "b", "2026-11-03 09:53:10"],
    ]
    columns = ["id", "service", "target", "config_key", "old_value", "new_value", "changed_at"]
    conv.observations.append(
        Observation("c1", QUERY_MYSQL, {"sql": "SELECT * FROM config_changes"}, {"columns": columns, "rows": rows})
    )

    first, second = change_rows(conv)

    assert first.quote == "payment-service pool.max 40 8 2026-11-03 09:52:10"
    assert second.quote == "kube-system/coredns Corefile a b 2026-11-03 09:53:10"
    assert first.is_change and second.at == datetime(2026, 11, 3, 9, 53, 10, tzinfo=UTC)
