"""One error envelope for the whole API: ``{"error": {"code", "message", "details"}}``.

Application errors carry a stable code; DRF's and Django's own errors (404, 405, 500, bad
JSON, oversized bodies) are mapped onto the same envelope. Nothing here ever includes a
stack trace, SQL, a prompt or a provider's message.
"""

from __future__ import annotations

import logging
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import defaults
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

logger = logging.getLogger(__name__)


class ApplicationError(Exception):
    """Base of the errors services raise on purpose. Subclasses set code, status and message."""

    code = "application_error"
    status_code: int = status.HTTP_400_BAD_REQUEST
    message = "The request could not be completed."

    def __init__(self, message: str | None = None, *, details: dict[str, Any] | None = None) -> None:
        self.message = message or self.message
        self.details = details or {}
        super().__init__(self.message)


class NotFound(ApplicationError):
    code = "not_found"
    status_code = status.HTTP_404_NOT_FOUND
    message = "Not found."


class SessionBusy(ApplicationError):
    code = "session_busy"
    status_code = status.HTTP_409_CONFLICT
    message = "This session already has a run in progress; wait for it or cancel it."


class IdempotencyConflict(ApplicationError):
    code = "idempotency_key_reused"
    status_code = status.HTTP_422_UNPROCESSABLE_ENTITY
    message = "This Idempotency-Key was already used for a different request."


class QueueUnavailable(ApplicationError):
    code = "queue_unavailable"
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    message = "The run queue is unavailable; try again shortly."
    retry_after_s = 5


class QueueFull(ApplicationError):
    code = "queue_full"
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    message = "Too many runs are waiting; try again shortly."
    retry_after_s = 10


class PayloadTooLarge(ApplicationError):
    code = "payload_too_large"
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    message = "The request body is too large."


def envelope(code: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "details": details or {}}}


def _validation_details(detail: Any) -> Any:
    if isinstance(detail, dict):
        return {str(k): _validation_details(v) for k, v in detail.items()}
    if isinstance(detail, list):
        return [_validation_details(v) for v in detail]
    return str(detail)


_DRF_CODES: list[tuple[type[exceptions.APIException], str, str]] = [
    (exceptions.ParseError, "invalid_json", "The request body is not valid JSON."),
    (exceptions.NotAuthenticated, "unauthenticated", "Authentication is required: send 'Authorization: Bearer <key>'."),
    (exceptions.AuthenticationFailed, "invalid_api_key", "The API key is missing, malformed, unknown or revoked."),
    (exceptions.PermissionDenied, "permission_denied", "You are not allowed to do this."),
    (exceptions.NotFound, "not_found", "Not found."),
    (exceptions.MethodNotAllowed, "method_not_allowed", "This method is not allowed here."),
    (exceptions.NotAcceptable, "not_acceptable", "The requested format is not available."),
    (exceptions.UnsupportedMediaType, "unsupported_media_type", "Send JSON (Content-Type: application/json)."),
    (exceptions.Throttled, "rate_limited", "Too many requests; slow down."),
]


def _accepted_media_types(context: dict[str, Any]) -> list[str]:
    view = context.get("view")
    return [str(parser.media_type) for parser in getattr(view, "parser_classes", ())]


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """DRF's EXCEPTION_HANDLER."""
    if isinstance(exc, ApplicationError):
        response = Response(envelope(exc.code, exc.message, exc.details), status=exc.status_code)
        if hasattr(exc, "retry_after_s"):
            response["Retry-After"] = str(exc.retry_after_s)
        return response
    handled = drf_exception_handler(exc, context)
    if handled is None:
        return None  # an unexpected error: Django's handler500 answers, with the envelope
    response = handled
    if isinstance(exc, exceptions.ValidationError):
        response.data = envelope(
            "invalid_request", "The request is not valid.", {"fields": _validation_details(exc.detail)}
        )
        return response
    accepted = _accepted_media_types(context)
    if accepted and "application/json" not in accepted:
        # Endpoints that take something else (uploads are multipart) say so.
        if isinstance(exc, exceptions.ParseError):
            response.data = envelope("invalid_body", f"The request body is not valid {' or '.join(accepted)}.")
            return response
        if isinstance(exc, exceptions.UnsupportedMediaType):
            response.data = envelope("unsupported_media_type", f"Send {' or '.join(accepted)}.")
            return response
    for kind, code, message in _DRF_CODES:
        if isinstance(exc, kind):
            response.data = envelope(code, message)
            return response
    response.data = envelope("error", "The request failed.")
    return response


def _is_api(request: HttpRequest) -> bool:
    return request.path.startswith("/api/")


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if _is_api(request):
        return JsonResponse(envelope("not_found", "Not found."), status=404)
    return defaults.page_not_found(request, exception)


def server_error(request: HttpRequest) -> HttpResponse:
    if _is_api(request):
        return JsonResponse(envelope("internal_error", "The server failed; the error was logged."), status=500)
    return defaults.server_error(request)


def bad_request(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if _is_api(request):
        return JsonResponse(envelope("bad_request", "The request could not be understood."), status=400)
    return defaults.bad_request(request, exception)  # type: ignore[arg-type]


def permission_denied(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    if _is_api(request):
        return JsonResponse(envelope("permission_denied", "You are not allowed to do this."), status=403)
    return defaults.permission_denied(request, exception)  # type: ignore[arg-type]
