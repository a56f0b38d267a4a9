"""The errors services raise on purpose, and the one envelope every error is shown in.

An :class:`ApplicationError` carries a stable code, a safe message and details, and says what
kind of failure it is (:class:`ErrorKind`); it knows nothing of HTTP. The edge
(``core.api.exception_handler``) turns the kind into a status code, so a storage adapter or a
service can raise one without being shaped like a view.
"""

from __future__ import annotations

import enum
from typing import Any


class ErrorKind(enum.Enum):
    INVALID = "invalid"  # the request is wrong
    NOT_FOUND = "not_found"  # no such object (or not yours)
    CONFLICT = "conflict"  # the object's state forbids it now
    REJECTED = "rejected"  # well-formed, but it contradicts an earlier request
    TOO_LARGE = "too_large"
    LIMITED = "limited"  # the caller is over a limit; retry later
    UNAVAILABLE = "unavailable"  # a dependency is down; retry later


class ApplicationError(Exception):
    """Base of the errors services raise on purpose. Subclasses set code, kind and message;
    ``retry_after_s`` (when set) tells the caller when to try again."""

    code = "application_error"
    kind = ErrorKind.INVALID
    message = "The request could not be completed."
    retry_after_s: int | None = None

    def __init__(self, message: str | None = None, *, details: dict[str, Any] | None = None) -> None:
        self.message = message or self.message
        self.details = details or {}
        super().__init__(self.message)


class NotFound(ApplicationError):
    code = "not_found"
    kind = ErrorKind.NOT_FOUND
    message = "Not found."


class PayloadTooLarge(ApplicationError):
    code = "payload_too_large"
    kind = ErrorKind.TOO_LARGE
    message = "The request body is too large."


class QueueUnavailable(ApplicationError):
    code = "queue_unavailable"
    kind = ErrorKind.UNAVAILABLE
    message = "The run queue is unavailable; try again shortly."
    retry_after_s = 5


class QueueFull(ApplicationError):
    code = "queue_full"
    kind = ErrorKind.UNAVAILABLE
    message = "Too many runs are waiting; try again shortly."
    retry_after_s = 10


def envelope(code: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    """``{"error": {"code", "message", "details"}}``: the shape of every error the API returns."""
    return {"error": {"code": code, "message": message, "details": details or {}}}
