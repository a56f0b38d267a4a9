"""ToolBoundary: ids, validation, timeouts, parallelism, failures, the canonical store and the audit."""

from __future__ import annotations

import contextvars
import json
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Annotated, Any, Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import Field

from harness.audit import Audit
from harness.context import SYSTEM_CLOCK, Budgets, CancelReason, RunContext
from harness.errors import BudgetExhausted, DeadlineExceeded, RunCancelled
from harness.inmemory import InMemoryAudit, InMemoryInvocationStore, InMemoryLogs, SqliteSqlSource
from harness.llm.base import ToolCall
from harness.ports import InvocationStatus, LogLine
from harness.tools.boundary import ToolBoundary, ToolObservation
from harness.tools.evidence import lookup_knowledge_tool, query_logs_tool, query_mysql_tool
from harness.tools.spec import ToolArgumentError, ToolArguments, ToolOutput, ToolRefused, ToolSpec
from tests.harness.chain import FakeClock

RUN_ID = "run-boundary"
PROPERTY = settings(max_examples=80, derandomize=True, database=None, deadline=None)


class ProbeArgs(ToolArguments):
    query: Annotated[str, Field(min_length=1, max_length=40, description="What to probe.")]
    count: Annotated[int, Field(ge=1, le=7, description="How many.")] = 3
    mode: Literal["fast", "safe"] = "safe"


Handler = Callable[[ProbeArgs, float], ToolOutput]


def ok_output(**raw: Any) -> ToolOutput:
    return ToolOutput(raw or {"answer": "fine"}, "ok")


def probe(name: str = "probe", handler: Handler | None = None, *, timeout_s: float = 5.0) -> ToolSpec[ProbeArgs]:
    def default(args: ProbeArgs, _timeout: float) -> ToolOutput:
        return ok_output(echo=args.query, count=args.count)

    return ToolSpec(name, f"The {name} tool.", ProbeArgs, handler or default, timeout_s=timeout_s)


@dataclass
class Rig:
    ctx: RunContext
    boundary: ToolBoundary
    store: InMemoryInvocationStore
    memory: InMemoryAudit
    called: list[str] = field(default_factory=list)

    def call(self, name: str, arguments: Any) -> ToolCall:
        text = arguments if isinstance(arguments, str) else json.dumps(arguments)
        return self.boundary.issue([ToolCall("model-id", name, text)])[0]

    def invoke(self, name: str, arguments: Any) -> ToolObservation:
        return self.boundary.invoke(self.call(name, arguments))


def build(
    *specs: ToolSpec[Any],
    budgets: Budgets | None = None,
    deadline_s: float = 60.0,
    store: InMemoryInvocationStore | None = None,
    memory: InMemoryAudit | None = None,
    ctx: RunContext | None = None,
    executor: ThreadPoolExecutor | None = None,
    on_call: Callable[[str], None] | None = None,
) -> Rig:
    ctx = ctx or RunContext(RUN_ID, deadline_s=deadline_s, budgets=budgets or Budgets(max_tool_calls=100))
    store = store or InMemoryInvocationStore()
    memory = memory or InMemoryAudit()
    called: list[str] = []

    def notify(tool: str) -> None:
        called.append(tool)
        if on_call is not None:
            on_call(tool)

    boundary = ToolBoundary(
        ctx=ctx,
        specs=specs or (probe(),),
        store=store,
        audit=Audit(memory.sinks(), run_id=RUN_ID, clock=SYSTEM_CLOCK),
        on_call=notify,
        executor=executor,
    )
    return Rig(ctx, boundary, store, memory, called)


def content(observation: ToolObservation) -> dict[str, Any]:
    parsed: dict[str, Any] = json.loads(observation.content)
    return parsed


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    """Blocks slow handlers; opened at teardown so no pool thread is left waiting."""
    event = threading.Event()
    yield event
    event.set()


def blocking(gate: threading.Event, started: threading.Event | None = None) -> Handler:
    def handle(args: ProbeArgs, _timeout: float) -> ToolOutput:
        if started is not None:
            started.set()
        gate.wait(10)
        return ok_output(echo=args.query)

    return handle


def sleeping(seconds: float, label: str) -> Handler:
    def handle(args: ProbeArgs, _timeout: float) -> ToolOutput:
        time.sleep(seconds)
        return ok_output(label=label, query=args.query)

    return handle


# --- the schema the model sees is the validator ---------------------------------------------


def test_schema_shown_to_the_model_states_the_limits_validation_enforces() -> None:
    rig = build(probe())
    schema = rig.boundary.definitions[0].parameters
    props = schema["properties"]
    assert props["count"]["maximum"] == 7
    assert props["count"]["minimum"] == 1
    assert props["mode"]["enum"] == ["fast", "safe"]
    assert props["query"]["maxLength"] == 40
    assert schema["required"] == ["query"]
    assert schema["additionalProperties"] is False
    assert "title" not in json.dumps(schema)

    def status(arguments: Any) -> InvocationStatus:
        return rig.invoke("probe", arguments).status

    ready, invalid = InvocationStatus.READY, InvocationStatus.INVALID_ARGUMENTS
    maximum, minimum = props["count"]["maximum"], props["count"]["minimum"]
    assert status({"query": "q", "count": maximum}) is ready
    assert status({"query": "q", "count": maximum + 1}) is invalid
    assert status({"query": "q", "count": minimum}) is ready
    assert status({"query": "q", "count": minimum - 1}) is invalid
    for mode in props["mode"]["enum"]:
        assert status({"query": "q", "mode": mode}) is ready
    assert status({"query": "q", "mode": "reckless"}) is invalid
    assert status({"query": "x" * props["query"]["maxLength"]}) is ready
    assert status({"query": "x" * (props["query"]["maxLength"] + 1)}) is invalid
    assert status({"count": 2}) is invalid  # "query" is required
    assert status({"query": "q", "verbose": True}) is invalid  # additionalProperties: false
    assert status({"query": "q", "count": "5"}) is invalid  # strict: a string is not an int
    assert status({"query": "q", "count": 5.0}) is invalid


@PROPERTY
@given(st.integers(min_value=-50, max_value=150))
def test_any_integer_is_accepted_exactly_when_the_schema_allows_it(n: int) -> None:
    specs: list[ToolSpec[Any]] = [probe(), lookup_knowledge_tool(_NoKnowledge()), query_logs_tool(InMemoryLogs())]
    fields = {
        "probe": ("count", {"query": "q"}),
        "lookup_knowledge": ("top_k", {"query": "q"}),
        "query_logs": ("limit", {}),
    }
    for spec in specs:
        name, base = fields[spec.name]
        bounds = spec.definition.parameters["properties"][name]
        allowed = bounds["minimum"] <= n <= bounds["maximum"]
        try:
            spec.parse(json.dumps({**base, name: n}))
            accepted = True
        except ToolArgumentError:
            accepted = False
        assert accepted is allowed, (spec.name, name, n, bounds)


def test_the_log_level_enum_in_the_schema_is_what_validation_accepts() -> None:
    spec = query_logs_tool(InMemoryLogs())
    level = spec.definition.parameters["properties"]["level"]
    enum = next(option["enum"] for option in level["anyOf"] if "enum" in option)
    assert enum == ["DEBUG", "INFO", "WARN", "ERROR", "FATAL"]
    for value in enum:
        assert spec.parse(json.dumps({"level": value})).level == value
    with pytest.raises(ToolArgumentError) as info:
        spec.parse('{"level": "VERBOSE"}')
    assert info.value.problems[0]["field"] == "level"
    with pytest.raises(ToolArgumentError):
        spec.parse('{"limit": "10"}')
    with pytest.raises(ToolArgumentError):
        spec.parse('{"query": "x", "sql": "SELECT 1"}')


class _NoKnowledge:
    def search(self, query: str, top_k: int) -> Any:
        raise AssertionError("not called")


# --- invalid calls never reach the backend --------------------------------------------------


@pytest.mark.parametrize(
    "arguments",
    [
        "{not json",
        '{"query": "pool", "count": "5"}',
        '{"query": "pool", "unexpected": 1}',
        '["pool"]',
        '{"query": ""}',
        "",
    ],
)
def test_invalid_arguments_go_back_to_the_model_as_a_tool_error(arguments: str) -> None:
    backend_calls: list[ProbeArgs] = []

    def handle(args: ProbeArgs, _timeout: float) -> ToolOutput:
        backend_calls.append(args)
        return ok_output()

    rig = build(probe(handler=handle))
    call = rig.call("probe", arguments)
    observation = rig.boundary.invoke(call)

    assert observation.status is InvocationStatus.INVALID_ARGUMENTS
    assert observation.error_code == "invalid_arguments"
    assert observation.evidence_status is None
    body = content(observation)
    assert body["tool_call_id"] == call.id
    assert body["tool"] == "probe"
    assert body["error"]["code"] == "invalid_arguments"
    assert body["error"]["message"]
    assert isinstance(body["error"]["details"], list)
    assert body["error"]["details"]
    assert all({"field", "problem"} <= set(d) for d in body["error"]["details"])
    assert backend_calls == []
    stored = rig.store.get(RUN_ID, call.id)
    assert stored is not None
    assert stored.status is InvocationStatus.INVALID_ARGUMENTS
    assert stored.raw_result is None


def test_unknown_tool_is_a_tool_error_that_names_the_available_tools() -> None:
    backend_calls: list[ProbeArgs] = []

    def handle(args: ProbeArgs, _timeout: float) -> ToolOutput:
        backend_calls.append(args)
        return ok_output()

    rig = build(probe("probe", handle), probe("other", handle))
    observation = rig.invoke("drop_database", {"query": "q"})
    assert observation.status is InvocationStatus.INVALID_ARGUMENTS
    assert observation.error_code == "unknown_tool"
    error = content(observation)["error"]
    assert error["code"] == "unknown_tool"
    assert "probe" in error["message"]
    assert "other" in error["message"]
    assert backend_calls == []


# --- call ids ---------------------------------------------------------------------------------


def test_issue_replaces_the_models_ids_with_unique_framework_ids() -> None:
    rig = build(probe())
    requested = [ToolCall("call_1", "probe", "{}"), ToolCall("call_1", "probe", '{"query": "x"}')]
    issued = rig.boundary.issue(requested)
    assert [c.name for c in issued] == ["probe", "probe"]
    assert [c.arguments for c in issued] == [c.arguments for c in requested]
    ids = [c.id for c in issued]
    assert len(set(ids)) == 2
    assert "call_1" not in ids
    assert all(i.startswith("call_") for i in ids)


def test_a_call_id_that_was_not_issued_is_refused_without_running_or_charging() -> None:
    backend_calls: list[ProbeArgs] = []

    def handle(args: ProbeArgs, _timeout: float) -> ToolOutput:
        backend_calls.append(args)
        return ok_output()

    rig = build(probe(handler=handle))
    rig.boundary.issue([ToolCall("call_model", "probe", '{"query": "q"}')])
    forged = ToolCall("call_model", "probe", '{"query": "q"}')  # the model's own id, never issued
    observation = rig.boundary.invoke(forged)
    assert observation.status is InvocationStatus.REFUSED
    assert observation.error_code == "unknown_call_id"
    assert content(observation)["error"]["code"] == "unknown_call_id"
    assert backend_calls == []
    assert rig.ctx.usage().tool_calls == 0
    assert rig.store.get(RUN_ID, "call_model") is None


def test_an_issued_id_can_be_invoked_only_once() -> None:
    backend_calls: list[ProbeArgs] = []

    def handle(args: ProbeArgs, _timeout: float) -> ToolOutput:
        backend_calls.append(args)
        return ok_output(echo=args.query)

    rig = build(probe(handler=handle))
    call = rig.call("probe", {"query": "first"})
    assert rig.boundary.invoke(call).status is InvocationStatus.READY
    replay = ToolCall(call.id, "probe", '{"query": "second"}')
    again = rig.boundary.invoke(replay)
    assert again.status is InvocationStatus.REFUSED
    assert again.error_code == "unknown_call_id"
    assert [a.query for a in backend_calls] == ["first"]
    stored = rig.store.get(RUN_ID, call.id)
    assert stored is not None
    assert stored.status is InvocationStatus.READY
    assert stored.raw_result == {"echo": "first"}


def test_the_same_id_twice_in_one_step_runs_once() -> None:
    backend_calls: list[ProbeArgs] = []

    def handle(args: ProbeArgs, _timeout: float) -> ToolOutput:
        backend_calls.append(args)
        return ok_output()

    rig = build(probe(handler=handle))
    call = rig.call("probe", {"query": "q"})
    first, second = rig.boundary.invoke_all([call, call])
    assert first.status is InvocationStatus.READY
    assert second.error_code == "unknown_call_id"
    assert len(backend_calls) == 1


# --- time: per-tool timeout, deadline, parallelism, cancel -------------------------------------


def test_a_slow_tool_times_out_at_its_own_limit(gate: threading.Event) -> None:
    rig = build(probe(handler=blocking(gate), timeout_s=0.2))
    call = rig.call("probe", {"query": "q"})
    started = time.perf_counter()
    observation = rig.boundary.invoke(call)
    elapsed = time.perf_counter() - started
    assert observation.status is InvocationStatus.TIMEOUT
    assert observation.error_code == "tool_timeout"
    assert content(observation)["error"]["code"] == "tool_timeout"
    assert 0.18 <= elapsed < 0.6, elapsed
    stored = rig.store.get(RUN_ID, call.id)
    assert stored is not None
    assert stored.status is InvocationStatus.TIMEOUT


def test_a_tool_is_given_no_more_time_than_the_run_has_left() -> None:
    seen: list[float] = []

    def handle(args: ProbeArgs, timeout: float) -> ToolOutput:
        seen.append(timeout)
        return ok_output()

    rig = build(probe(handler=handle, timeout_s=30.0), deadline_s=2.0)
    assert rig.invoke("probe", {"query": "q"}).status is InvocationStatus.READY
    assert len(seen) == 1
    assert 0 < seen[0] <= 2.0


def test_the_run_deadline_bounds_a_slow_tool_with_a_longer_timeout(gate: threading.Event) -> None:
    rig = build(probe(handler=blocking(gate), timeout_s=30.0), deadline_s=0.3)
    call = rig.call("probe", {"query": "q"})
    started = time.perf_counter()
    try:
        status = rig.boundary.invoke(call).status
    except DeadlineExceeded:
        status = None
    elapsed = time.perf_counter() - started
    assert status in (None, InvocationStatus.TIMEOUT)
    assert elapsed < 0.8, elapsed


def test_calls_of_one_step_run_in_parallel() -> None:
    rig = build(probe("a", sleeping(0.3, "a")), probe("b", sleeping(0.3, "b")))
    calls = [rig.call("a", {"query": "qa"}), rig.call("b", {"query": "qb"})]
    started = time.perf_counter()
    observations = rig.boundary.invoke_all(calls)
    elapsed = time.perf_counter() - started
    assert [o.status for o in observations] == [InvocationStatus.READY, InvocationStatus.READY]
    assert elapsed < 0.5, f"two 0.3s tools took {elapsed:.2f}s: they ran one after the other"


def test_results_come_back_in_call_order_not_completion_order() -> None:
    rig = build(probe("slow", sleeping(0.3, "slow")), probe("fast", sleeping(0.02, "fast")))
    calls = [
        rig.call("slow", {"query": "one"}),
        rig.call("fast", {"query": "two"}),
        rig.call("fast", {"query": "three"}),
    ]
    observations = rig.boundary.invoke_all(calls)
    assert [o.tool_call_id for o in observations] == [c.id for c in calls]
    assert [content(o)["result"]["query"] for o in observations] == ["one", "two", "three"]
    assert [content(o)["result"]["label"] for o in observations] == ["slow", "fast", "fast"]
    assert rig.boundary.observations == observations


def test_a_cancel_from_another_thread_stops_the_wait_on_a_slow_tool(gate: threading.Event) -> None:
    started = threading.Event()
    rig = build(probe(handler=blocking(gate, started), timeout_s=10.0))
    call = rig.call("probe", {"query": "q"})
    cancelled_at: list[float] = []

    def cancel() -> None:
        started.wait(5)
        time.sleep(0.05)
        cancelled_at.append(time.perf_counter())
        rig.ctx.cancel(CancelReason.USER)

    canceller = threading.Thread(target=cancel)
    canceller.start()
    try:
        with pytest.raises(RunCancelled):
            rig.boundary.invoke_all([call])
        raised_at = time.perf_counter()
    finally:
        canceller.join(5)
    assert cancelled_at, "the cancel never happened"
    assert raised_at - cancelled_at[0] < 0.2, f"noticed the cancel after {raised_at - cancelled_at[0]:.2f}s"


# --- a run that ends while its calls are in flight ---------------------------------------------

PARALLEL = 4


def started_together(gate: threading.Event, count: int) -> tuple[Handler, threading.Barrier]:
    """A handler that blocks on ``gate``; the barrier is passed once all ``count`` calls run."""
    barrier = threading.Barrier(count + 1)

    def handle(args: ProbeArgs, _timeout: float) -> ToolOutput:
        barrier.wait(5)
        gate.wait(10)
        return ok_output(echo=args.query)

    return handle, barrier


def assert_every_call_recorded(rig: Rig, calls: list[ToolCall], status: InvocationStatus, code: str | None) -> None:
    assert rig.ctx.usage().tool_calls == len(calls)
    assert [r.tool_call_id for r in rig.memory.tools] == [c.id for c in calls]
    assert [(r.status, r.error_code) for r in rig.memory.tools] == [(status, code)] * len(calls)
    assert rig.memory.names() == ["tool.completed"] * len(calls)
    assert [e.details["status"] for e in rig.memory.timeline] == [status.value] * len(calls)
    assert len(rig.store.items) == len(calls)
    for call in calls:
        stored = rig.store.get(RUN_ID, call.id)
        assert stored is not None
        assert (stored.status, stored.error_code, stored.raw_result) == (status, code, None)
    assert [o.status for o in rig.boundary.observations] == [status] * len(calls)


def test_a_cancel_mid_step_records_every_call_in_flight_as_cancelled(gate: threading.Event) -> None:
    handler, barrier = started_together(gate, PARALLEL)
    rig = build(probe(handler=handler, timeout_s=10.0))
    calls = [rig.call("probe", {"query": f"q{i}"}) for i in range(PARALLEL)]

    def cancel() -> None:
        barrier.wait(5)  # every call is running
        rig.ctx.cancel(CancelReason.USER)

    canceller = threading.Thread(target=cancel)
    canceller.start()
    try:
        with pytest.raises(RunCancelled):
            rig.boundary.invoke_all(calls)
    finally:
        canceller.join(5)

    assert_every_call_recorded(rig, calls, InvocationStatus.CANCELLED, "cancelled")
    error = content(rig.boundary.observations[0])["error"]
    assert error == {"code": "cancelled", "message": "The run ended before this call finished."}


def test_the_deadline_mid_step_records_every_call_in_flight(gate: threading.Event) -> None:
    handler, barrier = started_together(gate, PARALLEL)
    clock = FakeClock()
    ctx = RunContext(RUN_ID, deadline_s=60.0, budgets=Budgets(max_tool_calls=100), clock=clock)
    rig = build(probe(handler=handler, timeout_s=30.0), ctx=ctx)
    calls = [rig.call("probe", {"query": f"q{i}"}) for i in range(PARALLEL)]

    def expire() -> None:
        barrier.wait(5)
        clock.advance(61.0)  # the run's deadline passes while every call is still running

    expirer = threading.Thread(target=expire)
    expirer.start()
    started = time.perf_counter()
    try:
        with pytest.raises(DeadlineExceeded):
            rig.boundary.invoke_all(calls)
    finally:
        expirer.join(5)

    assert time.perf_counter() - started < 2.0  # not the tools' own 30 s
    assert_every_call_recorded(rig, calls, InvocationStatus.CANCELLED, "deadline_exceeded")


def test_a_call_that_finished_before_the_cancel_keeps_its_result(gate: threading.Event) -> None:
    fast_done = threading.Event()
    slow_started = threading.Event()

    def fast(args: ProbeArgs, _timeout: float) -> ToolOutput:
        fast_done.set()
        return ok_output(echo=args.query)

    rig = build(probe("fast", fast), probe("slow", blocking(gate, slow_started), timeout_s=10.0))
    calls = [rig.call("slow", {"query": "one"}), rig.call("fast", {"query": "two"})]

    def cancel() -> None:
        fast_done.wait(5)
        slow_started.wait(5)
        time.sleep(0.05)
        rig.ctx.cancel(CancelReason.USER)

    canceller = threading.Thread(target=cancel)
    canceller.start()
    try:
        with pytest.raises(RunCancelled):
            rig.boundary.invoke_all(calls)
    finally:
        canceller.join(5)

    assert [(r.tool, r.status, r.error_code) for r in rig.memory.tools] == [
        ("slow", InvocationStatus.CANCELLED, "cancelled"),
        ("fast", InvocationStatus.READY, None),
    ]
    finished = rig.store.get(RUN_ID, calls[1].id)
    assert finished is not None
    assert (finished.status, finished.raw_result) == (InvocationStatus.READY, {"echo": "two"})
    assert rig.ctx.usage().tool_calls == 2


def test_a_cancel_between_starts_records_the_calls_already_started(gate: threading.Event) -> None:
    ctx = RunContext(RUN_ID, deadline_s=60.0)

    def cancel_at_once(_tool: str) -> None:
        ctx.cancel(CancelReason.USER)  # the user cancels as the first call starts

    rig = build(probe(handler=blocking(gate), timeout_s=10.0), ctx=ctx, on_call=cancel_at_once)
    calls = [rig.call("probe", {"query": f"q{i}"}) for i in range(3)]

    with pytest.raises(RunCancelled):
        rig.boundary.invoke_all(calls)

    # The other two never started: not charged, not recorded.
    assert_every_call_recorded(rig, calls[:1], InvocationStatus.CANCELLED, "cancelled")


def test_a_budget_that_runs_out_mid_step_still_awaits_and_records_the_started_calls() -> None:
    rig = build(probe(handler=sleeping(0.1, "ran")), budgets=Budgets(max_tool_calls=2))
    calls = [rig.call("probe", {"query": f"q{i}"}) for i in range(3)]

    with pytest.raises(BudgetExhausted):
        rig.boundary.invoke_all(calls)

    assert [(r.status, r.error_code) for r in rig.memory.tools] == [(InvocationStatus.READY, None)] * 2
    assert {k[1] for k in rig.store.items} == {calls[0].id, calls[1].id}
    assert rig.ctx.usage().tool_calls == 2


def test_a_call_that_cannot_even_be_submitted_is_recorded_as_failed() -> None:
    pool = ThreadPoolExecutor(max_workers=1)
    pool.shutdown()
    rig = build(probe(), executor=pool)
    call = rig.call("probe", {"query": "q"})

    observation = rig.boundary.invoke(call)

    assert (observation.status, observation.error_code) == (InvocationStatus.FAILED, "tool_failed")
    assert rig.ctx.usage().tool_calls == 1
    assert [r.status for r in rig.memory.tools] == [InvocationStatus.FAILED]
    stored = rig.store.get(RUN_ID, call.id)
    assert stored is not None and stored.status is InvocationStatus.FAILED


# --- the caller's context ---------------------------------------------------------------------

_BOUND: contextvars.ContextVar[str] = contextvars.ContextVar("bound", default="nothing")


def test_backends_run_in_the_callers_context_and_leave_nothing_behind() -> None:
    """What the caller bound (the service binds the run id its log lines carry) holds in the pool
    thread; what a backend binds stays in that call, not in the pool thread for the next one."""
    seen: list[tuple[str, str]] = []

    def handle(args: ProbeArgs, _timeout: float) -> ToolOutput:
        seen.append((args.query, _BOUND.get()))
        _BOUND.set("set by a backend")
        return ok_output()

    rig = build(probe(handler=handle))
    token = _BOUND.set("run-7")
    try:
        rig.boundary.invoke_all([rig.call("probe", {"query": q}) for q in ("a", "b", "c")])
    finally:
        _BOUND.reset(token)
    rig.boundary.invoke(rig.call("probe", {"query": "unbound"}))

    assert sorted(seen) == [("a", "run-7"), ("b", "run-7"), ("c", "run-7"), ("unbound", "nothing")]
    assert _BOUND.get() == "nothing"


# --- backend failures ----------------------------------------------------------------------


def test_a_backend_exception_is_a_tool_error_without_its_text() -> None:
    def explode(args: ProbeArgs, _timeout: float) -> ToolOutput:
        raise RuntimeError("password=hunter2 host=db-secret-7")

    rig = build(probe(handler=explode))
    call = rig.call("probe", {"query": "q"})
    observation = rig.boundary.invoke(call)
    assert observation.status is InvocationStatus.FAILED
    assert observation.error_code == "tool_failed"
    assert content(observation)["error"]["code"] == "tool_failed"
    assert "hunter2" not in observation.content
    assert "db-secret-7" not in observation.content
    assert "RuntimeError" not in observation.content
    stored = rig.store.get(RUN_ID, call.id)
    assert stored is not None
    assert stored.status is InvocationStatus.FAILED
    assert stored.raw_result is None


def test_a_result_with_non_string_keys_does_not_crash_the_step() -> None:
    def handle(args: ProbeArgs, _timeout: float) -> ToolOutput:
        return ToolOutput({"by_status": {500: 3, 200: 97}}, "ok")

    rig = build(probe(handler=handle))
    call = rig.call("probe", {"query": "q"})
    observation = rig.boundary.invoke(call)
    assert observation.status is InvocationStatus.READY
    body = content(observation)
    assert body["tool_call_id"] == call.id
    assert body["result"] == {"by_status": {"500": 3, "200": 97}}
    stored = rig.store.get(RUN_ID, call.id)
    assert stored is not None
    assert stored.raw_result == {"by_status": {500: 3, 200: 97}}  # the canonical result keeps the int keys
    assert rig.memory.tools[0].result_bytes > 0


def test_a_backend_refusal_reaches_the_model_with_its_reason() -> None:
    def refuse(args: ProbeArgs, _timeout: float) -> ToolOutput:
        raise ToolRefused("scope_refused", "That service is outside this team's scope.")

    rig = build(probe(handler=refuse))
    observation = rig.invoke("probe", {"query": "q"})
    assert observation.status is InvocationStatus.REFUSED
    assert observation.error_code == "scope_refused"
    error = content(observation)["error"]
    assert error == {"code": "scope_refused", "message": "That service is outside this team's scope."}


def test_a_sql_write_is_refused_by_the_read_only_source() -> None:
    sql = SqliteSqlSource({"incidents": (("id", "service"), [(1, "payment-service")])})
    rig = build(query_mysql_tool(sql))
    refused = rig.invoke("query_mysql", {"sql": "DELETE FROM incidents"})
    assert refused.status is InvocationStatus.REFUSED
    assert refused.error_code == "sql_refused"
    assert content(refused)["error"]["message"] == "only reading statements are allowed"
    rows = rig.invoke("query_mysql", {"sql": "SELECT service FROM incidents"})
    assert rows.status is InvocationStatus.READY
    assert content(rows)["result"]["rows"] == [["payment-service"]]


# --- the canonical invocation ----------------------------------------------------------------


def test_the_canonical_invocation_keeps_the_full_request_and_raw_result() -> None:
    raw = {"items": [{"n": i, "text": f"item {i}"} for i in range(100)], "note": "x" * 2_000}

    def handle(args: ProbeArgs, _timeout: float) -> ToolOutput:
        return ToolOutput(raw, "ok")

    rig = build(probe(handler=handle))
    arguments = '{"query": "  pool  ", "mode": "fast"}'
    call = rig.call("probe", arguments)
    observation = rig.boundary.invoke(call)
    assert observation.status is InvocationStatus.READY
    assert observation.evidence_status == "ok"
    assert rig.called == ["probe"]

    stored = rig.store.get(RUN_ID, call.id)
    assert stored is not None
    assert stored.run_id == RUN_ID
    assert stored.tool_call_id == call.id
    assert stored.tool == "probe"
    assert stored.status is InvocationStatus.READY
    assert stored.evidence_status == "ok"
    assert stored.error_code is None
    assert stored.request == {
        "arguments_text": arguments,
        "arguments": {"query": "pool", "count": 3, "mode": "fast"},
    }
    assert stored.raw_result == raw  # all 100 items and the whole note, though the model saw less
    seen = content(observation)
    assert len(seen["result"]["items"]) < 100
    assert len(seen["result"]["note"]) < 2_000
    assert stored.created_at.tzinfo is not None
    assert stored.duration_ms >= 0


def test_the_canonical_request_of_a_real_tool_records_the_validated_arguments() -> None:
    logs = InMemoryLogs([LogLine("2024-05-01T10:00:00+00:00", "payment-service", "ERROR", "pool exhausted")])
    rig = build(query_logs_tool(logs))
    call = rig.call("query_logs", {"level": "warning", "service": "payment-service"})
    observation = rig.boundary.invoke(call)
    assert observation.status is InvocationStatus.READY
    assert observation.evidence_status == "ok"
    stored = rig.store.get(RUN_ID, call.id)
    assert stored is not None
    assert stored.request["arguments"]["level"] == "WARN"
    assert stored.request["arguments"]["limit"] == 50
    assert stored.raw_result["lines"][0]["message"] == "pool exhausted"


def test_a_result_that_cannot_be_stored_is_not_given_to_the_model_as_evidence() -> None:
    store = InMemoryInvocationStore()
    store.fail_puts = True

    def handle(args: ProbeArgs, _timeout: float) -> ToolOutput:
        return ToolOutput({"finding": "RESULT-THAT-WAS-NEVER-STORED"}, "ok")

    rig = build(probe(handler=handle), store=store)
    call = rig.call("probe", {"query": "q"})
    observation = rig.boundary.invoke(call)
    assert observation.status is InvocationStatus.FAILED
    assert observation.error_code == "evidence_store_unavailable"
    assert observation.evidence_status is None
    assert content(observation)["error"]["code"] == "evidence_store_unavailable"
    assert "RESULT-THAT-WAS-NEVER-STORED" not in observation.content
    assert store.items == {}
    store.fail_puts = False
    assert store.get(RUN_ID, call.id) is None


# --- audit -------------------------------------------------------------------------------------


ARG_NEEDLE = "ARGNEEDLE31415"
RESULT_NEEDLE = "RESULTNEEDLE27182"


def _audit_text(memory: InMemoryAudit) -> str:
    return repr(memory.tools) + repr([dict(e.details) for e in memory.timeline]) + repr(memory.timeline)


def test_audit_records_carry_metadata_only() -> None:
    def handle(args: ProbeArgs, _timeout: float) -> ToolOutput:
        return ToolOutput({"finding": f"{RESULT_NEEDLE} {args.query}"}, "ok")

    rig = build(probe(handler=handle))
    arguments = json.dumps({"query": ARG_NEEDLE})
    call = rig.call("probe", arguments)
    observation = rig.boundary.invoke(call)
    bad = rig.invoke("probe", {"query": ARG_NEEDLE, "count": 99})
    assert observation.status is InvocationStatus.READY
    assert bad.status is InvocationStatus.INVALID_ARGUMENTS
    assert RESULT_NEEDLE in observation.content  # the model does see the result

    assert len(rig.memory.tools) == 2
    record = rig.memory.tools[0]
    assert record.run_id == RUN_ID
    assert record.tool_call_id == call.id
    assert record.tool == "probe"
    assert record.status is InvocationStatus.READY
    assert record.evidence_status == "ok"
    assert record.error_code is None
    assert record.request_bytes == len(arguments.encode())
    assert record.result_bytes > len(RESULT_NEEDLE)
    assert rig.memory.tools[1].error_code == "invalid_arguments"
    assert rig.memory.names() == ["tool.completed", "tool.completed"]
    assert rig.memory.timeline[0].details["status"] == "ready"

    audited = _audit_text(rig.memory).lower()
    assert ARG_NEEDLE.lower() not in audited
    assert RESULT_NEEDLE.lower() not in audited


def test_a_broken_audit_does_not_change_what_the_model_sees() -> None:
    def handle(args: ProbeArgs, _timeout: float) -> ToolOutput:
        return ToolOutput({"finding": f"seen {args.query}"}, "ok")

    def run(memory: InMemoryAudit) -> tuple[Rig, list[ToolObservation]]:
        rig = build(probe(handler=handle), memory=memory)
        calls = [rig.call("probe", {"query": "q"}), rig.call("probe", "{broken"), rig.call("nope", "{}")]
        return rig, rig.boundary.invoke_all(calls)

    _, healthy = run(InMemoryAudit())
    broken_rig, broken = run(InMemoryAudit(broken=True))

    def comparable(o: ToolObservation) -> ToolObservation:
        return replace(o, tool_call_id="ID", content=o.content.replace(o.tool_call_id, "ID"))

    assert [comparable(o) for o in broken] == [comparable(o) for o in healthy]
    assert broken[0].status is InvocationStatus.READY
    assert broken_rig.memory.tools == []
    assert broken_rig.memory.timeline == []
    stored = broken_rig.store.get(RUN_ID, broken[0].tool_call_id)
    assert stored is not None
    assert stored.status is InvocationStatus.READY


# --- budget ------------------------------------------------------------------------------------


def test_each_call_is_charged_to_the_tool_budget_before_the_backend_runs() -> None:
    charged_when_running: list[int] = []
    rig_holder: list[Rig] = []

    def handle(args: ProbeArgs, _timeout: float) -> ToolOutput:
        charged_when_running.append(rig_holder[0].ctx.usage().tool_calls)
        return ok_output()

    rig = build(probe(handler=handle), budgets=Budgets(max_tool_calls=3))
    rig_holder.append(rig)
    assert rig.invoke("probe", {"query": "a"}).status is InvocationStatus.READY
    assert rig.invoke("probe", "{bad json").status is InvocationStatus.INVALID_ARGUMENTS  # charged too
    assert rig.invoke("probe", {"query": "b"}).status is InvocationStatus.READY
    assert charged_when_running == [1, 3]
    assert rig.ctx.usage().tool_calls == 3
    with pytest.raises(BudgetExhausted) as info:
        rig.invoke("probe", {"query": "c"})
    assert info.value.budget == "tool call"
    assert len(charged_when_running) == 2


def test_a_cancelled_run_runs_no_more_tools() -> None:
    backend_calls: list[ProbeArgs] = []

    def handle(args: ProbeArgs, _timeout: float) -> ToolOutput:
        backend_calls.append(args)
        return ok_output()

    rig = build(probe(handler=handle))
    call = rig.call("probe", {"query": "q"})
    rig.ctx.cancel(CancelReason.USER)
    with pytest.raises(RunCancelled):
        rig.boundary.invoke(call)
    assert backend_calls == []
    assert rig.ctx.usage().tool_calls == 0


# --- secrets --------------------------------------------------------------------------------------


def test_secrets_are_redacted_before_the_store_the_projection_and_the_audit_see_the_result() -> None:
    def leaky(args: ProbeArgs, _timeout: float) -> ToolOutput:
        return ok_output(line="connect mysql://app:hunter2@db failed, api_key=sk-live-4eC39HqLyjWDarjtT1zdp7dc")

    rig = build(probe(handler=leaky))
    observation = rig.invoke("probe", {"query": "password=hunter2"})

    assert observation.status is InvocationStatus.READY
    stored = rig.store.get(RUN_ID, observation.tool_call_id)
    assert stored is not None
    expected = "connect mysql://app:[REDACTED:password]@db failed, api_key=[REDACTED:api_key]"
    assert stored.raw_result == {"line": expected}
    assert json.loads(observation.content)["result"] == {"line": expected}
    assert stored.request["arguments"] == {"query": "password=[REDACTED:password]", "count": 3, "mode": "safe"}
    everything = repr((stored, observation, rig.memory.tools, rig.memory.timeline))
    assert "hunter2" not in everything and "4eC39HqLyjWDarjtT1zdp7dc" not in everything
