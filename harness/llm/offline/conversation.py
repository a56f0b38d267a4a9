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
    view: dict[str, Any]

    @property
    def ok(self) -> bool:
        return "error" not in self.view


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
            view = loads(message.content)
            name, args = calls[message.tool_call_id]
            conv.observations.append(
                Observation(message.tool_call_id, name, args, view if isinstance(view, dict) else {"error": {}})
            )
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
