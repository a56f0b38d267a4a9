"""The ORM run store and audit sinks against the real database: claims, terminal writes,
session memory (and its one-query memo), the plain-SQL inserts and the buffered audit."""

from __future__ import annotations

import logging
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import IntegrityError
from django.utils import timezone

from chat.models import RunEvent
from harness.context import Outcome as HarnessOutcome
from harness.context import RunStatus as HarnessStatus
from harness.context import UsageSnapshot
from harness.ports import (
    InvocationStatus,
    ReasoningRecord,
    RoutingContext,
    RunFinish,
    RunStart,
    StepRecord,
    TimelineCategory,
    TimelineEvent,
    ToolAuditRecord,
)
from harness.release import ContentType, Failure, PublishedContent, RunResult
from tests.django_fixtures import Caller
from traces import stores
from traces.models import AgentStep, ChatSession, ReasoningAudit, Run, ToolInvocation, TraceEvent
from traces.sql import Row, fast_insert, insert_rows
from traces.stores import MAX_REASONING_CHARS, DjangoAuditSinks, DjangoRunStore

BASE = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
STARTED = datetime(2026, 1, 5, 10, 0, 0, 123456, tzinfo=UTC)
FINISHED = datetime(2026, 1, 5, 10, 0, 7, 654321, tzinfo=UTC)


def new_session(caller: Caller, title: str = "payments") -> ChatSession:
    return ChatSession.objects.create(owner=caller.user, title=title)


def add_run(
    session: ChatSession,
    *,
    at: int,
    question: str = "q",
    intent: str = "",
    outcome: str = "",
    published: dict[str, Any] | None = None,
    status: str = "completed",
) -> Run:
    """A run row created ``at`` seconds after BASE (explicit, so the order never depends on the clock)."""
    run = Run.objects.create(
        session=session,
        owner=session.owner,
        question=question,
        intent=intent,
        outcome=outcome,
        published_result=published,
        status=status,
    )
    Run.objects.filter(id=run.id).update(created_at=BASE + timedelta(seconds=at))
    return run


def start_of(run: Run, *, question: str | None = None, at: datetime = STARTED) -> RunStart:
    return RunStart(str(run.id), str(run.session_id), str(run.owner_id), question or run.question, at)


def success(run_id: str, session_id: str, *, answer: str = "pool exhausted") -> RunResult:
    return RunResult(
        run_id=run_id,
        session_id=session_id,
        status=HarnessStatus.COMPLETED,
        outcome=HarnessOutcome.SUCCESS,
        intent="DIAGNOSIS",
        content=PublishedContent(ContentType.DIAGNOSIS_REPORT, {"conclusion": answer}),
        usage=UsageSnapshot(model_calls=3, tool_calls=4, input_tokens=1200, output_tokens=340, model_retries=2),
        duration_ms=7531.5,
        model_ms=5000.25,
        backend_ms=1200.5,
        published_result={"conclusion": answer, "services": ["payment-service"]},
    )


def failure(run_id: str, session_id: str) -> RunResult:
    return RunResult(
        run_id=run_id,
        session_id=session_id,
        status=HarnessStatus.FAILED,
        outcome=HarnessOutcome.FAILED,
        failure=Failure("model_timeout", "m" * 400),
    )


def row_state(run_id: Any) -> dict[str, Any]:
    return dict(Run.objects.filter(id=run_id).values().get())


# --- start_run -------------------------------------------------------------------------------


def test_start_run_claims_a_queued_run_exactly_once(alice: Caller) -> None:
    run = add_run(new_session(alice), at=0, status="queued")
    store = DjangoRunStore()

    assert store.start_run(start_of(run)) is True
    claimed = Run.objects.get(id=run.id)
    assert claimed.status == "running" and claimed.started_at == STARTED

    # A second delivery of the same run (another worker, a redelivered message) must not run it.
    assert DjangoRunStore().start_run(start_of(run, at=STARTED + timedelta(minutes=5))) is False
    again = Run.objects.get(id=run.id)
    assert again.status == "running" and again.started_at == STARTED


def test_start_run_creates_a_running_run_when_nobody_queued_it(alice: Caller) -> None:
    session = new_session(alice)
    run_id = str(uuid.uuid4())
    start = RunStart(run_id, str(session.id), str(alice.user.pk), "Why is checkout slow?", STARTED)
    store = DjangoRunStore()

    assert store.start_run(start) is True
    run = Run.objects.get(id=run_id)
    assert run.status == "running" and run.started_at == STARTED
    assert run.question == "Why is checkout slow?"
    assert run.session_id == session.id and run.owner_id == alice.user.pk
    assert run.created_at is not None and run.outcome == "" and run.finished_at is None

    assert store.start_run(start) is False  # now it exists, and it is not queued
    assert Run.objects.filter(session=session).count() == 1


@pytest.mark.parametrize("status", ["completed", "failed", "cancelled"])
def test_start_run_refuses_a_terminal_run(alice: Caller, status: str) -> None:
    run = add_run(new_session(alice), at=0, status=status, outcome="cancelled" if status == "cancelled" else "")
    before = row_state(run.id)
    assert DjangoRunStore().start_run(start_of(run)) is False
    assert row_state(run.id) == before


# --- finish_run, record_intent ---------------------------------------------------------------


def test_finish_run_writes_the_terminal_state_once(alice: Caller) -> None:
    run = add_run(new_session(alice), at=0, status="running")
    store = DjangoRunStore()
    result = success(str(run.id), str(run.session_id))

    assert store.finish_run(RunFinish(str(run.id), result, FINISHED)) is True
    done = Run.objects.get(id=run.id)
    assert (done.status, done.outcome, done.intent) == ("completed", "success", "DIAGNOSIS")
    assert done.content == {"content_type": "diagnosis_report", "payload": {"conclusion": "pool exhausted"}}
    assert done.published_result == {"conclusion": "pool exhausted", "services": ["payment-service"]}
    assert (done.model_calls, done.tool_calls, done.input_tokens, done.output_tokens) == (3, 4, 1200, 340)
    assert done.model_retries == 2
    assert (done.duration_ms, done.model_ms, done.backend_ms) == (7531.5, 5000.25, 1200.5)
    assert done.finished_at == FINISHED
    assert (done.failure_code, done.failure_message, done.fallback_reason) == ("", "", "")

    # A second terminal write (a late cancel, a duplicate worker) is refused and changes nothing.
    before = row_state(run.id)
    late = failure(str(run.id), str(run.session_id))
    assert store.finish_run(RunFinish(str(run.id), late, FINISHED + timedelta(seconds=30))) is False
    assert row_state(run.id) == before


@pytest.mark.parametrize("status", ["queued", "completed", "cancelled"])
def test_finish_run_refuses_a_run_that_is_not_running(alice: Caller, status: str) -> None:
    run = add_run(new_session(alice), at=0, status=status)
    before = row_state(run.id)
    result = success(str(run.id), str(run.session_id))
    assert DjangoRunStore().finish_run(RunFinish(str(run.id), result, FINISHED)) is False
    assert row_state(run.id) == before


def test_a_failure_is_stored_with_its_code_and_a_bounded_message(alice: Caller) -> None:
    run = add_run(new_session(alice), at=0, status="running")
    assert DjangoRunStore().finish_run(RunFinish(str(run.id), failure(str(run.id), str(run.session_id)), FINISHED))
    failed = Run.objects.get(id=run.id)
    assert (failed.status, failed.outcome, failed.failure_code) == ("failed", "failed", "model_timeout")
    assert failed.failure_message == "m" * 300
    assert failed.content is None and failed.published_result is None and failed.intent == ""


def test_record_intent_sets_only_the_intent(alice: Caller) -> None:
    run = add_run(new_session(alice), at=0, status="running", question="how do I rotate keys?")
    other = add_run(run.session, at=1, status="running")
    before = row_state(run.id)
    DjangoRunStore().record_intent(run_id=str(run.id), intent="KNOWLEDGE_QUERY")
    after = row_state(run.id)
    assert after == {**before, "intent": "KNOWLEDGE_QUERY"}
    assert Run.objects.get(id=other.id).intent == ""


# --- session memory ----------------------------------------------------------------------------


P_OLD = {"conclusion": "old diagnosis"}
P_NEW = {"conclusion": "new diagnosis"}


def test_memory_reads_only_the_same_session_and_skips_the_excluded_run(alice: Caller, bob: Caller) -> None:
    mine = new_session(alice)
    theirs = new_session(bob)
    add_run(mine, at=0, question="payments slow?", intent="DIAGNOSIS", outcome="success", published=P_OLD)
    add_run(mine, at=1, question="what is a runbook?", intent="KNOWLEDGE_QUERY", outcome="success")
    add_run(mine, at=2, question="not routed yet", status="failed", outcome="failed")  # no intent: not history
    current = add_run(mine, at=3, question="and now?", intent="DIAGNOSIS", status="running")
    # Newer, in another session: never part of this session's memory.
    add_run(theirs, at=10, question="bob's question", intent="DIAGNOSIS", outcome="success", published=P_NEW)

    def ctx(exclude: Run) -> RoutingContext:
        return DjangoRunStore().routing_context(session_id=str(mine.id), exclude_run_id=str(exclude.id))

    assert ctx(current) == RoutingContext("KNOWLEDGE_QUERY", "what is a runbook?")
    latest = DjangoRunStore().latest_published_diagnosis(session_id=str(mine.id), exclude_run_id=str(current.id))
    assert latest == P_OLD

    # Excluding the newest routed run makes the one before it the context.
    newest = add_run(mine, at=4, question="newest", intent="SYSTEM_CHAT", outcome="success")
    assert ctx(current) == RoutingContext("SYSTEM_CHAT", "newest")
    assert ctx(newest) == RoutingContext("DIAGNOSIS", "and now?")


def test_an_empty_session_has_no_memory(alice: Caller) -> None:
    session = new_session(alice)
    only = add_run(session, at=0, intent="DIAGNOSIS", outcome="success", published=P_NEW)
    store = DjangoRunStore()
    assert store.routing_context(session_id=str(session.id), exclude_run_id=str(only.id)) == RoutingContext()
    assert store.latest_published_diagnosis(session_id=str(session.id), exclude_run_id=str(only.id)) is None


def test_only_a_successful_published_diagnosis_is_remembered_newest_first(alice: Caller) -> None:
    session = new_session(alice)
    add_run(session, at=0, intent="DIAGNOSIS", outcome="success", published={"conclusion": "oldest"})
    add_run(session, at=1, intent="DIAGNOSIS", outcome="success", published=P_OLD)
    # Newer, but none of these may become the previous turn:
    add_run(session, at=2, intent="DIAGNOSIS", outcome="fallback", published={"conclusion": "unverified"})
    add_run(session, at=3, intent="DIAGNOSIS", outcome="success", published=None)
    add_run(session, at=4, intent="KNOWLEDGE_QUERY", outcome="success", published={"conclusion": "an answer"})
    add_run(session, at=5, intent="DIAGNOSIS", outcome="failed", status="failed", published={"conclusion": "x"})
    current = add_run(session, at=6, status="running")
    store = DjangoRunStore()
    assert store.latest_published_diagnosis(session_id=str(session.id), exclude_run_id=str(current.id)) == P_OLD

    newer = add_run(session, at=7, intent="DIAGNOSIS", outcome="success", published=P_NEW)
    assert store.latest_published_diagnosis(session_id=str(session.id), exclude_run_id=str(current.id)) == P_NEW
    # The run being executed never remembers itself.
    assert store.latest_published_diagnosis(session_id=str(session.id), exclude_run_id=str(newer.id)) == P_OLD


def _two_sessions(alice: Caller) -> dict[str, tuple[str, str]]:
    """Two sessions whose memories differ; returns session id -> (session id, excluded run id)."""
    one, two = new_session(alice, "one"), new_session(alice, "two")
    add_run(one, at=0, question="one: diagnose", intent="DIAGNOSIS", outcome="success", published=P_OLD)
    add_run(one, at=1, question="one: hello", intent="SYSTEM_CHAT", outcome="success")
    current_one = add_run(one, at=2, status="running")
    add_run(two, at=0, question="two: diagnose", intent="DIAGNOSIS", outcome="success", published=P_NEW)
    add_run(two, at=1, question="two: docs", intent="KNOWLEDGE_QUERY", outcome="fallback")
    current_two = add_run(two, at=2, status="running")
    return {"one": (str(one.id), str(current_one.id)), "two": (str(two.id), str(current_two.id))}


def _alone(session_id: str, run_id: str) -> tuple[RoutingContext, Any]:
    """Each question asked of a store that has never been asked anything."""
    return (
        DjangoRunStore().routing_context(session_id=session_id, exclude_run_id=run_id),
        DjangoRunStore().latest_published_diagnosis(session_id=session_id, exclude_run_id=run_id),
    )


def test_the_memo_answers_as_each_query_alone_in_either_order(alice: Caller) -> None:
    sessions = _two_sessions(alice)
    expected = {name: _alone(*ids) for name, ids in sessions.items()}
    assert expected["one"] == (RoutingContext("SYSTEM_CHAT", "one: hello"), P_OLD)
    assert expected["two"] == (RoutingContext("KNOWLEDGE_QUERY", "two: docs"), P_NEW)

    for name, (session_id, run_id) in sessions.items():
        store = DjangoRunStore()  # the harness's order: routing, then memory
        routing = store.routing_context(session_id=session_id, exclude_run_id=run_id)
        latest = store.latest_published_diagnosis(session_id=session_id, exclude_run_id=run_id)
        assert (routing, latest) == expected[name]

        store = DjangoRunStore()  # the other order
        latest = store.latest_published_diagnosis(session_id=session_id, exclude_run_id=run_id)
        routing = store.routing_context(session_id=session_id, exclude_run_id=run_id)
        assert (routing, latest) == expected[name]


def test_the_memo_keeps_two_sessions_apart_when_interleaved(alice: Caller) -> None:
    sessions = _two_sessions(alice)
    expected = {name: _alone(*ids) for name, ids in sessions.items()}
    one, two = sessions["one"], sessions["two"]

    store = DjangoRunStore()
    r1 = store.routing_context(session_id=one[0], exclude_run_id=one[1])
    r2 = store.routing_context(session_id=two[0], exclude_run_id=two[1])
    l2 = store.latest_published_diagnosis(session_id=two[0], exclude_run_id=two[1])
    l1 = store.latest_published_diagnosis(session_id=one[0], exclude_run_id=one[1])
    assert (r1, l1) == expected["one"] and (r2, l2) == expected["two"]

    store = DjangoRunStore()
    l1 = store.latest_published_diagnosis(session_id=one[0], exclude_run_id=one[1])
    r2 = store.routing_context(session_id=two[0], exclude_run_id=two[1])
    r1 = store.routing_context(session_id=one[0], exclude_run_id=one[1])
    l2 = store.latest_published_diagnosis(session_id=two[0], exclude_run_id=two[1])
    assert (r1, l1) == expected["one"] and (r2, l2) == expected["two"]


def test_the_memo_does_not_outlive_one_pair_of_questions(alice: Caller) -> None:
    """A long-lived store (one per worker) answers the next pair from the database, not the memo."""
    session = new_session(alice)
    add_run(session, at=0, question="first", intent="DIAGNOSIS", outcome="success", published=P_OLD)
    current = add_run(session, at=5, status="running")
    store = DjangoRunStore()
    ids = {"session_id": str(session.id), "exclude_run_id": str(current.id)}
    assert store.routing_context(**ids) == RoutingContext("DIAGNOSIS", "first")
    assert store.latest_published_diagnosis(**ids) == P_OLD

    add_run(session, at=1, question="second", intent="DIAGNOSIS", outcome="success", published=P_NEW)
    assert store.routing_context(**ids) == RoutingContext("DIAGNOSIS", "second")
    assert store.latest_published_diagnosis(**ids) == P_NEW


@pytest.mark.parametrize("newer", [DjangoRunStore.RECENT_RUNS - 1, DjangoRunStore.RECENT_RUNS, 45])
def test_a_success_older_than_the_recent_runs_is_still_remembered(alice: Caller, newer: int) -> None:
    session = new_session(alice)
    add_run(session, at=0, question="the diagnosis", intent="DIAGNOSIS", outcome="success", published=P_OLD)
    for i in range(1, newer + 1):
        intent, outcome = ("DIAGNOSIS", "fallback") if i % 2 else ("KNOWLEDGE_QUERY", "success")
        add_run(session, at=i, question=f"follow-up {i}", intent=intent, outcome=outcome)
    current = add_run(session, at=newer + 1, status="running")
    store = DjangoRunStore()
    ids = {"session_id": str(session.id), "exclude_run_id": str(current.id)}
    assert store.routing_context(**ids).last_user_query == f"follow-up {newer}"
    assert store.latest_published_diagnosis(**ids) == P_OLD


# --- fast_insert -----------------------------------------------------------------------------


def test_fast_insert_writes_defaults_and_timestamps_and_the_instance_is_saved(alice: Caller) -> None:
    before = timezone.now()
    session = ChatSession(owner=alice.user, title="checkout errors")
    fast_insert(session)
    run = Run(session=session, owner=alice.user, question="Why is checkout failing?")
    fast_insert(run)
    after = timezone.now()

    assert session.created_at is not None and before <= session.created_at <= after
    stored = Run.objects.get(id=run.id)
    assert stored.status == "queued" and stored.metadata == {} and stored.idempotency_key is None
    assert (stored.intent, stored.outcome, stored.model_calls, stored.tool_calls) == ("", "", 0, 0)
    assert stored.created_at == run.created_at and before <= stored.created_at <= after
    assert stored.session_id == session.id and ChatSession.objects.get(id=session.id).title == "checkout errors"

    # The instance behaves as a saved one: it refreshes, and save() updates instead of inserting.
    Run.objects.filter(id=run.id).update(status="running")
    run.refresh_from_db()
    assert run.status == "running"
    run.question = "edited"
    run.save()
    assert Run.objects.count() == 1 and Run.objects.get(id=run.id).question == "edited"
    session.title = "renamed"
    session.save()
    assert ChatSession.objects.count() == 1 and ChatSession.objects.get().title == "renamed"


def test_fast_insert_surfaces_a_duplicate_idempotency_key_as_an_integrity_error(alice: Caller, bob: Caller) -> None:
    session = ChatSession(owner=alice.user)
    fast_insert(session)
    fast_insert(Run(session=session, owner=alice.user, question="q", idempotency_key="k-1"))
    with pytest.raises(IntegrityError):
        fast_insert(Run(session=session, owner=alice.user, question="q", idempotency_key="k-1"))
    assert Run.objects.filter(owner=alice.user).count() == 1

    # The key is per owner, and runs without a key never collide.
    other = ChatSession(owner=bob.user)
    fast_insert(other)
    fast_insert(Run(session=other, owner=bob.user, question="q", idempotency_key="k-1"))
    fast_insert(Run(session=session, owner=alice.user, question="q"))
    fast_insert(Run(session=session, owner=alice.user, question="q"))
    assert Run.objects.count() == 4


# --- insert_rows -------------------------------------------------------------------------------


def test_insert_rows_writes_several_tables_and_skips_duplicates(alice: Caller) -> None:
    run = add_run(new_session(alice), at=0, status="completed")
    now = timezone.now()
    rows: list[Row] = [
        (
            AgentStep,
            {
                "run_id": run.id,
                "index": i,
                "purpose": "agent",
                "role": "agent",
                "message_count": 2 + i,
                "message_roles": ["system", "user"],
                "has_text": bool(i),
                "tool_call_names": ["query_logs"],
                "input_tokens": 10,
                "output_tokens": 5,
                "duration_ms": 12.5,
                "error_code": "",
                "created_at": now,
            },
        )
        for i in range(2)
    ]
    rows.append(
        (
            ToolInvocation,
            {
                "run_id": run.id,
                "tool_call_id": "call-1",
                "tool": "query_logs",
                "status": "ready",
                "evidence_status": "ok",
                "error_code": "",
                "duration_ms": 3.0,
                "request_bytes": 40,
                "result_bytes": 900,
                "created_at": now,
            },
        )
    )
    rows += [
        (RunEvent, {"run_id": run.id, "seq": seq, "event_type": "status", "data": '{"stage": "x"}', "created_at": now})
        for seq in (1, 2, 3)
    ]

    insert_rows(rows)
    with pytest.raises(IntegrityError):  # by default a duplicate is an error, not silently dropped
        insert_rows(rows)
    insert_rows(rows, skip_duplicates=True)  # a second archive of the same rows: still one copy

    steps = list(AgentStep.objects.filter(run=run).order_by("index"))
    assert [(s.index, s.message_count, s.has_text) for s in steps] == [(0, 2, False), (1, 3, True)]
    assert steps[0].message_roles == ["system", "user"] and steps[0].tool_call_names == ["query_logs"]
    assert steps[0].created_at == now
    (tool,) = ToolInvocation.objects.filter(run=run)
    assert (tool.tool, tool.status, tool.evidence_status, tool.result_bytes) == ("query_logs", "ready", "ok", 900)
    assert list(RunEvent.objects.filter(run=run).order_by("seq").values_list("seq", flat=True)) == [1, 2, 3]


# --- DjangoAuditSinks ------------------------------------------------------------------------


def _record_everything(sinks: DjangoAuditSinks, run_id: str, *, secret: str = "") -> None:
    sinks.record_step(
        StepRecord(
            run_id=run_id,
            index=0,
            purpose="route",
            role="router",
            message_count=2,
            message_roles=("system", "user"),
            has_text=True,
            tool_call_names=(),
            input_tokens=120,
            output_tokens=8,
            duration_ms=41.5,
        )
    )
    sinks.record_step(
        StepRecord(
            run_id=run_id,
            index=1,
            purpose="agent",
            role="agent",
            message_count=4,
            message_roles=("system", "user", "assistant", "tool"),
            has_text=False,
            tool_call_names=("query_logs", "lookup_knowledge"),
            input_tokens=900,
            output_tokens=60,
            duration_ms=250.0,
            error_code="model_timeout",
        )
    )
    sinks.record_tool(
        ToolAuditRecord(
            run_id=run_id,
            tool_call_id=f"call-{secret}1",
            tool="query_logs",
            status=InvocationStatus.READY,
            evidence_status="ok",
            error_code=None,
            duration_ms=12.25,
            request_bytes=64,
            result_bytes=2048,
        )
    )
    sinks.record_tool(
        ToolAuditRecord(
            run_id=run_id,
            tool_call_id="call-2",
            tool="query_mysql",
            status=InvocationStatus.REFUSED,
            evidence_status=None,
            error_code="sql_refused",
            duration_ms=1.0,
            request_bytes=30,
            result_bytes=0,
        )
    )
    sinks.record_tool(
        ToolAuditRecord(
            run_id=run_id,
            tool_call_id="call-3",
            tool="query_logs",
            status=InvocationStatus.CANCELLED,
            evidence_status=None,
            error_code="deadline_exceeded",
            duration_ms=3000.0,
            request_bytes=20,
            result_bytes=0,
        )
    )
    at = datetime(2026, 1, 5, 10, 0, 1, 500000, tzinfo=UTC)
    sinks.append(TimelineEvent(run_id, TimelineCategory.RUN, "run.started", at, {"previous_turn": False}))
    sinks.append(
        TimelineEvent(
            run_id,
            TimelineCategory.RELEASE,
            "release.decided",
            at + timedelta(seconds=2),
            {"outcome": "success", "reason": None, "attempts": 1},
        )
    )
    sinks.record_reasoning(
        ReasoningRecord(
            run_id, 1, "agent", reasoning=f"think {secret}" + "r" * MAX_REASONING_CHARS, assistant_text=None
        )
    )


def test_audit_records_are_buffered_until_flush_then_written_with_their_fields(alice: Caller) -> None:
    run = add_run(new_session(alice), at=0, status="running")
    other = add_run(run.session, at=1, status="running")
    run_id = str(run.id)
    sinks = DjangoAuditSinks()
    _record_everything(sinks, run_id)
    _record_everything(sinks, str(other.id))

    assert not AgentStep.objects.exists() and not ToolInvocation.objects.exists()
    assert not TraceEvent.objects.exists() and not ReasoningAudit.objects.exists()

    sinks.flush(run_id)

    steps = list(AgentStep.objects.filter(run=run).order_by("index"))
    assert [(s.index, s.purpose, s.role, s.message_count, s.has_text) for s in steps] == [
        (0, "route", "router", 2, True),
        (1, "agent", "agent", 4, False),
    ]
    assert steps[0].message_roles == ["system", "user"] and steps[0].tool_call_names == []
    assert steps[1].tool_call_names == ["query_logs", "lookup_knowledge"]
    assert (steps[1].input_tokens, steps[1].output_tokens, steps[1].duration_ms) == (900, 60, 250.0)
    assert (steps[0].error_code, steps[1].error_code) == ("", "model_timeout")

    tools = {t.tool_call_id: t for t in ToolInvocation.objects.filter(run=run)}
    assert set(tools) == {"call-1", "call-2", "call-3"}
    ok, refused, cut_short = tools["call-1"], tools["call-2"], tools["call-3"]
    assert (ok.tool, ok.status, ok.evidence_status, ok.error_code) == ("query_logs", "ready", "ok", "")
    assert (ok.duration_ms, ok.request_bytes, ok.result_bytes) == (12.25, 64, 2048)
    assert (refused.status, refused.evidence_status, refused.error_code) == ("refused", "", "sql_refused")
    assert (cut_short.status, cut_short.error_code) == ("cancelled", "deadline_exceeded")

    timeline = list(TraceEvent.objects.filter(run=run).order_by("at"))
    assert [(e.category, e.name) for e in timeline] == [("run", "run.started"), ("release", "release.decided")]
    assert timeline[0].at == datetime(2026, 1, 5, 10, 0, 1, 500000, tzinfo=UTC)
    assert timeline[0].details == {"previous_turn": False}
    assert timeline[1].details == {"outcome": "success", "attempts": 1}  # None values are dropped

    (reasoning,) = ReasoningAudit.objects.filter(run=run)
    assert (reasoning.step_index, reasoning.purpose, reasoning.assistant_text) == (1, "agent", None)
    assert reasoning.reasoning is not None and len(reasoning.reasoning) == MAX_REASONING_CHARS
    assert reasoning.reasoning.startswith("think ")

    # The other run's records are still buffered, and flushing the same run again adds nothing.
    sinks.flush(run_id)
    assert AgentStep.objects.count() == 2 and not AgentStep.objects.filter(run=other).exists()
    sinks.flush(str(other.id))
    assert AgentStep.objects.filter(run=other).count() == 2
    assert TraceEvent.objects.filter(run=other).count() == 2


def test_a_run_with_many_records_is_flushed_before_it_ends(alice: Caller) -> None:
    run = add_run(new_session(alice), at=0, status="running")
    sinks = DjangoAuditSinks()
    sinks.FLUSH_AT = 3
    at = timezone.now()
    for i in range(4):
        sinks.append(TimelineEvent(str(run.id), TimelineCategory.TOOL, f"tool.{i}", at + timedelta(seconds=i)))
    assert TraceEvent.objects.filter(run=run).count() == 3
    sinks.flush(str(run.id))
    assert list(TraceEvent.objects.filter(run=run).order_by("at").values_list("name", flat=True)) == [
        "tool.0",
        "tool.1",
        "tool.2",
        "tool.3",
    ]


def test_a_run_s_trace_is_written_before_its_terminal_state(alice: Caller, monkeypatch: pytest.MonkeyPatch) -> None:
    # A client that sees the run finished (its status, its stream's end, its webhook) and then
    # reads the trace console finds every step and tool call, not whatever was flushed so far.
    run = add_run(new_session(alice), at=0, status="running")
    sinks = DjangoAuditSinks()
    _record_everything(sinks, str(run.id))
    store = DjangoRunStore(audit=sinks)
    seen: list[tuple[int, int]] = []
    complete = store.lifecycle.complete

    def observed(**kwargs: Any) -> bool:
        seen.append((AgentStep.objects.filter(run=run).count(), ToolInvocation.objects.filter(run=run).count()))
        return complete(**kwargs)

    monkeypatch.setattr(store.lifecycle, "complete", observed)
    assert store.finish_run(RunFinish(str(run.id), success(str(run.id), str(run.session_id)), FINISHED))
    assert seen == [(2, 3)] and Run.objects.get(id=run.id).status == "completed"


def test_flush_is_fail_open_and_logs_no_record_content(
    alice: Caller, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    run = add_run(new_session(alice), at=0, status="running")
    run_id = str(run.id)
    secret = "SECRET-REASONING-MARKER"

    def broken(rows: Any) -> None:
        raise IntegrityError(f"duplicate entry 'think {secret}' for key 'reasoning'")

    monkeypatch.setattr(stores, "insert_rows", broken)
    sinks = DjangoAuditSinks()
    _record_everything(sinks, run_id, secret=secret)
    with caplog.at_level(logging.WARNING, logger="traces.stores"):
        sinks.flush(run_id)  # must not raise: the run's result matters more than its audit

    (record,) = [r for r in caplog.records if r.name == "traces.stores"]
    assert record.levelno == logging.WARNING
    assert record.getMessage() == f"audit flush failed for run {run_id}: IntegrityError"
    assert secret not in caplog.text and "duplicate entry" not in caplog.text
    assert not AgentStep.objects.exists() and not TraceEvent.objects.exists()


def test_flushing_records_of_a_run_that_does_not_exist_does_not_raise(service: Any) -> None:
    missing = str(uuid.uuid4())
    sinks = DjangoAuditSinks()
    _record_everything(sinks, missing)
    sinks.flush(missing)  # a foreign-key failure (or an ignored row) stays inside the sink
    assert not AgentStep.objects.exists() and not ToolInvocation.objects.exists()
    assert not TraceEvent.objects.exists() and not ReasoningAudit.objects.exists()
