"""The ASGI entry point bounds an API write's body before Django reads it: Django's handler
would otherwise spool the whole of a chunked body, however large, to a file first."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any

from django.conf import settings

from traces.models import Run

CHUNK = 64 * 1024


def post(
    path: str, chunks: int, *, declared: int | None = None, parts: list[bytes] | None = None
) -> tuple[int, dict[str, Any], int]:
    """POST ``chunks`` chunks of 64 KiB (or ``parts``) to config.asgi's application: status,
    JSON answer, and how many chunks it read."""
    from config.asgi import application

    read = 0
    if parts is not None:
        chunks = len(parts)

    async def receive() -> dict[str, Any]:
        nonlocal read
        if read < chunks:
            read += 1
            body = parts[read - 1] if parts is not None else b"x" * CHUNK
            return {"type": "http.request", "body": body, "more_body": read < chunks}
        await asyncio.sleep(3600)
        raise AssertionError("unreachable")

    sent: list[Mapping[str, Any]] = []

    async def send(message: Mapping[str, Any]) -> None:
        sent.append(message)

    headers = [(b"host", b"testserver"), (b"content-type", b"application/json")]
    headers.append(
        (b"content-length", str(declared).encode()) if declared is not None else (b"transfer-encoding", b"chunked")
    )
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
        "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "", "headers": headers,
        "client": ("127.0.0.1", 50000), "server": ("testserver", 80),
    }  # fmt: skip
    asyncio.run(asyncio.wait_for(application(scope, receive, send), 30))
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], json.loads(body), read


def test_a_chunked_body_is_refused_once_it_passes_the_limit_not_after_reading_it_all(service: Any) -> None:
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    status, answer, read = post("/api/chat", chunks=1_000)  # 64 MB

    assert status == 413 and answer["error"]["code"] == "payload_too_large"
    assert read <= limit // CHUNK + 2  # it stopped reading right after the limit
    assert Run.objects.count() == 0


def test_a_declared_oversize_is_refused_before_reading(service: Any) -> None:
    status, answer, read = post("/api/chat", chunks=1_000, declared=64 * 1024 * 1024)
    assert status == 413 and answer["error"]["code"] == "payload_too_large" and read == 0


def test_a_body_within_the_limit_reaches_django_whole(service: Any) -> None:
    status, answer, read = post("/api/chat", chunks=0, parts=[b'{"question": ', b'"hello"}'])
    assert read == 2
    assert status == 401 and answer["error"]["code"] == "unauthenticated"  # past the bound, to the API
