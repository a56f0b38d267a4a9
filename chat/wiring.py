"""The composition root: the one place where the harness meets its adapters.

Read ``application()`` and you have read the architecture: the harness's ChatApplication
with the ORM run store and audit sinks (model and tool calls metered on the way), the Redis
invocation store and cancel signal, the models chosen per role from settings, and the
configured evidence backends.
"""

from __future__ import annotations

import functools
import time
import uuid
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from chat import metrics
from chat.events import EventStream
from chat.redis_store import RedisCancelSignal, RedisInvocationStore
from chat.webhooks.services import deliveries_for_run
from harness.application import ChatApplication, ChatRequest, HarnessSettings
from harness.audit import AuditSinks
from harness.context import Budgets
from harness.inmemory import InMemoryAudit, InMemoryInvocationStore, InMemoryRunStore, RecordingObserver
from harness.llm.base import ChatModel, Models
from harness.llm.offline import OfflineAnalyst
from harness.llm.openai_compat import OpenAICompatibleModel, OpenAIConfig
from harness.ports import InvocationStatus, RunbookSource
from harness.tools.evidence import lookup_knowledge_tool, query_logs_tool, query_mysql_tool
from harness.tools.spec import ToolSpec
from knowledge.backends import knowledge_search
from knowledge.logs.source import DatabaseLogSource
from knowledge.runbooks import DatabaseRunbooks
from knowledge.scenarios import Executed, ScenarioEvidence, ScenarioExecutor
from knowledge.search import DatabaseKnowledgeSearch
from knowledge.sqlsource import DatabaseSqlSource, sql_source_from_settings
from traces.lifecycle import RunLifecycle
from traces.stores import DjangoAuditSinks, DjangoRunStore

ROLES = ("router", "agent", "guard")


def _role_config(role: str) -> OpenAIConfig | None:
    llm: dict[str, Any] = settings.LLM
    own = llm["ROLES"][role]
    if own["BASE_URL"] and not own["API_KEY"]:
        # Never send one provider's key to another provider's endpoint.
        raise ImproperlyConfigured(f"LLM_{role.upper()}_BASE_URL is set, so LLM_{role.upper()}_API_KEY must be too")
    base_url = own["BASE_URL"] or llm["BASE_URL"]
    api_key = own["API_KEY"] or llm["API_KEY"]
    if not (base_url and api_key):
        return None
    return OpenAIConfig(
        base_url=base_url,
        api_key=api_key,
        model=own["MODEL"] or llm["MODEL"],
        timeout_s=llm["TIMEOUT_S"],
        max_retries=llm["MAX_RETRIES"],
    )


def providers() -> dict[str, str]:
    """Which provider answers each role (no secrets): for readyz and the admin."""
    out = {}
    for role in ROLES:
        config = _role_config(role)
        out[role] = f"openai-compatible:{config.model}" if config else "offline"
    return out


def models() -> Models:
    offline = OfflineAnalyst()
    chosen: dict[str, ChatModel] = {}
    for role in ROLES:
        config = _role_config(role)
        chosen[role] = OpenAICompatibleModel(config) if config else offline
    return Models(router=chosen["router"], agent=chosen["agent"], guard=chosen["guard"])


class _Slowed:
    """A backend that takes ``latency_s`` longer to answer: to demo or test slow evidence."""

    def __init__(self, backend: Any, latency_s: float) -> None:
        self._backend = backend
        self._latency_s = latency_s

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._backend, name)
        if name not in ("search", "query", "execute"):
            return attribute

        def slowed(*args: Any, **kwargs: Any) -> Any:
            time.sleep(self._latency_s)
            return attribute(*args, **kwargs)

        return slowed


@dataclass(frozen=True)
class Evidence:
    """What the agent may consult: one tool per configured backend, and the runbooks."""

    tools: list[ToolSpec[Any]]
    runbooks: RunbookSource | None


def evidence() -> Evidence:
    """``EVIDENCE_SOURCE``: ``database`` (the knowledge app), ``example`` (the bundled incident,
    in memory) or ``none``. A tool is one line here: its spec over its backend."""
    source = settings.EVIDENCE_SOURCE
    if source == "none":
        return Evidence([], None)
    if source == "database":
        sql = sql_source_from_settings()
        tools: list[ToolSpec[Any]] = [
            lookup_knowledge_tool(_slowed(knowledge_search())),
            query_logs_tool(_slowed(DatabaseLogSource())),
            *([query_mysql_tool(_slowed(sql))] if sql is not None else []),
        ]
        return Evidence(tools, DatabaseRunbooks())
    if source == "example":
        from harness.examples import payment_incident

        incident = payment_incident()
        tools = [
            lookup_knowledge_tool(_slowed(incident.knowledge)),
            query_logs_tool(_slowed(incident.logs)),
            query_mysql_tool(_slowed(incident.sql)),
        ]
        return Evidence(list(tools), incident.runbooks)
    raise ImproperlyConfigured(f"EVIDENCE_SOURCE must be database, example or none, not {source!r}")


def _slowed(backend: Any) -> Any:
    return _Slowed(backend, settings.EVIDENCE_LATENCY_S) if settings.EVIDENCE_LATENCY_S > 0 else backend


def harness_settings() -> HarnessSettings:
    h: dict[str, Any] = settings.HARNESS
    return HarnessSettings(
        deadline_s=h["DEADLINE_S"],
        budgets=Budgets(
            max_model_calls=int(h["MAX_MODEL_CALLS"]),
            max_tool_calls=int(h["MAX_TOOL_CALLS"]),
            max_tokens=int(h["MAX_TOKENS"]),
            max_model_retries=int(h["MAX_MODEL_RETRIES"]),
        ),
        tool_timeout_s=h["TOOL_TIMEOUT_S"],
    )


@functools.cache
def audit_sinks() -> DjangoAuditSinks:
    return DjangoAuditSinks()


@functools.cache
def lifecycle() -> RunLifecycle:
    """Every change of a run's state; each terminal one ends the run's event stream, archives
    it, then calls these hooks in order."""
    return RunLifecycle(stream=EventStream(), hooks=[deliveries_for_run, metrics.run_finished], publish=publish_run)


def publish_run(run_id: uuid.UUID | str) -> None:
    """Send a queued run's task to the workers (no retry: a broker failure is the caller's)."""
    from chat.tasks import run_chat

    run_chat.apply_async(args=[str(run_id)], retry=False)


@functools.cache
def application() -> ChatApplication:
    sinks, chosen = audit_sinks(), evidence()
    # model and tool calls are stored as trace rows and observed as latencies
    metered = metrics.MeteredAuditSinks(sinks, providers=providers(), tools=[spec.name for spec in chosen.tools])
    return ChatApplication(
        models=models(),
        run_store=DjangoRunStore(lifecycle(), audit=sinks),
        invocations=RedisInvocationStore(ttl_s=int(settings.HARNESS["INVOCATION_TTL_S"])),
        audit=AuditSinks(steps=metered, tools=metered, timeline=sinks, reasoning=sinks),
        tools=chosen.tools,
        runbooks=chosen.runbooks,
        settings=harness_settings(),
        cancel_signal=RedisCancelSignal,
    )


def scenario_executor(*, with_models: Models | None = None) -> ScenarioExecutor:
    """How ``eval_scenarios`` runs a question: the chain the service runs, with these models
    (default: this process's) and the service's harness settings, over the database evidence
    the scenario loaded; the run itself lives in memory, so an evaluation writes no run rows."""
    chosen = with_models or models()

    def execute(question: str, evidence: ScenarioEvidence) -> Executed:
        invocations, audit = InMemoryInvocationStore(), InMemoryAudit()
        app = ChatApplication(
            models=chosen,
            run_store=InMemoryRunStore(),
            invocations=invocations,
            audit=audit.sinks(),
            tools=[
                lookup_knowledge_tool(DatabaseKnowledgeSearch(embedder=evidence.embedder)),
                query_logs_tool(DatabaseLogSource()),
                *([query_mysql_tool(DatabaseSqlSource(evidence.sql_url))] if evidence.sql_url else []),
            ],
            runbooks=DatabaseRunbooks(check_interval_s=0) if evidence.runbooks else None,
            settings=harness_settings(),
        )
        run_id = str(uuid.uuid4())
        started = time.perf_counter()
        result = app.execute(ChatRequest(question, "eval", run_id=run_id), RecordingObserver())
        seconds = time.perf_counter() - started
        calls = []
        for record in audit.tools:
            invocation = invocations.get(run_id, record.tool_call_id)
            ready = invocation is not None and invocation.status is InvocationStatus.READY
            calls.append((record.tool, invocation.raw_result if ready and invocation else None))
        return Executed(result, tuple(calls), seconds)

    return execute
