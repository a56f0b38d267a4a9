"""The webhook API and the per-key limits: endpoints are their owner's alone, secrets are shown
once, a forbidden URL is refused before anything is written, and a key over its limits gets 429
with Retry-After in the usual envelope."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from chat import wiring
from chat.models import WebhookDelivery, WebhookEndpoint
from tests.chat.test_apis import assert_error
from tests.django_fixtures import Caller
from traces.models import Run

QUESTION = "Payments are timing out since 10:00, please investigate"
HOOK = "https://hooks.example.com/sba"


@pytest.fixture(autouse=True)
def public_names(monkeypatch: pytest.MonkeyPatch) -> None:
    """hooks.example.com resolves to a public address (no DNS in tests); other names do not."""
    from chat.webhooks import targets

    def resolve(host: str, port: int) -> list[str]:
        if host == "hooks.example.com":
            return ["93.184.216.34"]
        if host == "internal.example.com":
            return ["10.0.0.8"]
        raise OSError("unknown host")

    monkeypatch.setattr(targets, "system_resolver", resolve)


def test_an_endpoint_is_created_with_a_secret_shown_once(alice: Caller) -> None:
    created = alice.post("/api/webhook-endpoints", {"url": HOOK, "description": "ticketing"})

    assert created.status_code == 201
    body = created.json()
    assert body["secret"].startswith("whsec_") and body["url"] == HOOK and not body["disabled"]
    listed = alice.get("/api/webhook-endpoints").json()["results"]
    shown = alice.get(f"/api/webhook-endpoints/{body['id']}").json()
    assert [e["id"] for e in listed] == [body["id"]]
    assert "secret" not in listed[0] and "secret" not in shown
    assert body["secret"] not in str(listed) + str(shown)
    stored = WebhookEndpoint.objects.get(id=body["id"])
    assert body["secret"] not in stored.secret  # sealed at rest


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1/hook",
        "http://internal.example.com/",
        "ftp://hooks.example.com/",
        "http://x:y@hooks.example.com/",
    ],
)
def test_a_forbidden_url_is_refused_and_nothing_is_written(alice: Caller, url: str) -> None:
    endpoint = alice.post("/api/webhook-endpoints", {"url": url})
    run = alice.post("/api/chat", {"question": QUESTION, "webhook_url": url})

    assert_error(endpoint, 400, "webhook_url_forbidden")
    assert_error(run, 400, "webhook_url_forbidden")
    assert "10.0.0.8" not in endpoint.content.decode()  # the address it resolved to is not told
    assert not WebhookEndpoint.objects.exists() and not Run.objects.exists()


def test_rotating_and_disabling_an_endpoint(alice: Caller) -> None:
    endpoint = alice.post("/api/webhook-endpoints", {"url": HOOK}).json()

    rotated = alice.post(f"/api/webhook-endpoints/{endpoint['id']}/rotate-secret").json()
    disabled = alice.post(f"/api/webhook-endpoints/{endpoint['id']}/disable")
    again = alice.post(f"/api/webhook-endpoints/{endpoint['id']}/disable")

    assert rotated["secret"] != endpoint["secret"] and rotated["previous_secret_expires_at"]
    assert disabled.status_code == again.status_code == 200
    assert again.json()["disabled"] and again.json()["disabled_reason"] == "disabled"


def test_another_owners_endpoints_and_deliveries_answer_404(alice: Caller, bob: Caller, staff: Caller) -> None:
    endpoint = alice.post("/api/webhook-endpoints", {"url": HOOK}).json()
    run_id = alice.post("/api/chat", {"question": QUESTION, "webhook_url": HOOK}).json()["run_id"]
    wiring.lifecycle().cancel_queued(run_id=uuid.UUID(run_id))
    delivery = WebhookDelivery.objects.get(run_id=run_id)

    for caller in (bob, staff):
        assert_error(caller.get(f"/api/webhook-endpoints/{endpoint['id']}"), 404, "not_found")
        assert_error(caller.post(f"/api/webhook-endpoints/{endpoint['id']}/rotate-secret"), 404, "not_found")
        assert_error(caller.post(f"/api/webhook-endpoints/{endpoint['id']}/disable"), 404, "not_found")
        assert_error(caller.post(f"/api/webhook-deliveries/{delivery.id}/redeliver"), 404, "not_found")
        assert caller.get("/api/webhook-endpoints").json()["results"] == []
    assert_error(bob.get(f"/api/runs/{run_id}/webhook-deliveries"), 404, "not_found")
    assert staff.get(f"/api/runs/{run_id}/webhook-deliveries").json() == []  # the run, not alice's receiver
    assert_error(alice.get("/api/webhook-endpoints/not-a-uuid"), 400, "invalid_id")
    assert not WebhookEndpoint.objects.get(id=endpoint["id"]).disabled_at


def test_the_delivery_log_shows_attempts_but_never_a_secret(alice: Caller, monkeypatch: pytest.MonkeyPatch) -> None:
    from chat.webhooks import services

    monkeypatch.setattr(services, "_nudge", lambda *a, **k: None)
    run_id = alice.post("/api/chat", {"question": QUESTION, "webhook_url": HOOK}).json()["run_id"]
    wiring.lifecycle().cancel_queued(run_id=uuid.UUID(run_id))

    (delivery,) = alice.get(f"/api/runs/{run_id}/webhook-deliveries").json()

    assert delivery["status"] == "pending" and delivery["url"] == HOOK and delivery["attempt_log"] == []
    assert delivery["webhook_id"].startswith("msg_") and "body" not in delivery
    assert alice.webhook_secret not in str(delivery)


def test_a_key_with_too_many_active_runs_gets_429(alice: Caller, bob: Caller, settings: Any) -> None:
    settings.MAX_ACTIVE_RUNS_PER_KEY = 2
    for i in range(2):
        assert alice.post("/api/chat", {"question": f"{QUESTION} {i}"}).status_code == 202

    refused = alice.post("/api/chat", {"question": QUESTION})

    assert_error(refused, 429, "too_many_active_runs")
    assert refused["Retry-After"] == "5"
    assert Run.objects.filter(owner=alice.user).count() == 2
    assert bob.post("/api/chat", {"question": QUESTION}).status_code == 202  # another key is not limited


def test_a_key_over_its_request_rate_gets_429_whichever_process_it_asks(
    alice: Caller, bob: Caller, settings: Any
) -> None:
    settings.API_RATE_PER_KEY = "3/hour"  # one window for the whole test
    assert [alice.get("/api/sessions").status_code for _ in range(3)] == [200, 200, 200]

    throttled = alice.get("/api/sessions")

    assert_error(throttled, 429, "rate_limited")
    assert 0 < int(throttled["Retry-After"]) <= 3_600
    assert bob.get("/api/sessions").status_code == 200
    # the count is in Redis, shared by every web process: a fresh client of the same key is counted too
    assert Caller(alice.user, alice.key).get("/api/sessions").status_code == 429
