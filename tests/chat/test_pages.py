"""The chat page at ``/``: signed-in browsers get a page that talks to the API with a key of
their session's own, revoked when they sign out."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from chat.models import ApiKey
from chat.pages import BROWSER_KEY_NAME


@pytest.fixture
def person(service: Any) -> Any:
    return get_user_model().objects.create_user("oncall", password="correct horse battery")


def signed_in(person: Any) -> Client:
    client = Client()
    response = client.post("/login/", {"username": "oncall", "password": "correct horse battery"})
    assert response.status_code == 302 and response["Location"] == "/"
    return client


def page_key(client: Client) -> str:
    response = client.get("/")
    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    found = re.search(r'<script id="sba-key" type="application/json">(.*?)</script>', response.content.decode())
    assert found
    key: str = json.loads(found.group(1))
    return key


def test_the_page_asks_a_stranger_to_sign_in(service: Any) -> None:
    response = Client().get("/")
    assert response.status_code == 302 and response["Location"].startswith("/login/")
    login = Client().get("/login/")
    assert login.status_code == 200 and b'name="password"' in login.content


def test_a_wrong_password_is_told_plainly(person: Any) -> None:
    response = Client().post("/login/", {"username": "oncall", "password": "nope"})
    assert response.status_code == 200 and b"did not match" in response.content


def test_a_signed_in_page_gets_one_key_for_its_session_that_the_api_accepts(person: Any) -> None:
    client = signed_in(person)
    key = page_key(client)
    assert page_key(client) == key  # a reload keeps the session's key
    assert ApiKey.objects.filter(user=person, name=BROWSER_KEY_NAME, revoked_at__isnull=True).count() == 1
    api = Client(headers={"Authorization": f"Bearer {key}"})
    response = api.post("/api/chat", {"question": "hello, what can you do?"}, content_type="application/json")
    assert response.status_code == 202
    # the API reads no cookie: the signed-in browser without the header is a stranger there
    assert client.post("/api/chat", {"question": "hi"}, content_type="application/json").status_code == 401


def test_signing_out_revokes_the_sessions_key(person: Any) -> None:
    client = signed_in(person)
    key = page_key(client)
    assert client.post("/logout/").status_code == 302
    api = Client(headers={"Authorization": f"Bearer {key}"})
    assert api.get("/api/sessions").status_code == 401
    assert client.get("/").status_code == 302


def test_the_page_loads_nothing_from_elsewhere(person: Any) -> None:
    html = signed_in(person).get("/").content.decode()
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", html)
