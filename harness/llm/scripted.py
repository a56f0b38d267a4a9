"""ScriptedModel: a deterministic test model that plays a FIFO script of steps.

    model = ScriptedModel([
        assistant_message('{"intent": "DIAGNOSIS"}'),
        tool_call("query_logs", {"level": "ERROR"}),
        respond(lambda request: draft_citing(request, ...)),
    ])
    ...
    model.assert_complete()

Every request is recorded in ``model.calls``. A call past the end of the script raises
``ScriptExhausted`` and is remembered, so ``assert_complete`` fails the test even if the harness
swallowed the error.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from harness.llm.base import Message, ModelRequest, ModelResponse, TokenUsage, ToolCall

Step = Callable[[ModelRequest], ModelResponse]


class ScriptExhausted(AssertionError):
    pass


def assistant_message(content: str, *, usage: TokenUsage | None = None, reasoning: str | None = None) -> Step:
    def step(_: ModelRequest) -> ModelResponse:
        return ModelResponse(content, usage=usage or TokenUsage(10, 10), reasoning=reasoning, finish_reason="stop")

    return step


def json_message(payload: Any) -> Step:
    return assistant_message(json.dumps(payload, ensure_ascii=False))


def tool_call(name: str, arguments: Mapping[str, Any] | str, *, call_id: str = "call_model_1") -> Step:
    return tool_calls((name, arguments, call_id))


def tool_calls(*calls: tuple[str, Mapping[str, Any] | str] | tuple[str, Mapping[str, Any] | str, str]) -> Step:
    def step(_: ModelRequest) -> ModelResponse:
        built = []
        for i, call in enumerate(calls):
            name, arguments = call[0], call[1]
            call_id = call[2] if len(call) > 2 else f"call_model_{i + 1}"
            text = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
            built.append(ToolCall(str(call_id), name, text))
        return ModelResponse(None, tuple(built), TokenUsage(10, 10), finish_reason="tool_calls")

    return step


def raise_error(error: Exception) -> Step:
    def step(_: ModelRequest) -> ModelResponse:
        raise error

    return step


def respond(fn: Callable[[ModelRequest], ModelResponse | str]) -> Step:
    def step(request: ModelRequest) -> ModelResponse:
        out = fn(request)
        return out if isinstance(out, ModelResponse) else ModelResponse(out, usage=TokenUsage(10, 10))

    return step


@dataclass(frozen=True, slots=True)
class SeenResult:
    tool_call_id: str
    tool: str
    content: Mapping[str, Any]


def tool_results(request: ModelRequest) -> list[SeenResult]:
    """The tool results in a request's conversation, with the ids the harness issued."""
    names = {c.id: c.name for m in request.messages for c in m.tool_calls}
    out = []
    for message in request.messages:
        if message.role == "tool" and message.tool_call_id:
            out.append(
                SeenResult(
                    message.tool_call_id, names.get(message.tool_call_id, ""), json.loads(message.content or "{}")
                )
            )
    return out


def last_user_message(request: ModelRequest) -> Message:
    return next(m for m in reversed(request.messages) if m.role == "user")


class ScriptedModel:
    def __init__(self, steps: Iterable[Step] = (), *, name: str = "scripted") -> None:
        self.name = name
        self._steps = list(steps)
        self._lock = threading.Lock()
        self.calls: list[ModelRequest] = []
        self.overrun = False

    def add(self, *steps: Step) -> ScriptedModel:
        self._steps.extend(steps)
        return self

    def complete(self, request: ModelRequest) -> ModelResponse:
        with self._lock:
            self.calls.append(request)
            if not self._steps:
                self.overrun = True
                raise ScriptExhausted(f"{self.name}: no scripted step left for call {len(self.calls)}")
            step = self._steps.pop(0)
        return step(request)

    @property
    def remaining(self) -> int:
        return len(self._steps)

    def assert_complete(self) -> None:
        assert not self.overrun, f"{self.name} was called more often than scripted"
        assert not self._steps, f"{self.name}: {len(self._steps)} scripted step(s) were never used"
