"""Business writes of the chat API. Views call these; tasks call these; nothing else writes."""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connection
from django.utils import timezone

from chat import metrics, upkeep, wiring
from chat.authentication import digest, forget_cached_keys, new_raw_key
from chat.events import EventStreamObserver
from chat.models import ApiKey
from chat.redis_store import client as redis_client
from chat.redis_store import request_cancel
from chat.webhooks import signing
from core.errors import ApplicationError, ErrorKind, QueueFull, QueueUnavailable
from core.logcontext import binds_run
from core.viewer import Viewer, viewer_bound
from harness.application import ChatRequest, RunNotClaimed
from harness.context import CancelReason
from traces.lifecycle import EndCause, Swept
from traces.models import ACTIVE_STATUSES, Feedback, Run, RunStatus
from traces.sql import load_run_for_execution

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Submitted:
    run: Run
    created: bool


def chat_submit(
    *,
    user: Any,
    question: str,
    session_id: uuid.UUID | None = None,
    metadata: dict[str, Any] | None = None,
    idempotency_key: str | None = None,
    webhook_url: str = "",
    api_key_id: int | None = None,
) -> Submitted:
    """Open a queued run (and its session when none is given), then enqueue it.

    The task is published only after the run's transaction has committed, so the worker always
    finds the row; if publishing fails the run is failed at once, never left queued.
    """
    lifecycle = wiring.lifecycle()
    replayed = lifecycle.replayed(
        owner=user,
        idempotency_key=idempotency_key,
        question=question,
        session_id=session_id,
        metadata=metadata,
        webhook_url=webhook_url,
    )
    if replayed is not None:
        return Submitted(replayed, False)
    if _queue_length() >= settings.MAX_QUEUED_RUNS:
        raise QueueFull()
    if api_key_id is not None and _active_runs(api_key_id) >= settings.MAX_ACTIVE_RUNS_PER_KEY:
        raise TooManyActiveRuns(details={"limit": settings.MAX_ACTIVE_RUNS_PER_KEY})
    opened = lifecycle.open(
        owner=user,
        question=question,
        session_id=session_id,
        metadata=metadata,
        idempotency_key=idempotency_key,
        webhook_url=webhook_url,
        api_key_id=api_key_id,
    )
    if not opened.created:
        return Submitted(opened.run, False)
    run = opened.run
    try:
        wiring.publish_run(run.id)
    except Exception as exc:  # noqa: BLE001 - any broker failure means the run will never start
        logger.warning("run %s: broker unavailable: %s", run.id, type(exc).__name__)
        lifecycle.fail(
            run_id=run.id,
            from_status=RunStatus.QUEUED,
            code="queue_unavailable",
            message=QueueUnavailable.message,
            cause=EndCause.NOT_QUEUED,
        )
        raise QueueUnavailable() from None
    return Submitted(run, True)


class TooManyActiveRuns(ApplicationError):
    code = "too_many_active_runs"
    kind = ErrorKind.LIMITED
    message = "This API key has as many runs queued or running as it may; wait for one to end."
    retry_after_s = 5


def _active_runs(api_key_id: int) -> int:
    """The key's queued and running runs (a soft cap: two racing requests may both pass)."""
    return Run.objects.filter(api_key_id=api_key_id, status__in=ACTIVE_STATUSES).count()


def _queue_length() -> int:
    """Runs waiting for a worker: the broker's queue, read in one Redis call."""
    try:
        return int(redis_client().llen(settings.CELERY_TASK_DEFAULT_QUEUE))
    except Exception:  # noqa: BLE001 - a broker that cannot be read is reported when we publish
        return 0


def run_cancel(*, run: Run) -> Run:
    """Cancel a run. Queued: it ends now. Running: it ends before its next model or tool call.
    Finished: nothing changes. Idempotent."""
    if run.status == RunStatus.QUEUED:
        cancelled = wiring.lifecycle().cancel_queued(run_id=run.id)
        run.refresh_from_db()
        if cancelled:
            return run
    if run.status == RunStatus.RUNNING:
        request_cancel(str(run.id), CancelReason.USER)
    return run


def run_sweep_stale(*, run: Run | None = None) -> Swept:
    """End runs whose worker is gone, re-publish queued runs whose task was lost (see
    ``RunLifecycle.sweep``)."""
    return wiring.lifecycle().sweep(run_id=run.id if run is not None else None)


@binds_run  # every line logged while it runs, in any thread of the run, carries the run's id
@metrics.RUNS_EXECUTING.track_inprogress()
def run_execute(*, run_id: str) -> None:
    """The body of the Celery task: run a queued run once. Anything else does nothing."""
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
    # The run's evidence is what its owner may rely on: approved documents and their own
    # uploads. Not staff's wider view: a page nobody reviewed is evidence only for its uploader.
    evidence_viewer = Viewer(run.owner_id, is_staff=False)
    try:
        with upkeep.executing(run_id), viewer_bound(evidence_viewer):
            wiring.application().execute(request, EventStreamObserver(str(run.id)))
    except RunNotClaimed:
        return
    except Exception as exc:  # noqa: BLE001 - e.g. the database went away mid-run
        logger.error("run %s: the worker could not finish it: %s", run_id, type(exc).__name__)
        _end_unfinished(run.id)
    finally:
        wiring.audit_sinks().flush(str(run.id))


def _end_unfinished(run_id: uuid.UUID) -> None:
    """A run whose execution broke off is failed now, on a fresh connection, rather than left
    running for the sweeper to find."""
    try:
        connection.close()
        wiring.lifecycle().fail(
            run_id=run_id,
            from_status=RunStatus.RUNNING,
            code="internal_error",
            message="The run failed unexpectedly; the error was logged.",
            cause=EndCause.HARNESS,
        )
    except Exception as exc:  # noqa: BLE001 - the sweeper ends it once its heartbeat stops
        logger.warning("run %s: could not be ended now: %s", run_id, type(exc).__name__)


def feedback_submit(*, user: Any, run: Run, rating: str, comment: str = "") -> Feedback:
    feedback, _ = Feedback.objects.update_or_create(
        run=run, owner=user, defaults={"rating": rating, "comment": comment}
    )
    return feedback


def api_key_revoke(*, key: ApiKey) -> None:
    """Revoke a key: at once in this process, within the auth cache's TTL in the others."""
    ApiKey.objects.filter(pk=key.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
    forget_cached_keys()


def api_key_create(*, username: str, staff: bool = False, name: str = "") -> tuple[ApiKey, str, str]:
    """Create (or reuse) the user and a new key for them. The raw key and the key's webhook
    signing secret are returned once; only the key's hash and the sealed secret are stored."""
    user_model = get_user_model()
    user, _ = user_model.objects.get_or_create(username=username)
    if staff and not user.is_staff:
        user.is_staff = True
        user.save(update_fields=["is_staff"])
    return _new_key(user, name)


def api_key_for_user(*, user: Any, name: str) -> tuple[ApiKey, str]:
    """A new key for an existing user (the chat page's, for its session): the key and the raw key."""
    key, raw, _ = _new_key(user, name)
    return key, raw


def _new_key(user: Any, name: str) -> tuple[ApiKey, str, str]:
    raw = new_raw_key()
    webhook_secret = signing.new_secret()
    key = ApiKey.objects.create(
        user=user, name=name, prefix=raw[:12], digest=digest(raw), webhook_secret=signing.seal(webhook_secret)
    )
    return key, raw, webhook_secret
