"""A minimal asyncio HTTP/1.1 client for the concurrent benchmark phase.

It speaks just enough HTTP (keep-alive, Content-Length and chunked bodies) to post a question
and read the run's SSE stream until ``done``. A full client (httpx, httpx-sse) costs several
milliseconds of CPU per run; on a 2-core machine that CPU would be taken from the service
being measured. The tests use httpx-sse; this is only the load generator.
"""

from __future__ import annotations

import asyncio
import time

import orjson


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
