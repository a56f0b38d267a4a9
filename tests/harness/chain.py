"""Builders for whole-chain tests: a ChatApplication on in-memory adapters and scripted models."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from harness.application import ChatApplication, ChatRequest, HarnessSettings
from harness.context import Budgets
from harness.examples import Incident, payment_incident
from harness.inmemory import InMemoryAudit, InMemoryInvocationStore, InMemoryRunStore, RecordingObserver
from harness.llm.base import ChatModel, ModelRequest, Models
from harness.llm.scripted import ScriptedModel, Step, json_message, respond, tool_results
from harness.ports import CancelSignal
from harness.release import RunResult
from harness.tools.spec import ToolSpec

POOL_LINE = "Connection is not available, request timed out after 30000ms"
PASS = json_message({"verdict": "PASS", "issues": []})


class FakeClock:
    def __init__(self) -> None:
        self.t = 1_000.0

    def monotonic(self) -> float:
        return self.t

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.t, UTC)

    def advance(self, seconds: float) -> None:
        self.t += seconds


def route(intent: str) -> Step:
    return json_message({"intent": intent})


def cite(
    tool: str, quote: str, statement: str | None = None, *, call_id: str | None = None
) -> Callable[[ModelRequest], dict[str, Any]]:
    """A claim citing the first result of ``tool`` seen so far (or an explicit call id)."""

    def build(request: ModelRequest) -> dict[str, Any]:
        ids = [r.tool_call_id for r in tool_results(request) if r.tool == tool]
        return {
            "statement": statement or f"The evidence shows “{quote}”.",
            "citations": [{"tool_call_id": call_id or (ids[0] if ids else "call_none"), "quote": quote}],
        }

    return build


def draft(
    *claims: Callable[[ModelRequest], dict[str, Any]],
    conclusion: str = "Payments time out because the connection pool is exhausted.",
    root_cause: str = "Connection pool exhausted (Connection is not available, request timed out)",
    recommendations: Sequence[str] = (),
) -> Step:
    def build(request: ModelRequest) -> str:
        return json.dumps(
            {
                "conclusion": conclusion,
                "root_cause": root_cause,
                "claims": [c(request) for c in claims],
                "recommendations": list(recommendations),
                "limitations": [],
            },
            ensure_ascii=False,
        )

    return respond(build)


@dataclass
class Chain:
    app: ChatApplication
    store: InMemoryRunStore
    invocations: InMemoryInvocationStore
    audit: InMemoryAudit
    models: dict[str, ChatModel]
    observers: list[RecordingObserver] = field(default_factory=list)

    def ask(
        self, question: str = "Payments are timing out since 10:00, please investigate", **kwargs: Any
    ) -> RunResult:
        observer = kwargs.pop("observer", None) or RecordingObserver()
        self.observers.append(observer)
        return self.app.execute(ChatRequest(question, kwargs.pop("owner", "alice"), **kwargs), observer)

    @property
    def observer(self) -> RecordingObserver:
        return self.observers[-1]

    def scripted(self, role: str) -> ScriptedModel:
        model = self.models[role]
        assert isinstance(model, ScriptedModel)
        return model

    def published_text(self, result: RunResult) -> str:
        """Everything a user or another system could read about this run, as one string."""
        stored = self.store.runs[result.run_id].result
        seen = [r for o in self.observers for kind, r in o.events if kind == "result" and r.run_id == result.run_id]
        parts: list[Any] = [
            result.content.to_dict() if result.content else None,
            stored.content.to_dict() if stored and stored.content else None,
            stored.published_result if stored else None,
            [r.content.to_dict() if r.content else None for r in seen],
        ]
        return json.dumps(parts, ensure_ascii=False)


def build_chain(
    *,
    router: Iterable[Step] | ChatModel = (),
    agent: Iterable[Step] | ChatModel = (),
    guard: Iterable[Step] | ChatModel = (),
    incident: Incident | None = None,
    budgets: Budgets | None = None,
    deadline_s: float = 60.0,
    clock: Any = None,
    cancel_signal: CancelSignal | None = None,
    tools: Sequence[str] = ("knowledge", "logs", "sql"),
    extra_tools: Sequence[ToolSpec[Any]] = (),
) -> Chain:
    inc = incident or payment_incident()

    def model(steps: Iterable[Step] | ChatModel, name: str) -> ChatModel:
        return steps if hasattr(steps, "complete") else ScriptedModel(steps, name=name)  # type: ignore[return-value]

    models = {"router": model(router, "router"), "agent": model(agent, "agent"), "guard": model(guard, "guard")}
    store, invocations, audit = InMemoryRunStore(), InMemoryInvocationStore(), InMemoryAudit()
    settings = HarnessSettings(deadline_s=deadline_s, budgets=budgets or Budgets())
    kwargs: dict[str, Any] = {}
    if clock is not None:
        kwargs["clock"] = clock
    app = ChatApplication(
        models=Models(router=models["router"], agent=models["agent"], guard=models["guard"]),
        run_store=store,
        invocations=invocations,
        audit=audit.sinks(),
        tools=[*inc.tools(knowledge="knowledge" in tools, logs="logs" in tools, sql="sql" in tools), *extra_tools],
        runbooks=inc.runbooks,
        settings=settings,
        cancel_signal=(lambda _run_id: cancel_signal) if cancel_signal else None,
        **kwargs,
    )
    return Chain(app, store, invocations, audit, models)
