"""Webhooks end to end: the real ASGI server, run workers and the webhook worker deliver
``run.completed`` for a run that completes and for one cancelled while queued, signed for the
key that asked, and the delivery log says so."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from standardwebhooks.webhooks import Webhook

from chat.stack import Stack
from tests.django_fixtures import Caller
from tests.e2e.conftest import reaching, running_stack
from tests.webhook_receiver import Receiver

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def webhook_stack(
    receiver: Receiver, django_db_setup: Any, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    env = {
        **reaching(receiver),
        "WEBHOOK_SWEEP_S": "0.5",
    }
    with running_stack(django_db_blocker, tmp_path_factory, env=env, worker_concurrency=1) as stack:
        yield stack


@pytest.fixture
def api(webhook_stack: Stack, alice: Caller) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {alice.key}"}
    with httpx.Client(base_url=webhook_stack.base_url, headers=headers, timeout=httpx.Timeout(10, read=60)) as client:
        yield client


def wait_for_event(receiver: Receiver, run_id: str, timeout_s: float = 60) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for received in list(receiver.received):
            if json.loads(received.body)["data"]["id"] == run_id:
                return received
        time.sleep(0.05)
    raise AssertionError(f"no webhook for run {run_id}")


def test_a_completed_run_is_delivered_signed_and_logged(api: httpx.Client, alice: Caller, receiver: Receiver) -> None:
    run_id = api.post(
        "/api/chat", json={"question": "hello, what can you do?", "webhook_url": receiver.url("/ok")}
    ).json()["run_id"]

    received = wait_for_event(receiver, run_id)

    event = Webhook(alice.webhook_secret).verify(received.body, received.headers)
    assert event["data"] == api.get(f"/api/runs/{run_id}").json()
    assert event["data"]["status"] == "completed" and event["data"]["outcome"] == "success"
    deadline = time.monotonic() + 10
    while (log := api.get(f"/api/runs/{run_id}/webhook-deliveries").json())[0]["status"] != "succeeded":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert log[0]["attempt_log"][0]["status_code"] == 204 and log[0]["webhook_id"] == received.headers["webhook-id"]


def test_a_run_cancelled_while_queued_is_delivered_too(
    api: httpx.Client, alice: Caller, receiver: Receiver, webhook_stack: Stack
) -> None:
    from chat import wiring
    from chat.models import ApiKey

    # Opened straight through the lifecycle, so no worker can claim it before the cancel.
    opened = wiring.lifecycle().open(
        owner=alice.user,
        question="queued, then cancelled",
        webhook_url=receiver.url("/ok"),
        api_key_id=ApiKey.objects.get(user=alice.user).pk,
    )
    assert api.post(f"/api/runs/{opened.run.id}/cancel").status_code == 202

    received = wait_for_event(receiver, str(opened.run.id))
    event = Webhook(alice.webhook_secret).verify(received.body, received.headers)
    assert event["data"]["outcome"] == "cancelled"
    assert uuid.UUID(event["data"]["id"]) == opened.run.id


def test_a_delivery_whose_message_was_lost_is_sent_by_the_workers_sweep(
    api: httpx.Client, alice: Caller, receiver: Receiver
) -> None:
    from datetime import timedelta

    from django.utils import timezone

    from chat.models import ApiKey, WebhookDelivery
    from traces.models import Run

    run_id = api.post("/api/chat", json={"question": "hello there"}).json()["run_id"]
    deadline = time.monotonic() + 30
    while api.get(f"/api/runs/{run_id}").json()["status"] != "completed":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    # A delivery as the hook writes it, but its message never reached the broker.
    lost = WebhookDelivery.objects.create(
        run=Run.objects.get(id=run_id),
        owner=alice.user,
        api_key=ApiKey.objects.get(user=alice.user),
        target="request",
        url=receiver.url("/ok"),
        body=json.dumps({"type": "run.completed", "data": {"id": run_id}}),
        next_attempt_at=timezone.now() - timedelta(minutes=2),
    )

    received = wait_for_event(receiver, run_id, timeout_s=30)

    assert received.headers["webhook-id"] == lost.message_id
