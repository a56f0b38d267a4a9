"""The OpenAI-compatible provider, through the official ``openai`` client.

One instance per role (router, agent, guard), each with its own base URL, key and model. The
client's own retries are off: this provider retries 429, 5xx, timeouts and connection errors
itself, with exponential backoff and jitter, honouring ``Retry-After``, and never past the time
the run has left (``ModelRequest.timeout_s``). Errors come out typed; provider messages stay out
of them. The provider's ``reasoning_content`` (DeepSeek and others) is kept for the restricted
reasoning audit.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import openai

from harness.errors import (
    ModelAuthenticationFailed,
    ModelError,
    ModelRateLimited,
    ModelRefused,
    ModelResponseInvalid,
    ModelTimeout,
    ModelUnavailable,
)
from harness.llm.base import Message, ModelRequest, ModelResponse, TokenUsage, ToolCall

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class OpenAIConfig:
    base_url: str
    api_key: str
    model: str
    timeout_s: float = 60.0
    max_retries: int = 2
    backoff_base_s: float = 0.5
    backoff_max_s: float = 8.0
    temperature: float | None = 0.0
    max_output_tokens: int | None = 4_096

    def __repr__(self) -> str:  # never print the key
        return f"OpenAIConfig(base_url={self.base_url!r}, model={self.model!r})"


def _message(m: Message) -> dict[str, Any]:
    if m.role == "tool":
        return {"role": "tool", "tool_call_id": m.tool_call_id, "content": m.content or ""}
    out: dict[str, Any] = {"role": m.role, "content": m.content}
    if m.tool_calls:
        out["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in m.tool_calls
        ]
    elif out["content"] is None:
        out["content"] = ""
    return out


class OpenAICompatibleModel:
    def __init__(
        self,
        config: OpenAIConfig,
        *,
        client: openai.OpenAI | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.config = config
        self._client = client or openai.OpenAI(
            base_url=config.base_url, api_key=config.api_key, max_retries=0, timeout=config.timeout_s
        )
        self._sleep = sleep

    def complete(self, request: ModelRequest) -> ModelResponse:
        # Each attempt may take the configured timeout; all attempts together never outlast the
        # time the run has left (or, without a run deadline, every attempt's full timeout).
        overall = request.timeout_s or self.config.timeout_s * (self.config.max_retries + 1)
        deadline = time.monotonic() + overall
        kwargs: dict[str, Any] = {
            "model": self.config.model,
            "messages": [_message(m) for m in request.messages],
        }
        if request.tools:
            kwargs["tools"] = [
                {
                    "type": "function",
                    "function": {"name": t.name, "description": t.description, "parameters": dict(t.parameters)},
                }
                for t in request.tools
            ]
        elif request.json_output:
            kwargs["response_format"] = {"type": "json_object"}
        if self.config.temperature is not None:
            kwargs["temperature"] = self.config.temperature
        max_tokens = request.max_output_tokens or self.config.max_output_tokens
        if max_tokens:
            kwargs["max_tokens"] = max_tokens

        attempt = 0
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ModelTimeout()
            try:
                completion = self._client.chat.completions.create(
                    **kwargs, timeout=min(self.config.timeout_s, remaining)
                )
                return self._parse(completion)
            except ModelError:
                raise
            except Exception as exc:  # noqa: BLE001 - mapped to a typed error below
                error, retry_after = _classify(exc)
            attempt += 1
            if not error.retryable or attempt > self.config.max_retries:
                raise error from None
            delay = retry_after if retry_after is not None else self._backoff(attempt)
            if time.monotonic() + delay >= deadline:
                raise error from None
            logger.info(
                "model %s attempt %d failed (%s); retrying in %.2fs", self.config.model, attempt, error.code, delay
            )
            self._sleep(delay)

    def _backoff(self, attempt: int) -> float:
        ceiling = min(self.config.backoff_max_s, self.config.backoff_base_s * 2.0 ** (attempt - 1))
        return ceiling * random.uniform(0.5, 1.0)  # noqa: S311 - jitter, not cryptography

    def _parse(self, completion: Any) -> ModelResponse:
        choices = getattr(completion, "choices", None)
        if not choices:
            raise ModelResponseInvalid()
        choice = choices[0]
        message = getattr(choice, "message", None)
        if message is None:
            raise ModelResponseInvalid()
        if choice.finish_reason == "content_filter":
            raise ModelRefused()
        calls = []
        for call in message.tool_calls or ():
            function = getattr(call, "function", None)
            if function is None or not getattr(call, "id", None):
                raise ModelResponseInvalid()
            calls.append(ToolCall(call.id, function.name, function.arguments or "{}"))
        if getattr(message, "refusal", None) and not message.content and not calls:
            raise ModelRefused()
        reasoning = getattr(message, "reasoning_content", None)
        if reasoning is None and message.model_extra:
            reasoning = message.model_extra.get("reasoning_content")
        usage = completion.usage
        return ModelResponse(
            content=message.content,
            tool_calls=tuple(calls),
            usage=TokenUsage(usage.prompt_tokens or 0, usage.completion_tokens or 0) if usage else TokenUsage(),
            reasoning=reasoning if isinstance(reasoning, str) and reasoning else None,
            finish_reason=choice.finish_reason,
            model=getattr(completion, "model", None),
        )


def _classify(exc: Exception) -> tuple[ModelError, float | None]:
    """Map a client exception to a typed error and the server's Retry-After, if any."""
    if isinstance(exc, openai.APITimeoutError):
        return ModelTimeout(), None
    if isinstance(exc, openai.APIConnectionError):
        return ModelUnavailable(), None
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        retry_after = _retry_after(exc)
        if status == 429:
            return ModelRateLimited(), retry_after
        if status in (401, 403):
            return ModelAuthenticationFailed(), None
        if status in (400, 422):
            return ModelRefused(), None
        if status >= 500 or status == 408:
            return ModelUnavailable(), retry_after
        unavailable = ModelUnavailable()
        unavailable.retryable = False
        return unavailable, None
    if isinstance(exc, openai.APIResponseValidationError | ValueError | TypeError | AttributeError | KeyError):
        return ModelResponseInvalid(), None
    return ModelUnavailable(), None


def _retry_after(exc: openai.APIStatusError) -> float | None:
    value = exc.response.headers.get("retry-after") if exc.response is not None else None
    try:
        return min(float(value), 30.0) if value is not None else None
    except ValueError:
        return None
