"""The OpenAI-compatible provider, through the official ``openai`` client.

One instance per role (router, agent, guard), each with its own base URL, key and model. The
client's own retries are off: this provider retries 429, 5xx, timeouts and connection errors
itself, with exponential backoff and jitter, honouring ``Retry-After`` when it fits, never past
the time the run has left (``ModelRequest.timeout_s``) and never beyond the run's retry budget
(``ModelRequest.retry_gate``). A reply that is not a well-formed chat completion is
:class:`ModelResponseInvalid`. Errors come out typed; provider messages stay out of them. The
provider's ``reasoning_content`` (DeepSeek and others) is kept for the restricted reasoning
audit.
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, TypeGuard

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

#: The longest wait a server's Retry-After may impose on one retry.
RETRY_AFTER_MAX_S = 30.0


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
        # Retries are this provider's (bounded by the run); a client retrying too would multiply
        # them, so even a client passed in has its own retries switched off.
        self._client = (
            client.with_options(max_retries=0)
            if client is not None
            else openai.OpenAI(
                base_url=config.base_url, api_key=config.api_key, max_retries=0, timeout=config.timeout_s
            )
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
            except Exception as exc:  # noqa: BLE001 - mapped to a typed error below
                error, retry_after = _classify(exc)
            else:
                return _parse(completion)
            attempt += 1
            if not error.retryable or attempt > self.config.max_retries:
                raise error from None
            delay = retry_after if retry_after is not None else self._backoff(attempt)
            gate = request.retry_gate
            if time.monotonic() + delay >= deadline or (gate is not None and not gate.begin_model_retry(delay)):
                raise error from None
            logger.info(
                "model %s attempt %d failed (%s); retrying in %.2fs", self.config.model, attempt, error.code, delay
            )
            # The run's wait ends early when the run does, so a cancel never waits out a backoff.
            (gate.wait if gate is not None else self._sleep)(delay)

    def _backoff(self, attempt: int) -> float:
        ceiling = min(self.config.backoff_max_s, self.config.backoff_base_s * 2.0 ** (attempt - 1))
        return ceiling * random.uniform(0.5, 1.0)  # noqa: S311 - jitter, not cryptography


def _parse(completion: Any) -> ModelResponse:
    """The completion as a response; anything that is not a well-formed chat completion (a
    client may hand back whatever JSON the server sent) is an invalid response."""
    try:
        return _read_completion(completion)
    except ModelError:
        raise
    except Exception:  # noqa: BLE001 - an unreadable shape, whatever the exception
        raise ModelResponseInvalid() from None


def _read_completion(completion: Any) -> ModelResponse:
    choices = getattr(completion, "choices", None)
    if not choices or not isinstance(choices, list):
        raise ModelResponseInvalid()
    choice = choices[0]
    message = getattr(choice, "message", None)
    if message is None:
        raise ModelResponseInvalid()
    finish_reason = getattr(choice, "finish_reason", None)
    if finish_reason == "content_filter":
        raise ModelRefused()
    content = message.content
    if content is not None and not isinstance(content, str):
        raise ModelResponseInvalid()
    calls = []
    for call in message.tool_calls or ():
        function = getattr(call, "function", None)
        call_id = getattr(call, "id", None)
        name = getattr(function, "name", None)
        arguments = getattr(function, "arguments", None)
        if not (_text(call_id) and _text(name)) or not (arguments is None or isinstance(arguments, str)):
            raise ModelResponseInvalid()
        calls.append(ToolCall(call_id, name, arguments or "{}"))
    if getattr(message, "refusal", None) and not content and not calls:
        raise ModelRefused()
    reasoning = getattr(message, "reasoning_content", None)
    if reasoning is None and message.model_extra:
        reasoning = message.model_extra.get("reasoning_content")
    return ModelResponse(
        content=content,
        tool_calls=tuple(calls),
        usage=_usage(getattr(completion, "usage", None)),
        reasoning=reasoning if isinstance(reasoning, str) and reasoning else None,
        finish_reason=finish_reason if isinstance(finish_reason, str) else None,
        model=model if isinstance(model := getattr(completion, "model", None), str) else None,
    )


def _text(value: object) -> TypeGuard[str]:
    return isinstance(value, str) and bool(value)


def _usage(usage: Any) -> TokenUsage:
    if usage is None:
        return TokenUsage()
    counts = (getattr(usage, "prompt_tokens", None) or 0, getattr(usage, "completion_tokens", None) or 0)
    if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in counts):
        raise ModelResponseInvalid()
    return TokenUsage(*counts)


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
    """The wait the server asked for (``retry-after-ms``, or ``Retry-After`` in seconds or as an
    HTTP date), clamped to ``[0, RETRY_AFTER_MAX_S]``; ``None`` when absent or unreadable."""
    headers = exc.response.headers if exc.response is not None else {}
    seconds: float | None = None
    if (millis := headers.get("retry-after-ms")) is not None:
        seconds = _number(millis, 0.001)
    if seconds is None and (value := headers.get("retry-after")) is not None:
        seconds = _number(value, 1.0)
        if seconds is None:
            seconds = _http_date_delay(value)
    return None if seconds is None else min(max(seconds, 0.0), RETRY_AFTER_MAX_S)


def _number(value: str, scale: float) -> float | None:
    try:
        number = float(value) * scale
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def _http_date_delay(value: str) -> float | None:
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return (when - datetime.now(UTC)).total_seconds()
