"""Refuse oversized API bodies before anything parses them."""

from __future__ import annotations

from collections.abc import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse

from chat.errors import PayloadTooLarge, envelope


class BodySizeLimitMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if request.path.startswith("/api/") and request.method in ("POST", "PUT", "PATCH"):
            limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
            declared = request.META.get("CONTENT_LENGTH") or "0"
            try:
                too_big = int(declared) > limit
            except ValueError:
                too_big = True
            if not too_big:
                too_big = len(request.body) > limit
            if too_big:
                error = PayloadTooLarge(f"The request body is larger than {limit} bytes.")
                return JsonResponse(envelope(error.code, error.message), status=error.status_code)
        return self.get_response(request)
