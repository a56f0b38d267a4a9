"""ModelCaller: the single path of every model call in a run.

It checks the RunContext (active, budget) before the call, bounds the call by the deadline and
its retries by the run's retry budget, accounts tokens and time, and writes the metadata-only step audit and the restricted reasoning
audit. Nothing else in the harness calls ``ChatModel.complete``.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence

from harness.audit import Audit
from harness.context import RunContext
from harness.errors import ModelError, RunInterrupted
from harness.llm.base import (
    Message,
    ModelRequest,
    ModelResponse,
    ModelRole,
    Models,
    Purpose,
    ToolDefinition,
)
from harness.ports import ReasoningRecord, StepRecord


class ModelCaller:
    def __init__(self, ctx: RunContext, models: Models, audit: Audit) -> None:
        self._ctx = ctx
        self._models = models
        self._audit = audit
        self._index = itertools.count()

    def call(
        self,
        role: ModelRole,
        purpose: Purpose,
        messages: Sequence[Message],
        *,
        tools: Sequence[ToolDefinition] = (),
        json_output: bool = False,
    ) -> ModelResponse:
        self._ctx.begin_model_call()
        index = next(self._index)
        self._ctx.current_step = index
        started_ms = self._ctx.elapsed_ms()
        request = ModelRequest(
            role=role,
            purpose=purpose,
            messages=tuple(messages),
            tools=tuple(tools),
            json_output=json_output,
            timeout_s=max(self._ctx.remaining_s(), 0.001),
            retry_gate=self._ctx,
        )
        started = time.perf_counter()
        try:
            response = self._models.for_role(role).complete(request)
        except ModelError as exc:
            self._record(request, index, None, started_ms, time.perf_counter() - started, exc.code)
            # A provider timeout caused by the run's own deadline is the deadline, not the model.
            self._ctx.check()
            raise
        except RunInterrupted as exc:  # the run ended while the provider waited to retry
            self._record(request, index, None, started_ms, time.perf_counter() - started, exc.code)
            raise
        elapsed = time.perf_counter() - started
        self._ctx.record_usage(response.usage)
        self._record(request, index, response, started_ms, elapsed, None)
        # A cancel that arrived while the model was thinking takes effect now, not one step later.
        self._ctx.check()
        return response

    def _record(
        self,
        request: ModelRequest,
        index: int,
        response: ModelResponse | None,
        started_ms: float,
        elapsed_s: float,
        error_code: str | None,
    ) -> None:
        self._ctx.add_model_time(elapsed_s)
        run_id = self._ctx.run_id
        usage = response.usage if response is not None else None
        self._audit.step(
            StepRecord(
                run_id=run_id,
                index=index,
                purpose=request.purpose.value,
                role=request.role.value,
                message_count=len(request.messages),
                message_roles=tuple(m.role for m in request.messages),
                has_text=bool(response is not None and response.content),
                tool_call_names=tuple(c.name for c in response.tool_calls) if response else (),
                input_tokens=usage.input_tokens if usage else 0,
                output_tokens=usage.output_tokens if usage else 0,
                duration_ms=elapsed_s * 1000.0,
                error_code=error_code,
                started_ms=started_ms,
            )
        )
        if response is not None:
            self._audit.reasoning(
                ReasoningRecord(
                    run_id=run_id,
                    step_index=index,
                    purpose=request.purpose.value,
                    reasoning=response.reasoning,
                    assistant_text=_assistant_text(response),
                )
            )


def _assistant_text(response: ModelResponse) -> str | None:
    """The visible assistant output of a step: its text and its tool-call plan."""
    parts = [response.content] if response.content else []
    parts += [f"{c.name}({c.arguments})" for c in response.tool_calls]
    return "\n".join(parts) or None
