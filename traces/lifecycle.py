"""A run's lifecycle: the one owner of every change to a run's state.

::

    open ──▶ queued ──claim──▶ running ──complete──▶ completed | failed | cancelled
               │                  │
               ├── cancel_queued ─┼──▶ cancelled
               └── fail ──────────┴──▶ failed      (not enqueued; worker lost, swept)

Every transition is one conditional UPDATE from the state it expects, so of two writers that
race (the harness completing, a user cancelling, a sweeper declaring the worker lost) exactly
one wins. The winner of a terminal transition — and only it — calls ``_run_finished``, which after
the transaction commits ends the run's event stream (``content`` or ``failure``, then ``done``),
archives the stream to the run's rows and then calls each post-terminal hook the composition
root gave (a webhook, a metric), every step fail-open: the row is the truth, written first.

Runs and sessions are created here too, and only here: ``open`` for a question the API
accepted, ``claim`` for a run the harness starts that nobody queued (the harness used without
the API), ``session_for`` for the harness's session lookup.
"""

from __future__ import annotations

import enum
import functools
import hashlib
import json
import logging
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db import IntegrityError, connection, transaction
from django.db.models import F, Q
from django.utils import timezone

from core.errors import ApplicationError, ErrorKind, NotFound
from harness.ports import RunStart
from harness.release import RunResult
from traces.models import ACTIVE_STATUSES, ChatSession, Outcome, Run, RunStatus
from traces.sql import fast_insert, run_table, uuid_hex, when

logger = logging.getLogger(__name__)

#: the pause before trying a stream step again, times the attempt
_RETRY_PAUSE_S = 0.2

#: How long past its deadline a running run may go on (heartbeat or not) before it is declared lost.
STALE_GRACE = timedelta(seconds=60)
FAILURE_MESSAGE_CHARS = 300
SESSION_TITLE_CHARS = 80


class SessionBusy(ApplicationError):
    code = "session_busy"
    kind = ErrorKind.CONFLICT
    message = "This session already has a run in progress; wait for it or cancel it."


class IdempotencyConflict(ApplicationError):
    code = "idempotency_key_reused"
    kind = ErrorKind.REJECTED
    message = "This Idempotency-Key was already used for a different request."


class EndCause(enum.StrEnum):
    """Who ended a run."""

    HARNESS = "harness"  # the chain ran to its end (a cancel or the deadline inside it included)
    CANCELLED = "cancelled"  # cancelled while still queued
    NOT_QUEUED = "not_queued"  # the task could not be enqueued
    WORKER_LOST = "worker_lost"  # swept: its worker is gone
    QUEUE_LOST = "queue_lost"  # swept: its task never reached a worker


@dataclass(frozen=True, slots=True)
class RunEnded:
    """A run's terminal transition, as the one writer that made it saw it."""

    run_id: uuid.UUID
    status: RunStatus
    outcome: Outcome
    content: Mapping[str, Any] | None
    failure_code: str
    failure_message: str
    cause: EndCause
    #: for the metrics: the harness's intent ("" if it never routed), the state the run left and
    #: how long the harness took (None when the harness did not end it)
    intent: str = ""
    previous: RunStatus = RunStatus.RUNNING
    duration_ms: float | None = None

    @property
    def failure(self) -> dict[str, str] | None:
        return {"code": self.failure_code, "message": self.failure_message} if self.failure_code else None


class RunStream(Protocol):
    """The run's event stream, as the lifecycle drives it (the chat app implements it)."""

    def opened(self, run: Run) -> None:
        """The first events of a new run: ``metadata`` and the ``queued`` status."""
        ...

    def ended(self, ended: RunEnded) -> None:
        """The last events: ``content`` or ``failure``, then ``done``."""
        ...

    def archive(self, run_id: uuid.UUID) -> None:
        """Copy the run's events into its rows (idempotent)."""
        ...


#: called once per terminal transition, after commit, after the stream has ended
FinishedHook = Callable[[RunEnded], object]


@dataclass(slots=True)
class Swept:
    """What one sweep did."""

    lost: int = 0
    republished: int = 0
    expired: int = 0

    @property
    def ended(self) -> int:
        return self.lost + self.expired


@dataclass(frozen=True, slots=True)
class Opened:
    run: Run
    #: False when an Idempotency-Key replayed an earlier request
    created: bool


class RunLifecycle:
    """Every transition of a run. ``stream`` None: nothing is streamed (a store used alone);
    ``publish`` (re-)publishes a queued run's task, None: the sweep does not re-publish."""

    def __init__(
        self,
        *,
        stream: RunStream | None = None,
        hooks: Sequence[FinishedHook] = (),
        publish: Callable[[uuid.UUID], object] | None = None,
    ) -> None:
        self._stream = stream
        self._hooks = tuple(hooks)
        self._publish = publish

    # --- creation ---------------------------------------------------------------------

    def replayed(
        self,
        *,
        owner: Any,
        idempotency_key: str | None,
        question: str,
        session_id: uuid.UUID | None,
        metadata: Mapping[str, Any] | None = None,
        webhook_url: str = "",
    ) -> Run | None:
        """The run an earlier request with this Idempotency-Key created, if any. The key used
        before with a request that differs in any field is :class:`IdempotencyConflict`."""
        if not idempotency_key:
            return None
        existing = Run.objects.filter(owner=owner, idempotency_key=idempotency_key).first()
        if existing is None:
            return None
        if existing.request_digest:
            same = existing.request_digest == request_digest(
                question=question, session_id=session_id, metadata=metadata, webhook_url=webhook_url
            )
        else:  # a run opened before requests were fingerprinted
            same = _same_request(existing, question=question, session_id=session_id)
        if not same:
            raise IdempotencyConflict()
        return existing

    def open(
        self,
        *,
        owner: Any,
        question: str,
        session_id: uuid.UUID | None = None,
        metadata: Mapping[str, Any] | None = None,
        idempotency_key: str | None = None,
        webhook_url: str = "",
        api_key_id: int | None = None,
    ) -> Opened:
        """A queued run in the owner's session ``session_id``, or in a new session when none is
        given. A session has one active run at most (:class:`SessionBusy`)."""
        if connection.in_atomic_block:
            raise RuntimeError("open() commits the run itself; do not call it inside a transaction")
        fields: dict[str, Any] = {
            "question": question,
            "metadata": dict(metadata or {}),
            "idempotency_key": idempotency_key or None,
            "request_digest": request_digest(
                question=question, session_id=session_id, metadata=metadata, webhook_url=webhook_url
            )
            if idempotency_key
            else "",
            "webhook_url": webhook_url,
            "api_key_id": api_key_id,
            # the caller publishes it right after: a lost message is re-published from here on
            "published_at": timezone.now(),
            "publishes": 1,
        }
        try:
            if session_id is not None:
                with transaction.atomic():
                    # The session row lock serialises concurrent questions in one session.
                    session = ChatSession.objects.select_for_update().filter(id=session_id, owner=owner).first()
                    if session is None:
                        raise NotFound("No such session.")
                    busy = Run.objects.filter(session=session, status__in=ACTIVE_STATUSES).values_list("id", flat=True)
                    if (running := busy.first()) is not None:
                        raise SessionBusy(details={"run_id": str(running)})
                    session.save(update_fields=["updated_at"])
                    run = _create_run(session.id, owner, **fields)
            else:
                # A new session has no other run to race with: no lock, no transaction needed.
                session = _create_session(owner, question)
                try:
                    run = _create_run(session.id, owner, **fields)
                except IntegrityError:
                    ChatSession.objects.filter(id=session.id).delete()
                    raise
        except IntegrityError:
            # Two requests raced with one Idempotency-Key; the other one won.
            existing = self.replayed(
                owner=owner,
                idempotency_key=idempotency_key,
                question=question,
                session_id=session_id,
                metadata=metadata,
                webhook_url=webhook_url,
            )
            if existing is None:
                raise
            return Opened(existing, False)
        if self._stream is not None:
            self._quietly("open", run.id, functools.partial(self._stream.opened, run))
        return Opened(run, True)

    def session_for(self, *, owner: str, session_id: str | None, title: str) -> str:
        """The harness's session: the one given (the API checked it is the owner's), else a new one."""
        if session_id is not None:
            return session_id
        return str(_create_session(int(owner), title).id)

    # --- transitions --------------------------------------------------------------------

    def claim(self, start: RunStart) -> bool:
        """``queued → running``, once. A run nobody queued (the harness used without the API) is
        created already running."""
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {run_table()} SET status = %s, started_at = %s, heartbeat_at = %s WHERE id = %s AND status = %s",  # noqa: S608
                [
                    RunStatus.RUNNING.value,
                    when(start.started_at),
                    when(timezone.now()),
                    uuid_hex(start.run_id),
                    RunStatus.QUEUED.value,
                ],
            )
            if cursor.rowcount:
                return True
        if Run.objects.filter(id=start.run_id).exists():
            return False
        try:
            _create_run(
                uuid.UUID(start.session_id),
                int(start.owner),
                question=start.question,
                run_id=uuid.UUID(start.run_id),
                status=RunStatus.RUNNING,
                started_at=start.started_at,
                heartbeat_at=timezone.now(),
            )
        except IntegrityError:
            return False
        return True

    def record_intent(self, *, run_id: str, intent: str) -> None:
        with connection.cursor() as cursor:
            cursor.execute(f"UPDATE {run_table()} SET intent = %s WHERE id = %s", [intent, uuid_hex(run_id)])  # noqa: S608

    def complete(self, *, run_id: str, result: RunResult, finished_at: datetime) -> bool:
        """``running → terminal`` with what the harness released. Plain SQL: once per run, on the
        hot path."""
        usage = result.usage
        failure = result.failure
        content = result.content.to_dict() if result.content else None
        values = {
            "status": result.status.value,
            "outcome": result.outcome.value,
            "intent": result.intent or "",
            "content": _json(content),
            "published_result": _json(dict(result.published_result) if result.published_result else None),
            "fallback_reason": result.fallback_reason or "",
            "failure_code": failure.code if failure else "",
            "failure_message": failure.message[:FAILURE_MESSAGE_CHARS] if failure else "",
            "model_calls": usage.model_calls,
            "model_retries": usage.model_retries,
            "tool_calls": usage.tool_calls,
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "finished_at": when(finished_at),
            "duration_ms": result.duration_ms,
            "model_ms": result.model_ms,
            "backend_ms": result.backend_ms,
        }
        assignments = ", ".join(f"{connection.ops.quote_name(column)} = %s" for column in values)
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {run_table()} SET {assignments} WHERE id = %s AND status = %s",  # noqa: S608
                [*values.values(), uuid_hex(run_id), RunStatus.RUNNING.value],
            )
            if not cursor.rowcount:
                return False
        ended = RunEnded(
            run_id=uuid.UUID(run_id),
            status=result.status,
            outcome=result.outcome,
            content=content,
            failure_code=values["failure_code"],
            failure_message=values["failure_message"],
            cause=EndCause.HARNESS,
            intent=values["intent"],
            duration_ms=result.duration_ms,
        )
        self._run_finished(ended)
        return True

    def fail(self, *, run_id: uuid.UUID, from_status: RunStatus, code: str, message: str, cause: EndCause) -> bool:
        """``from_status → failed`` for a run the harness is not running (not enqueued, lost)."""
        return self._end(
            run_id,
            from_status=from_status,
            status=RunStatus.FAILED,
            outcome=Outcome.FAILED,
            code=code,
            message=message,
            cause=cause,
        )

    def cancel_queued(self, *, run_id: uuid.UUID) -> bool:
        """``queued → cancelled``. (A running run is asked to stop; the harness then completes it.)"""
        return self._end(
            run_id,
            from_status=RunStatus.QUEUED,
            status=RunStatus.CANCELLED,
            outcome=Outcome.CANCELLED,
            code="cancelled",
            message="The run was cancelled.",
            cause=EndCause.CANCELLED,
        )

    def heartbeat(self, run_ids: Sequence[str]) -> set[str]:
        """Mark running runs as alive (their worker is executing them). Returns those of
        ``run_ids`` that have ended: someone else ended them."""
        if not run_ids:
            return set()
        marks = ", ".join(["%s"] * len(run_ids))
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {run_table()} SET heartbeat_at = %s WHERE status = %s AND id IN ({marks})",  # noqa: S608
                [when(timezone.now()), RunStatus.RUNNING.value, *(uuid_hex(r) for r in run_ids)],
            )
            if cursor.rowcount == len(run_ids):
                return set()
        # still queued: claimed a moment from now, not ended
        active = Run.objects.filter(id__in=run_ids, status__in=ACTIVE_STATUSES).values_list("id", flat=True)
        return set(run_ids) - {str(r) for r in active}

    def sweep(self, *, run_id: uuid.UUID | None = None) -> Swept:
        """End or re-publish runs nobody is working on:

        - running, and its worker has been silent for ``RUN_HEARTBEAT_TIMEOUT_S`` (or it is past
          its deadline plus a grace): failed, ``worker_lost``;
        - queued, and its message has not been taken for ``QUEUE_REPUBLISH_S``: published again
          (a duplicate is harmless, the claim is once), until it has waited ``QUEUE_LOST_S``:
          then failed, ``queue_lost``.
        """
        now = timezone.now()
        upkeep = settings.RUN_UPKEEP
        silent = now - timedelta(seconds=upkeep["HEARTBEAT_TIMEOUT_S"])
        overdue = now - timedelta(seconds=settings.RUN_DEADLINE_S) - STALE_GRACE
        running = Run.objects.filter(status=RunStatus.RUNNING).filter(
            Q(heartbeat_at__lt=silent) | Q(heartbeat_at__isnull=True, started_at__lt=silent) | Q(started_at__lt=overdue)
        )
        unclaimed = now - timedelta(seconds=upkeep["QUEUE_REPUBLISH_S"])
        queued = Run.objects.filter(status=RunStatus.QUEUED).filter(
            Q(published_at__lt=unclaimed) | Q(published_at__isnull=True, created_at__lt=unclaimed)
        )
        if run_id is not None:
            running, queued = running.filter(id=run_id), queued.filter(id=run_id)
        swept = Swept()
        for stale_id in running.values_list("id", flat=True):
            swept.lost += self.fail(
                run_id=stale_id,
                from_status=RunStatus.RUNNING,
                code="worker_lost",
                message="The worker running this run was lost.",
                cause=EndCause.WORKER_LOST,
            )
        expired = now - timedelta(seconds=upkeep["QUEUE_LOST_S"])
        for waiting_id, created_at, published_at in queued.values_list("id", "created_at", "published_at")[:500]:
            if created_at < expired:
                swept.expired += self.fail(
                    run_id=waiting_id,
                    from_status=RunStatus.QUEUED,
                    code="queue_lost",
                    message="The run's task was lost by the queue and it could not be started.",
                    cause=EndCause.QUEUE_LOST,
                )
            elif self._publish is not None and self._republish(waiting_id, published_at, now):
                swept.republished += 1
        return swept

    def _republish(self, run_id: uuid.UUID, published_at: datetime | None, now: datetime) -> bool:
        """Publish a queued run's task again, once per period whoever else sweeps."""
        same = Run.objects.filter(id=run_id, status=RunStatus.QUEUED, published_at=published_at)
        won = same.update(published_at=now, publishes=F("publishes") + 1)
        if not won:
            return False
        assert self._publish is not None
        return self._quietly("republish", run_id, functools.partial(self._publish, run_id))

    # --- the end ------------------------------------------------------------------------

    def _end(
        self,
        run_id: uuid.UUID,
        *,
        from_status: RunStatus,
        status: RunStatus,
        outcome: Outcome,
        code: str,
        message: str,
        cause: EndCause,
    ) -> bool:
        message = message[:FAILURE_MESSAGE_CHARS]
        won = Run.objects.filter(id=run_id, status=from_status).update(
            status=status, outcome=outcome, failure_code=code, failure_message=message, finished_at=timezone.now()
        )
        if won:
            self._run_finished(RunEnded(run_id, status, outcome, None, code, message, cause, previous=from_status))
        return bool(won)

    def _run_finished(self, ended: RunEnded) -> None:
        """The single point every terminal transition passes, once per run, after commit."""
        transaction.on_commit(lambda: self._after_commit(ended))

    def _after_commit(self, ended: RunEnded) -> None:
        stream = self._stream
        # A broker that has just restarted fails the first command on each pooled connection: the
        # end of the stream and its archive are tried again before they are given up.
        if stream is not None and self._quietly("end", ended.run_id, lambda: stream.ended(ended), attempts=3):
            self._quietly("archive", ended.run_id, lambda: stream.archive(ended.run_id), attempts=3)
        for hook in self._hooks:
            self._quietly(getattr(hook, "__name__", "hook"), ended.run_id, functools.partial(hook, ended))

    @staticmethod
    def _quietly(what: str, run_id: uuid.UUID, step: Callable[[], Any], attempts: int = 1) -> bool:
        for attempt in range(1, attempts + 1):
            try:
                step()
            except Exception as exc:  # noqa: BLE001 - the row is the truth; the rest is best effort
                logger.warning(
                    "run %s: %s failed (attempt %d of %d): %s", run_id, what, attempt, attempts, type(exc).__name__
                )
                if attempt < attempts:
                    time.sleep(_RETRY_PAUSE_S * attempt)
            else:
                return True
        return False


def request_digest(
    *, question: str, session_id: uuid.UUID | None, metadata: Mapping[str, Any] | None, webhook_url: str
) -> str:
    """The fingerprint of a request's fields, as the run that answers it keeps it: the same
    fields give the same digest whatever the order of the metadata's keys (no metadata and an
    empty one are the same request)."""
    fields = {
        "question": question,
        "session_id": str(session_id) if session_id else None,
        "metadata": dict(metadata or {}),
        "webhook_url": webhook_url or "",
    }
    canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False, cls=DjangoJSONEncoder)
    return hashlib.sha256(canonical.encode()).hexdigest()


def _same_request(run: Run, *, question: str, session_id: uuid.UUID | None) -> bool:
    return run.question == question and (session_id is None or run.session_id == session_id)


def _create_session(owner: Any, question: str) -> ChatSession:
    session = ChatSession(owner_id=getattr(owner, "pk", owner), title=question[:SESSION_TITLE_CHARS])
    fast_insert(session)
    return session


def _create_run(
    session_id: uuid.UUID,
    owner: Any,
    *,
    question: str,
    run_id: uuid.UUID | None = None,
    status: RunStatus = RunStatus.QUEUED,
    **fields: Any,
) -> Run:
    run = Run(session_id=session_id, owner_id=getattr(owner, "pk", owner), question=question, status=status, **fields)
    if run_id is not None:
        run.id = run_id
    fast_insert(run)
    return run


def _json(value: Any) -> str | None:
    return None if value is None else json.dumps(value, cls=DjangoJSONEncoder)
