"""Typed harness errors.

Every error carries a stable ``code`` (the value that reaches the ``failure`` event and the run
row) and a ``safe_message`` that may be shown to a user. Provider messages, prompts and payloads
never go into either, and provider exceptions are not chained onto them, so not even a logged
traceback can carry what a provider said.
"""

from __future__ import annotations


class HarnessError(Exception):
    """Base of every error the harness raises on purpose."""

    code: str = "internal_error"
    safe_message: str = "The run failed because of an internal error."

    def __init__(self, safe_message: str | None = None) -> None:
        if safe_message is not None:
            self.safe_message = safe_message
        super().__init__(self.safe_message)


class RunInterrupted(HarnessError):
    """The run reached a terminal state (cancel, deadline, shutdown) before this step."""

    code = "cancelled"
    safe_message = "The run was cancelled."


class RunCancelled(RunInterrupted):
    code = "cancelled"
    safe_message = "The run was cancelled."


class DeadlineExceeded(RunInterrupted):
    code = "deadline_exceeded"
    safe_message = "The run did not finish before its deadline."


class WorkerShutdown(RunInterrupted):
    code = "worker_shutdown"
    safe_message = "The run was stopped because its worker is shutting down."


class BudgetExhausted(HarnessError):
    code = "budget_exhausted"
    safe_message = "The run used up its budget before it could finish."

    def __init__(self, budget: str) -> None:
        self.budget = budget
        super().__init__(f"The run used up its {budget} budget before it could finish.")


class ModelError(HarnessError):
    """A model call did not produce a usable response."""

    code = "model_unavailable"
    safe_message = "The language model is unavailable."
    retryable = False


class ModelTimeout(ModelError):
    code = "model_timeout"
    safe_message = "The language model did not answer in time."
    retryable = True


class ModelUnavailable(ModelError):
    code = "model_unavailable"
    safe_message = "The language model is unavailable."
    retryable = True


class ModelRateLimited(ModelUnavailable):
    code = "model_rate_limited"
    safe_message = "The language model is rate limiting requests."


class ModelRefused(ModelError):
    code = "model_refused"
    safe_message = "The language model refused the request."


class ModelAuthenticationFailed(ModelError):
    code = "model_auth_failed"
    safe_message = "The language model rejected the configured credentials."


class ModelResponseInvalid(ModelError):
    code = "model_invalid_response"
    safe_message = "The language model returned a response that could not be read."


class RoutingUnavailable(HarnessError):
    code = "routing_unavailable"
    safe_message = "The question could not be routed; please try again."


class StoreUnavailable(HarnessError):
    code = "store_unavailable"
    safe_message = "A storage backend needed by the run is unavailable."
