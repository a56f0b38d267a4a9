"""The ports: everything the harness needs from the outside world, as small Protocols.

The Django service implements them with the ORM, Redis and django-eventstream;
``harness.inmemory`` implements them in memory. Nothing in ``harness/`` imports an adapter.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    from harness.context import CancelReason
    from harness.release import RunResult

EvidenceStatus = Literal["ok", "no_evidence"]
Scalar = str | int | float | bool | None


class Clock(Protocol):
    """Time source. ``monotonic`` drives deadlines; ``now`` stamps records (timezone-aware UTC)."""

    def monotonic(self) -> float: ...

    def now(self) -> datetime: ...


class CancelSignal(Protocol):
    """A cancellation requested from outside this process (e.g. a flag in Redis)."""

    def requested(self) -> CancelReason | None:
        """The reason a cancel was requested, or ``None``. Called at every harness boundary."""
        ...


# --- evidence backends ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class KnowledgeChunk:
    document_id: str
    title: str
    section: str
    text: str
    score: float
    #: its document's provenance: reviewed for everyone (True), or an upload the run's owner
    #: made that nobody has approved yet (False; no other user's run is given it)
    approved: bool = True


@dataclass(frozen=True, slots=True)
class KnowledgeResult:
    chunks: tuple[KnowledgeChunk, ...]
    evidence_status: EvidenceStatus
    retrieval_mode: str = "hybrid"


class KnowledgeSearch(Protocol):
    """Retrieval over the knowledge base, graded ``ok`` or ``no_evidence``."""

    def search(self, query: str, top_k: int) -> KnowledgeResult: ...


@dataclass(frozen=True, slots=True)
class LogQuery:
    query: str
    service: str | None = None
    level: str | None = None
    start: datetime | None = None
    end: datetime | None = None
    limit: int = 50


@dataclass(frozen=True, slots=True)
class LogLine:
    ts: str
    service: str
    level: str
    message: str
    #: the machine that wrote it, when the source says (a node's journal, an event's kubelet)
    host: str = ""


@dataclass(frozen=True, slots=True)
class LogTemplate:
    """A message pattern with variable parts masked, and where and when it occurred."""

    template: str
    count: int
    level: str
    services: tuple[str, ...]
    first_ts: str
    last_ts: str
    example: str
    #: the machines its lines came from, where the source says
    hosts: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class LogResult:
    lines: tuple[LogLine, ...]
    total: int
    counts_by_level: Mapping[str, int] = field(default_factory=dict)
    counts_by_service: Mapping[str, int] = field(default_factory=dict)
    templates: tuple[LogTemplate, ...] = ()


class LogSource(Protocol):
    """Searchable application logs. ``level`` is a minimum severity."""

    def query(self, query: LogQuery) -> LogResult: ...


@dataclass(frozen=True, slots=True)
class TableInfo:
    name: str
    columns: tuple[str, ...]
    description: str = ""


@dataclass(frozen=True, slots=True)
class SqlResult:
    columns: tuple[str, ...]
    rows: tuple[tuple[Scalar, ...], ...]
    truncated: bool = False


class SqlRefused(Exception):
    """Raised by a SQL source for a statement it will not run. ``reason`` is safe to show."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


class SqlSource(Protocol):
    """A read-only business datasource."""

    def tables(self) -> Sequence[TableInfo]:
        """The tables the agent may query, for the tool description."""
        ...

    def execute(self, sql: str, *, timeout_s: float) -> SqlResult:
        """Run one read statement; raise :class:`SqlRefused` for anything else."""
        ...


# --- canonical invocations and audit -------------------------------------------------------


class InvocationStatus(enum.StrEnum):
    READY = "ready"
    INVALID_ARGUMENTS = "invalid_arguments"
    REFUSED = "refused"
    FAILED = "failed"
    TIMEOUT = "timeout"
    #: the run ended (cancel, deadline, shutdown) while the call was in flight; its result, if it
    #: ever comes, is not used
    CANCELLED = "cancelled"


@dataclass(frozen=True, slots=True)
class CanonicalInvocation:
    """The full truth of one tool call: the request and the raw result, for the guards."""

    run_id: str
    tool_call_id: str
    tool: str
    request: Mapping[str, Any]
    raw_result: Any
    status: InvocationStatus
    evidence_status: EvidenceStatus | None
    error_code: str | None
    created_at: datetime
    duration_ms: float


class InvocationStore(Protocol):
    """Canonical invocations keyed by run and call id (Redis with a TTL in the service)."""

    def put(self, invocation: CanonicalInvocation) -> None: ...

    def get(self, run_id: str, tool_call_id: str) -> CanonicalInvocation | None: ...


@dataclass(frozen=True, slots=True)
class StepRecord:
    """Metadata of one model call. Never the messages or the model's text."""

    run_id: str
    index: int
    purpose: str
    role: str
    message_count: int
    message_roles: tuple[str, ...]
    has_text: bool
    tool_call_names: tuple[str, ...]
    input_tokens: int
    output_tokens: int
    duration_ms: float
    error_code: str | None = None
    #: when the call began, in ms since the run started
    started_ms: float | None = None


@dataclass(frozen=True, slots=True)
class ToolAuditRecord:
    """Metadata of one tool call. Never its arguments or result."""

    run_id: str
    tool_call_id: str
    tool: str
    status: InvocationStatus
    evidence_status: EvidenceStatus | None
    error_code: str | None
    duration_ms: float
    request_bytes: int
    result_bytes: int
    #: the model step whose reply asked for the call, and when the call began (ms since the run started)
    step_index: int | None = None
    started_ms: float | None = None


class TimelineCategory(enum.StrEnum):
    RUN = "run"
    ROUTING = "routing"
    AGENT = "agent"
    TOOL = "tool"
    EVIDENCE = "evidence"
    SEMANTIC = "semantic"
    RELEASE = "release"


@dataclass(frozen=True, slots=True)
class TimelineEvent:
    run_id: str
    category: TimelineCategory
    name: str
    at: datetime
    details: Mapping[str, Scalar] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ReasoningRecord:
    """Restricted audit: what the provider reasoned and said at one step. Staff-only reads."""

    run_id: str
    step_index: int
    purpose: str
    reasoning: str | None
    assistant_text: str | None


class StepAuditSink(Protocol):
    def record_step(self, record: StepRecord) -> None: ...


class ToolAuditSink(Protocol):
    def record_tool(self, record: ToolAuditRecord) -> None: ...


class TimelineSink(Protocol):
    def append(self, event: TimelineEvent) -> None: ...


class ReasoningAuditSink(Protocol):
    def record_reasoning(self, record: ReasoningRecord) -> None: ...


# --- runs ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RoutingContext:
    """The last routed question of a session: all the router may know about history."""

    last_intent: str | None = None
    last_user_query: str | None = None


@dataclass(frozen=True, slots=True)
class RunStart:
    run_id: str
    session_id: str
    owner: str
    question: str
    started_at: datetime


@dataclass(frozen=True, slots=True)
class RunFinish:
    run_id: str
    result: RunResult
    finished_at: datetime


class RunStore(Protocol):
    """Sessions and runs. The service implements it with the ORM."""

    def resolve_session(self, *, owner: str, session_id: str | None, title: str) -> str:
        """Return the session id, creating the session when it is absent."""
        ...

    def routing_context(self, *, session_id: str, exclude_run_id: str) -> RoutingContext: ...

    def latest_published_diagnosis(self, *, session_id: str, exclude_run_id: str) -> Mapping[str, Any] | None:
        """The stored published result of the session's latest ``success`` DIAGNOSIS run."""
        ...

    def start_run(self, start: RunStart) -> bool:
        """Mark the run RUNNING. ``False`` if it is already claimed or terminal: do not run it."""
        ...

    def record_intent(self, *, run_id: str, intent: str) -> None: ...

    def finish_run(self, finish: RunFinish) -> bool:
        """Write the terminal state once. ``False`` if another terminal state was written first."""
        ...


# --- observer ------------------------------------------------------------------------------


class Stage(enum.StrEnum):
    QUEUED = "queued"
    ROUTING = "routing"
    ROUTED = "routed"
    KNOWLEDGE_LOOKUP = "knowledge_lookup"
    AGENT_STEP = "agent_step"
    TOOL_CALL = "tool_call"
    EVIDENCE_CHECK = "evidence_check"
    EVIDENCE_REPAIR = "evidence_repair"
    SEMANTIC_REVIEW = "semantic_review"
    RELEASING = "releasing"


class RunControl(Protocol):
    """Handed to the observer when a run starts: its identity and a way to cancel it."""

    @property
    def session_id(self) -> str: ...

    @property
    def run_id(self) -> str: ...

    def cancel(self, reason: CancelReason) -> bool: ...


class RunObserver(Protocol):
    """Protocol-neutral progress of one run (the service maps it to SSE events)."""

    def started(self, control: RunControl) -> None:
        """The run row is RUNNING; ``metadata`` may be sent."""
        ...

    def status(self, stage: Stage, detail: Mapping[str, Scalar] | None = None) -> None: ...

    def finished(self, result: RunResult) -> None:
        """The terminal state is persisted; ``content``/``failure`` and ``done`` may be sent."""
        ...


# --- runbooks ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Runbook:
    """A Markdown runbook: workflow, required evidence, stop conditions, report rules."""

    slug: str
    title: str
    body: str


class RunbookSource(Protocol):
    def match(self, question: str, *, limit: int) -> Sequence[Runbook]:
        """The runbooks that best match the question, best first (possibly none)."""
        ...
