"""A minimal asyncio HTTP/1.1 client for the concurrent benchmark phase and the load test.

It speaks just enough HTTP (keep-alive, Content-Length and chunked bodies) to post a question
and read the run's SSE stream until ``done``. A full client (httpx, httpx-sse) costs several
milliseconds of CPU per run; on a 2-core machine that CPU would be taken from the service
being measured. The tests use httpx-sse; this is only the load generator.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import orjson

#: the start of a ``done`` event's block (a field line; data lines cannot hold a newline)
_DONE = b"\nevent: done\n"


@dataclass(frozen=True, slots=True)
class SseEvent:
    id: str | None
    type: str
    data: bytes


@dataclass(slots=True)
class StreamRead:
    """A response read to its end: for a stream, every event and when ``done`` arrived."""

    status: int
    body: bytes = b""
    #: the body ended as HTTP says it should (the last chunk, or Content-Length bytes)
    ended: bool = False
    done_at: float | None = None
    events: list[SseEvent] = field(default_factory=list)


def parse_events(body: bytes) -> list[SseEvent]:
    """The events of an SSE body, as an EventSource dispatches them (comments and ``retry``
    lines skipped; a block with neither an event type nor data dispatches nothing)."""
    events: list[SseEvent] = []
    for block in body.replace(b"\r\n", b"\n").split(b"\n\n"):
        event_id: str | None = None
        event_type: str | None = None
        data: list[bytes] = []
        for line in block.split(b"\n"):
            if not line or line.startswith(b":"):
                continue
            name, _, value = line.partition(b":")
            value = value[1:] if value.startswith(b" ") else value
            if name == b"event":
                event_type = value.decode()
            elif name == b"id":
                event_id = value.decode()
            elif name == b"data":
                data.append(value)
        if event_type is not None or data:
            events.append(SseEvent(event_id, event_type or "message", b"\n".join(data)))
    return events


class Connection:
    def __init__(self, host: str, port: int, key: str) -> None:
        self.host, self.port = host, port
        self.auth = f"Bearer {key}".encode()
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            await self.writer.wait_closed()

    def _send(self, method: str, path: str, body: bytes = b"") -> None:
        assert self.writer is not None
        head = (
            f"{method} {path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nAuthorization: ".encode()
            + self.auth
            + b"\r\n"
        )
        if body:
            head += b"Content-Type: application/json\r\nContent-Length: " + str(len(body)).encode() + b"\r\n"
        self.writer.write(head + b"\r\n" + body)

    async def _head(self) -> tuple[int, dict[bytes, bytes]]:
        assert self.reader is not None
        status_line = await self.reader.readline()
        status = int(status_line.split(b" ", 2)[1])
        headers: dict[bytes, bytes] = {}
        while True:
            line = await self.reader.readline()
            if line in (b"\r\n", b""):
                return status, headers
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip()

    async def _chunks(self) -> None:
        """Read a chunked body until the stream's ``done`` event, then to its end."""
        assert self.reader is not None
        seen_done = False
        while True:
            size = int((await self.reader.readline()).split(b";")[0], 16)
            if size == 0:
                await self.reader.readline()
                if not seen_done:
                    raise RuntimeError("the stream ended without done")
                return
            chunk = await self.reader.readexactly(size + 2)
            if b"event: done" in chunk:
                seen_done = True
                if b'"outcome": "success"' not in chunk and b'"outcome": "fallback"' not in chunk:
                    raise RuntimeError(f"a run ended badly: {chunk[-120:]!r}")

    async def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        """One request with a Content-Length answer (the JSON API): its status and body."""
        self._send(method, path, body)
        status, headers = await self._head()
        assert self.reader is not None
        return status, await self.reader.readexactly(int(headers.get(b"content-length") or 0))

    async def stream(self, path: str) -> StreamRead:
        """GET a stream and read it to its end (not merely to ``done``: a second ``done`` must
        be seen), noting when ``done`` arrived; any other answer is read as a plain body."""
        self._send("GET", path)
        status, headers = await self._head()
        assert self.reader is not None
        read = StreamRead(status)
        if headers.get(b"transfer-encoding") != b"chunked":
            read.body = await self.reader.readexactly(int(headers.get(b"content-length") or 0))
            read.ended = True
            return read
        body = bytearray()
        while True:
            size = int((await self.reader.readline()).split(b";")[0], 16)
            if size == 0:
                await self.reader.readline()
                read.ended = True
                break
            chunk = await self.reader.readexactly(size + 2)
            body += chunk[:-2]
            # an event is never split across sends, but look back a little all the same
            if read.done_at is None and _DONE in body[-(size + len(_DONE)) :]:
                read.done_at = time.perf_counter()
        read.body = bytes(body)
        read.events = parse_events(read.body)
        return read

    async def run(self, question: str) -> float:
        started = time.perf_counter()
        self._send("POST", "/api/chat", orjson.dumps({"question": question}))
        status, headers = await self._head()
        assert self.reader is not None
        body = await self.reader.readexactly(int(headers[b"content-length"]))
        if status != 202:
            raise RuntimeError(f"POST /api/chat answered {status}: {body[:200]!r}")
        run_id = orjson.loads(body)["run_id"]
        self._send("GET", f"/api/runs/{run_id}/events")
        status, headers = await self._head()
        if status != 200 or headers.get(b"transfer-encoding") != b"chunked":
            raise RuntimeError(f"the stream answered {status}")
        await self._chunks()
        return (time.perf_counter() - started) * 1000.0


async def _load(host: str, port: int, key: str, question: str, clients: int, total: int) -> float:
    remaining = [total]

    async def client() -> None:
        connection = Connection(host, port, key)
        await connection.open()
        try:
            while remaining[0] > 0:
                remaining[0] -= 1
                await connection.run(question)
        finally:
            await connection.close()

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    return total / (time.perf_counter() - started)


def runs_per_second(host: str, port: int, key: str, question: str, *, clients: int, total: int) -> float:
    return asyncio.run(_load(host, port, key, question, clients, total))
