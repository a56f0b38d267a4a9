"""Middleware, arranged so a request crosses into a thread once, not once per middleware.

Under ASGI, Django runs each *async-capable* MiddlewareMixin's process_request and
process_response through ``sync_to_async``: two thread hops per middleware per request,
most of the cost of a small API call. A chain of sync-only middlewares instead runs, with the
sync view, inside one hop. So every middleware here is sync-only (the built-in ones are
subclassed to say so), and the only async code is the SSE view itself.


``RunLogContextMiddleware`` binds the run a request is about (``/api/runs/<id>/…``) for its
log lines, and unbinds it when the request ends.
``BodySizeLimitMiddleware`` refuses oversized API bodies (413) before anything parses them,
whether they declare their size or are sent chunked.
The ``Admin*`` middlewares are the ones the admin needs (sessions, CSRF, messages, login),
doing nothing under ``/api/``: the API authenticates with keys, not cookies, and every request
saved from a middleware that has no work to do is time the service gets back.

"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.contrib.auth.middleware import AuthenticationMiddleware
from django.contrib.messages.middleware import MessageMiddleware
from django.contrib.sessions.middleware import SessionMiddleware
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse
from django.middleware.clickjacking import XFrameOptionsMiddleware
from django.middleware.common import CommonMiddleware
from django.middleware.csrf import CsrfViewMiddleware
from django.middleware.security import SecurityMiddleware

from core.api import STATUS_OF
from core.errors import PayloadTooLarge, envelope
from core.logcontext import bind_run, run_bound

API_PREFIX = "/api/"
#: file uploads: streamed by the multipart parser, limited by the upload size (plus the form)
UPLOAD_PATHS = frozenset({"/api/documents"})


def body_limit(path: str, method: str) -> int | None:
    """The most bytes an API write may send (None: not an API write)."""
    if not path.startswith(API_PREFIX) or method not in ("POST", "PUT", "PATCH"):
        return None
    limit = int(settings.DATA_UPLOAD_MAX_MEMORY_SIZE)
    if path in UPLOAD_PATHS:
        limit += int(settings.KNOWLEDGE["MAX_UPLOAD_BYTES"])
    return limit


def too_large(limit: int) -> tuple[int, bytes]:
    """The 413 answer to a body over ``limit``: status and JSON body."""
    error = PayloadTooLarge(f"The request body is larger than {limit} bytes.")
    return STATUS_OF[error.kind], json.dumps(envelope(error.code, error.message)).encode()


def _too_big(request: HttpRequest) -> HttpResponse | None:
    limit = body_limit(request.path, request.method or "")
    if limit is None:
        return None
    upload = request.path in UPLOAD_PATHS
    try:
        too_big = int(request.META.get("CONTENT_LENGTH") or "0") > limit
    except ValueError:
        too_big = True
    if not too_big and not upload:
        try:
            too_big = len(request.body) > limit
        except RequestDataTooBig:
            # A body with no Content-Length (chunked) is measured as it is read: as large as
            # one that declared its size, it gets the same answer.
            too_big = True
    if not too_big:
        return None
    status, body = too_large(limit)
    return HttpResponse(body, status=status, content_type="application/json")


class BodySizeLimitMiddleware:
    sync_capable = True
    async_capable = False

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return _too_big(request) or self.get_response(request)


class RunLogContextMiddleware:
    sync_capable = True
    async_capable = False

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        # A thread serves request after request: each starts with no run bound, and ends so.
        with run_bound(None):
            return self.get_response(request)

    def process_view(self, request: HttpRequest, view: Any, args: Any, kwargs: dict[str, Any]) -> None:
        run_id = kwargs.get("run_id")
        if isinstance(run_id, str):
            with contextlib.suppress(ValueError):  # only a well-formed id reaches a log line
                bind_run(uuid.UUID(run_id))


class _SkipUnderApi:
    """Mixed into a Django middleware: under /api/ the request goes straight through."""

    get_response: Callable[[HttpRequest], Any]

    def __call__(self, request: HttpRequest) -> Any:
        if request.path.startswith(API_PREFIX):
            return self.get_response(request)
        return super().__call__(request)  # type: ignore[misc]


class AdminSessionMiddleware(_SkipUnderApi, SessionMiddleware):
    async_capable = False


class AdminCsrfViewMiddleware(_SkipUnderApi, CsrfViewMiddleware):
    async_capable = False


class AdminAuthenticationMiddleware(_SkipUnderApi, AuthenticationMiddleware):
    async_capable = False


class AdminMessageMiddleware(_SkipUnderApi, MessageMiddleware):
    async_capable = False


class SyncSecurityMiddleware(SecurityMiddleware):
    async_capable = False


class SyncCommonMiddleware(CommonMiddleware):
    async_capable = False


class SyncXFrameOptionsMiddleware(XFrameOptionsMiddleware):
    async_capable = False
