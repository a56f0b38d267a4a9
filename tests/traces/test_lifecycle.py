"""The run's lifecycle against the real database: every terminal transition, whoever causes it,
ends the stream, archives it and calls the hooks exactly once, in that order, after commit; of
racing writers exactly one wins; runs and sessions are opened here with their rules."""

from __future__ import annotations

import logging
import threading
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.utils import timezone

from core.errors import NotFound
from harness.context import Outcome as HarnessOutcome
from harness.context import RunStatus as HarnessStatus
from harness.ports import RunStart
from harness.release import ContentType, Failure, PublishedContent, RunResult
from traces.lifecycle import EndCause, IdempotencyConflict, RunEnded, RunLifecycle, SessionBusy
from traces.models import ChatSession, Run, RunStatus

NOW = datetime(2026, 1, 5, 10, 0, tzinfo=UTC)


class Recorder:
    """The stream and a hook, recording what they were told, in one list."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def opened(self, run: Run) -> None:
        self.calls.append(("opened", run.id))

    def ended(self, ended: RunEnded) -> None:
        self.calls.append(("ended", ended))

    def archive(self, run_id: uuid.UUID) -> None:
        self.calls.append(("archive", run_id))

    def hook(self, ended: RunEnded) -> None:
        self.calls.append(("hook", ended.run_id))

    def ends(self) -> list[RunEnded]:
        return [value for kind, value in self.calls if kind == "ended"]


@pytest.fixture
def owner(transactional_db: None) -> Any:
    return get_user_model().objects.create(username="alice")


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()


@pytest.fixture
def lifecycle(recorder: Recorder) -> RunLifecycle:
    return RunLifecycle(stream=recorder, hooks=[recorder.hook])


def queued(lifecycle: RunLifecycle, owner: Any, question: str = "Payments time out") -> Run:
    return lifecycle.open(owner=owner, question=question).run


def running(lifecycle: RunLifecycle, run: Run) -> Run:
    assert lifecycle.claim(RunStart(str(run.id), str(run.session_id), str(run.owner_id), run.question, timezone.now()))
    return run


def released(run: Run) -> RunResult:
    return RunResult(
        run_id=str(run.id),
        session_id=str(run.session_id),
        status=HarnessStatus.COMPLETED,
        outcome=HarnessOutcome.SUCCESS,
        content=PublishedContent(ContentType.DIAGNOSIS_REPORT, {"conclusion": "pool exhausted"}),
    )


def assert_ended_once(recorder: Recorder, run: Run) -> RunEnded:
    mine = [(kind, value) for kind, value in recorder.calls if kind != "opened"]
    assert [kind for kind, _ in mine] == ["ended", "archive", "hook"]
    ended: RunEnded = mine[0][1]
    assert ended.run_id == run.id and mine[1][1] == run.id and mine[2][1] == run.id
    row = Run.objects.get(id=run.id)
    assert (row.status, row.outcome, row.failure_code) == (ended.status, ended.outcome, ended.failure_code)
    assert row.finished_at is not None
    return ended


# --- every way a run ends -------------------------------------------------------------------


def test_the_harness_completing_a_run_ends_it_once(lifecycle: RunLifecycle, recorder: Recorder, owner: Any) -> None:
    run = running(lifecycle, queued(lifecycle, owner))

    assert lifecycle.complete(run_id=str(run.id), result=released(run), finished_at=NOW) is True

    ended = assert_ended_once(recorder, run)
    assert ended.cause is EndCause.HARNESS and ended.outcome is HarnessOutcome.SUCCESS
    assert ended.content == {"content_type": "diagnosis_report", "payload": {"conclusion": "pool exhausted"}}
    assert ended.failure is None


def test_a_failed_harness_result_ends_with_its_failure(lifecycle: RunLifecycle, recorder: Recorder, owner: Any) -> None:
    run = running(lifecycle, queued(lifecycle, owner))
    result = RunResult(
        run_id=str(run.id),
        session_id=str(run.session_id),
        status=HarnessStatus.FAILED,
        outcome=HarnessOutcome.FAILED,
        failure=Failure("model_unavailable", "m" * 400),
    )

    assert lifecycle.complete(run_id=str(run.id), result=result, finished_at=NOW)

    ended = assert_ended_once(recorder, run)
    assert ended.failure == {"code": "model_unavailable", "message": "m" * 300}
    assert ended.content is None


def test_cancelling_a_queued_run_ends_it_once(lifecycle: RunLifecycle, recorder: Recorder, owner: Any) -> None:
    run = queued(lifecycle, owner)

    assert lifecycle.cancel_queued(run_id=run.id) is True
    assert lifecycle.cancel_queued(run_id=run.id) is False

    ended = assert_ended_once(recorder, run)
    assert (ended.status, ended.outcome, ended.cause) == (
        RunStatus.CANCELLED,
        HarnessOutcome.CANCELLED,
        EndCause.CANCELLED,
    )


def test_a_run_that_could_not_be_enqueued_ends_failed_once(
    lifecycle: RunLifecycle, recorder: Recorder, owner: Any
) -> None:
    run = queued(lifecycle, owner)

    won = lifecycle.fail(
        run_id=run.id, from_status=RunStatus.QUEUED, code="queue_unavailable", message="x", cause=EndCause.NOT_QUEUED
    )

    assert won is True
    ended = assert_ended_once(recorder, run)
    assert ended.failure == {"code": "queue_unavailable", "message": "x"} and ended.cause is EndCause.NOT_QUEUED


def test_a_sweep_ends_a_lost_run_once_and_a_second_sweep_finds_nothing(
    lifecycle: RunLifecycle, recorder: Recorder, owner: Any, settings: Any
) -> None:
    run = running(lifecycle, queued(lifecycle, owner))
    Run.objects.filter(id=run.id).update(started_at=timezone.now() - timedelta(seconds=settings.RUN_DEADLINE_S + 61))
    fresh = running(lifecycle, queued(lifecycle, owner, "another question"))

    assert lifecycle.sweep().lost == 1
    assert lifecycle.sweep().ended == 0

    ended = assert_ended_once(recorder, run)
    assert ended.failure_code == "worker_lost" and ended.cause is EndCause.WORKER_LOST
    assert Run.objects.get(id=fresh.id).status == RunStatus.RUNNING


def test_a_run_whose_worker_stops_beating_is_lost_in_seconds_not_at_its_deadline(
    lifecycle: RunLifecycle, recorder: Recorder, owner: Any, settings: Any
) -> None:
    settings.RUN_UPKEEP = {**settings.RUN_UPKEEP, "HEARTBEAT_TIMEOUT_S": 5.0}
    silent = running(lifecycle, queued(lifecycle, owner))
    beating = running(lifecycle, queued(lifecycle, owner, "another question"))
    six_seconds_ago = timezone.now() - timedelta(seconds=6)
    Run.objects.filter(id__in=[silent.id, beating.id]).update(heartbeat_at=six_seconds_ago)

    assert lifecycle.heartbeat([str(beating.id)]) == set()
    swept = lifecycle.sweep()

    assert (swept.lost, swept.expired) == (1, 0)
    assert assert_ended_once(recorder, silent).failure_code == "worker_lost"
    assert Run.objects.get(id=beating.id).status == RunStatus.RUNNING
    # the silent run's worker, if it was only cut off, learns that its run was ended elsewhere
    assert lifecycle.heartbeat([str(silent.id), str(beating.id)]) == {str(silent.id)}


def test_a_queued_run_whose_task_was_lost_is_published_again_then_failed_when_it_never_starts(
    recorder: Recorder, owner: Any, settings: Any
) -> None:
    published: list[uuid.UUID] = []
    lifecycle = RunLifecycle(stream=recorder, hooks=[recorder.hook], publish=published.append)
    settings.RUN_UPKEEP = {**settings.RUN_UPKEEP, "QUEUE_REPUBLISH_S": 30.0, "QUEUE_LOST_S": 600.0}
    run = queued(lifecycle, owner)
    fresh = queued(lifecycle, owner, "just asked")
    assert Run.objects.get(id=run.id).publishes == 1

    assert lifecycle.sweep().republished == 0  # nobody has waited 30 s yet
    Run.objects.filter(id=run.id).update(published_at=timezone.now() - timedelta(seconds=31))
    assert lifecycle.sweep().republished == 1
    assert lifecycle.sweep().republished == 0  # once per period, however many sweep
    assert published == [run.id]
    assert Run.objects.get(id=run.id).publishes == 2

    long_ago = timezone.now() - timedelta(seconds=601)
    Run.objects.filter(id=run.id).update(created_at=long_ago, published_at=long_ago)
    swept = lifecycle.sweep()

    assert (swept.expired, swept.republished) == (1, 0)
    ended = assert_ended_once(recorder, run)
    assert ended.failure_code == "queue_lost" and ended.cause is EndCause.QUEUE_LOST
    assert Run.objects.get(id=fresh.id).status == RunStatus.QUEUED


def test_racing_sweepers_publish_a_lost_task_once(recorder: Recorder, owner: Any) -> None:
    published: list[uuid.UUID] = []
    lifecycle = RunLifecycle(stream=recorder, publish=published.append)
    run = queued(lifecycle, owner)
    old = timezone.now() - timedelta(seconds=120)
    Run.objects.filter(id=run.id).update(published_at=old)

    # two sweepers read the same stale row; only the first conditional update wins
    assert lifecycle._republish(run.id, old, timezone.now()) is True
    assert lifecycle._republish(run.id, old, timezone.now()) is False
    assert published == [run.id]


def test_a_late_result_after_a_cancel_changes_nothing_and_ends_nothing(
    lifecycle: RunLifecycle, recorder: Recorder, owner: Any
) -> None:
    run = queued(lifecycle, owner)
    lifecycle.cancel_queued(run_id=run.id)

    assert lifecycle.complete(run_id=str(run.id), result=released(run), finished_at=NOW) is False

    assert len(recorder.ends()) == 1 and Run.objects.get(id=run.id).status == RunStatus.CANCELLED


@pytest.mark.skipif(connection.vendor == "sqlite", reason="SQLite serialises writers; the race needs a server")
def test_racing_cancel_completion_and_sweep_end_a_run_exactly_once(
    lifecycle: RunLifecycle, recorder: Recorder, owner: Any, settings: Any
) -> None:
    for _ in range(20):
        run = running(lifecycle, queued(lifecycle, owner, f"race {uuid.uuid4()}"))
        Run.objects.filter(id=run.id).update(
            started_at=timezone.now() - timedelta(seconds=settings.RUN_DEADLINE_S + 61)
        )
        barrier = threading.Barrier(3)

        def race(end: Any, barrier: threading.Barrier = barrier) -> None:
            barrier.wait()
            try:
                end()
            finally:
                connection.close()

        ends = [
            lambda run=run: lifecycle.complete(run_id=str(run.id), result=released(run), finished_at=NOW),
            lambda run=run: lifecycle.sweep(run_id=run.id),
            lambda run=run: lifecycle.fail(
                run_id=run.id,
                from_status=RunStatus.RUNNING,
                code="worker_lost",
                message="x",
                cause=EndCause.WORKER_LOST,
            ),
        ]
        threads = [threading.Thread(target=race, args=(end,)) for end in ends]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert [e.run_id for e in recorder.ends()].count(run.id) == 1
    assert len(recorder.ends()) == 20


# --- after commit, fail-open ------------------------------------------------------------------


def test_nothing_is_announced_for_an_end_that_rolled_back(
    lifecycle: RunLifecycle, recorder: Recorder, owner: Any
) -> None:
    run = queued(lifecycle, owner)

    def cancel_then_fail() -> None:
        with transaction.atomic():
            lifecycle.cancel_queued(run_id=run.id)
            raise RuntimeError("the caller's transaction fails")

    with pytest.raises(RuntimeError):
        cancel_then_fail()

    assert recorder.ends() == [] and Run.objects.get(id=run.id).status == RunStatus.QUEUED
    with transaction.atomic():
        lifecycle.cancel_queued(run_id=run.id)
        assert recorder.ends() == []  # not before the commit
    assert len(recorder.ends()) == 1


def test_a_failing_stream_or_hook_does_not_stop_the_others(
    owner: Any, recorder: Recorder, caplog: pytest.LogCaptureFixture
) -> None:
    class DownStream(Recorder):
        def ended(self, ended: RunEnded) -> None:
            raise ConnectionError("redis is down: secret-host:6379")

    def broken_hook(ended: RunEnded) -> None:
        raise ValueError("webhook refused")

    stream = DownStream()
    lifecycle = RunLifecycle(stream=stream, hooks=[broken_hook, recorder.hook])
    run = queued(lifecycle, owner)

    with caplog.at_level(logging.WARNING, logger="traces.lifecycle"):
        assert lifecycle.cancel_queued(run_id=run.id)

    assert ("archive", run.id) not in stream.calls  # nothing to archive from a stream that failed
    assert recorder.calls == [("hook", run.id)]
    assert Run.objects.get(id=run.id).status == RunStatus.CANCELLED
    logged = " ".join(r.getMessage() for r in caplog.records)
    assert "ConnectionError" in logged and "ValueError" in logged and "secret-host" not in logged


def test_a_stream_that_fails_once_after_a_broker_restart_is_tried_again_and_archived(
    owner: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    class JustRestarted(Recorder):
        failures = 1

        def ended(self, ended: RunEnded) -> None:
            if self.failures:
                self.failures -= 1
                raise ConnectionError("Connection closed by server.")
            super().ended(ended)

    monkeypatch.setattr("traces.lifecycle._RETRY_PAUSE_S", 0.0)
    stream = JustRestarted()
    lifecycle = RunLifecycle(stream=stream)
    run = queued(lifecycle, owner)

    assert lifecycle.cancel_queued(run_id=run.id)

    assert [kind for kind, _ in stream.calls if kind in ("ended", "archive")] == ["ended", "archive"]


# --- opening ------------------------------------------------------------------------------------


def test_opening_creates_a_session_and_a_queued_run_and_streams_its_start(
    lifecycle: RunLifecycle, recorder: Recorder, owner: Any
) -> None:
    opened = lifecycle.open(owner=owner, question="Why is checkout slow?", metadata={"ticket": "OPS-1"})

    run = Run.objects.get(id=opened.run.id)
    assert opened.created and run.status == RunStatus.QUEUED and run.metadata == {"ticket": "OPS-1"}
    assert ChatSession.objects.get(id=run.session_id).title == "Why is checkout slow?"
    assert recorder.calls == [("opened", run.id)]


def test_a_session_holds_one_active_run_and_only_its_owner_may_use_it(
    lifecycle: RunLifecycle, recorder: Recorder, owner: Any
) -> None:
    first = queued(lifecycle, owner)
    mallory = get_user_model().objects.create(username="mallory")

    with pytest.raises(SessionBusy) as busy:
        lifecycle.open(owner=owner, question="again", session_id=first.session_id)
    with pytest.raises(NotFound):
        lifecycle.open(owner=mallory, question="mine now", session_id=first.session_id)

    assert busy.value.details == {"run_id": str(first.id)}
    assert Run.objects.count() == 1
    lifecycle.cancel_queued(run_id=first.id)
    assert lifecycle.open(owner=owner, question="again", session_id=first.session_id).run.session_id == first.session_id


def test_an_idempotency_key_replays_its_run_and_refuses_another_question(lifecycle: RunLifecycle, owner: Any) -> None:
    run = lifecycle.open(owner=owner, question="q", idempotency_key="k-1").run

    assert lifecycle.replayed(owner=owner, idempotency_key="k-1", question="q", session_id=None) == run
    with pytest.raises(IdempotencyConflict):
        lifecycle.replayed(owner=owner, idempotency_key="k-1", question="other", session_id=None)
    again = lifecycle.open(owner=owner, question="q", idempotency_key="k-1")  # a racing duplicate
    assert not again.created and again.run.id == run.id
    assert Run.objects.count() == 1 and ChatSession.objects.count() == 1


def test_an_idempotency_key_refuses_a_request_that_differs_in_metadata_or_webhook(
    lifecycle: RunLifecycle, owner: Any
) -> None:
    run = lifecycle.open(owner=owner, question="q", metadata={"t": 1}, idempotency_key="k-1").run
    same = {"owner": owner, "idempotency_key": "k-1", "question": "q", "session_id": None}

    assert lifecycle.replayed(**same, metadata={"t": 1}) == run
    for other in (
        {"metadata": {"t": 2}},
        {"metadata": None},
        {"metadata": {"t": 1}, "webhook_url": "https://x.test/h"},
    ):
        with pytest.raises(IdempotencyConflict):
            lifecycle.replayed(**same, **other)
    with pytest.raises(IdempotencyConflict):  # a racing duplicate with another body
        lifecycle.open(owner=owner, question="q", metadata={"t": 2}, idempotency_key="k-1")
    assert Run.objects.count() == 1


def test_a_run_opened_before_requests_were_fingerprinted_is_still_matched_by_its_question(
    lifecycle: RunLifecycle, owner: Any
) -> None:
    run = lifecycle.open(owner=owner, question="q", idempotency_key="k-1").run
    Run.objects.filter(id=run.id).update(request_digest="")

    assert lifecycle.replayed(owner=owner, idempotency_key="k-1", question="q", session_id=None) == run
    with pytest.raises(IdempotencyConflict):
        lifecycle.replayed(owner=owner, idempotency_key="k-1", question="other", session_id=None)


def test_the_harness_used_without_the_api_gets_its_session_and_run_created_here(
    lifecycle: RunLifecycle, owner: Any
) -> None:
    session_id = lifecycle.session_for(owner=str(owner.pk), session_id=None, title="from a script")
    run_id = str(uuid.uuid4())

    assert lifecycle.claim(RunStart(run_id, session_id, str(owner.pk), "from a script", NOW)) is True
    assert lifecycle.claim(RunStart(run_id, session_id, str(owner.pk), "from a script", NOW)) is False

    run = Run.objects.get(id=run_id)
    assert run.status == RunStatus.RUNNING and str(run.session_id) == session_id
