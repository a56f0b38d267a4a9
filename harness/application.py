"""ChatApplication: one run, start to finish, in the order of the product's harness chain.

    resolve session → read PreviousTurn (before this run is persisted) → persist RUNNING
    → started (metadata) → IntentRouter → persist intent → one fixed executor (+ guards)
    → release → persist terminal state and published content → finished (content|failure, done)

The first terminal transition wins: if a cancel or the deadline lands while the executor is
finishing, the run ends cancelled/failed and its draft result is discarded, never published.
"""

from __future__ import annotations

import logging
import traceback
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from harness.agent import AgentSettings, DiagnosisAgent
from harness.audit import Audit, AuditSinks
from harness.context import (
    SYSTEM_CLOCK,
    Budgets,
    CancelReason,
    Outcome,
    RunContext,
    RunStatus,
    TerminalState,
)
from harness.errors import DeadlineExceeded, HarnessError, RunCancelled, RunInterrupted, WorkerShutdown
from harness.executors import DiagnosisExecutor, Executor, KnowledgeQueryExecutor, SystemChatExecutor
from harness.guards.evidence import EvidenceGuard
from harness.guards.repair import EvidenceRepair
from harness.guards.semantic import SemanticGuard
from harness.llm.base import Models
from harness.llm.call import ModelCaller
from harness.memory import PublishedResultPolicy
from harness.ports import (
    CancelSignal,
    Clock,
    InvocationStore,
    RunbookSource,
    RunFinish,
    RunObserver,
    RunStart,
    RunStore,
    Stage,
    TimelineCategory,
)
from harness.release import Failure, Release, ReleasePolicy, RunResult
from harness.routing import Intent, IntentRouter
from harness.scope import RunScope, report_status
from harness.tools.boundary import ToolBoundary
from harness.tools.projection import DEFAULT_LIMITS, ProjectionLimits
from harness.tools.spec import ToolSpec

logger = logging.getLogger(__name__)

MAX_QUESTION_CHARS = 8_000


@dataclass(frozen=True, slots=True)
class HarnessSettings:
    deadline_s: float = 120.0
    budgets: Budgets = field(default_factory=Budgets)
    router_attempts: int = 2
    agent: AgentSettings = field(default_factory=AgentSettings)
    runbook_limit: int = 3
    tool_timeout_s: float = 15.0
    projection: ProjectionLimits = DEFAULT_LIMITS


@dataclass(frozen=True, slots=True)
class ChatRequest:
    question: str
    owner: str
    session_id: str | None = None
    run_id: str | None = None


class RunNotClaimed(HarnessError):
    """The run is already running or finished elsewhere; this execution must do nothing."""

    code = "run_not_claimed"
    safe_message = "The run is already being handled."


class InvalidQuestion(HarnessError):
    code = "invalid_question"
    safe_message = "The question must be between 1 and 8000 characters."


@dataclass(frozen=True, slots=True)
class _Control:
    session_id: str
    run_id: str
    _ctx: RunContext

    def cancel(self, reason: CancelReason) -> bool:
        return self._ctx.cancel(reason)


class ChatApplication:
    def __init__(
        self,
        *,
        models: Models,
        run_store: RunStore,
        invocations: InvocationStore,
        audit: AuditSinks,
        tools: Sequence[ToolSpec[Any]] = (),
        runbooks: RunbookSource | None = None,
        settings: HarnessSettings | None = None,
        clock: Clock = SYSTEM_CLOCK,
        cancel_signal: Callable[[str], CancelSignal | None] | None = None,
    ) -> None:
        self.settings = settings or HarnessSettings()
        self._models = models
        self._store = run_store
        self._invocations = invocations
        self._sinks = audit
        self._clock = clock
        self._cancel_signal = cancel_signal
        names = [spec.name for spec in tools]
        if len(set(names)) != len(names):
            raise ValueError(f"two tools share a name: {names}")
        self._tools = tuple(tools)
        citations = {spec.name: spec.citations for spec in tools}
        self._memory = PublishedResultPolicy()
        self._router = IntentRouter(attempts=self.settings.router_attempts)
        release = ReleasePolicy(citations)
        self._executors: dict[Intent, Executor] = {
            Intent.SYSTEM_CHAT: SystemChatExecutor(),
            Intent.KNOWLEDGE_QUERY: KnowledgeQueryExecutor(release),
            Intent.DIAGNOSIS: DiagnosisExecutor(
                agent=DiagnosisAgent(self.settings.agent),
                evidence_guard=EvidenceGuard(invocations, citations=citations),
                repair=EvidenceRepair(),
                semantic_guard=SemanticGuard(),
                release=release,
                memory=self._memory,
                runbooks=runbooks,
                runbook_limit=self.settings.runbook_limit,
            ),
        }

    def execute(self, request: ChatRequest, observer: RunObserver) -> RunResult:
        """Run one question to its terminal state; raises only :class:`RunNotClaimed` and
        :class:`InvalidQuestion` (before anything is written)."""
        question = request.question.strip()
        if not question or len(question) > MAX_QUESTION_CHARS:
            raise InvalidQuestion()
        run_id = request.run_id or str(uuid.uuid4())
        session_id = self._store.resolve_session(
            owner=request.owner, session_id=request.session_id, title=question[:80]
        )
        # Memory is read before this run is persisted, so it can never see itself.
        routing_context = self._store.routing_context(session_id=session_id, exclude_run_id=run_id)
        previous_turn = self._memory.previous_turn(
            self._store.latest_published_diagnosis(session_id=session_id, exclude_run_id=run_id)
        )
        signal = self._cancel_signal(run_id) if self._cancel_signal else None
        ctx = RunContext(
            run_id,
            deadline_s=self.settings.deadline_s,
            budgets=self.settings.budgets,
            clock=self._clock,
            cancel_signal=signal,
        )
        if not self._store.start_run(RunStart(run_id, session_id, request.owner, question, self._clock.now())):
            raise RunNotClaimed()
        audit = Audit(self._sinks, run_id=run_id, clock=self._clock)
        boundary = ToolBoundary(
            ctx=ctx,
            specs=self._tools,
            store=self._invocations,
            audit=audit,
            on_call=lambda tool: report_status(observer, run_id, Stage.TOOL_CALL, {"tool": tool}),
            limits=self.settings.projection,
            default_timeout_s=self.settings.tool_timeout_s,
        )
        scope = RunScope(
            run_id, ctx, ModelCaller(ctx, self._models, audit), boundary, self._invocations, audit, observer
        )
        audit.event(TimelineCategory.RUN, "run.started", previous_turn=previous_turn is not None)
        self._notify(run_id, "started", lambda: observer.started(_Control(session_id, run_id, ctx)))

        intent: Intent | None = None
        release: Release | None = None
        failure: HarnessError | None = None
        try:
            scope.status(Stage.ROUTING)
            intent, attempts = self._router.route(scope.caller, question, routing_context)
            self._store.record_intent(run_id=run_id, intent=intent.value)
            audit.event(TimelineCategory.ROUTING, "routing.routed", intent=intent.value, attempts=attempts)
            scope.status(Stage.ROUTED, {"intent": intent.value})
            release = self._executors[intent].execute(scope, question, previous_turn)
            scope.status(Stage.RELEASING)
            ctx.check()
        except RunInterrupted:
            release = None
        except HarnessError as exc:
            failure, release = exc, None
        except Exception as exc:  # noqa: BLE001 - an unexpected error ends the run, safely
            # The type and where it was raised, never the message: it may quote prompts or evidence.
            logger.error("run %s failed unexpectedly: %s at %s", run_id, type(exc).__name__, _where(exc))
            failure, release = HarnessError(), None

        if release is not None:
            ctx.finish(TerminalState(RunStatus.COMPLETED, release.outcome))
        elif failure is not None:
            ctx.finish(TerminalState(RunStatus.FAILED, Outcome.FAILED, failure.code))
        result = self._result(ctx, session_id, intent, release, failure)
        audit.event(
            TimelineCategory.RELEASE, "release.decided",
            outcome=result.outcome.value, reason=result.fallback_reason, failure_code=result.failure.code if result.failure else None,
        )  # fmt: skip
        if not self._store.finish_run(RunFinish(run_id, result, self._clock.now())):
            logger.warning("run %s already had a terminal state; this result was discarded", run_id)
            return result
        audit.event(TimelineCategory.RUN, "run.finished", status=result.status.value, outcome=result.outcome.value)
        self._notify(run_id, "finished", lambda: observer.finished(result))
        return result

    def _result(
        self,
        ctx: RunContext,
        session_id: str,
        intent: Intent | None,
        release: Release | None,
        failure: HarnessError | None,
    ) -> RunResult:
        terminal = ctx.terminal
        assert terminal is not None, "every path reaches a terminal state"
        result = RunResult(
            run_id=ctx.run_id,
            session_id=session_id,
            status=terminal.status,
            outcome=terminal.outcome,
            intent=intent.value if intent else None,
            usage=ctx.usage(),
            duration_ms=ctx.elapsed_ms(),
            model_ms=ctx.model_time_s * 1000.0,
            backend_ms=ctx.backend_time_s * 1000.0,
        )
        if terminal.status is RunStatus.COMPLETED and release is not None:
            return replace(
                result,
                content=release.content,
                fallback_reason=release.fallback_reason.value if release.fallback_reason else None,
                published_result=release.published_result,
            )
        code = terminal.failure_code or HarnessError.code
        if failure is not None and failure.code == code:
            message = failure.safe_message
        else:
            message = _INTERRUPTION_MESSAGES.get(code, HarnessError.safe_message)
        return replace(result, failure=Failure(code, message))

    @staticmethod
    def _notify(run_id: str, what: str, send: Callable[[], None]) -> None:
        try:
            send()
        except Exception as exc:  # noqa: BLE001 - the stored run stays the truth
            logger.warning("observer %s failed for run %s: %s", what, run_id, type(exc).__name__)


def _where(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)[-3:]
    return " <- ".join(f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in reversed(frames))


_INTERRUPTION_MESSAGES = {e.code: e.safe_message for e in (RunCancelled, DeadlineExceeded, WorkerShutdown)}
