"""ToolBoundary: the only way a tool runs.

For every call it: issues the framework's ``tool_call_id`` (the model's own ids are replaced, so
ids are unique and owned by this run), checks the run is active and charges the tool budget,
validates the arguments against the tool's schema (errors go back to the model as tool errors),
runs the backend with a per-tool timeout cut to the run's deadline, redacts the secrets in the
result and the request (:mod:`harness.redact`: nothing after this point ever sees them, and a
quote verifies against the redacted text), stores the canonical invocation (full request and
raw result) for the guards, hands the agent a bounded projection,
and writes a metadata-only audit row (fail-open). Calls of one model step run in parallel; every
call that started is recorded, also when the run ends while it is in flight.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass, field
from typing import Any

from harness.audit import Audit
from harness.context import RunContext
from harness.errors import HarnessError, RunInterrupted
from harness.llm.base import ToolCall, ToolDefinition
from harness.ports import (
    CanonicalInvocation,
    EvidenceStatus,
    InvocationStatus,
    InvocationStore,
    TimelineCategory,
    ToolAuditRecord,
)
from harness.redact import redact, redact_text
from harness.tools.projection import DEFAULT_LIMITS, ProjectionLimits, dumps_json, project_error, project_result
from harness.tools.spec import ToolArgumentError, ToolOutput, ToolRefused, ToolSpec

logger = logging.getLogger(__name__)

_POOL_LOCK = threading.Lock()
_POOL: ThreadPoolExecutor | None = None
#: How often a wait on a slow tool looks at the run's cancellation and deadline.
_WAIT_SLICE_S = 0.05


def _shared_pool() -> ThreadPoolExecutor:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=16, thread_name_prefix="harness-tool")
        return _POOL


def new_tool_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


@dataclass(frozen=True, slots=True)
class ToolObservation:
    """The outcome of one call as the agent sees it (``content``) plus its metadata."""

    tool_call_id: str
    tool: str
    status: InvocationStatus
    evidence_status: EvidenceStatus | None
    error_code: str | None
    content: str


@dataclass
class _Pending:
    call: ToolCall
    spec: ToolSpec[Any] | None
    started: float
    request: dict[str, Any]
    future: Future[ToolOutput] | None = None
    timeout_s: float = 0.0
    started_ms: float = 0.0
    step_index: int | None = None
    status: InvocationStatus = InvocationStatus.READY
    error: tuple[str, str, Any] | None = None
    output: ToolOutput | None = field(default=None)


class ToolBoundary:
    def __init__(
        self,
        *,
        ctx: RunContext,
        specs: Sequence[ToolSpec[Any]],
        store: InvocationStore,
        audit: Audit,
        on_call: Callable[[str], None] | None = None,
        limits: ProjectionLimits = DEFAULT_LIMITS,
        executor: ThreadPoolExecutor | None = None,
        default_timeout_s: float = 10.0,
    ) -> None:
        self._ctx = ctx
        self._default_timeout_s = default_timeout_s
        self._specs = {spec.name: spec for spec in specs}
        self._store = store
        self._audit = audit
        self._on_call = on_call
        self._limits = limits
        self._executor = executor
        self._issued: set[str] = set()
        self._used: set[str] = set()
        self.observations: list[ToolObservation] = []

    @property
    def definitions(self) -> tuple[ToolDefinition, ...]:
        return tuple(spec.definition for spec in self._specs.values())

    @property
    def tool_names(self) -> tuple[str, ...]:
        return tuple(self._specs)

    def issue(self, calls: Sequence[ToolCall]) -> tuple[ToolCall, ...]:
        """Give each requested call a framework id; only issued ids may be invoked, once."""
        issued = []
        for call in calls:
            call_id = new_tool_call_id()
            self._issued.add(call_id)
            issued.append(ToolCall(call_id, call.name, call.arguments))
        return tuple(issued)

    def invoke(self, call: ToolCall) -> ToolObservation:
        return self.invoke_all([call])[0]

    def invoke_all(self, calls: Sequence[ToolCall]) -> list[ToolObservation]:
        """Run the calls of one step in parallel; results come back in call order.

        Every call that started is recorded (audit row and canonical invocation), whatever stops
        the step: when the budget runs out part-way, the calls already started are awaited first;
        when the run is cancelled or passes its deadline, the calls still in flight are recorded
        as ``cancelled`` and the interruption is raised after them."""
        pending: list[_Pending] = []
        stop: HarnessError | None = None
        try:
            for call in calls:
                pending.append(self._start(call))
        except HarnessError as exc:  # the later calls never start; the earlier ones still count
            stop = exc
        if not isinstance(stop, RunInterrupted):
            try:
                self._await(pending)
            except RunInterrupted as exc:
                stop = exc
        if isinstance(stop, RunInterrupted):
            self._abandon(pending, stop.code)
        observations = [self._finish(p) for p in pending]
        self.observations.extend(observations)
        if stop is not None:
            raise stop
        return observations

    # --- phases ----------------------------------------------------------------------------

    def _pending(self, call: ToolCall, spec: ToolSpec[Any] | None, request: dict[str, Any]) -> _Pending:
        return _Pending(
            call,
            spec,
            time.perf_counter(),
            request,
            started_ms=self._ctx.elapsed_ms(),
            step_index=self._ctx.current_step,
        )

    def _start(self, call: ToolCall) -> _Pending:
        request: dict[str, Any] = {"arguments_text": redact_text(call.arguments)}
        if call.id not in self._issued or call.id in self._used:
            p = self._pending(call, None, request)
            return self._fail(
                p, InvocationStatus.REFUSED, "unknown_call_id", "This call id was not issued to this run."
            )
        self._used.add(call.id)
        spec = self._specs.get(call.name)
        self._ctx.begin_tool_call()
        p = self._pending(call, spec, request)
        try:
            return self._submit(p)
        except Exception as exc:  # noqa: BLE001 - a charged call is recorded, even one that never ran
            logger.warning("tool %s could not start in run %s: %s", call.name, self._ctx.run_id, type(exc).__name__)
            return self._fail(p, InvocationStatus.FAILED, "tool_failed", f"The {call.name} backend failed.")

    def _submit(self, p: _Pending) -> _Pending:
        call, spec, request = p.call, p.spec, p.request
        if self._on_call is not None:
            self._on_call(call.name)
        if spec is None:
            return self._fail(
                p, InvocationStatus.INVALID_ARGUMENTS, "unknown_tool",
                f"There is no tool named {call.name!r}. Available: {', '.join(self._specs) or 'none'}.",
            )  # fmt: skip
        try:
            args = spec.parse(call.arguments)
        except ToolArgumentError as exc:
            return self._fail(
                p, InvocationStatus.INVALID_ARGUMENTS, "invalid_arguments",
                "The arguments do not match the tool's schema; fix them and call again.", exc.problems,
            )  # fmt: skip
        request["arguments"] = redact(args.model_dump(mode="json"))
        p.timeout_s = self._ctx.timeout_for(self._default_timeout_s if spec.timeout_s is None else spec.timeout_s)
        # In a copy of this thread's context: what the caller bound (the run id its log lines
        # carry) holds in the backend too, and nothing the backend sets leaks into the pool thread.
        run_in_context = contextvars.copy_context().run
        p.future = (self._executor or _shared_pool()).submit(run_in_context, self._run_backend, spec, args, p.timeout_s)
        return p

    def _run_backend(self, spec: ToolSpec[Any], args: Any, timeout_s: float) -> ToolOutput:
        started = time.perf_counter()
        try:
            output = spec.run(args, timeout_s)
        finally:
            self._ctx.add_backend_time(time.perf_counter() - started)
        # The one place every result passes: the store, the projection, the guards and the
        # report only ever see the redacted result. A result that cannot be redacted fails.
        return ToolOutput(redact(output.raw), output.evidence_status)

    def _await(self, pending: Sequence[_Pending]) -> None:
        running = [p for p in pending if p.future is not None]
        while running:
            soonest = min(p.started + p.timeout_s for p in running) - time.perf_counter()
            timeout = max(0.0, min(_WAIT_SLICE_S, soonest))
            if len(running) == 1:
                future = running[0].future
                assert future is not None
                with contextlib.suppress(FutureTimeout):
                    future.exception(timeout=timeout)  # returns as soon as it is done
            else:
                wait_futures([p.future for p in running if p.future is not None], timeout, "FIRST_COMPLETED")
            self._ctx.check()  # a cancel or the deadline stops the wait within one slice
            now = time.perf_counter()
            for p in running:
                assert p.future is not None
                if p.future.done():
                    self._collect(p)
                elif now - p.started >= p.timeout_s:
                    self._fail(p, InvocationStatus.TIMEOUT, "tool_timeout",
                               f"{p.call.name} did not answer within {p.timeout_s:.1f}s.")  # fmt: skip
            running = [p for p in running if p.output is None and p.error is None]

    def _abandon(self, pending: Sequence[_Pending], code: str) -> None:
        """The run ended mid-step: a call that finished meanwhile keeps its result, every other
        one is ``cancelled`` (one still queued for a thread never runs)."""
        for p in pending:
            if p.output is not None or p.error is not None:
                continue
            if p.future is not None and p.future.done():
                self._collect(p)
                continue
            if p.future is not None:
                p.future.cancel()
            self._fail(p, InvocationStatus.CANCELLED, code, "The run ended before this call finished.")

    def _collect(self, p: _Pending) -> None:
        assert p.future is not None
        try:
            p.output = p.future.result()
        except ToolRefused as exc:
            self._fail(p, InvocationStatus.REFUSED, exc.code, exc.reason)
        except Exception as exc:  # noqa: BLE001 - a backend failure is a tool error, not a crash
            logger.warning("tool %s failed in run %s: %s", p.call.name, self._ctx.run_id, type(exc).__name__)
            self._fail(p, InvocationStatus.FAILED, "tool_failed", f"The {p.call.name} backend failed.")

    def _fail(self, p: _Pending, status: InvocationStatus, code: str, message: str, details: Any = None) -> _Pending:
        p.status = status
        p.error = (code, message, details)
        return p

    def _finish(self, p: _Pending) -> ToolObservation:
        call = p.call
        duration_ms = (time.perf_counter() - p.started) * 1000.0
        raw: Mapping[str, Any] | None = p.output.raw if p.output is not None else None
        evidence = p.output.evidence_status if p.output is not None else None
        raw_bytes = len(dumps_json(raw).encode()) if raw is not None else 0
        if p.error is None and raw is not None and call.id in self._used:
            try:
                self._store.put(
                    CanonicalInvocation(
                        run_id=self._ctx.run_id,
                        tool_call_id=call.id,
                        tool=call.name,
                        request=p.request,
                        raw_result=raw,
                        status=InvocationStatus.READY,
                        evidence_status=evidence,
                        error_code=None,
                        created_at=self._ctx.clock.now(),
                        duration_ms=duration_ms,
                    )
                )
            except Exception as exc:  # noqa: BLE001 - fail closed: an unstored result is not evidence
                logger.warning("invocation store failed in run %s: %s", self._ctx.run_id, type(exc).__name__)
                self._fail(p, InvocationStatus.FAILED, "evidence_store_unavailable",
                           "The result could not be recorded, so it cannot be used as evidence.")  # fmt: skip
        if p.error is None and raw is not None:
            content = project_result(call.name, call.id, raw, self._limits)
        else:
            code, message, details = p.error or ("tool_failed", "The tool failed.", None)
            content = project_error(call.name, call.id, code, message, details)
            self._store_failure(p, duration_ms)
        error_code = p.error[0] if p.error else None
        self._audit.tool(
            ToolAuditRecord(
                run_id=self._ctx.run_id,
                tool_call_id=call.id,
                tool=call.name,
                status=p.status,
                evidence_status=evidence if p.error is None else None,
                error_code=error_code,
                duration_ms=duration_ms,
                request_bytes=len(call.arguments.encode()),
                result_bytes=raw_bytes,
                step_index=p.step_index,
                started_ms=p.started_ms,
            )
        )
        self._audit.event(
            TimelineCategory.TOOL, "tool.completed",
            tool=call.name, status=p.status.value, error_code=error_code, duration_ms=round(duration_ms, 3),
        )  # fmt: skip
        return ToolObservation(call.id, call.name, p.status, evidence if p.error is None else None, error_code, content)

    def _store_failure(self, p: _Pending, duration_ms: float) -> None:
        """Failed calls are recorded too (never READY), so a citation of one is recognised."""
        if p.error is None or p.error[0] in ("unknown_call_id", "evidence_store_unavailable"):
            return
        try:
            self._store.put(
                CanonicalInvocation(
                    run_id=self._ctx.run_id,
                    tool_call_id=p.call.id,
                    tool=p.call.name,
                    request=p.request,
                    raw_result=None,
                    status=p.status,
                    evidence_status=None,
                    error_code=p.error[0],
                    created_at=self._ctx.clock.now(),
                    duration_ms=duration_ms,
                )
            )
        except Exception as exc:  # noqa: BLE001 - nothing citable is lost
            logger.warning("invocation store failed in run %s: %s", self._ctx.run_id, type(exc).__name__)
