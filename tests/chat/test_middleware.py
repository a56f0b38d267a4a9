"""The middleware: no cookies under /api/, sessions and CSRF kept for the admin, and oversized
API bodies refused before anything reads them."""

from __future__ import annotations

import json
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
