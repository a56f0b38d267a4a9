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
        executor = await self._free.get()
        try:
            async with ThreadSensitiveContext(executor=executor):
                await self.handle(scope, receive, send)
        finally:
            self._free.put_nowait(executor)


application = PooledThreadsASGIHandler(threads=settings.WEB_SYNC_THREADS)

# Everything loaded so far lives as long as the process: keep the collector from rescanning it.
freeze_startup_objects()
