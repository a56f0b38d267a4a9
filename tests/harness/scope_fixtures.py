"""Builders for unit tests that need a RunScope: one run on in-memory adapters and scripted models."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from harness.audit import Audit
from harness.context import Budgets, RunContext
from harness.examples import payment_incident
from harness.inmemory import (
    InMemoryAudit,
    InMemoryInvocationStore,
    InMemoryKnowledge,
    InMemoryLogs,
    RecordingObserver,
)
from harness.llm.base import ChatModel, ModelRequest, Models
from harness.llm.call import ModelCaller
from harness.llm.scripted import ScriptedModel, Step, respond, tool_results
from harness.ports import (
    CanonicalInvocation,
    InvocationStatus,
    KnowledgeChunk,
    KnowledgeSearch,
    LogLine,
    LogSource,
    SqlSource,
)
from harness.scope import RunScope
from harness.tools.boundary import ToolBoundary
from harness.tools.evidence import lookup_knowledge_tool, query_logs_tool, query_mysql_tool
from harness.tools.spec import ToolSpec

RUN_ID = "run-under-test"
T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)

POOL_ERROR = "HikariPool-1 - Connection is not available, request timed out after 30000ms (total=10, active=10)"
PAYMENT_TIMEOUT = "Payment authorization failed: upstream timeout after 30000ms order=123456"
SMTP_RETRY = "SMTP delivery retry scheduled for message 3fa9 (attempt 2)"

LOG_LINES = (
    LogLine("2026-11-30T10:01:00Z", "payment-service", "ERROR", POOL_ERROR),
    LogLine("2026-11-30T10:02:00Z", "payment-service", "ERROR", PAYMENT_TIMEOUT),
    LogLine("2026-11-30T09:30:00Z", "notification-service", "WARN", SMTP_RETRY),
)

POOL_DOC_TEXT = (
    "The most common cause of connection pool exhaustion is a maximum pool size that is too small "
    "for the traffic, often after a configuration change reduced db.pool.max_size."
)
CHUNKS = (
    KnowledgeChunk("runbook-db-pool#1", "Database connection pool exhaustion", "Causes", POOL_DOC_TEXT, 0.0),
    KnowledgeChunk(
        "cache-stampede#0",
        "Cache stampede",
        "Symptoms",
        "When a hot key expires, many requests miss the cache at once and hit the database together.",
        0.0,
    ),
)


class FixedClock:
    """A clock that never moves: deadlines never pass on their own."""

    def monotonic(self) -> float:
        return 1_000.0

    def now(self) -> datetime:
        return T0


@dataclass
class Harness:
    scope: RunScope
    model: ScriptedModel
    guard: ScriptedModel
    store: InMemoryInvocationStore
    audit: InMemoryAudit
    observer: RecordingObserver

    @property
    def ctx(self) -> RunContext:
        return self.scope.ctx


#: how the evidence tools' results are cited, as ChatApplication hands it to the guards and release
CITATIONS = {spec.name: spec.citations for spec in payment_incident().tools()}


def tools_over(
    *, knowledge: KnowledgeSearch | None = None, logs: LogSource | None = None, sql: SqlSource | None = None
) -> list[ToolSpec[Any]]:
    """The evidence tools over the backends given, as a composition root would list them."""
    return [
        *([lookup_knowledge_tool(knowledge)] if knowledge is not None else []),
        *([query_logs_tool(logs)] if logs is not None else []),
        *([query_mysql_tool(sql)] if sql is not None else []),
    ]


def build_scope(
    steps: Iterable[Step] = (),
    *,
    guard_steps: Iterable[Step] | None = None,
    knowledge: KnowledgeSearch | None = None,
    logs: LogSource | None = None,
    sql: SqlSource | None = None,
    budgets: Budgets | None = None,
    run_id: str = RUN_ID,
    store: InMemoryInvocationStore | None = None,
    router: ChatModel | None = None,
) -> Harness:
    """A RunScope as ChatApplication builds it. ``steps`` play the agent role (and the router and
    guard roles too, unless ``guard_steps`` gives the guard its own script)."""
    model = ScriptedModel(steps, name="agent")
    guard = ScriptedModel(guard_steps, name="guard") if guard_steps is not None else model
    clock = FixedClock()
    ctx = RunContext(run_id, deadline_s=60.0, budgets=budgets or Budgets(), clock=clock)
    memory_audit = InMemoryAudit()
    audit = Audit(memory_audit.sinks(), run_id=run_id, clock=clock)
    caller = ModelCaller(ctx, Models(router=router or model, agent=model, guard=guard), audit)
    invocations = store if store is not None else InMemoryInvocationStore()
    boundary = ToolBoundary(
        ctx=ctx,
        specs=tools_over(knowledge=knowledge, logs=logs, sql=sql),
        store=invocations,
        audit=audit,
    )
    observer = RecordingObserver()
    scope = RunScope(run_id, ctx, caller, boundary, invocations, audit, observer)
    return Harness(scope, model, guard, invocations, memory_audit, observer)


def incident_scope(steps: Iterable[Step] = (), **kwargs: Any) -> Harness:
    """A scope whose tools are the in-memory logs and knowledge base above."""
    kwargs.setdefault("logs", InMemoryLogs(LOG_LINES))
    kwargs.setdefault("knowledge", InMemoryKnowledge(CHUNKS, min_score=0.5))
    return build_scope(steps, **kwargs)


def ready_invocation(
    tool_call_id: str, raw: Any, *, tool: str = "query_logs", run_id: str = RUN_ID
) -> CanonicalInvocation:
    return CanonicalInvocation(
        run_id=run_id,
        tool_call_id=tool_call_id,
        tool=tool,
        request={"arguments_text": "{}"},
        raw_result=raw,
        status=InvocationStatus.READY,
        evidence_status="ok",
        error_code=None,
        created_at=T0,
        duration_ms=1.0,
    )


def log_raw(*lines: LogLine) -> dict[str, Any]:
    """A raw query_logs result holding ``lines``."""
    return {
        "total": len(lines),
        "returned": len(lines),
        "lines": [{"ts": x.ts, "service": x.service, "level": x.level, "message": x.message} for x in lines],
    }


def draft_json(
    claims: Sequence[dict[str, Any]],
    *,
    conclusion: str = "Payments time out because the database connection pool is exhausted.",
    root_cause: str = "The payment-service connection pool is exhausted (Connection is not available).",
    recommendations: Sequence[str] = (),
    limitations: Sequence[str] = (),
) -> str:
    return json.dumps(
        {
            "conclusion": conclusion,
            "root_cause": root_cause,
            "claims": list(claims),
            "recommendations": list(recommendations),
            "limitations": list(limitations),
        },
        ensure_ascii=False,
    )


def claim(statement: str, *citations: tuple[str, str]) -> dict[str, Any]:
    return {"statement": statement, "citations": [{"tool_call_id": i, "quote": q} for i, q in citations]}


def seen_ids(request: ModelRequest, tool: str) -> list[str]:
    """The framework ids of the results of ``tool`` in a request's conversation."""
    return [r.tool_call_id for r in tool_results(request) if r.tool == tool]


def draft_citing(
    quote: str,
    *,
    tool: str = "query_logs",
    statement: str = "payment-service logged “Connection is not available, request timed out”.",
    **fields: Any,
) -> Step:
    """A draft step whose one claim cites the first result of ``tool`` the agent has seen."""

    def build(request: ModelRequest) -> str:
        ids = seen_ids(request, tool)
        return draft_json([claim(statement, (ids[0] if ids else "call_missing", quote))], **fields)

    return respond(build)
