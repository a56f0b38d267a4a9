"""The SSE side of a run: channels, the replayable event storage, the observer, emitters.

Each run has one channel, ``run-<uuid>``. Every event is stored as a numbered row of the run
(1, 2, 3, …) before it is published, and published through django-eventstream's Redis
pub/sub so a web process sees what a worker sends. A client that connects late, or
reconnects with ``Last-Event-ID``, is served from these rows first.
"""

from __future__ import annotations

import json
import logging
import threading
import uuid
from collections.abc import Mapping
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db import IntegrityError
from django.db.models import Max
from django_eventstream import send_event
from django_eventstream.channelmanager import ChannelManagerBase
from django_eventstream.event import Event
from django_eventstream.storage import StorageBase

from chat.models import RunEvent
from harness.ports import RunControl, Scalar, Stage
from harness.release import RunResult
from traces.models import Run

logger = logging.getLogger(__name__)

CHANNEL_PREFIX = "run-"
TERMINAL_EVENT = "done"


def channel_for(run_id: uuid.UUID | str) -> str:
    return f"{CHANNEL_PREFIX}{run_id}"


def run_id_of(channel: str) -> uuid.UUID | None:
    if not channel.startswith(CHANNEL_PREFIX):
        return None
    try:
        return uuid.UUID(channel[len(CHANNEL_PREFIX) :])
    except ValueError:
        return None


class RunEventStorage(StorageBase):  # type: ignore[misc]
    """django-eventstream storage on the run's own event rows.

    Unlike the bundled DjangoModelStorage it replays from the very first event (``last_id`` 0)
    and never trims: a run's events live and die with the run.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: dict[uuid.UUID, int] = {}

    def append_event(self, channel: str, event_type: str, data: str) -> Event:
        run_id = run_id_of(channel)
        if run_id is None:
            raise ValueError(f"not a run channel: {channel!r}")
        for attempt in range(3):
            with self._lock:
                if attempt or run_id not in self._last:
                    self._last[run_id] = self.get_current_id(channel)
                seq = self._last[run_id] + 1
                self._last[run_id] = seq
            try:
                RunEvent.objects.create(run_id=run_id, seq=seq, event_type=event_type, data=data)
                break
            except IntegrityError:
                # Another process wrote this run's events since we last looked: re-read, retry.
                continue
        else:
            raise RuntimeError("could not number the event")
        if event_type == TERMINAL_EVENT:
            with self._lock:
                self._last.pop(run_id, None)
        return Event(channel, event_type, data, id=seq)

    def get_events(self, channel: str, last_id: int, limit: int = 100) -> list[Event]:
        run_id = run_id_of(channel)
        if run_id is None:
            return []
        rows = RunEvent.objects.filter(run_id=run_id, seq__gt=last_id).order_by("seq")[:limit]
        return [Event(channel, row.event_type, row.data, id=row.seq) for row in rows]

    def get_current_id(self, channel: str) -> int:
        run_id = run_id_of(channel)
        if run_id is None:
            return 0
        current: int | None = RunEvent.objects.filter(run_id=run_id).aggregate(m=Max("seq"))["m"]
        return current or 0


class RunChannelManager(ChannelManagerBase):  # type: ignore[misc]
    """Only the run's owner, or staff, may read a run's channel."""

    def get_channels_for_request(self, request: Any, view_kwargs: Mapping[str, Any]) -> set[str]:
        return {channel_for(view_kwargs["run_id"])}

    def can_read_channel(self, user: Any, channel: str) -> bool:
        run_id = run_id_of(channel)
        if run_id is None or user is None or not getattr(user, "is_authenticated", False):
            return False
        if user.is_staff:
            return Run.objects.filter(id=run_id).exists()
        return Run.objects.filter(id=run_id, owner_id=user.pk).exists()

    def is_channel_reliable(self, channel: str) -> bool:
        return True


def emit(run_id: uuid.UUID | str, event_type: str, data: Mapping[str, Any]) -> None:
    send_event(
        channel_for(run_id), event_type, json.dumps(data, cls=DjangoJSONEncoder, ensure_ascii=False), json_encode=False
    )


def emit_metadata(run: Run) -> None:
    emit(run.id, "metadata", {"session_id": str(run.session_id), "run_id": str(run.id)})
    emit(run.id, "status", {"stage": Stage.QUEUED.value})


def emit_terminal(
    run_id: uuid.UUID | str,
    *,
    outcome: str,
    content: Mapping[str, Any] | None,
    failure: Mapping[str, str] | None,
) -> None:
    """``content`` or ``failure``, then ``done``: the end of every stream."""
    if content is not None:
        emit(run_id, "content", content)
    if failure is not None:
        emit(run_id, "failure", failure)
    emit(run_id, TERMINAL_EVENT, {"outcome": outcome})


def emit_run_terminal(run: Run) -> None:
    """The terminal events of a run row (for ends the harness did not write itself)."""
    failure = {"code": run.failure_code, "message": run.failure_message} if run.failure_code else None
    emit_terminal(run.id, outcome=run.outcome, content=run.content, failure=failure)


class EventStreamObserver:
    """The harness observer of a run executed by a worker: status and result become events.

    ``metadata`` and the ``queued`` status were sent by the API when the run was created.
    """

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.control: RunControl | None = None

    def started(self, control: RunControl) -> None:
        self.control = control

    def status(self, stage: Stage, detail: Mapping[str, Scalar] | None = None) -> None:
        data: dict[str, Any] = {"stage": stage.value}
        if detail:
            data["detail"] = dict(detail)
        emit(self.run_id, "status", data)

    def finished(self, result: RunResult) -> None:
        failure = {"code": result.failure.code, "message": result.failure.message} if result.failure else None
        emit_terminal(
            self.run_id,
            outcome=result.outcome.value,
            content=result.content.to_dict() if result.content else None,
            failure=failure,
        )
