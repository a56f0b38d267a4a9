"""The API edge every app shares: the DRF exception handler and Django's error views (one
envelope for all of them), strict input serializers, ids from URLs, and pagination.

DRF's and Django's own errors (404, 405, 500, bad JSON, oversized bodies) are mapped onto the
same envelope as :class:`~core.errors.ApplicationError`. Nothing here ever includes a stack
trace, SQL, a prompt or a provider's message.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views import defaults
from drf_spectacular.utils import OpenApiParameter, inline_serializer
from rest_framework import exceptions, serializers, status
from rest_framework.pagination import CursorPagination
from rest_framework.parsers import BaseParser, JSONParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView
from rest_framework.views import exception_handler as drf_exception_handler

from core.errors import ApplicationError, ErrorKind, envelope

#: the HTTP status of each kind of application error
STATUS_OF: dict[ErrorKind, int] = {
    ErrorKind.INVALID: status.HTTP_400_BAD_REQUEST,
    ErrorKind.NOT_FOUND: status.HTTP_404_NOT_FOUND,
    ErrorKind.CONFLICT: status.HTTP_409_CONFLICT,
    ErrorKind.REJECTED: status.HTTP_422_UNPROCESSABLE_ENTITY,
    ErrorKind.TOO_LARGE: status.HTTP_413_REQUEST_ENTITY_TOO_LARGE,
    ErrorKind.LIMITED: status.HTTP_429_TOO_MANY_REQUESTS,
    ErrorKind.UNAVAILABLE: status.HTTP_503_SERVICE_UNAVAILABLE,
}


class InvalidId(ApplicationError):
    code = "invalid_id"
    message = "The id in the URL is not a valid UUID."


def parse_id(value: str) -> uuid.UUID:
    """A UUID from a URL, or 400 ``invalid_id``."""
    try:
        return uuid.UUID(value)
    except ValueError:
        raise InvalidId() from None


#: how deeply a JSON body may nest (objects and arrays); no field of the API needs more
MAX_JSON_DEPTH = 32


class JsonTooDeep(ApplicationError):
    code = "json_too_deep"
    message = f"The JSON body is nested more than {MAX_JSON_DEPTH} levels deep."


class BoundedJSONParser(JSONParser):
    """DRF's JSON parser, refusing a body nested deeper than :data:`MAX_JSON_DEPTH` with 400
    ``json_too_deep``: Python's decoder would otherwise fail with a RecursionError (a 500) on
    thousands of levels, and anything deep enough to pass it would fail whatever walks it next
    (serializers, the JSON column, the run's representation)."""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise JsonTooDeep() from None
        if _depth_exceeds(data, MAX_JSON_DEPTH):
            raise JsonTooDeep()
        return data


def _depth_exceeds(value: Any, limit: int) -> bool:
    """Whether objects and arrays nest more than ``limit`` deep (iteratively: no recursion)."""
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else None
        if children is None:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return False


class StrictSerializer(serializers.Serializer[Any]):
    """Unknown fields are an error, not silently ignored."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError({name: ["Unknown field."] for name in unknown})
        return super().to_internal_value(data)


class TextField(serializers.CharField):
    """A string, and only a string: DRF's CharField would turn 42 into "42"."""

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return str(super().to_internal_value(data))


class NewestFirst(CursorPagination):
    """Cursor pages, newest first. ``page_size`` must be 1…100 (DRF would ignore a bad one);
    a cursor that is not one of ours is 404, as DRF answers it."""

    ordering = ("-created_at", "-id")
    page_size = 20
    max_page_size = 100
    page_size_query_param = "page_size"

    def get_page_size(self, request: Any) -> int:
        raw = request.query_params.get(self.page_size_query_param)
        if raw is None:
            return self.page_size
        if not raw.isdigit() or not 1 <= int(raw) <= self.max_page_size:
            raise serializers.ValidationError(
                {self.page_size_query_param: [f"A whole number from 1 to {self.max_page_size}."]}
            )
        return int(raw)


#: the query parameters of a page (documented on every paginated operation)
PAGE_PARAMETERS = (
    OpenApiParameter("cursor", str, required=False, description="The `next` or `previous` link's cursor."),
    OpenApiParameter("page_size", int, required=False, description="Items per page, 1 to 100 (default 20)."),
)


class UnknownParameter(ApplicationError):
    code = "unknown_parameter"
    message = "The request has query parameters this endpoint does not take."


def error_response(exc: ApplicationError) -> Response:
    """An application error as the API answers it."""
    response = Response(envelope(exc.code, exc.message, exc.details), status=STATUS_OF[exc.kind])
    if exc.retry_after_s is not None:
        response["Retry-After"] = str(exc.retry_after_s)
    return response


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
        return error_response(exc)
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


#: the statuses any operation may answer with the error envelope (besides its own successes)
ERROR_STATUSES = {
    "400": "Invalid request (bad JSON, JSON nested too deep, unknown or invalid fields, a bad id).",
    "401": "No API key, or an unknown, revoked or malformed one.",
    "403": "The key may not do this.",
    "404": "No such object, or not yours.",
    "405": "Method not allowed here.",
    "406": "The requested format is not available.",
    "409": "The object's state forbids this now.",
    "413": "The request body is too large.",
    "415": "Unsupported media type.",
    "422": "Contradicts an earlier request (an Idempotency-Key reused).",
    "429": "Over a per-key limit; see Retry-After.",
    "503": "A dependency is unavailable; see Retry-After.",
}


def document_errors(result: dict[str, Any], generator: Any, request: Any, public: bool) -> dict[str, Any]:
    """drf-spectacular postprocessing hook: the error envelope, and every status above, on
    every operation (an operation's own documented responses win)."""
    components = result.setdefault("components", {}).setdefault("schemas", {})
    components["ErrorEnvelope"] = {
        "type": "object",
        "required": ["error"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["code", "message", "details"],
                "properties": {
                    "code": {"type": "string"},
                    "message": {"type": "string"},
                    "details": {"type": "object"},
                },
            }
        },
    }
    envelope_ref = {"content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorEnvelope"}}}}
    for operations in result.get("paths", {}).values():
        for operation in operations.values():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            for code, description in ERROR_STATUSES.items():
                operation["responses"].setdefault(code, {"description": description, **envelope_ref})
    return result


class ApiView(APIView):
    """DRF's APIView, answering a method it does not serve with 405 before it checks who asks
    (DRF would check permissions first and answer 403 to a staff-only view's PUT), and a query
    parameter it does not read with 400 ``unknown_parameter`` (a misspelt filter must not be
    silently ignored)."""

    parser_classes: Sequence[type[BaseParser]] = (BoundedJSONParser,)
    #: the query parameters the view reads
    query_parameters: frozenset[str] = frozenset()

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        if request.method is None or not hasattr(self, request.method.lower()):
            raise exceptions.MethodNotAllowed(request.method or "")
        super().initial(request, *args, **kwargs)
        unknown = sorted(set(request.query_params) - self.query_parameters)
        if unknown:
            raise UnknownParameter(details={"parameters": [name[:100] for name in unknown[:10]]})


class PagedApiView(ApiView):
    """A view whose GET answers :class:`NewestFirst` pages."""

    query_parameters = frozenset({"cursor", "page_size"})


def paginated(item: type[serializers.Serializer[Any]]) -> serializers.Serializer[Any]:
    """The schema of a :class:`NewestFirst` page of ``item``: ``{next, previous, results}``."""
    return inline_serializer(
        f"Paginated{item.__name__}",
        {
            "next": serializers.URLField(allow_null=True),
            "previous": serializers.URLField(allow_null=True),
            "results": item(many=True),
        },
    )
