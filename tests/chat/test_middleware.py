"""The middleware: no cookies under /api/, sessions and CSRF kept for the admin, and oversized
API bodies refused before anything reads them."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from typing import Any

import pytest
from django.conf import settings
from django.test import Client

from tests.django_fixtures import Caller
from traces.models import ChatSession, Run

DIAGNOSIS = "Payments are timing out since 10:00, please investigate"
#: Cookies a browser that visited the admin may still send: an unknown session and a token of
#: the wrong length. Django's own middleware answers both with Set-Cookie (delete / re-issue).
STALE_COOKIES = {settings.SESSION_COOKIE_NAME: "no-such-session", settings.CSRF_COOKIE_NAME: "short"}


def browser_with_stale_cookies() -> Client:
    client = Client()
    for name, value in STALE_COOKIES.items():
        client.cookies[name] = value
    return client


def assert_no_cookies(response: Any) -> None:
    assert not response.cookies, response.cookies
    assert "Set-Cookie" not in response.headers


def test_api_responses_set_no_session_or_csrf_cookie(staff: Caller) -> None:
    client = browser_with_stale_cookies()
    bearer = {"Authorization": f"Bearer {staff.key}"}

    listed = client.get("/api/sessions", headers=bearer)
    assert listed.status_code == 200
    assert_no_cookies(listed)

    asked = client.post(
        "/api/chat", json.dumps({"question": DIAGNOSIS}), content_type="application/json", headers=bearer
    )
    assert asked.status_code == 202  # no CSRF token needed with a key
    assert_no_cookies(asked)

    run_id = asked.json()["run_id"]
    for response in (
        client.get(f"/api/runs/{run_id}", headers=bearer),
        client.get("/api/runs/not-a-uuid", headers=bearer),
        client.get("/api/sessions"),  # 401
        client.get("/api/healthz"),
    ):
        assert response.status_code in (200, 400, 401)
        assert_no_cookies(response)


def test_an_admin_session_cookie_does_not_authenticate_the_api(staff: Caller) -> None:
    staff.user.is_superuser = True
    staff.user.save(update_fields=["is_superuser"])
    client = Client()
    client.force_login(staff.user)
    assert client.get("/admin/").status_code == 200
    response = client.get("/api/sessions")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthenticated"
    assert_no_cookies(response)


def test_the_admin_login_page_renders_and_sets_the_csrf_cookie(service: Any) -> None:
    response = Client().get("/admin/login/")
    assert response.status_code == 200
    page = response.content.decode()
    assert 'name="username"' in page and 'name="csrfmiddlewaretoken"' in page
    assert settings.CSRF_COOKIE_NAME in response.cookies
    assert response.cookies[settings.CSRF_COOKIE_NAME].value


def test_the_admin_still_enforces_csrf_and_stale_cookies_are_answered(service: Any) -> None:
    client = Client(enforce_csrf_checks=True)
    refused = client.post("/admin/login/", {"username": "x", "password": "y"})
    assert refused.status_code == 403

    page = browser_with_stale_cookies().get("/admin/login/")
    assert page.status_code == 200
    assert settings.CSRF_COOKIE_NAME in page.cookies  # re-issued: the admin's middleware ran


# --- body size ---------------------------------------------------------------------------------


@pytest.mark.parametrize("authenticated", [True, False])
def test_a_declared_oversized_body_is_413_before_parsing_or_authentication(alice: Caller, authenticated: bool) -> None:
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    client = Client()
    headers = {"Authorization": f"Bearer {alice.key}"} if authenticated else {}
    response = client.post(
        "/api/chat",
        "{not json",  # would be 400 invalid_json (or 401) if anything had read it
        content_type="application/json",
        headers=headers,
        CONTENT_LENGTH=str(limit + 1),
    )
    assert response.status_code == 413
    error = response.json()["error"]
    assert error["code"] == "payload_too_large" and str(limit) in error["message"]
    assert Run.objects.count() == 0 and ChatSession.objects.count() == 0


def test_a_100_kb_json_body_is_413(alice: Caller, service: Any) -> None:
    body = json.dumps({"question": "x" * 100_000})
    response = alice.client.post("/api/chat", body, content_type="application/json")
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload_too_large"
    assert Run.objects.count() == 0 and int(service.llen("runs")) == 0


def test_a_body_at_the_limit_is_read_and_validated(alice: Caller) -> None:
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    padding = limit - len(json.dumps({"question": ""}))
    body = json.dumps({"question": "x" * padding})
    assert len(body) == limit
    response = alice.client.post("/api/chat", body, content_type="application/json")
    assert response.status_code == 400  # too long a question, not too big a body
    assert response.json()["error"]["code"] == "invalid_request"


def test_the_limit_only_applies_to_api_bodies(alice: Caller) -> None:
    response = alice.client.get("/api/sessions", CONTENT_LENGTH=str(settings.DATA_UPLOAD_MAX_MEMORY_SIZE * 4))
    assert response.status_code == 200


def _asgi_post(path: str, chunks: list[bytes], headers: list[tuple[bytes, bytes]]) -> tuple[int, dict[str, Any]]:
    """POST a body to the ASGI application in the given chunks, with no Content-Length (as a
    client sending ``Transfer-Encoding: chunked`` does): Django's test client cannot."""
    from django.core.asgi import get_asgi_application

    application = get_asgi_application()
    messages = [{"type": "http.request", "body": c, "more_body": i < len(chunks) - 1} for i, c in enumerate(chunks)]
    sent: list[Mapping[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if messages:
            return messages.pop(0)
        await asyncio.sleep(3600)  # no disconnect while the response is written
        raise AssertionError("unreachable")

    async def send(message: Mapping[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
        "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
        "headers": [(b"host", b"testserver"), (b"transfer-encoding", b"chunked"), *headers],
        "client": ("127.0.0.1", 50000), "server": ("testserver", 80),
    }  # fmt: skip
    asyncio.run(application(scope, receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], json.loads(body)


def test_a_chunked_oversized_body_is_413_like_a_declared_one(alice: Caller) -> None:
    body = json.dumps({"question": "x" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1)}).encode()
    chunks = [body[i : i + 16_384] for i in range(0, len(body), 16_384)]
    headers = [(b"content-type", b"application/json"), (b"authorization", f"Bearer {alice.key}".encode())]

    status, answer = _asgi_post("/api/chat", chunks, headers)

    assert status == 413
    assert answer["error"]["code"] == "payload_too_large"
    assert Run.objects.count() == 0 and ChatSession.objects.count() == 0


def test_a_chunked_body_within_the_limit_is_read() -> None:
    status, answer = _asgi_post("/api/chat", [b'{"question": ', b'"hello"}'], [(b"content-type", b"application/json")])
    assert status == 401 and answer["error"]["code"] == "unauthenticated"  # past the size check


# --- nesting ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        '{"question": "Payments time out", "metadata": {"a": ' + "[" * 5000 + "]" * 5000 + "}}",
        "[" * 5000 + "]" * 5000,
        '{"question": "Payments time out", "metadata": {"a": ' + '{"b": ' * 40 + "1" + "}" * 40 + "}}",
    ],
    ids=["metadata-5000-deep", "body-5000-deep", "metadata-40-deep"],
)
def test_a_body_nested_too_deep_is_400_and_creates_nothing(alice: Caller, body: str) -> None:
    response = alice.client.post("/api/chat", body, content_type="application/json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "json_too_deep"
    assert Run.objects.count() == 0 and ChatSession.objects.count() == 0


def test_metadata_nested_within_the_limit_is_accepted(alice: Caller) -> None:
    metadata = {"a": {"b": {"c": [[["deep enough"]]]}}}
    response = alice.client.post(
        "/api/chat", json.dumps({"question": DIAGNOSIS, "metadata": metadata}), content_type="application/json"
    )
    assert response.status_code == 202
    assert Run.objects.get().metadata == metadata
