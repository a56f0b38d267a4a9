"""Reading a request the way a model would: the question, the tools offered, the results so far."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from harness.llm.base import ModelRequest, ToolDefinition
from harness.tools.projection import TRUNCATION_MARK


def loads(text: str | None) -> Any:
    try:
        return json.loads(text or "")
    except json.JSONDecodeError:
        return None


def untruncated(text: str) -> str:
    return text[: -len(TRUNCATION_MARK)] if text.endswith(TRUNCATION_MARK) else text


@dataclass
class Observation:
    call_id: str
    tool: str
    args: dict[str, Any]
    #: the (bounded) result as the harness projected it; empty for an error
    view: dict[str, Any]
    error: dict[str, Any] | None = None
    truncated: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass
class Conversation:
    question: str
    previous_turn: dict[str, Any] | None
    system: str
    tools: dict[str, ToolDefinition]
    observations: list[Observation] = field(default_factory=list)
    tool_steps: int = 0
    last_user: str = ""

    def results(self, tool: str) -> list[Observation]:
        return [o for o in self.observations if o.tool == tool and o.ok]

    def called(self, tool: str, args: dict[str, Any]) -> bool:
        key = json.dumps(args, sort_keys=True)
        return any(o.tool == tool and json.dumps(o.args, sort_keys=True) == key for o in self.observations)


def read(request: ModelRequest) -> Conversation:
    system = next((m.content or "" for m in request.messages if m.role == "system"), "")
    users = [m.content or "" for m in request.messages if m.role == "user"]
    first = loads(users[0]) if users else None
    question = first.get("question", "") if isinstance(first, dict) else (users[0] if users else "")
    previous = first.get("previous_turn") if isinstance(first, dict) else None
    conv = Conversation(
        question=str(question),
        previous_turn=previous if isinstance(previous, dict) else None,
        system=system,
        tools={t.name: t for t in request.tools},
        last_user=users[-1] if users else "",
    )
    calls: dict[str, tuple[str, dict[str, Any]]] = {}
    for message in request.messages:
        if message.role == "assistant" and message.tool_calls:
            conv.tool_steps += 1
            for call in message.tool_calls:
                args = loads(call.arguments)
                calls[call.id] = (call.name, args if isinstance(args, dict) else {})
        elif message.role == "tool" and message.tool_call_id in calls:
            top = loads(message.content)
            name, args = calls[message.tool_call_id]
            result = top.get("result") if isinstance(top, dict) else None
            if isinstance(result, dict):
                observation = Observation(message.tool_call_id, name, args, result, None, "truncated" in top)
            else:
                error = top.get("error") if isinstance(top, dict) else None
                observation = Observation(
                    message.tool_call_id, name, args, {}, error if isinstance(error, dict) else {}
                )
            conv.observations.append(observation)
    return conv


_TABLES = re.compile(r"Tables: (.*)\.$", re.DOTALL)
_TABLE = re.compile(r"([A-Za-z_][\w.]*)\(([^)]*)\)")


def sql_tables(definition: ToolDefinition | None) -> dict[str, list[str]]:
    """Table name -> columns, from the query_mysql description."""
    if definition is None:
        return {}
    found = _TABLES.search(definition.description)
    if not found:
        return {}
    return {
        m.group(1): [c.strip() for c in m.group(2).split(",") if c.strip()] for m in _TABLE.finditer(found.group(1))
    }
