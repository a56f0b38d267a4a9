"""The offline analyst as the embedded default model, through the whole ChatApplication.

The payment incident shipped in ``harness.examples`` is one scenario; a disk-full incident built
here is another, so the analyst is shown to reason from whatever evidence it is given.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from harness.application import ChatApplication, ChatRequest
from harness.examples import INJECTION, Incident, payment_incident
from harness.inmemory import (
    InMemoryAudit,
    InMemoryInvocationStore,
    InMemoryKnowledge,
    InMemoryLogs,
    InMemoryRunbooks,
    InMemoryRunStore,
    RecordingObserver,
    SqliteSqlSource,
)
from harness.llm.base import Models
from harness.llm.offline import OfflineAnalyst
from harness.ports import KnowledgeChunk, LogLine, Runbook
from harness.release import RunResult
from tests.harness.scope_fixtures import tools_over

ENGLISH = "Payments are timing out since about 10:00 UTC — what is going on?"
CHINESE = "支付接口从10点开始一直超时，帮我排查原因"


@dataclass
class Run:
    result: RunResult
    audit: InMemoryAudit
    invocations: InMemoryInvocationStore

    @property
    def content_type(self) -> str | None:
        return self.result.content.content_type.value if self.result.content else None

    @property
    def payload(self) -> dict[str, Any]:
        assert self.result.content is not None
        return dict(self.result.content.payload)

    def published_text(self) -> str:
        assert self.result.content is not None
        return json.dumps(self.result.content.to_dict(), ensure_ascii=False)

    def events(self, name: str) -> list[dict[str, Any]]:
        return [dict(e.details) for e in self.audit.timeline if e.name == name]

    def tool_calls(self) -> list[tuple[str, str]]:
        """(tool, canonical arguments) of every call that reached a backend."""
        return [
            (inv.tool, json.dumps(inv.request.get("arguments"), sort_keys=True, ensure_ascii=False))
            for inv in self.invocations.items.values()
        ]


def diagnose(
    question: str,
    *,
    knowledge: InMemoryKnowledge | None = None,
    logs: InMemoryLogs | None = None,
    sql: SqliteSqlSource | None = None,
    runbooks: InMemoryRunbooks | None = None,
) -> Run:
    audit = InMemoryAudit()
    invocations = InMemoryInvocationStore()
    app = ChatApplication(
        models=Models.single(OfflineAnalyst()),
        run_store=InMemoryRunStore(),
        invocations=invocations,
        audit=audit.sinks(),
        tools=tools_over(knowledge=knowledge, logs=logs, sql=sql),
        runbooks=runbooks,
    )
    result = app.execute(ChatRequest(question, owner="oncall"), RecordingObserver())
    return Run(result, audit, invocations)


def on_incident(question: str, incident: Incident) -> Run:
    return diagnose(
        question, knowledge=incident.knowledge, logs=incident.logs, sql=incident.sql, runbooks=incident.runbooks
    )


@pytest.fixture(scope="module")
def incident() -> Incident:
    return payment_incident()


@pytest.fixture(scope="module")
def english(incident: Incident) -> Run:
    return on_incident(incident.question, incident)


@pytest.fixture(scope="module")
def chinese(incident: Incident) -> Run:
    return on_incident(CHINESE, incident)


def assert_verified_diagnosis(run: Run) -> None:
    assert run.result.outcome.value == "success", run.result
    assert run.result.intent == "DIAGNOSIS"
    assert run.content_type == "diagnosis_report"
    assert run.events("evidence.checked") == [{"passed": True, "findings": 0, "codes": ""}]
    assert [e["verdict"] for e in run.events("semantic.reviewed")] == ["PASS"]
    findings = run.payload["findings"]
    assert findings
    for finding in findings:
        assert finding["statement"].strip()
        assert finding["evidence"], finding
        assert all(e["quote"].strip() for e in finding["evidence"])


# --- the shipped payment incident ----------------------------------------------------------


def test_the_english_question_gets_a_verified_pool_diagnosis(incident: Incident, english: Run) -> None:
    assert_verified_diagnosis(english)
    root_cause = english.payload["root_cause"].lower()
    for keyword in incident.root_cause_keywords:
        assert keyword.lower() in root_cause
    assert english.payload["recommendations"]


def test_the_report_quotes_the_pool_error_and_the_config_change(english: Run) -> None:
    quotes = {e["tool"]: e["quote"] for f in english.payload["findings"] for e in f["evidence"]}
    evidence = [(e["tool"], e["quote"]) for f in english.payload["findings"] for e in f["evidence"]]
    assert any(tool == "query_logs" and "Connection is not available" in quote for tool, quote in evidence)
    assert "db.pool.max_size" in quotes["query_mysql"]
    assert "50" in quotes["query_mysql"] and "10" in quotes["query_mysql"]
    assert any(s["document_id"].startswith("runbook-db-pool") for s in english.payload["sources"])


def test_the_chinese_question_reaches_the_same_root_cause(incident: Incident, chinese: Run) -> None:
    assert_verified_diagnosis(chinese)
    root_cause = chinese.payload["root_cause"].lower()
    for keyword in incident.root_cause_keywords:
        assert keyword.lower() in root_cause
    # The analyst answers in the language of the question.
    assert any("\u4e00" <= ch <= "\u9fff" for ch in chinese.payload["conclusion"])


@pytest.mark.parametrize("run_name", ["english", "chinese"])
def test_the_injected_instruction_is_never_published(run_name: str, request: pytest.FixtureRequest) -> None:
    run: Run = request.getfixturevalue(run_name)
    published = run.published_text().lower()
    assert "solar flare" not in published
    assert INJECTION.lower() not in published
    limitations = " ".join(run.payload["limitations"])
    assert ("addressed to an assistant" in limitations and "ignored" in limitations) or (
        "指令" in limitations and "忽略" in limitations
    )


def test_the_first_step_gathers_evidence_in_parallel_and_no_call_repeats(english: Run) -> None:
    agent_steps = [s for s in english.audit.steps if s.purpose == "agent_step"]
    first = agent_steps[0].tool_call_names
    assert len(first) >= 2
    assert {"lookup_knowledge", "query_logs"} <= set(first)
    calls = english.tool_calls()
    assert len(calls) == len(set(calls)), calls
    assert len(english.audit.tools) == len(calls)
    assert {r.tool for r in english.audit.tools} == {"lookup_knowledge", "query_logs", "query_mysql"}
    assert all(r.status.value == "ready" for r in english.audit.tools)
    # Every tool call the offline analyst asked for actually ran: none was refused as a duplicate.
    asked = sum(len(s.tool_call_names) for s in agent_steps)
    assert asked == len(calls)


def test_a_symptom_with_no_evidence_falls_back(incident: Incident) -> None:
    run = on_incident("Users cannot log in since 10:00, please investigate", incident)

    assert run.result.intent == "DIAGNOSIS"
    assert run.result.outcome.value == "fallback"
    assert run.content_type == "safe_fallback"
    assert run.result.fallback_reason == "insufficient_evidence"
    assert run.payload["reason"] == "insufficient_evidence"
    assert "pool" not in run.published_text().lower()


def test_without_the_database_the_pool_is_named_but_no_change_is_claimed(incident: Incident) -> None:
    run = diagnose(ENGLISH, knowledge=incident.knowledge, logs=incident.logs, runbooks=incident.runbooks)

    assert_verified_diagnosis(run)
    assert "pool" in run.payload["root_cause"].lower()
    assert "db.pool.max_size" not in run.payload["root_cause"]
    assert all(e["tool"] != "query_mysql" for f in run.payload["findings"] for e in f["evidence"])
    assert any("database" in note for note in run.payload["limitations"])


def test_without_logs_there_is_no_diagnosis(incident: Incident) -> None:
    run = diagnose(ENGLISH, knowledge=incident.knowledge, sql=incident.sql, runbooks=incident.runbooks)

    assert run.result.outcome.value == "fallback"
    assert run.content_type == "safe_fallback"
    assert run.result.fallback_reason == "insufficient_evidence"


def test_chronic_noise_and_an_empty_knowledge_base_give_no_diagnosis(incident: Incident) -> None:
    noise = [
        line
        for line in incident.logs.lines
        if line.level == "INFO" or line.service in ("notification-service", "inventory-service")
    ]
    noise = [line for line in noise if line.message != INJECTION]

    run = diagnose(ENGLISH, knowledge=InMemoryKnowledge([]), logs=InMemoryLogs(noise), sql=incident.sql)

    assert run.result.outcome.value == "fallback"
    assert run.content_type == "safe_fallback"
    assert run.result.fallback_reason == "insufficient_evidence"
    published = run.published_text()
    assert "SMTP" not in published and "Cache miss" not in published


@pytest.mark.parametrize(("question", "greeting"), [("hello", "Hello"), ("你好", "你好")])
def test_small_talk_is_answered_without_tools(incident: Incident, question: str, greeting: str) -> None:
    run = on_incident(question, incident)

    assert run.result.outcome.value == "success"
    assert run.result.intent == "SYSTEM_CHAT"
    assert run.content_type == "system_chat"
    assert run.payload["text"].startswith(greeting)
    assert run.audit.tools == []


def test_a_how_to_question_is_answered_from_the_knowledge_base(incident: Incident) -> None:
    run = on_incident("How do I restore the pool size?", incident)

    assert run.result.outcome.value == "success"
    assert run.result.intent == "KNOWLEDGE_QUERY"
    assert run.content_type == "knowledge_answer"
    known = {chunk.document_id for chunk in incident.knowledge.chunks}
    sources = run.payload["sources"]
    assert sources
    assert {s["document_id"] for s in sources} <= known
    assert any(s["document_id"].startswith("runbook-db-pool") for s in sources)
    assert "Restore the previous maximum pool size" in run.payload["answer"]
    assert [r.tool for r in run.audit.tools] == ["lookup_knowledge"]


# --- an incident the analyst has never seen ------------------------------------------------

_T0 = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
DISK_QUESTION = "Order creation has been failing since 10:00, what is going on?"
DISK_ERROR = "No space left on device"


def _ts(minutes: float) -> str:
    return (_T0 + timedelta(minutes=minutes)).isoformat().replace("+00:00", "Z")


def disk_full_lines() -> list[LogLine]:
    """08:00–11:00 traffic; the journal volume fills at 10:00, order writes fail from 10:02."""
    rnd = random.Random(11)
    lines = []
    for m in range(180):
        for _ in range(2):
            service = rnd.choice(["order-service", "catalog-service", "api-gateway"])
            lines.append(
                LogLine(_ts(m + rnd.random()), service, "INFO", f"POST /api/orders 201 in {rnd.randint(5, 50)}ms")
            )
        if m % 10 == 0:
            lines.append(
                LogLine(
                    _ts(m + 0.2), "catalog-service", "WARN", f"Slow query on products took {rnd.randint(600, 900)}ms"
                )
            )
    for i in range(30):
        lines.append(
            LogLine(
                _ts(120 + i * 0.5),
                "order-service",
                "ERROR",
                f"java.io.IOException: {DISK_ERROR} while writing /var/lib/orders/journal/segment-{i:05d}.log",
            )
        )
    for i in range(50):
        lines.append(
            LogLine(
                _ts(122 + i * 0.4),
                "order-service",
                "ERROR",
                f"Failed to write order {rnd.randint(100000, 999999)}: journal append rejected",
            )
        )
    for i in range(25):
        lines.append(
            LogLine(_ts(123 + i * 0.6), "api-gateway", "ERROR", "Upstream order-service returned 500 path=/api/orders")
        )
    return lines


DISK_DOCS = [
    ("runbook-disk-full", "Disk full on a data volume", "Symptoms",
     f'When a data volume fills up, every write fails with "{DISK_ERROR}" and services that persist to the volume start rejecting requests.'),
    ("runbook-disk-full", "Disk full on a data volume", "Causes",
     "The usual cause is data that is kept longer than the volume was sized for, often after a change raised the log or journal retention."),
    ("runbook-disk-full", "Disk full on a data volume", "Remediation",
     "Delete the oldest journal segments to free space, restore the previous retention setting and add an alert on volume usage above 80%."),
    ("catalog-perf", "Catalog query performance", "Slow queries",
     "Slow queries on the products table are expected during the nightly reindex and do not affect checkout."),
    ("redis-pool", "Redis connection pool exhausted", "Symptoms",
     "When the Redis connection pool is exhausted, new commands are refused until a connection is released; raise the pool max connections."),
]  # fmt: skip


OPS_CHANGES = [
    (1, "catalog-service", "search.reindex.cron", "0 2 * * *", "0 3 * * *", "carol", "2026-11-28 14:00:00"),
    (2, "order-service", "journal.retention.days", "7", "90", "dave", "2026-12-01 09:40:00"),
]  # fmt: skip


def disk_full_incident(extra_lines: list[LogLine] | None = None) -> dict[str, Any]:
    sql = SqliteSqlSource(
        {
            "ops_changes": (
                ("id", "service", "setting", "old_value", "new_value", "changed_by", "changed_at"),
                OPS_CHANGES,
            ),
            "orders": (
                ("id", "status", "created_at"),
                [(i, "FAILED" if i % 2 else "CREATED", _ts(115 + i)) for i in range(1, 20)],
            ),
        }
    )
    chunks = [
        KnowledgeChunk(f"{doc}#{i}", title, section, text, 0.0)
        for i, (doc, title, section, text) in enumerate(DISK_DOCS)
    ]
    runbooks = InMemoryRunbooks(
        [Runbook("diagnose-disk-full", "Diagnose a full disk", "## Workflow\n1. Look for 'No space left on device'.")]
    )
    return {
        "knowledge": InMemoryKnowledge(chunks),
        "logs": InMemoryLogs(disk_full_lines() + (extra_lines or [])),
        "sql": sql,
        "runbooks": runbooks,
    }


def assert_disk_diagnosis(run: Run) -> None:
    assert_verified_diagnosis(run)
    root_cause = run.payload["root_cause"]
    assert DISK_ERROR in root_cause
    assert "order-service" in root_cause
    assert "pool" not in root_cause.lower()
    assert "Redis" not in root_cause


def test_a_disk_full_incident_is_diagnosed_from_its_own_evidence() -> None:
    run = diagnose(DISK_QUESTION, **disk_full_incident())

    assert_disk_diagnosis(run)
    assert "journal.retention.days" in run.payload["root_cause"]
    evidence = [(e["tool"], e["quote"]) for f in run.payload["findings"] for e in f["evidence"]]
    assert any(tool == "query_logs" and DISK_ERROR in quote for tool, quote in evidence)
    assert any(tool == "query_mysql" and "journal.retention.days" in quote for tool, quote in evidence)
    assert any(s["document_id"].startswith("runbook-disk-full") for s in run.payload["sources"])
    assert any("journal segments" in r for r in run.payload["recommendations"])
    # Nothing of the shipped example leaks into a different incident.
    assert "db.pool" not in run.published_text()


def _red_herring(start_minutes: float, message: str, count: int = 300) -> list[LogLine]:
    """A steady error of an unrelated service, from ``start_minutes`` after 08:00 until 11:00."""
    step = (180 - start_minutes) / count
    return [LogLine(_ts(start_minutes + i * step), "recommendation-service", "ERROR", message) for i in range(count)]


def test_a_chronic_error_of_another_service_is_not_taken_for_the_cause() -> None:
    # Redis trouble since 03:00, seven hours before anything broke, worded in the strongest
    # cause vocabulary there is (refused, pool, exhausted, max), and far more frequent.
    herring = _red_herring(
        -300, "Redis connection refused: connection pool exhausted, max connections reached (active=64)"
    )

    run = diagnose(DISK_QUESTION, **disk_full_incident(herring))

    assert_disk_diagnosis(run)
    assert "recommendation-service" not in run.payload["root_cause"]


def test_an_unrelated_error_that_began_hours_earlier_is_not_taken_for_the_cause() -> None:
    # Redis errors in recommendation-service from 08:00, steady, two hours before orders failed.
    # It mentions orders only because it loads "order recommendations".
    herring = _red_herring(
        0,
        "Redis connection refused while loading order recommendations: connection pool exhausted, "
        "max connections reached",
    )

    run = diagnose(DISK_QUESTION, **disk_full_incident(herring))

    assert_disk_diagnosis(run)


# --- reading documents and log windows -----------------------------------------------------


@pytest.mark.parametrize(
    ("sentence", "chinese", "expected"),
    [
        ("Revert the pool size change through config-service.", False, True),
        ("If no change explains it, scale payment-service out instead.", False, False),
        ("You should restore the index before raising the pool.", False, True),
        ("Retries from checkout add load, and the breaker opens.", False, False),
        ("Alert `PaymentErrors` fires when 2% of payments fail.", False, False),
        ("The worker logs `restart the consumer` when it gives up.", False, False),
        ("通过 config-service 回滚连接池大小的修改。", False, False),  # an English report
        ("建议通过 config-service 回滚连接池大小的修改。", True, True),
        ("之后 HPA 因 CPU 升高扩容，新 Pod 又撞上连接上限。", True, False),
    ],
)
def test_recommendations_are_instructions_not_descriptions(sentence: str, chinese: bool, expected: bool) -> None:
    from harness.llm.offline.lexicon import is_recommendation

    assert is_recommendation(sentence, chinese=chinese) is expected


def test_the_incident_window_describes_a_pattern_and_all_time_says_when_it_began() -> None:
    from harness.llm.offline.conversation import Conversation, Observation
    from harness.llm.offline.evidence import log_patterns

    def _conversation(*observations: Observation) -> Conversation:
        return Conversation("q", None, "", {}, list(observations))

    def templates(count: int, services: list[str], first: str) -> dict[str, Any]:
        return {"templates": [{"template": "pool exhausted", "count": count, "level": "ERROR",
                               "services": services, "first_ts": first, "last_ts": "2026-11-03T10:30:00Z",
                               "example": "pool exhausted"}]}  # fmt: skip

    window = {"query": "", "level": "WARN", "start": "2026-11-03T09:00:00Z", "end": "2026-11-03T10:15:00Z"}
    overall = Observation("a", "query_logs", {"query": "", "level": "WARN"},
                          templates(90, ["payment-service", "order-service"], "2026-10-20T08:00:00Z"), None)  # fmt: skip
    began_inside = Observation(
        "b", "query_logs", window, templates(40, ["payment-service"], "2026-11-03T10:01:00Z"), None
    )
    began_before = Observation(
        "c", "query_logs", window, templates(40, ["payment-service"], "2026-11-03T09:00:30Z"), None
    )

    (inside,), _ = log_patterns(_conversation(overall, began_inside))
    (before,), _ = log_patterns(_conversation(overall, began_before))

    assert (inside.count, inside.services, inside.first) == (
        40,
        ("payment-service",),
        datetime(2026, 11, 3, 10, 1, tzinfo=UTC),
    )
    assert before.first == datetime(2026, 10, 20, 8, 0, tzinfo=UTC)  # it was there long before the window
