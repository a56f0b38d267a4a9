"""The chat API's own errors; the shared ones and the envelope are in ``core``."""

from __future__ import annotations

from core.errors import ApplicationError, ErrorKind


class SessionBusy(ApplicationError):
    code = "session_busy"
    kind = ErrorKind.CONFLICT
    message = "This session already has a run in progress; wait for it or cancel it."


class IdempotencyConflict(ApplicationError):
    code = "idempotency_key_reused"
    kind = ErrorKind.REJECTED
    message = "This Idempotency-Key was already used for a different request."
