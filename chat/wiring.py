"""The composition root: the one place where the harness meets its adapters.

Read ``application()`` and you have read the architecture: the harness's ChatApplication
with the ORM run store and audit sinks, the Redis invocation store and cancel signal, the
models chosen per role from settings, and the configured evidence backends.
"""

from __future__ import annotations

import functools
import time
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from chat.redis_store import RedisCancelSignal, RedisInvocationStore
from harness.application import ChatApplication, HarnessSettings
from harness.audit import AuditSinks
from harness.context import Budgets
from harness.llm.base import ChatModel, Models
from harness.llm.offline import OfflineAnalyst
from harness.llm.openai_compat import OpenAICompatibleModel, OpenAIConfig
from harness.ports import RunbookSource
from knowledge.embeddings import Embedder, embedder_from_config
from knowledge.logs.source import DatabaseLogSource
from knowledge.retrieval import RetrievalConfig
from knowledge.runbooks import DatabaseRunbooks
from knowledge.search import DatabaseKnowledgeSearch
from knowledge.sqlsource import sql_source_from_settings
from traces.stores import DjangoAuditSinks, DjangoRunStore

if TYPE_CHECKING:
    from knowledge.milvus import MilvusKnowledgeSearch

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


@functools.cache
def embedder() -> Embedder | None:
    """The configured embedder (``EMBEDDINGS_PROVIDER``), one per process; ``None`` is lexical only."""
    return embedder_from_config(settings.EMBEDDINGS)


@functools.cache
def knowledge_search() -> DatabaseKnowledgeSearch | MilvusKnowledgeSearch:
    """``KNOWLEDGE_ENGINE``: ``local`` (an index in this process's memory) or ``milvus``."""
    k: dict[str, Any] = settings.KNOWLEDGE
    config = RetrievalConfig(
        min_coverage=k["MIN_COVERAGE"], min_cosine=k["MIN_COSINE"], threads=settings.COMPUTE_THREADS
    )
    engine = k.get("ENGINE", "local")
    if engine == "local":
        return DatabaseKnowledgeSearch(embedder=embedder(), config=config)
    if engine == "milvus":
        from knowledge.milvus import MilvusKnowledgeSearch  # pymilvus is imported only when chosen

        return MilvusKnowledgeSearch(
            embedder=embedder(),
            uri=k["MILVUS_URI"],
            collection=k["MILVUS_COLLECTION"],
            token=k["MILVUS_TOKEN"],
            timeout_s=k["MILVUS_TIMEOUT_S"],
            config=config,
        )
    raise ImproperlyConfigured(f"KNOWLEDGE_ENGINE must be local or milvus, not {engine!r}")


def _database_backends() -> dict[str, Any]:
    return {
        "knowledge": knowledge_search(),
        "logs": DatabaseLogSource(),
        "sql": sql_source_from_settings(),
    }


def evidence_backends() -> dict[str, Any]:
    """``EVIDENCE_SOURCE``: ``database`` (the knowledge app), ``example`` (the bundled incident,
    in memory) or ``none``."""
    source = settings.EVIDENCE_SOURCE
    if source == "none":
        return {"knowledge": None, "logs": None, "sql": None, "runbooks": None}
    runbooks: RunbookSource
    if source == "database":
        backends, runbooks = _database_backends(), DatabaseRunbooks()
    elif source == "example":
        from harness.examples import payment_incident

        incident = payment_incident()
        backends = {"knowledge": incident.knowledge, "logs": incident.logs, "sql": incident.sql}
        runbooks = incident.runbooks
    else:
        raise ImproperlyConfigured(f"EVIDENCE_SOURCE must be database, example or none, not {source!r}")
    if settings.EVIDENCE_LATENCY_S > 0:
        backends = {name: _Slowed(backend, settings.EVIDENCE_LATENCY_S) for name, backend in backends.items()}
    return {**backends, "runbooks": runbooks}


def harness_settings() -> HarnessSettings:
    h: dict[str, Any] = settings.HARNESS
    return HarnessSettings(
        deadline_s=h["DEADLINE_S"],
        budgets=Budgets(
            max_model_calls=int(h["MAX_MODEL_CALLS"]),
            max_tool_calls=int(h["MAX_TOOL_CALLS"]),
            max_tokens=int(h["MAX_TOKENS"]),
        ),
        tool_timeout_s=h["TOOL_TIMEOUT_S"],
    )


@functools.cache
def audit_sinks() -> DjangoAuditSinks:
    return DjangoAuditSinks()


@functools.cache
def application() -> ChatApplication:
    sinks = audit_sinks()
    return ChatApplication(
        models=models(),
        run_store=DjangoRunStore(),
        invocations=RedisInvocationStore(ttl_s=int(settings.HARNESS["INVOCATION_TTL_S"])),
        audit=AuditSinks(steps=sinks, tools=sinks, timeline=sinks, reasoning=sinks),
        settings=harness_settings(),
        cancel_signal=RedisCancelSignal,
        **evidence_backends(),
    )
