"""Business writes of the chat API. Views call these; tasks call these; nothing else writes."""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from chat.authentication import digest, forget_cached_keys, new_raw_key
from chat.errors import IdempotencyConflict, SessionBusy
from chat.events import EventStreamObserver, archive_events, emit_metadata, emit_run_terminal, event_rows
from chat.models import ApiKey
from chat.redis_store import client as redis_client
from chat.redis_store import request_cancel
from core.errors import NotFound, QueueFull, QueueUnavailable
from harness.application import ChatRequest, RunNotClaimed
from harness.context import CancelReason
from traces.models import ACTIVE_STATUSES, ChatSession, Feedback, Outcome, Run, RunStatus
from traces.stores import Row, fast_insert, load_run_for_execution

logger = logging.getLogger(__name__)

#: How long past its deadline a running run may go silent before it is declared lost.
STALE_GRACE = timedelta(seconds=60)


@dataclass(frozen=True)
class Submitted:
    run: Run
    created: bool


def _same_request(run: Run, *, question: str, session_id: uuid.UUID | None) -> bool:
    return run.question == question and (session_id is None or run.session_id == session_id)


def chat_submit(
    *,
    user: Any,
    question: str,
    session_id: uuid.UUID | None = None,
    metadata: dict[str, Any] | None = None,
    idempotency_key: str | None = None,
) -> Submitted:
    """Create a queued run (and its session when none is given), then enqueue it.

    The task is published only after the run's transaction has committed, so the worker always
    finds the row; if publishing fails the run is failed at once, never left queued.
    """
    if connection.in_atomic_block:
        raise RuntimeError("chat_submit publishes after its own commit; do not call it inside a transaction")
    if idempotency_key:
        existing = Run.objects.filter(owner=user, idempotency_key=idempotency_key).first()
        if existing is not None:
            if not _same_request(existing, question=question, session_id=session_id):
                raise IdempotencyConflict()
            return Submitted(existing, False)
    if _queue_length() >= settings.MAX_QUEUED_RUNS:
        raise QueueFull()
    fields = {
        "owner": user,
        "question": question,
        "metadata": metadata or {},
        "idempotency_key": idempotency_key or None,
    }
    try:
        if session_id is not None:
            with transaction.atomic():
                # The session row lock serialises concurrent questions in one session.
                session = ChatSession.objects.select_for_update().filter(id=session_id, owner=user).first()
                if session is None:
                    raise NotFound("No such session.")
                active = Run.objects.filter(session=session, status__in=ACTIVE_STATUSES).values_list("id", flat=True)
                busy = active.first()
                if busy is not None:
                    raise SessionBusy(details={"run_id": str(busy)})
                session.save(update_fields=["updated_at"])
                run = Run.objects.create(session=session, **fields)
        else:
            # A new session has no other run to race with: no lock, no transaction needed.
            session = ChatSession(owner=user, title=question[:80])
            fast_insert(session)
            run = Run(session=session, **fields)
            try:
                fast_insert(run)
            except IntegrityError:
                ChatSession.objects.filter(id=session.id).delete()
                raise
    except IntegrityError:
        # Two requests raced with one Idempotency-Key; the other one won.
        existing = Run.objects.filter(owner=user, idempotency_key=idempotency_key).first() if idempotency_key else None
        if existing is None:
            raise
        if not _same_request(existing, question=question, session_id=session_id):
            raise IdempotencyConflict() from None
        return Submitted(existing, False)

    try:
        emit_metadata(run)
    except Exception as exc:  # noqa: BLE001 - the stream is best effort; the row is the truth
        logger.warning("run %s: could not emit metadata: %s", run.id, type(exc).__name__)
    from chat.tasks import run_chat

    try:
        run_chat.apply_async(args=[str(run.id)], retry=False)
    except Exception as exc:  # noqa: BLE001 - any broker failure means the run will never start
        logger.warning("run %s: broker unavailable: %s", run.id, type(exc).__name__)
        run_fail(run=run, from_status=RunStatus.QUEUED, code="queue_unavailable", message=QueueUnavailable.message)
        raise QueueUnavailable() from None
    return Submitted(run, True)


def _queue_length() -> int:
    """Runs waiting for a worker: the broker's queue, read in one Redis call."""
    try:
        return int(redis_client().llen(settings.CELERY_TASK_DEFAULT_QUEUE))
    except Exception:  # noqa: BLE001 - a broker that cannot be read is reported when we publish
        return 0


def run_fail(*, run: Run, from_status: str, code: str, message: str) -> bool:
    """End a run the harness is not running (unqueued, lost) with a failure. First wins."""
    ended = Run.objects.filter(id=run.id, status=from_status).update(
        status=RunStatus.FAILED,
        outcome=Outcome.FAILED,
        failure_code=code,
        failure_message=message[:300],
        finished_at=timezone.now(),
    )
    if ended:
        run.refresh_from_db()
        _emit_terminal_quietly(run)
    return bool(ended)


def _emit_terminal_quietly(run: Run) -> None:
    try:
        emit_run_terminal(run)
    except Exception as exc:  # noqa: BLE001
        logger.warning("run %s: could not emit its end: %s", run.id, type(exc).__name__)
        return
    _archive_quietly(run.id)


def run_cancel(*, run: Run) -> Run:
    """Cancel a run. Queued: it ends now. Running: it ends before its next model or tool call.
    Finished: nothing changes. Idempotent."""
    if run.status == RunStatus.QUEUED:
        cancelled = Run.objects.filter(id=run.id, status=RunStatus.QUEUED).update(
            status=RunStatus.CANCELLED,
            outcome=Outcome.CANCELLED,
            failure_code="cancelled",
            failure_message="The run was cancelled.",
            finished_at=timezone.now(),
        )
        run.refresh_from_db()
        if cancelled:
            _emit_terminal_quietly(run)
            return run
    if run.status == RunStatus.RUNNING:
        request_cancel(str(run.id), CancelReason.USER)
    return run


def run_sweep_stale(*, run: Run | None = None) -> int:
    """Fail runs whose worker is gone: running past deadline + grace, or queued past the time
    the broker would have redelivered them. Returns how many were ended."""
    now = timezone.now()
    deadline = timedelta(seconds=settings.RUN_DEADLINE_S)
    running = Run.objects.filter(status=RunStatus.RUNNING, started_at__lt=now - deadline - STALE_GRACE)
    queued = Run.objects.filter(
        status=RunStatus.QUEUED,
        created_at__lt=now - timedelta(seconds=settings.CELERY_VISIBILITY_TIMEOUT_S) - deadline - STALE_GRACE,
    )
    if run is not None:
        running, queued = running.filter(id=run.id), queued.filter(id=run.id)
    ended = 0
    message = "The worker running this run was lost."
    for stale in running:
        ended += run_fail(run=stale, from_status=RunStatus.RUNNING, code="worker_lost", message=message)
    for stale in queued:
        ended += run_fail(run=stale, from_status=RunStatus.QUEUED, code="worker_lost", message=message)
    return ended


def run_execute(*, run_id: str) -> None:
    """The body of the Celery task: run a queued run once. Anything else does nothing."""
    from chat.wiring import application, audit_sinks

    run = load_run_for_execution(run_id)
    if run is None:  # a message for a run that is gone (deleted, or a database restored)
        return
    if run.status == RunStatus.RUNNING:
        # A redelivered message: the first delivery's worker may be dead. Only a run past its
        # deadline is declared lost; one still within it belongs to its worker.
        run_sweep_stale(run=run)
        return
    if run.status != RunStatus.QUEUED:
        return
    request = ChatRequest(run.question, owner=str(run.owner_id), session_id=str(run.session_id), run_id=str(run.id))
    claimed = False
    try:
        application().execute(request, EventStreamObserver(str(run.id)))
        claimed = True
    except RunNotClaimed:
        return
    finally:
        # The trace rows and the archived stream, in one transaction.
        audit_sinks().flush(str(run.id), also=_event_rows_quietly(run.id) if claimed else ())


def _event_rows_quietly(run_id: uuid.UUID) -> list[Row]:
    try:
        return event_rows(run_id)
    except Exception as exc:  # noqa: BLE001 - the live list still serves the stream
        logger.warning("run %s: could not read its events to archive: %s", run_id, type(exc).__name__)
        return []


def _archive_quietly(run_id: uuid.UUID) -> None:
    try:
        archive_events(run_id)
    except Exception as exc:  # noqa: BLE001 - the live list still serves the stream
        logger.warning("run %s: could not archive its events: %s", run_id, type(exc).__name__)


def feedback_submit(*, user: Any, run: Run, rating: str, comment: str = "") -> Feedback:
    feedback, _ = Feedback.objects.update_or_create(
        run=run, owner=user, defaults={"rating": rating, "comment": comment}
    )
    return feedback


def api_key_revoke(*, key: ApiKey) -> None:
    """Revoke a key: at once in this process, within the auth cache's TTL in the others."""
    ApiKey.objects.filter(pk=key.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
    forget_cached_keys()


def api_key_create(*, username: str, staff: bool = False, name: str = "") -> tuple[ApiKey, str]:
    """Create (or reuse) the user and a new key for them. The raw key is returned once."""
    user_model = get_user_model()
    user, _ = user_model.objects.get_or_create(username=username)
    if staff and not user.is_staff:
        user.is_staff = True
        user.save(update_fields=["is_staff"])
    raw = new_raw_key()
    key = ApiKey.objects.create(user=user, name=name, prefix=raw[:12], digest=digest(raw))
    return key, raw
