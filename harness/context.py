"""RunContext: the deadline, cancellation, budgets and first-terminal-wins lifecycle of one run.

Every model call and tool call starts with ``begin_model_call`` / ``begin_tool_call``, which check
the run is still active (not cancelled, deadline not passed, no external cancel requested) and
charge the budget; a provider retrying a failed attempt asks ``begin_model_retry`` first. Terminal transitions may race from several threads (the worker finishing,
a user cancelling, the deadline passing): the first one wins and every later one is refused.
"""

from __future__ import annotations

import enum
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from harness.errors import (
    BudgetExhausted,
    DeadlineExceeded,
    RunCancelled,
    RunInterrupted,
    WorkerShutdown,
)
from harness.llm.base import TokenUsage
from harness.ports import CancelSignal, Clock


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def now(self) -> datetime:
        return datetime.now(UTC)


SYSTEM_CLOCK = SystemClock()


class CancelReason(enum.StrEnum):
    USER = "user"
    DEADLINE = "deadline"
    SHUTDOWN = "shutdown"


class RunStatus(enum.StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


class Outcome(enum.StrEnum):
    SUCCESS = "success"
    FALLBACK = "fallback"
    FAILED = "failed"
    CANCELLED = "cancelled"


@dataclass(frozen=True, slots=True)
class TerminalState:
    status: RunStatus
    outcome: Outcome
    failure_code: str | None = None


_INTERRUPTIONS: dict[CancelReason, tuple[TerminalState, type[RunInterrupted]]] = {
    CancelReason.USER: (TerminalState(RunStatus.CANCELLED, Outcome.CANCELLED, "cancelled"), RunCancelled),
    CancelReason.DEADLINE: (
        TerminalState(RunStatus.FAILED, Outcome.FAILED, DeadlineExceeded.code),
        DeadlineExceeded,
    ),
    CancelReason.SHUTDOWN: (
        TerminalState(RunStatus.FAILED, Outcome.FAILED, WorkerShutdown.code),
        WorkerShutdown,
    ),
}


@dataclass(frozen=True, slots=True)
class Budgets:
    max_model_calls: int = 12
    max_tool_calls: int = 12
    max_tokens: int = 120_000
    #: retries of failed model attempts (429, 5xx, timeouts), all calls of the run together
    max_model_retries: int = 4

    def __post_init__(self) -> None:
        if min(self.max_model_calls, self.max_tool_calls, self.max_tokens, self.max_model_retries) < 0:
            raise ValueError("budgets must not be negative")


@dataclass(frozen=True, slots=True)
class UsageSnapshot:
    model_calls: int = 0
    tool_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    #: provider attempts beyond the first of a model call (each model call is one of ``model_calls``)
    model_retries: int = 0

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens


class RunContext:
    """Owns one run's limits and lifecycle. Thread-safe."""

    def __init__(
        self,
        run_id: str,
        *,
        deadline_s: float,
        budgets: Budgets | None = None,
        clock: Clock = SYSTEM_CLOCK,
        cancel_signal: CancelSignal | None = None,
    ) -> None:
        self.run_id = run_id
        self.budgets = budgets or Budgets()
        self.clock = clock
        self._cancel_signal = cancel_signal
        self._started = clock.monotonic()
        self._deadline = self._started + deadline_s
        self._lock = threading.Lock()
        self._interrupted = threading.Event()
        # One attribute, assigned once under the lock: readers never see half a transition.
        self._end: tuple[TerminalState, type[RunInterrupted] | None] | None = None
        self._model_calls = 0
        self._model_retries = 0
        self._tool_calls = 0
        self._input_tokens = 0
        self._output_tokens = 0
        self._model_s = 0.0
        self._backend_s = 0.0
        #: the index of the model step in progress or last made (the tool calls it asks for belong to it)
        self.current_step: int | None = None

    # --- lifecycle -----------------------------------------------------------------------

    @property
    def terminal(self) -> TerminalState | None:
        end = self._end
        return end[0] if end is not None else None

    @property
    def interrupted(self) -> bool:
        return self._interrupted.is_set()

    def finish(self, state: TerminalState) -> bool:
        """Record ``state`` as the terminal state if no other got there first."""
        return self._transition(state, None)

    def cancel(self, reason: CancelReason) -> bool:
        """Stop the run before its next model or tool call. ``False`` if it already ended."""
        state, error = _INTERRUPTIONS[reason]
        return self._transition(state, error)

    def _transition(self, state: TerminalState, interruption: type[RunInterrupted] | None) -> bool:
        with self._lock:
            if self._end is not None:
                return False
            self._end = (state, interruption)
        if interruption is not None:
            self._interrupted.set()
        return True

    # --- checks --------------------------------------------------------------------------

    def remaining_s(self) -> float:
        return self._deadline - self.clock.monotonic()

    def elapsed_ms(self) -> float:
        return (self.clock.monotonic() - self._started) * 1000.0

    def check(self) -> None:
        """Raise the run's interruption if it was cancelled or its deadline has passed."""
        if self._end is None:
            reason = self._cancel_signal.requested() if self._cancel_signal is not None else None
            if reason is not None:
                self.cancel(reason)
            elif self.remaining_s() <= 0:
                self.cancel(CancelReason.DEADLINE)
        end = self._end
        if end is not None:
            # A run that already completed has nothing left to do either.
            raise (end[1] or RunCancelled)()

    def begin_model_call(self) -> None:
        self.check()
        with self._lock:
            if self._model_calls >= self.budgets.max_model_calls:
                raise BudgetExhausted("model call")
            if self._input_tokens + self._output_tokens >= self.budgets.max_tokens:
                raise BudgetExhausted("token")
            self._model_calls += 1

    def begin_model_retry(self, delay_s: float) -> bool:
        """Charge one retry of a failed model attempt that starts after ``delay_s``. ``False``
        (nothing charged) when the retry budget is spent or the wait would outlast the deadline;
        raises the run's interruption if it has ended. Implements :class:`RetryGate`."""
        self.check()
        if delay_s >= self.remaining_s():
            return False
        with self._lock:
            if self._model_retries >= self.budgets.max_model_retries:
                return False
            self._model_retries += 1
        return True

    def record_usage(self, usage: TokenUsage) -> None:
        with self._lock:
            self._input_tokens += max(usage.input_tokens, 0)
            self._output_tokens += max(usage.output_tokens, 0)

    def begin_tool_call(self) -> None:
        self.check()
        with self._lock:
            if self._tool_calls >= self.budgets.max_tool_calls:
                raise BudgetExhausted("tool call")
            self._tool_calls += 1

    @property
    def remaining_model_calls(self) -> int:
        return self.budgets.max_model_calls - self._model_calls

    @property
    def remaining_tool_calls(self) -> int:
        return self.budgets.max_tool_calls - self._tool_calls

    def usage(self) -> UsageSnapshot:
        with self._lock:
            return UsageSnapshot(
                self._model_calls, self._tool_calls, self._input_tokens, self._output_tokens, self._model_retries
            )

    def add_model_time(self, seconds: float) -> None:
        with self._lock:
            self._model_s += seconds

    def add_backend_time(self, seconds: float) -> None:
        with self._lock:
            self._backend_s += seconds

    @property
    def model_time_s(self) -> float:
        """Time spent inside model providers (excluded when the harness is benchmarked)."""
        return self._model_s

    @property
    def backend_time_s(self) -> float:
        """Time spent inside evidence backends (knowledge, logs, SQL)."""
        return self._backend_s

    def wait(self, seconds: float, *, poll_s: float = 0.05) -> None:
        """Sleep up to ``seconds`` (never past the deadline); wake early when the run is
        interrupted here or by the external cancel signal (polled every ``poll_s``)."""
        until = self.clock.monotonic() + max(0.0, min(seconds, self.remaining_s()))
        while True:
            self.check()
            left = until - self.clock.monotonic()
            if left <= 0:
                return
            self._interrupted.wait(min(left, poll_s))

    def timeout_for(self, limit_s: float) -> float:
        """The time a blocking call may take: its own limit, cut to what the deadline leaves."""
        return max(0.0, min(limit_s, self.remaining_s()))
