"""GET /api/runs/{id}/events: the run's Server-Sent Events stream (ASGI).

Events are read from storage first (the run's Redis list, or its archived rows) and then
followed live through django-eventstream's listener manager, which receives what workers
publish via Redis. The loop here replaces the library's streaming view for two reasons:

- a client that connects without ``Last-Event-ID`` must get the whole stream from event 1
  (the library starts at the current event, with no backlog);
- a live event that arrives while storage is being read must be neither lost nor sent
  twice. The listener's queue is emptied *before* each read, and live events are taken only
  in sequence (id = last + 1): anything older is a duplicate and is skipped, any gap sends the
  loop back to storage.

The stream ends after ``done``. A client that reconnects after ``done`` gets 204, which tells
an EventSource to stop reconnecting. If the run's stored events were lost (Redis restarted
without persistence mid-run, or was down when the run ended), the end still comes: a stream
that has had nothing new for ``ROW_CHECK_S`` looks at the run's row, and once the run has been
over for ``END_GRACE_S`` its ``content``/``failure`` and ``done`` are rebuilt from the row and
sent in sequence. A run whose events are gone from both Redis and the archive is served the
same way from its row. Ids are plain integers; ``Last-Event-ID`` may also be in
the library's ``run-<id>:<n>`` form.

The same stream is served two ways: ``serve_stream``, a plain ASGI app that the ASGI entry
point puts in front of Django for this one path (a stream then costs a few awaits instead of
a Django request cycle), and ``run_events``, the Django view behind the same URL (for
Django's own handlers and test clients, and ``reverse``). Following a run live needs an ASGI
server: django-eventstream's Redis listener lives in the process's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import functools
import logging
import re
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

import orjson
import redis
import redis.asyncio as aioredis
from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import close_old_connections
from django.http import HttpRequest, HttpResponse, HttpResponseBase, JsonResponse, StreamingHttpResponse
from django.utils import timezone
from django_eventstream.event import Event
from django_eventstream.utils import sse_encode_event
from django_eventstream.views import Listener, get_listener_manager

from chat.authentication import cached_user_for_key, key_from_header, user_for_key
from chat.events import (
    TERMINAL_EVENT,
    RunEventStorage,
    archived_events,
    archived_last_event,
    channel_for,
    ended_in_row,
    events_key,
    owner_key,
)
from core.errors import envelope
from traces.models import Run

logger = logging.getLogger(__name__)

BATCH = 500
#: How long to wait for a live event before looking at storage again (a missed pub/sub
#: message costs at most this much delay) and how often to send a keep-alive comment.
POLL_S = 2.0
KEEP_ALIVE_S = 15.0
#: After this long with nothing to send, a stream asks the run's row whether the run is over;
#: a run that has been over for END_GRACE_S without its ``done`` arriving lost its events.
ROW_CHECK_S = 5.0
END_GRACE_S = 3.0
_LAST_ID = re.compile(r"^(?:run-[0-9a-fA-F-]{36}:)?(\d{1,9})$")
HEADERS = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache"), (b"x-accel-buffering", b"no")]


class InvalidLastEventId(ValueError):
    pass


def parse_last_event_id(value: str | None) -> int:
    if value is None or not value.strip():
        return 0
    found = _LAST_ID.match(value.strip())
    if not found:
        raise InvalidLastEventId(value)
    return int(found.group(1))


@dataclass(frozen=True)
class Refusal:
    status: int
    code: str = ""
    message: str = ""

    def body(self) -> bytes:
        return orjson.dumps(envelope(self.code, self.message)) if self.code else b""


UNAUTHENTICATED = Refusal(401, "unauthenticated", "Authentication is required: send 'Authorization: Bearer <key>'.")
INVALID_KEY = Refusal(401, "invalid_api_key", "The API key is missing, malformed, unknown or revoked.")
NOT_FOUND = Refusal(404, "not_found", "No such run.")
INVALID_ID = Refusal(400, "invalid_id", "The id in the URL is not a valid UUID.")
INVALID_LAST_ID = Refusal(400, "invalid_last_event_id", "Last-Event-ID must be an event id from this stream.")
METHOD_NOT_ALLOWED = Refusal(405, "method_not_allowed", "This method is not allowed here.")
FINISHED = Refusal(204)
UNAVAILABLE = Refusal(503, "stream_unavailable", "The live stream is unavailable; try again shortly.")
FAILED = Refusal(500, "internal_error", "The server failed; the error was logged.")


def _aredis() -> aioredis.Redis:
    """The asyncio Redis client of the running event loop (its connections belong to it)."""
    return _client_for(asyncio.get_running_loop())


@functools.lru_cache(maxsize=8)
def _client_for(loop: asyncio.AbstractEventLoop) -> aioredis.Redis:
    return aioredis.Redis.from_url(settings.REDIS_URL, socket_timeout=2.0, socket_connect_timeout=2.0)


def _user_from_db(raw: str) -> Any | None:
    # Streams read from the loop's executor threads, outside Django's request cycle: let the
    # thread's connection be checked (and replaced if stale) as a request's would be.
    close_old_connections()
    return user_for_key(raw)


def _owns_in_db(user: Any, run_key: str) -> bool:
    close_old_connections()
    runs = Run.objects.all() if user.is_staff else Run.objects.filter(owner_id=user.pk)
    return runs.filter(id=run_key).exists()


async def _authorise(authorization: str | None, run_key: str) -> Any:
    """The user who may read the run's stream, or a Refusal. No database in the usual case:
    the key was verified recently and the run's owner is in Redis."""
    raw = key_from_header(authorization)
    if raw is None:
        return UNAUTHENTICATED
    user = (
        (cached_user_for_key(raw) or await sync_to_async(_user_from_db, thread_sensitive=False)(raw)) if raw else None
    )
    if user is None:
        return INVALID_KEY
    try:
        owner = await _aredis().get(owner_key(run_key))
    except redis.RedisError:  # Redis down: the database knows who owns the run
        owner = None
    if owner is not None and (user.is_staff or int(owner) == user.pk):
        return user
    if await sync_to_async(_owns_in_db, thread_sensitive=False)(user, run_key):
        return user
    return NOT_FOUND


def _archived(channel: str, run_key: str, last_id: int, limit: int) -> list[Event]:
    close_old_connections()
    return archived_events(channel, run_key, last_id, limit)


def _archived_newest(run_key: str) -> tuple[int, str | None]:
    close_old_connections()
    return archived_last_event(run_key)


def _ended_in_row(run_key: str, grace_s: float) -> Any:
    close_old_connections()
    return ended_in_row(run_key, ended_before=timezone.now() - datetime.timedelta(seconds=grace_s))


async def _rebuilt_end(channel: str, run_key: str, last_id: int, *, grace_s: float) -> list[Event]:
    """The run's ``content``/``failure`` and ``done`` from its row, numbered after ``last_id``
    (with its opening events first when the client has seen nothing), or [] while it runs."""
    ended = await sync_to_async(_ended_in_row, thread_sensitive=False)(run_key, grace_s)
    if ended is None:
        return []
    opening, end = ended
    events = [*opening, *end] if last_id == 0 else end
    return [Event(channel, kind, data, id=last_id + i) for i, (kind, data) in enumerate(events, start=1)]


async def _read(storage: RunEventStorage, channel: str, run_key: str, last_id: int, limit: int) -> list[Event]:
    """Events after ``last_id``: from the live Redis list, or from the archived rows."""
    pipe = _aredis().pipeline(transaction=False)
    pipe.exists(events_key(run_key))
    pipe.lrange(events_key(run_key), last_id, last_id + limit - 1)
    try:
        live, items = await pipe.execute()
    except redis.RedisError:
        return await sync_to_async(_archived, thread_sensitive=False)(channel, run_key, last_id, limit)
    if live:
        return [
            Event(channel, (p := orjson.loads(item))["t"], p["d"], id=last_id + i + 1) for i, item in enumerate(items)
        ]
    events: list[Event] = await sync_to_async(storage.get_events, thread_sensitive=False)(channel, last_id, limit)
    return events


async def _newest(storage: RunEventStorage, channel: str, run_key: str) -> tuple[int, str | None, bool]:
    """The id and type of the newest event, and whether Redis answered."""
    pipe = _aredis().pipeline(transaction=False)
    pipe.llen(events_key(run_key))
    pipe.lindex(events_key(run_key), -1)
    try:
        count, last = await pipe.execute()
    except redis.RedisError:
        return (*await sync_to_async(_archived_newest, thread_sensitive=False)(run_key), False)
    if count:
        return int(count), orjson.loads(last)["t"], True
    newest: tuple[int, str | None] = await sync_to_async(storage.last_event, thread_sensitive=False)(channel)
    return (*newest, True)


async def open_stream(
    run_id: str, authorization: str | None, last_event_id: str | None
) -> Refusal | AsyncIterator[str]:
    """Check everything, then return the stream (or why there is none). Nothing here raises:
    a failure is logged by its type and answered with the error envelope."""
    try:
        return await _open_stream(run_id, authorization, last_event_id)
    except Exception as exc:  # noqa: BLE001 - never a traceback, never a plain-text 500
        logger.warning("run stream %s could not be opened: %s", run_id[:40], type(exc).__name__)
        return FAILED


async def _open_stream(
    run_id: str, authorization: str | None, last_event_id: str | None
) -> Refusal | AsyncIterator[str]:
    try:
        run_key = str(uuid.UUID(run_id))
    except ValueError:
        return INVALID_ID
    user = await _authorise(authorization, run_key)
    if isinstance(user, Refusal):
        return user
    try:
        last_id = parse_last_event_id(last_event_id)
    except InvalidLastEventId:
        return INVALID_LAST_ID
    storage = RunEventStorage()
    channel = channel_for(run_key)
    newest, newest_type, live = await _newest(storage, channel, run_key)
    if newest_type == TERMINAL_EVENT and last_id >= newest:
        return FINISHED
    if newest_type != TERMINAL_EVENT and not live:
        # Redis is down. A run that has not ended is followed through Redis (its archive comes
        # at its end); one that ended while Redis was down is told by its row.
        archived = await sync_to_async(_archived, thread_sensitive=False)(channel, run_key, last_id, BATCH)
        end = await _rebuilt_end(channel, run_key, max(newest, last_id), grace_s=0)
        if not end:
            return UNAVAILABLE
        return _replay([*archived, *end] if last_id < newest else end)
    return _stream(storage, channel, run_key, last_id, user.pk)


async def _replay(events: list[Event]) -> AsyncIterator[str]:
    yield "retry: 2000\n"
    yield "".join(_encode(e) for e in events)


def _encode(event: Event) -> str:
    return str(sse_encode_event(event.type, event.data, event_id=str(event.id)))


async def _stream(
    storage: RunEventStorage, channel: str, run_key: str, last_id: int, user_id: Any
) -> AsyncIterator[str]:
    manager = get_listener_manager()
    listener = Listener()
    listener.user_id = user_id
    listener.channels = {channel}
    listener.assign_loop()
    manager.add_listener(listener)
    loop = asyncio.get_running_loop()
    sent_at = next_row_check = loop.time()
    try:
        # Field lines with no blank line after them: they belong to the next event's block, so
        # no client sees an empty event (some dispatch one for a retry-only or comment block).
        yield "retry: 2000\n"
        while True:
            with manager.lock:  # empty the live queue first: whatever arrives now is kept
                listener.channel_items = {}
                listener.overflow = False
                listener.aevent.clear()
            events = await _read(storage, channel, run_key, last_id, BATCH)
            if not events and loop.time() - sent_at >= ROW_CHECK_S and loop.time() >= next_row_check:
                next_row_check = loop.time() + ROW_CHECK_S
                events = await _rebuilt_end(channel, run_key, last_id, grace_s=END_GRACE_S)
            if events:
                last_id = int(events[-1].id)
                sent_at = loop.time()
                yield "".join(_encode(e) for e in events)
                if events[-1].type == TERMINAL_EVENT:
                    return
            if len(events) == BATCH:
                continue
            quiet_since = loop.time()
            while True:
                try:
                    await asyncio.wait_for(listener.aevent.wait(), timeout=POLL_S)
                except TimeoutError:
                    if loop.time() - quiet_since >= KEEP_ALIVE_S:
                        yield ": keep-alive\n"
                        quiet_since = loop.time()
                    break  # look at storage again, in case a live event went missing
                with manager.lock:
                    items = listener.channel_items.pop(channel, [])
                    overflow = listener.overflow
                    listener.overflow = False
                    listener.aevent.clear()
                gap = overflow
                chunk = []
                finished = False
                for event in items:
                    event_id = int(event.id) if event.id is not None else 0
                    if event_id <= last_id:
                        continue  # already sent (read from storage)
                    if event_id != last_id + 1:
                        gap = True
                        break
                    last_id = event_id
                    chunk.append(_encode(event))
                    if event.type == TERMINAL_EVENT:
                        finished = True
                        break
                if chunk:
                    sent_at = loop.time()
                    yield "".join(chunk)
                if finished:
                    return
                if gap:
                    break
    finally:
        listener.aevent.set()
        manager.remove_listener(listener)


# --- served as plain ASGI ------------------------------------------------------------------


def _header(scope: dict[str, Any], name: bytes) -> str | None:
    for key, value in scope.get("headers", ()):
        if key == name:
            return str(value.decode("latin-1"))
    return None


async def serve_stream(scope: dict[str, Any], receive: Any, send: Any, run_id: str) -> None:
    if scope.get("method") != "GET":
        opened: Refusal | AsyncIterator[str] = METHOD_NOT_ALLOWED
    else:
        last = _header(scope, b"last-event-id")
        if not last:
            values = parse_qs(scope.get("query_string", b"").decode("latin-1")).get("lastEventId", [])
            last = next((v for v in reversed(values) if v), None)
        opened = await open_stream(run_id, _header(scope, b"authorization"), last)
    if isinstance(opened, Refusal):
        body = opened.body()
        headers = [(b"content-type", b"application/json")] if body else []
        if opened.status == 401:
            headers.append((b"www-authenticate", b'Bearer realm="api"'))
        if opened.status == 503:
            headers.append((b"retry-after", b"5"))
        await send({"type": "http.response.start", "status": opened.status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
        return
    await send({"type": "http.response.start", "status": 200, "headers": HEADERS})

    async def disconnected() -> None:
        while (await receive())["type"] != "http.disconnect":
            pass

    watcher = asyncio.ensure_future(disconnected())
    try:
        async for chunk in opened:
            if watcher.done():
                break
            await send({"type": "http.response.body", "body": chunk.encode(), "more_body": True})
        else:
            await send({"type": "http.response.body", "body": b"", "more_body": False})
    except OSError:
        pass  # the client went away mid-send
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher
        await opened.aclose()  # type: ignore[attr-defined]


# --- served by Django ----------------------------------------------------------------------


async def run_events(request: HttpRequest, run_id: str) -> HttpResponseBase:
    if request.method != "GET":
        opened: Refusal | AsyncIterator[str] = METHOD_NOT_ALLOWED
    else:
        last = request.headers.get("Last-Event-ID") or request.GET.get("lastEventId")
        opened = await open_stream(run_id, request.META.get("HTTP_AUTHORIZATION"), last)
    if isinstance(opened, Refusal):
        if opened.status == 204:
            return HttpResponse(status=204)
        response: HttpResponseBase = JsonResponse(envelope(opened.code, opened.message), status=opened.status)
        if opened.status == 401:
            response["WWW-Authenticate"] = 'Bearer realm="api"'
        if opened.status == 503:
            response["Retry-After"] = "5"
        return response
    response = StreamingHttpResponse(opened, content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response
