"""API keys in the admin: a new key is shown once and works; a key cannot change hands."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from chat.models import ApiKey


@pytest.fixture
def admin_client(service: Any) -> Client:
    client = Client()
    client.force_login(get_user_model().objects.create_superuser("keys-admin", "k@example.com", "pw-keys-1"))
    return client


def test_a_key_made_in_the_admin_is_shown_once_and_works(admin_client: Client) -> None:
    owner = get_user_model().objects.create_user("svc-bot")
    response = admin_client.post("/admin/chat/apikey/add/", {"user": owner.pk, "name": "ci"}, follow=True)
    assert response.status_code == 200
    found = re.search(r"shown this once[^:]*: ([A-Za-z0-9_-]+)", response.content.decode())
    assert found
    raw = found.group(1)
    key = ApiKey.objects.get(user=owner, name="ci")
    assert raw.startswith(key.prefix) and key.digest != raw
    assert Client(headers={"Authorization": f"Bearer {raw}"}).get("/api/sessions").status_code == 200
    # never shown again
    assert raw not in admin_client.get(f"/admin/chat/apikey/{key.pk}/change/").content.decode()


def test_a_key_cannot_be_moved_to_another_user_or_deleted(admin_client: Client) -> None:
    from chat.services import api_key_create

    key, _raw, _ = api_key_create(username="first-owner", name="old")
    other = get_user_model().objects.create_user("thief")
    admin_client.post(f"/admin/chat/apikey/{key.pk}/change/", {"user": other.pk, "name": "renamed"})
    key.refresh_from_db()
    assert key.user.username == "first-owner" and key.name == "renamed"
    assert admin_client.get(f"/admin/chat/apikey/{key.pk}/delete/").status_code == 403


def test_revoking_from_the_admin_stops_the_key(admin_client: Client) -> None:
    from chat.services import api_key_create

    key, raw, _ = api_key_create(username="soon-gone")
    admin_client.post("/admin/chat/apikey/", {"action": "revoke", "_selected_action": [key.pk], "index": 0})
    assert Client(headers={"Authorization": f"Bearer {raw}"}).get("/api/sessions").status_code == 401
