"""ASGI entry point: the API and the SSE streams are served here (e.g. by uvicorn).

Django's own ASGIHandler runs each request's synchronous code (DRF views, the ORM) on a
thread created for that request, so each request also opens a new database connection.
Here sync code runs on a small pool of long-lived threads instead, each keeping its
connection (``CONN_MAX_AGE``), handed to one request at a time. Event streams do not enter
Django at all: they are served by ``chat.sse.serve_stream``, a plain ASGI app that reads
Redis asynchronously and touches the database only when Redis cannot answer.
"""

from __future__ import annotations

import asyncio
import os
import re
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import django
from asgiref.sync import ThreadSensitiveContext

from core.startup import StartupError

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
try:
    django.setup(set_prefix=False)
except StartupError as exc:  # also in a worker process of the server, which prints no hook's line
    raise SystemExit(f"error: {exc}") from None

from django.conf import settings
from django.core.handlers.asgi import ASGIHandler

from chat.middleware import body_limit, too_large
from chat.sse import serve_stream
from config.gc import freeze_startup_objects

_STREAM = re.compile(r"^/api/runs/([^/]+)/events$")

# The only streamed responses that go through Django here are WhiteNoise's static files (event
# streams bypass it): Django reads such a file in a worker thread and warns that it did; for
# files of a few hundred kilobytes that is the right trade, not news for the log.
warnings.filterwarnings(
    "ignore", message="StreamingHttpResponse must consume synchronous iterators", module="django.core.handlers.asgi"
)


class PooledThreadsASGIHandler(ASGIHandler):
    def __init__(self, threads: int) -> None:
        super().__init__()
        self._executors = [ThreadPoolExecutor(max_workers=1, thread_name_prefix="django-sync") for _ in range(threads)]
        self._free: asyncio.Queue[ThreadPoolExecutor] | None = None

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            raise ValueError(f"Django can only handle ASGI/HTTP connections, not {scope['type']}.")
        stream = _STREAM.match(scope.get("path", ""))
        if stream:
            await serve_stream(scope, receive, send, stream.group(1))
            return
        if self._free is None:
            self._free = asyncio.Queue()
            for executor in self._executors:
                self._free.put_nowait(executor)
        receive = await _bounded_body(scope, receive, send)
        if receive is None:
            return
        executor = await self._free.get()
        try:
            async with ThreadSensitiveContext(executor=executor):
                await self.handle(scope, receive, send)
        finally:
            self._free.put_nowait(executor)


async def _bounded_body(scope: dict[str, Any], receive: Any, send: Any) -> Any:
    """An API write's body, read here up to its limit before Django sees any of it (Django's
    handler would spool the whole body, however large, to a file first): a ``receive`` that
    replays it, or None once a 413 was sent — for a declared size at once, for a chunked body as
    soon as it passes the limit, without reading the rest."""
    limit = body_limit(scope.get("path", ""), scope.get("method", ""))
    if limit is None:
        return receive
    declared = next((v for k, v in scope.get("headers", ()) if k == b"content-length"), None)
    if declared is not None and declared.isdigit() and int(declared) > limit:
        await _answer_too_large(send, limit)
        return None
    messages: list[dict[str, Any]] = []
    size = 0
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            break
        size += len(message.get("body", b""))
        if size > limit:
            await _answer_too_large(send, limit)
            return None
        if not message.get("more_body"):
            break

    async def replay() -> Any:
        return messages.pop(0) if messages else await receive()

    return replay


async def _answer_too_large(send: Any, limit: int) -> None:
    status, body = too_large(limit)
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


application = PooledThreadsASGIHandler(threads=settings.WEB_SYNC_THREADS)

# Everything loaded so far lives as long as the process: keep the collector from rescanning it.
freeze_startup_objects()
