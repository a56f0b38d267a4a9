"""The SSE side of a run: channels, the replayable event storage, the observer, emitters.

Each run has one channel, ``run-<uuid>``. Every event is stored, numbered 1, 2, 3, …, before
it is published through django-eventstream's Redis pub/sub, so a web process sees what a
worker sends. A client that connects late, or reconnects with ``Last-Event-ID``, is served
from storage first: the run's Redis list while it is live, its archived rows afterwards.
"""

from __future__ import annotations

import datetime
import functools
import json
import logging
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import orjson
from django.conf import settings
from django.core.serializers.json import DjangoJSONEncoder
from django.db.models import Max
from django.utils import timezone
from django_eventstream.channelmanager import ChannelManagerBase
from django_eventstream.event import Event
from django_eventstream.storage import StorageBase

from chat.models import RunEvent
from chat.redis_store import client
from harness.ports import RunControl, Scalar, Stage
from harness.release import RunResult
from traces.lifecycle import RunEnded
from traces.models import TERMINAL_STATUSES, Run
from traces.sql import Row, insert_rows

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
    """django-eventstream storage for run channels: a Redis list per run while it is live,
    archived to the run's own rows when it ends.

    ``RPUSH`` numbers events atomically across every process that writes them (the API, the
    worker); the list index is the event id, so replay from any id (0 included, which the
    bundled storages cannot do) is one ``LRANGE``. Once archived, the rows answer when the
    list has expired. Nothing is ever trimmed while the run is live.
    """

    def append_event(self, channel: str, event_type: str, data: str) -> Event:
        run_id = run_id_of(channel)
        if run_id is None:
            raise ValueError(f"not a run channel: {channel!r}")
        key = events_key(run_id)
        pipe = client().pipeline()
        pipe.rpush(key, orjson.dumps({"t": event_type, "d": data}))
        pipe.expire(key, _ttl_s())
        seq, _ = pipe.execute()
        return Event(channel, event_type, data, id=int(seq))

    def get_events(self, channel: str, last_id: int, limit: int = 100) -> list[Event]:
        run_id = run_id_of(channel)
        if run_id is None:
            return []
        pipe = client().pipeline()
        pipe.exists(events_key(run_id))
        pipe.lrange(events_key(run_id), last_id, last_id + limit - 1)
        live, items = pipe.execute()
        if live:
            return [_event(channel, last_id + i + 1, item) for i, item in enumerate(items)]
        return archived_events(channel, run_id, last_id, limit)

    def last_event(self, channel: str) -> tuple[int, str | None]:
        """The id and type of the channel's newest event (0, None when there is none)."""
        run_id = run_id_of(channel)
        if run_id is None:
            return 0, None
        pipe = client().pipeline(transaction=False)
        pipe.llen(events_key(run_id))
        pipe.lindex(events_key(run_id), -1)
        count, last = pipe.execute()
        if count:
            return int(count), orjson.loads(last)["t"]
        return archived_last_event(run_id)

    def get_current_id(self, channel: str) -> int:
        run_id = run_id_of(channel)
        if run_id is None:
            return 0
        count = int(client().llen(events_key(run_id)))
        if count:
            return count
        current: int | None = RunEvent.objects.filter(run_id=run_id).aggregate(m=Max("seq"))["m"]
        return current or 0


def archived_events(channel: str, run_id: uuid.UUID | str, last_id: int, limit: int) -> list[Event]:
    """The run's archived events after ``last_id``, from its rows."""
    rows = RunEvent.objects.filter(run_id=run_id, seq__gt=last_id).order_by("seq")[:limit]
    return [Event(channel, row.event_type, row.data, id=row.seq) for row in rows]


def archived_last_event(run_id: uuid.UUID | str) -> tuple[int, str | None]:
    """The id and type of the run's newest archived event (0, None when there is none)."""
    row = RunEvent.objects.filter(run_id=run_id).order_by("-seq").values_list("seq", "event_type").first()
    return (row[0], row[1]) if row else (0, None)


def events_key(run_id: uuid.UUID | str) -> str:
    return f"sba:ev:{{{run_id}}}"


def _ttl_s() -> int:
    return int(settings.HARNESS["INVOCATION_TTL_S"])


def _event(channel: str, seq: int, item: bytes) -> Event:
    parsed = orjson.loads(item)
    return Event(channel, parsed["t"], parsed["d"], id=seq)


def event_rows(run_id: uuid.UUID | str) -> list[Row]:
    """The run's live event list as rows, ready to archive.

    A list that does not end with ``done`` lost events (Redis restarted without persistence
    mid-run, or was down when the run ended): it is completed from the run's row, so the
    archive always ends as the run did. A list lost entirely is rebuilt from the row alone.
    """
    now = timezone.now()
    run = run_id if isinstance(run_id, uuid.UUID) else uuid.UUID(run_id)
    events = [(p["t"], p["d"]) for p in map(orjson.loads, client().lrange(events_key(run_id), 0, -1))]
    if not events or events[-1][0] != TERMINAL_EVENT:
        ended = ended_in_row(run)
        if ended is not None:
            opening, end = ended
            events = [*(events or opening), *end]
    return [
        (RunEvent, {"run_id": run, "seq": seq, "event_type": kind, "data": data, "created_at": now})
        for seq, (kind, data) in enumerate(events, start=1)
    ]


def archive_events(run_id: uuid.UUID | str) -> int:
    """Copy a run's event list into its rows (idempotent). Called when the run has ended."""
    rows = event_rows(run_id)
    if rows:
        insert_rows(rows, skip_duplicates=True)
    return len(rows)


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


#: The pub/sub channel django-eventstream's RedisListener reads in every web process.
PUBSUB_CHANNEL = "events_channel"


def owner_key(run_id: uuid.UUID | str) -> str:
    return f"sba:owner:{{{run_id}}}"  # {run} is a hash tag: a run's keys share a cluster slot


# Store, number and publish in one round trip: RPUSH gives the ids, and each message is its
# prefix (the event without its id) completed with the id. Atomic, like every Redis script.
_EMIT = """
local count = tonumber(ARGV[4])
local last = redis.call('LINDEX', KEYS[1], -1)
if last and string.sub(last, 1, 11) == '{"t":"done"' then return 0 end
local length = redis.call('RPUSH', KEYS[1], unpack(ARGV, 5, 4 + count))
redis.call('EXPIRE', KEYS[1], ARGV[1])
if ARGV[2] ~= '' then redis.call('SET', KEYS[2], ARGV[2], 'EX', ARGV[1]) end
local first = length - count + 1
for i = 1, count do
  redis.call('PUBLISH', ARGV[3], ARGV[4 + count + i] .. tostring(first + i - 1) .. '"}')
end
return length
"""


@functools.cache
def _emit_script() -> Any:
    return client().register_script(_EMIT)


def emit_many(
    run_id: uuid.UUID | str, events: Sequence[tuple[str, Mapping[str, Any]]], *, owner_id: int | None = None
) -> list[int]:
    """Store and publish events of one run in a single Redis round trip; returns their ids.

    This is django-eventstream's ``send_event`` (storage first, then the Redis message its
    listeners expect), batched: a run's last events (``content``, ``done``) go out together.
    ``owner_id`` is stored beside them, so the stream can check who may read it without the
    database. Nothing is added after ``done``: a run ended elsewhere (cancelled, swept) while its
    worker was still reporting progress keeps ``done`` as its last event.
    """
    channel = channel_for(run_id)
    items: list[bytes] = []
    prefixes: list[bytes] = []
    for event_type, data in events:
        text = _encoded(data)
        items.append(orjson.dumps({"t": event_type, "d": text}))
        # The listener's message with "pub_id" last, cut open where the id goes.
        prefixes.append(
            orjson.dumps({"channel": channel, "event_type": event_type, "data": text})[:-1] + b',"pub_id":"'
        )
    length = int(
        _emit_script()(
            keys=[events_key(run_id), owner_key(run_id)],
            args=[_ttl_s(), "" if owner_id is None else owner_id, PUBSUB_CHANNEL, len(items), *items, *prefixes],
        )
    )
    if not length:
        return []
    return list(range(length - len(items) + 1, length + 1))


def emit(run_id: uuid.UUID | str, event_type: str, data: Mapping[str, Any]) -> None:
    emit_many(run_id, [(event_type, data)])


def emit_metadata(run: Run) -> None:
    emit_many(
        run.id,
        [
            ("metadata", {"session_id": str(run.session_id), "run_id": str(run.id)}),
            ("status", {"stage": Stage.QUEUED.value}),
        ],
        owner_id=run.owner_id,
    )


def emit_terminal(
    run_id: uuid.UUID | str,
    *,
    outcome: str,
    content: Mapping[str, Any] | None,
    failure: Mapping[str, str] | None,
) -> None:
    """``content`` or ``failure``, then ``done``: the end of every stream, in one round trip."""
    emit_many(run_id, terminal_events(outcome=outcome, content=content, failure=failure))


def terminal_events(
    *, outcome: str, content: Mapping[str, Any] | None, failure: Mapping[str, str] | None
) -> list[tuple[str, Mapping[str, Any]]]:
    events: list[tuple[str, Mapping[str, Any]]] = []
    if content is not None:
        events.append(("content", content))
    if failure is not None:
        events.append(("failure", failure))
    events.append((TERMINAL_EVENT, {"outcome": outcome}))
    return events


def _encoded(data: Mapping[str, Any]) -> str:
    return json.dumps(data, cls=DjangoJSONEncoder, ensure_ascii=False)


#: An ended run's events as its row tells them: its opening events, then its terminal ones.
RowEvents = tuple[list[tuple[str, str]], list[tuple[str, str]]]


def ended_in_row(run_id: uuid.UUID | str, *, ended_before: datetime.datetime | None = None) -> RowEvents | None:
    """The events a run's stream opened and ended with, rebuilt from its row (``type``, JSON
    data) — for a stream whose stored events were lost. None while the run has not ended (or,
    with ``ended_before``, ended later than that: its own ``done`` may still be on the way)."""
    row = (
        Run.objects.filter(id=run_id, status__in=TERMINAL_STATUSES)
        .values("session_id", "outcome", "content", "failure_code", "failure_message", "finished_at")
        .first()
    )
    if row is None or (ended_before is not None and row["finished_at"] and row["finished_at"] > ended_before):
        return None
    failure = {"code": row["failure_code"], "message": row["failure_message"]} if row["failure_code"] else None
    opening = [
        ("metadata", _encoded({"session_id": str(row["session_id"]), "run_id": str(run_id)})),
        ("status", _encoded({"stage": Stage.QUEUED.value})),
    ]
    end = terminal_events(outcome=row["outcome"], content=row["content"], failure=failure)
    return opening, [(kind, _encoded(data)) for kind, data in end]


class EventStream:
    """The run's stream as its lifecycle (``traces.lifecycle``) opens, ends and archives it."""

    def opened(self, run: Run) -> None:
        emit_metadata(run)

    def ended(self, ended: RunEnded) -> None:
        emit_terminal(ended.run_id, outcome=ended.outcome.value, content=ended.content, failure=ended.failure)

    def archive(self, run_id: uuid.UUID) -> None:
        archive_events(run_id)


class EventStreamObserver:
    """The harness observer of a run executed by a worker: its progress becomes ``status`` events.

    Its first events (``metadata``, ``queued``) and its last (``content`` or ``failure``,
    ``done``) are the lifecycle's: they are sent whoever opens or ends the run.
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
        """Nothing: the run's lifecycle ended the stream when the run's terminal state was written."""
