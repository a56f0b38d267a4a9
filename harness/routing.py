"""IntentRouter: one direct model call that picks the executor. Fails closed.

The router sees only ``{query, last_intent?, last_user_query?}``: no tools, no history. The reply
must be exactly ``{"intent": "SYSTEM_CHAT" | "KNOWLEDGE_QUERY" | "DIAGNOSIS"}``. Two attempts
at most; then ``routing_unavailable``. It never defaults to DIAGNOSIS.
"""

from __future__ import annotations

import enum
import json
import logging

from pydantic import BaseModel, ConfigDict, ValidationError

from harness.errors import ModelError, RoutingUnavailable
from harness.llm.base import Message, ModelRole, Purpose
from harness.llm.call import ModelCaller
from harness.memory import LIMITS
from harness.ports import RoutingContext
from harness.prompts import ROUTER

logger = logging.getLogger(__name__)


class Intent(enum.StrEnum):
    SYSTEM_CHAT = "SYSTEM_CHAT"
    KNOWLEDGE_QUERY = "KNOWLEDGE_QUERY"
    DIAGNOSIS = "DIAGNOSIS"


class _RouterReply(BaseModel):
    # strict JSON: exactly one of Intent's values, spelled as they are
    model_config = ConfigDict(extra="forbid", strict=True)
    intent: Intent


def parse_intent(text: str | None) -> Intent | None:
    try:
        return _RouterReply.model_validate_json((text or "").strip()).intent
    except ValidationError:
        return None


def router_input(query: str, context: RoutingContext) -> str:
    payload: dict[str, str] = {"query": query}
    if context.last_intent:
        payload["last_intent"] = context.last_intent
    if context.last_user_query:
        payload["last_user_query"] = context.last_user_query[: LIMITS.router_query_chars]
    return json.dumps(payload, ensure_ascii=False)


class IntentRouter:
    def __init__(self, *, attempts: int = 2) -> None:
        self.attempts = attempts

    def route(self, caller: ModelCaller, query: str, context: RoutingContext) -> tuple[Intent, int]:
        """The intent and the number of attempts it took."""
        messages = [Message.system(ROUTER), Message.user(router_input(query, context))]
        for attempt in range(1, self.attempts + 1):
            try:
                response = caller.call(ModelRole.ROUTER, Purpose.ROUTING, messages, json_output=True)
            except ModelError as exc:
                logger.info("routing attempt %d failed: %s", attempt, exc.code)
                continue
            intent = parse_intent(response.content)
            if intent is not None:
                return intent, attempt
            logger.info("routing attempt %d returned no valid intent", attempt)
        raise RoutingUnavailable()
