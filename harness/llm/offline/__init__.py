"""The offline analyst: a deterministic model that needs no network and no key.

It plays every role the harness asks for — router, small talk, knowledge answer, diagnosis
agent (with repairs) and semantic reviewer — by reading the conversation and the tool results,
the way a careful engineer would. It is the embedded default, so the demo and the tests run
anywhere; a real model is configured with the OpenAI-compatible provider.

As the diagnosis agent it reads the evidence (:mod:`~harness.llm.offline.evidence`), weighs it
(:mod:`~harness.llm.offline.reasoning`), plans the next tool calls
(:mod:`~harness.llm.offline.planning`) and writes the draft (:mod:`~harness.llm.offline.writing`),
with the vocabulary of :mod:`~harness.llm.offline.lexicon`.
"""

from __future__ import annotations

import json

from harness.llm.base import ModelRequest, ModelResponse, Purpose, TokenUsage, ToolCall
from harness.llm.offline import chat, planning, reviewer, writing
from harness.llm.offline.conversation import loads, read
from harness.llm.offline.router import classify


def _tokens(chars: int) -> int:
    """About four characters per token, as the usual tokenizers count English."""
    return max(1, chars // 4)


class OfflineAnalyst:
    name = "offline-analyst"

    def complete(self, request: ModelRequest) -> ModelResponse:
        content, calls = self._answer(request)
        prompt = sum(len(m.content or "") + sum(len(c.arguments) for c in m.tool_calls) for m in request.messages)
        output = len(content or "") + sum(len(c.arguments) for c in calls)
        return ModelResponse(
            content=content,
            tool_calls=calls,
            usage=TokenUsage(_tokens(prompt), _tokens(output)),
            finish_reason="tool_calls" if calls else "stop",
            model=self.name,
        )

    def _answer(self, request: ModelRequest) -> tuple[str | None, tuple[ToolCall, ...]]:
        last_user = next((m.content or "" for m in reversed(request.messages) if m.role == "user"), "")
        match request.purpose:
            case Purpose.ROUTING:
                payload = loads(last_user)
                query = str(payload.get("query", "")) if isinstance(payload, dict) else last_user
                last = payload.get("last_intent") if isinstance(payload, dict) else None
                return json.dumps({"intent": classify(query, last if isinstance(last, str) else None)}), ()
            case Purpose.SYSTEM_CHAT:
                return chat.system_chat(last_user), ()
            case Purpose.KNOWLEDGE_ANSWER:
                return chat.knowledge_answer(last_user), ()
            case Purpose.SEMANTIC_REVIEW:
                return reviewer.review(last_user), ()
            case Purpose.EVIDENCE_REPAIR:
                return json.dumps(writing.repair_draft(read(request), last_user), ensure_ascii=False), ()
            case Purpose.FORMAT_REPAIR:
                return json.dumps(writing.write_draft(read(request)), ensure_ascii=False), ()
            case _:
                conv = read(request)
                steps = planning.plan(conv) if request.tools else []
                if steps:
                    calls = tuple(
                        ToolCall(f"offline_{i}", name, json.dumps(args, ensure_ascii=False))
                        for i, (name, args) in enumerate(steps)
                    )
                    return None, calls
                return json.dumps(writing.write_draft(conv), ensure_ascii=False), ()
