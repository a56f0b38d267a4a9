"""A local HTTP server that speaks the OpenAI protocol (chat completions, embeddings), for the
real ``openai`` client.

Tests queue replies (status, JSON body or raw bytes, headers, delay, a dropped connection, or a
function of the request); every request body the server received is kept in ``requests``.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest


@dataclass
class StubReply:
    status: int = 200
    body: Any = None
    raw: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    #: close the connection without answering (after ``delay_s``)
    disconnect: bool = False
    #: build the reply from the request's JSON body when it arrives (replaces every field above)
    respond: Callable[[dict[str, Any]], StubReply] | None = None


def chat_body(choices: list[Any], **fields: Any) -> dict[str, Any]:
    """A chat-completion envelope around ``choices`` exactly as given, however malformed."""
    return {
        "id": "chatcmpl-stub",
        "object": "chat.completion",
        "created": 0,
        "model": "stub-model",
        "choices": choices,
        **fields,
    }


def completion(
    content: str | None = None,
    *,
    tool_calls: list[tuple[str, str, str]] | None = None,
    reasoning: str | None = None,
    prompt_tokens: int = 11,
    completion_tokens: int = 7,
    finish_reason: str | None = None,
) -> StubReply:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = [
            {"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
            for cid, name, args in tool_calls
        ]
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    return StubReply(
        body={
            "id": "chatcmpl-stub",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": "stub-model",
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": finish_reason or ("tool_calls" if tool_calls else "stop"),
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }
    )


def embeddings(
    vectors: Sequence[Sequence[float]],
    *,
    order: Sequence[int] | None = None,
    model: str = "stub-embedding-model",
    prompt_tokens: int = 5,
) -> StubReply:
    """A ``/v1/embeddings`` reply: ``vectors[i]`` is the embedding of input ``i``; ``order`` lists
    the indexes in the order the ``data`` items are sent (the protocol allows any order)."""
    indexes = list(order) if order is not None else list(range(len(vectors)))
    return StubReply(
        body={
            "object": "list",
            "data": [{"object": "embedding", "index": i, "embedding": list(vectors[i])} for i in indexes],
            "model": model,
            "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
        }
    )


class OpenAIStub:
    def __init__(self) -> None:
        self.replies: deque[StubReply] = deque()
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length)
                sent = json.loads(body or b"{}")
                stub.requests.append({"path": self.path, "json": sent})
                stub.headers.append({k.lower(): v for k, v in self.headers.items()})
                reply = (
                    stub.replies.popleft()
                    if stub.replies
                    else StubReply(500, {"error": {"message": "no reply queued"}})
                )
                if reply.respond is not None:
                    reply = reply.respond(sent)
                if reply.delay_s:
                    time.sleep(reply.delay_s)
                if reply.disconnect:
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                payload = reply.raw if reply.raw is not None else json.dumps(reply.body).encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(payload)))
                    for k, v in reply.headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def queue(self, *replies: StubReply) -> None:
        self.replies.extend(replies)

    def __enter__(self) -> OpenAIStub:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


# --- fixtures (registered for every test by tests/conftest.py) ---------------------------------


@pytest.fixture(scope="module")
def openai_server() -> Iterator[OpenAIStub]:
    # One server per test module: stopping one takes up to half a second (its poll interval).
    with OpenAIStub() as server:
        yield server


@pytest.fixture
def stub(openai_server: OpenAIStub) -> OpenAIStub:
    """The module's OpenAI-compatible stub server, with no scripted replies and no requests yet."""
    openai_server.replies.clear()
    openai_server.requests.clear()
    openai_server.headers.clear()
    return openai_server
