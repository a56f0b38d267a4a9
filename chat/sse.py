"""GET /api/runs/{id}/events: the run's Server-Sent Events stream (ASGI).

Events are read from the run's stored rows first and then followed live through
django-eventstream's listener manager, which receives what workers publish via Redis.
The loop here replaces the library's own streaming view for two reasons:

- a client that connects without ``Last-Event-ID`` must get the whole stream from event 1
  (the library starts at the current event, with no backlog);
- a live event that arrives while the rows are being read must be neither lost nor sent
  twice. The listener's queue is emptied *before* each read, and live events are taken only
  in sequence (id = last + 1): anything older is a duplicate and is skipped, any gap sends the
  loop back to the rows.

The stream ends after ``done``. A client that reconnects after ``done`` gets 204, which tells
an EventSource to stop reconnecting. Ids are plain integers; ``Last-Event-ID`` may also be in
the library's ``run-<id>:<n>`` form.
"""

from __future__ import annotations

import asyncio
import logging
import re
import uuid
from collections.abc import AsyncIterator
from typing import Any

from asgiref.sync import sync_to_async
from django.db import close_old_connections
from django.http import HttpRequest, HttpResponse, HttpResponseBase, JsonResponse, StreamingHttpResponse
from django_eventstream.event import Event
from django_eventstream.utils import sse_encode_event
from django_eventstream.views import Listener, get_listener_manager

from chat.authentication import key_from_header, user_for_key
from chat.errors import envelope
from chat.events import TERMINAL_EVENT, RunEventStorage, channel_for, owner_key
from chat.redis_store import client
from traces.models import Run

logger = logging.getLogger(__name__)

BATCH = 500
#: How long to wait for a live event before looking at the rows again (a missed pub/sub
#: message costs at most this much delay) and how often to send a keep-alive comment.
POLL_S = 2.0
KEEP_ALIVE_S = 15.0
_LAST_ID = re.compile(r"^(?:run-[0-9a-fA-F-]{36}:)?(\d{1,9})$")


class InvalidLastEventId(ValueError):
    pass


def parse_last_event_id(value: str | None) -> int:
    if value is None or not value.strip():
        return 0
    found = _LAST_ID.match(value.strip())
    if not found:
        raise InvalidLastEventId(value)
    return int(found.group(1))


def _authorise(request: HttpRequest, run_id: str) -> tuple[Any, HttpResponse | None]:
    # Streams read from the loop's executor threads, outside Django's request cycle: let
    # the thread's connection be checked (and replaced if stale) like a request's would be.
    close_old_connections()
    raw = key_from_header(request.META.get("HTTP_AUTHORIZATION"))
    if raw is None:
        return None, _error(401, "unauthenticated", "Authentication is required: send 'Authorization: Bearer <key>'.")
    user = user_for_key(raw) if raw else None
    if user is None:
        return None, _error(401, "invalid_api_key", "The API key is missing, malformed, unknown or revoked.")
    owner = client().get(owner_key(run_id))
    if owner is not None and (user.is_staff or int(owner) == user.pk):
        return user, None
    runs = Run.objects.all() if user.is_staff else Run.objects.filter(owner=user)
    if not runs.filter(id=run_id).exists():
        return user, _error(404, "not_found", "No such run.")
    return user, None


def _error(status: int, code: str, message: str) -> HttpResponse:
    response = JsonResponse(envelope(code, message), status=status)
    if status == 401:
        response["WWW-Authenticate"] = 'Bearer realm="api"'
    return response


def _encode(event: Event) -> str:
    return str(sse_encode_event(event.type, event.data, event_id=str(event.id)))


async def run_events(request: HttpRequest, run_id: str) -> HttpResponseBase:
    try:
        run_key = str(uuid.UUID(run_id))
    except ValueError:
        return _error(400, "invalid_id", "The id in the URL is not a valid UUID.")
    if request.method != "GET":
        return _error(405, "method_not_allowed", "This method is not allowed here.")
    # Not thread_sensitive: stream setup and reads must not queue behind the process's sync views.
    user, refusal = await sync_to_async(_authorise, thread_sensitive=False)(request, run_key)
    if refusal is not None:
        return refusal
    header = request.headers.get("Last-Event-ID") or request.GET.get("lastEventId")
    try:
        last_id = parse_last_event_id(header)
    except InvalidLastEventId:
        return _error(400, "invalid_last_event_id", "Last-Event-ID must be an event id from this stream.")
    storage = RunEventStorage()
    channel = channel_for(run_key)
    newest, newest_type = await sync_to_async(storage.last_event, thread_sensitive=False)(channel)
    if newest_type == TERMINAL_EVENT and last_id >= newest:
        return HttpResponse(status=204)
    response = StreamingHttpResponse(_stream(storage, channel, last_id, user.pk), content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response


async def _stream(storage: RunEventStorage, channel: str, last_id: int, user_id: Any) -> AsyncIterator[str]:
    manager = get_listener_manager()
    listener = Listener()
    listener.user_id = user_id
    listener.channels = {channel}
    listener.assign_loop()
    manager.add_listener(listener)
    read = sync_to_async(storage.get_events, thread_sensitive=False)
    loop = asyncio.get_running_loop()
    try:
        # Field lines with no blank line after them: they belong to the next event's block, so
        # no client sees an empty event (some dispatch one for a retry-only or comment block).
        yield "retry: 2000\n"
        while True:
            with manager.lock:  # empty the live queue first: whatever arrives now is kept
                listener.channel_items = {}
                listener.overflow = False
                listener.aevent.clear()
            events = await read(channel, last_id, limit=BATCH)
            for event in events:
                last_id = int(event.id)
                yield _encode(event)
                if event.type == TERMINAL_EVENT:
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
                    break  # look at the rows again, in case a live event went missing
                with manager.lock:
                    items = listener.channel_items.pop(channel, [])
                    overflow = listener.overflow
                    listener.overflow = False
                    listener.aevent.clear()
                gap = overflow
                for event in items:
                    event_id = int(event.id) if event.id is not None else 0
                    if event_id <= last_id:
                        continue  # already sent (read from the rows)
                    if event_id != last_id + 1:
                        gap = True
                        break
                    last_id = event_id
                    yield _encode(event)
                    if event.type == TERMINAL_EVENT:
                        return
                if gap:
                    break
    finally:
        listener.aevent.set()
        manager.remove_listener(listener)
