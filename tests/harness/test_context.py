"""RunContext: budgets, deadline, cancellation and first-terminal-wins, as a run would notice them."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from harness.context import (
    Budgets,
    CancelReason,
    Outcome,
    RunContext,
    RunStatus,
    TerminalState,
)
from harness.errors import BudgetExhausted, DeadlineExceeded, RunCancelled, WorkerShutdown
from harness.llm.base import TokenUsage
from harness.testing import ManualCancelSignal

COMPLETED = TerminalState(RunStatus.COMPLETED, Outcome.SUCCESS)
CANCELLED = TerminalState(RunStatus.CANCELLED, Outcome.CANCELLED, "cancelled")
DEADLINE = TerminalState(RunStatus.FAILED, Outcome.FAILED, "deadline_exceeded")
SHUTDOWN = TerminalState(RunStatus.FAILED, Outcome.FAILED, "worker_shutdown")


class FakeClock:
    """A clock that only moves when the test says so."""

    def __init__(self, start: float = 1_000.0) -> None:
        self.t = start
        self._epoch = datetime(2024, 5, 1, 10, 0, tzinfo=UTC)

    def monotonic(self) -> float:
        return self.t

    def now(self) -> datetime:
        return self._epoch + timedelta(seconds=self.t)

    def advance(self, seconds: float) -> None:
        self.t += seconds


def make_ctx(
    *,
    deadline_s: float = 60.0,
    budgets: Budgets | None = None,
    clock: FakeClock | None = None,
    signal: ManualCancelSignal | None = None,
) -> RunContext:
    return RunContext(
        "run-ctx", deadline_s=deadline_s, budgets=budgets, clock=clock or FakeClock(), cancel_signal=signal
    )


# --- budgets -------------------------------------------------------------------------------


def test_model_call_budget_allows_exactly_max_calls_then_raises() -> None:
    ctx = make_ctx(budgets=Budgets(max_model_calls=3))
    for _ in range(3):
        ctx.begin_model_call()
    with pytest.raises(BudgetExhausted) as info:
        ctx.begin_model_call()
    assert info.value.budget == "model call"
    assert ctx.usage().model_calls == 3
    assert ctx.remaining_model_calls == 0


def test_tool_call_budget_allows_exactly_max_calls_then_raises() -> None:
    ctx = make_ctx(budgets=Budgets(max_tool_calls=2))
    ctx.begin_tool_call()
    ctx.begin_tool_call()
    with pytest.raises(BudgetExhausted) as info:
        ctx.begin_tool_call()
    assert info.value.budget == "tool call"
    assert ctx.usage().tool_calls == 2
    assert ctx.remaining_tool_calls == 0
    # The model budget is separate: tool calls did not consume it.
    ctx.begin_model_call()
    assert ctx.usage().model_calls == 1


def test_token_budget_stops_the_next_model_call_once_reached() -> None:
    ctx = make_ctx(budgets=Budgets(max_tokens=100))
    ctx.begin_model_call()
    ctx.record_usage(TokenUsage(input_tokens=60, output_tokens=39))
    ctx.begin_model_call()  # 99 < 100: still allowed
    ctx.record_usage(TokenUsage(input_tokens=0, output_tokens=1))
    with pytest.raises(BudgetExhausted) as info:
        ctx.begin_model_call()
    assert info.value.budget == "token"
    assert ctx.usage().tokens == 100
    assert ctx.usage().model_calls == 2


def test_negative_token_counts_from_a_provider_do_not_refund_the_budget() -> None:
    ctx = make_ctx(budgets=Budgets(max_tokens=10))
    ctx.record_usage(TokenUsage(input_tokens=10, output_tokens=0))
    ctx.record_usage(TokenUsage(input_tokens=-50, output_tokens=-50))
    assert ctx.usage().tokens == 10
    with pytest.raises(BudgetExhausted):
        ctx.begin_model_call()


def test_a_call_is_charged_when_it_begins_not_when_it_succeeds() -> None:
    ctx = make_ctx(budgets=Budgets(max_model_calls=2, max_tool_calls=1))
    ctx.begin_model_call()
    # No usage recorded yet (the call is in flight or failed): it already counts.
    assert ctx.usage().model_calls == 1
    assert ctx.remaining_model_calls == 1
    ctx.begin_tool_call()
    assert ctx.usage().tool_calls == 1
    # A failed call is not refunded: the next one is refused.
    with pytest.raises(BudgetExhausted):
        ctx.begin_tool_call()


def test_zero_budgets_refuse_the_first_call() -> None:
    ctx = make_ctx(budgets=Budgets(max_model_calls=0, max_tool_calls=0))
    with pytest.raises(BudgetExhausted):
        ctx.begin_model_call()
    with pytest.raises(BudgetExhausted):
        ctx.begin_tool_call()
    assert ctx.usage().model_calls == 0
    assert ctx.usage().tool_calls == 0


def test_the_model_retry_budget_counts_retries_of_the_whole_run() -> None:
    ctx = make_ctx(budgets=Budgets(max_model_retries=2))
    assert ctx.begin_model_retry(0.5)
    assert ctx.begin_model_retry(0.5)
    assert not ctx.begin_model_retry(0.5)  # spent: the provider gives up, the run goes on
    assert ctx.usage().model_retries == 2
    assert ctx.terminal is None
    ctx.begin_model_call()  # retries are not model calls
    assert ctx.usage().model_calls == 1


def test_a_retry_that_would_wait_past_the_deadline_is_refused_uncharged() -> None:
    clock = FakeClock()
    ctx = make_ctx(deadline_s=10.0, clock=clock, budgets=Budgets(max_model_retries=5))
    clock.advance(8.0)
    assert not ctx.begin_model_retry(2.0)
    assert ctx.begin_model_retry(1.5)
    assert ctx.usage().model_retries == 1


def test_a_cancelled_run_allows_no_retry() -> None:
    ctx = make_ctx()
    ctx.cancel(CancelReason.USER)
    with pytest.raises(RunCancelled):
        ctx.begin_model_retry(0.1)
    assert ctx.usage().model_retries == 0


def test_negative_budgets_are_rejected() -> None:
    with pytest.raises(ValueError, match="negative"):
        Budgets(max_tool_calls=-1)
    with pytest.raises(ValueError, match="negative"):
        Budgets(max_model_retries=-1)


def test_budget_exhaustion_does_not_end_the_run() -> None:
    ctx = make_ctx(budgets=Budgets(max_model_calls=0))
    with pytest.raises(BudgetExhausted):
        ctx.begin_model_call()
    assert ctx.terminal is None
    assert ctx.finish(COMPLETED) is True


# --- deadline ------------------------------------------------------------------------------


def test_deadline_passing_raises_deadline_exceeded_and_fails_the_run() -> None:
    clock = FakeClock()
    ctx = make_ctx(deadline_s=30, clock=clock)
    clock.advance(29)
    ctx.begin_model_call()
    assert ctx.remaining_s() == pytest.approx(1.0)
    assert ctx.timeout_for(10.0) == pytest.approx(1.0)
    clock.advance(1)
    with pytest.raises(DeadlineExceeded):
        ctx.begin_tool_call()
    assert ctx.terminal == DEADLINE
    assert ctx.terminal.failure_code == "deadline_exceeded"
    assert ctx.usage().tool_calls == 0  # refused before charging
    assert ctx.timeout_for(10.0) == 0.0


def test_deadline_is_noticed_by_every_kind_of_check() -> None:
    for begin in (RunContext.check, RunContext.begin_model_call, RunContext.begin_tool_call):
        clock = FakeClock()
        ctx = make_ctx(deadline_s=5, clock=clock)
        clock.advance(6)
        with pytest.raises(DeadlineExceeded):
            begin(ctx)
        assert ctx.terminal == DEADLINE
        assert ctx.interrupted


def test_elapsed_follows_the_clock() -> None:
    clock = FakeClock()
    ctx = make_ctx(clock=clock)
    clock.advance(2.5)
    assert ctx.elapsed_ms() == pytest.approx(2500.0)


# --- cancellation --------------------------------------------------------------------------


def test_user_cancel_stops_the_next_call_with_run_cancelled() -> None:
    ctx = make_ctx()
    ctx.begin_model_call()
    assert ctx.cancel(CancelReason.USER) is True
    assert ctx.interrupted
    with pytest.raises(RunCancelled):
        ctx.begin_model_call()
    with pytest.raises(RunCancelled):
        ctx.begin_tool_call()
    assert ctx.terminal == CANCELLED
    assert ctx.usage().model_calls == 1


def test_shutdown_cancel_raises_worker_shutdown() -> None:
    ctx = make_ctx()
    assert ctx.cancel(CancelReason.SHUTDOWN) is True
    with pytest.raises(WorkerShutdown):
        ctx.check()
    assert ctx.terminal == SHUTDOWN


def test_deadline_cancel_raises_deadline_exceeded() -> None:
    ctx = make_ctx()
    assert ctx.cancel(CancelReason.DEADLINE) is True
    with pytest.raises(DeadlineExceeded):
        ctx.begin_model_call()
    assert ctx.terminal == DEADLINE


@pytest.mark.parametrize(
    ("reason", "error", "state"),
    [
        (CancelReason.USER, RunCancelled, CANCELLED),
        (CancelReason.SHUTDOWN, WorkerShutdown, SHUTDOWN),
        (CancelReason.DEADLINE, DeadlineExceeded, DEADLINE),
    ],
)
def test_external_cancel_signal_is_seen_at_the_next_check(
    reason: CancelReason, error: type[Exception], state: TerminalState
) -> None:
    signal = ManualCancelSignal()
    ctx = make_ctx(signal=signal)
    ctx.begin_model_call()
    assert ctx.terminal is None
    signal.reason = reason
    assert ctx.terminal is None  # nothing happens until the harness looks
    with pytest.raises(error):
        ctx.begin_tool_call()
    assert ctx.terminal == state
    assert ctx.usage().tool_calls == 0
    # Once terminal, the signal going away does not revive the run.
    signal.reason = None
    with pytest.raises(error):
        ctx.check()


def test_external_cancel_wins_over_a_passed_deadline() -> None:
    clock = FakeClock()
    signal = ManualCancelSignal()
    ctx = make_ctx(deadline_s=1, clock=clock, signal=signal)
    clock.advance(5)
    signal.reason = CancelReason.USER
    with pytest.raises(RunCancelled):
        ctx.check()
    assert ctx.terminal == CANCELLED


def test_wait_wakes_early_when_the_run_is_cancelled() -> None:
    ctx = RunContext("run-wait", deadline_s=60)
    timer = threading.Timer(0.05, ctx.cancel, args=(CancelReason.USER,))
    started = time.perf_counter()
    timer.start()
    try:
        with pytest.raises(RunCancelled):
            ctx.wait(5.0)
    finally:
        timer.cancel()
    elapsed = time.perf_counter() - started
    assert elapsed < 1.0, f"wait slept {elapsed:.2f}s despite the cancel"


def test_wait_never_sleeps_past_the_deadline() -> None:
    ctx = RunContext("run-wait-deadline", deadline_s=0.1)
    started = time.perf_counter()
    with pytest.raises(DeadlineExceeded):
        ctx.wait(5.0)
    assert time.perf_counter() - started < 1.0
    assert ctx.terminal == DEADLINE


def test_wait_returns_normally_when_nothing_happens() -> None:
    ctx = RunContext("run-wait-ok", deadline_s=60)
    started = time.perf_counter()
    ctx.wait(0.05)
    assert time.perf_counter() - started >= 0.04
    assert ctx.terminal is None


# --- first terminal wins -------------------------------------------------------------------


def test_after_a_terminal_state_later_transitions_are_refused() -> None:
    ctx = make_ctx()
    assert ctx.finish(COMPLETED) is True
    assert ctx.finish(TerminalState(RunStatus.FAILED, Outcome.FAILED, "boom")) is False
    for reason in CancelReason:
        assert ctx.cancel(reason) is False
    assert ctx.terminal == COMPLETED
    assert not ctx.interrupted


def test_a_cancelled_run_cannot_be_completed_afterwards() -> None:
    ctx = make_ctx()
    assert ctx.cancel(CancelReason.USER) is True
    assert ctx.finish(COMPLETED) is False
    assert ctx.cancel(CancelReason.SHUTDOWN) is False
    assert ctx.terminal == CANCELLED
    with pytest.raises(RunCancelled):
        ctx.check()


def test_a_deadline_after_completion_does_not_overwrite_it() -> None:
    clock = FakeClock()
    ctx = make_ctx(deadline_s=1, clock=clock)
    assert ctx.finish(COMPLETED) is True
    clock.advance(10)
    with pytest.raises(RunCancelled):  # the run is over; no further calls
        ctx.check()
    assert ctx.terminal == COMPLETED


def test_first_terminal_wins_under_a_real_thread_race() -> None:
    rounds = 500
    winners: dict[str, int] = {"finish": 0, "user": 0, "deadline": 0}
    expected = {"finish": COMPLETED, "user": CANCELLED, "deadline": DEADLINE}
    for i in range(rounds):
        ctx = RunContext(f"race-{i}", deadline_s=60)
        barrier = threading.Barrier(3)
        results: dict[str, bool] = {}
        attempts: dict[str, Callable[[], bool]] = {
            "finish": functools.partial(ctx.finish, COMPLETED),
            "user": functools.partial(ctx.cancel, CancelReason.USER),
            "deadline": functools.partial(ctx.cancel, CancelReason.DEADLINE),
        }

        def contend(
            name: str,
            attempt: Callable[[], bool],
            barrier: threading.Barrier = barrier,
            results: dict[str, bool] = results,
        ) -> None:
            barrier.wait(timeout=5)
            results[name] = attempt()

        # Rotate who starts last (the barrier's last arrival tends to run first), so every
        # contender gets its chance to win across the rounds.
        order = list(attempts.items())
        order = order[i % 3 :] + order[: i % 3]
        threads = [threading.Thread(target=contend, args=(n, a)) for n, a in order]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=5)
        assert len(results) == 3, f"round {i}: a contender did not finish"
        won = [name for name, ok in results.items() if ok]
        assert len(won) == 1, f"round {i}: {results}"
        assert ctx.terminal == expected[won[0]], f"round {i}: {won[0]} won but terminal is {ctx.terminal}"
        assert ctx.interrupted is (won[0] != "finish")
        winners[won[0]] += 1
    assert sum(winners.values()) == rounds
    # The race really was contested: each kind of transition won some rounds.
    assert all(count > 0 for count in winners.values()), winners
