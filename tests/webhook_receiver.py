"""A real local HTTP server that receives webhooks and answers as a receiver may: 2xx, an error,
a timeout, 429 with Retry-After, 410, a redirect — chosen by the path it is sent to."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float


@dataclass
class Receiver:
    port: int
    received: list[Received] = field(default_factory=list)
    #: /flaky answers 500 this many times, then 204
    flaky_failures: int = 2
    slow_s: float = 3.0
    retry_after: str = "7"
    lock: threading.Lock = field(default_factory=threading.Lock)

    def url(self, path: str = "/ok") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def on(self, path: str) -> list[Received]:
        with self.lock:
            return [r for r in self.received if r.path == path]

    def wait_for(self, count: int, *, path: str | None = None, timeout_s: float = 20) -> list[Received]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self.lock:
                got = [r for r in self.received if path is None or r.path == path]
            if len(got) >= count:
                return got
            time.sleep(0.02)
        raise AssertionError(f"{len(got)} of {count} webhooks arrived")


def _handler(receiver: Receiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            with receiver.lock:
                receiver.received.append(
                    Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body, time.time())
                )
                flaky_left = receiver.flaky_failures - len([r for r in receiver.received if r.path == "/flaky"]) + 1
            path = self.path.split("?")[0]
            if path == "/ok":
                self._answer(204)
            elif path == "/fail":
                self._answer(500, b"internal error; the stack trace would be here " + b"x" * 5_000)
            elif path == "/slow":
                time.sleep(receiver.slow_s)
                self._answer(200)
            elif path == "/busy":
                self._answer(429, headers={"Retry-After": receiver.retry_after})
            elif path == "/gone":
                self._answer(410)
            elif path == "/redirect":
                self._answer(302, headers={"Location": receiver.url("/ok")})
            elif path == "/flaky":
                self._answer(500 if flaky_left > 0 else 204)
            else:
                self._answer(404)

        def _answer(self, code: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
            self.send_response(code)
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            if body:
                self.wfile.write(body)

    return Handler


@contextmanager
def receiving() -> Iterator[Receiver]:
    receiver = Receiver(port=0)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(receiver))
    server.daemon_threads = True
    receiver.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
