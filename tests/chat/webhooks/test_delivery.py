"""run.completed deliveries against a real local receiver: signed (checked with the
standardwebhooks library), exactly once per run end, retried on the schedule, Retry-After
honoured, 410 disabling the endpoint, no redirect followed, a timeout bounded, DNS rebinding
defeated, every attempt recorded."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from chat import wiring
from chat.models import WebhookAttempt, WebhookDelivery, WebhookEndpoint
from chat.webhooks import services, targets
from tests.django_fixtures import Caller
from tests.webhook_receiver import Receiver, receiving
from traces.lifecycle import EndCause, RunEnded
from traces.models import Outcome, Run, RunStatus

QUESTION = "Payments are timing out since 10:00, please investigate"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with receiving() as running:
        yield running


@pytest.fixture
def nudges(monkeypatch: pytest.MonkeyPatch) -> list[tuple[uuid.UUID, float]]:
    """The messages that would go to the webhook worker; the tests make the attempts themselves."""
    sent: list[tuple[uuid.UUID, float]] = []
    monkeypatch.setattr(
        services, "_nudge", lambda delivery_id, countdown_s=0.0: sent.append((delivery_id, countdown_s))
    )
    return sent


@pytest.fixture(autouse=True)
def local_receivers(settings: Any, receiver: Receiver) -> None:
    settings.WEBHOOK = {
        **settings.WEBHOOK,
        "ALLOWED_CIDRS": ["127.0.0.1/32"],
        "ALLOWED_PORTS": [str(receiver.port)],
        "RETRY_SCHEDULE_S": [0.0, 5.0, 300.0],
        "RETRY_JITTER": 0.1,
        "TIMEOUT_S": 2.0,
    }


def ended_run(caller: Caller, **fields: Any) -> Run:
    """A run asked for over the API, then ended (cancelled while queued) through its lifecycle."""
    response = caller.post("/api/chat", {"question": QUESTION, **fields})
    assert response.status_code == 202, response.content
    run_id = uuid.UUID(response.json()["run_id"])
    assert wiring.lifecycle().cancel_queued(run_id=run_id)
    return Run.objects.get(id=run_id)


def attempt(delivery: WebhookDelivery) -> WebhookAttempt:
    made = services.delivery_attempt(delivery_id=str(delivery.id))
    assert made is not None
    return made


def make_due(delivery: WebhookDelivery) -> None:
    WebhookDelivery.objects.filter(id=delivery.id).update(next_attempt_at=timezone.now() - timedelta(seconds=1))


def verify(secret: str, received: Any) -> dict[str, Any]:
    event: dict[str, Any] = Webhook(secret).verify(received.body, received.headers)
    return event


# --- what arrives --------------------------------------------------------------------------


def test_a_run_that_ends_sends_one_signed_event_that_reads_like_the_run_resource(
    alice: Caller, receiver: Receiver, nudges: list[Any]
) -> None:
    run = ended_run(alice, webhook_url=receiver.url("/ok"))
    (delivery,) = WebhookDelivery.objects.filter(run=run)
    assert nudges == [(delivery.id, 0.0)]  # the first attempt is asked for at once

    made = attempt(delivery)

    (received,) = receiver.wait_for(1)
    event = verify(alice.webhook_secret, received)
    assert event["type"] == "run.completed" and event["timestamp"]
    assert event["data"] == alice.get(f"/api/runs/{run.id}").json()
    assert event["data"]["status"] == "cancelled" and event["data"]["outcome"] == "cancelled"
    assert received.headers["webhook-id"] == delivery.message_id
    with pytest.raises(WebhookVerificationError):
        verify("whsec_" + "A" * 43, received)  # another secret does not verify
    assert made.status_code == 204 and made.error == ""
    delivery.refresh_from_db()
    assert delivery.status == "succeeded" and delivery.attempts == 1 and delivery.finished_at is not None


def test_a_run_ends_once_so_its_webhook_is_created_once(alice: Caller, receiver: Receiver, nudges: list[Any]) -> None:
    run = ended_run(alice, webhook_url=receiver.url("/ok"))

    assert not wiring.lifecycle().cancel_queued(run_id=run.id)  # a second end is refused…
    again = RunEnded(run.id, RunStatus.CANCELLED, Outcome.CANCELLED, None, "cancelled", "", EndCause.CANCELLED)
    services.deliveries_for_run(again)  # …and a repeated hook adds nothing

    assert WebhookDelivery.objects.filter(run=run).count() == 1


def test_without_a_url_the_keys_endpoints_receive_it_with_their_own_secrets(
    alice: Caller, bob: Caller, receiver: Receiver, nudges: list[Any]
) -> None:
    mine = alice.post("/api/webhook-endpoints", {"url": receiver.url("/ok")}).json()
    alice.post("/api/webhook-endpoints", {"url": receiver.url("/ok?second")})
    bob.post("/api/webhook-endpoints", {"url": receiver.url("/ok?bob")})
    disabled = alice.post("/api/webhook-endpoints", {"url": receiver.url("/ok?off")}).json()
    alice.post(f"/api/webhook-endpoints/{disabled['id']}/disable")

    run = ended_run(alice)

    deliveries = list(WebhookDelivery.objects.filter(run=run).order_by("url"))
    assert [d.url for d in deliveries] == [receiver.url("/ok"), receiver.url("/ok?second")]
    for delivery in deliveries:
        attempt(delivery)
    first = next(r for r in receiver.wait_for(2) if r.headers["webhook-id"] == deliveries[0].message_id)
    assert verify(mine["secret"], first)["data"]["id"] == str(run.id)
    with pytest.raises(WebhookVerificationError):
        verify(alice.webhook_secret, first)  # an endpoint signs with its own secret


def test_a_rotated_secret_keeps_the_old_one_signing_until_its_grace_ends(
    alice: Caller, receiver: Receiver, nudges: list[Any]
) -> None:
    old = alice.post("/api/webhook-endpoints", {"url": receiver.url("/ok")}).json()
    rotated = alice.post(f"/api/webhook-endpoints/{old['id']}/rotate-secret").json()
    assert rotated["secret"] != old["secret"] and rotated["previous_secret_expires_at"]

    attempt(WebhookDelivery.objects.get(run=ended_run(alice)))
    (during,) = receiver.wait_for(1)
    assert verify(old["secret"], during) and verify(rotated["secret"], during)
    assert len(during.headers["webhook-signature"].split()) == 2

    WebhookEndpoint.objects.filter(id=old["id"]).update(previous_secret_expires_at=timezone.now())
    attempt(WebhookDelivery.objects.get(run=ended_run(alice)))
    after = receiver.wait_for(2)[1]
    assert verify(rotated["secret"], after)
    with pytest.raises(WebhookVerificationError):
        verify(old["secret"], after)


# --- when it does not arrive ---------------------------------------------------------------


def test_a_failing_receiver_is_retried_on_the_schedule_then_the_delivery_fails(
    alice: Caller, receiver: Receiver, nudges: list[Any]
) -> None:
    delivery = WebhookDelivery.objects.get(run=ended_run(alice, webhook_url=receiver.url("/fail")))

    first = attempt(delivery)
    delivery.refresh_from_db()
    assert delivery.next_attempt_at is not None
    wait = (delivery.next_attempt_at - timezone.now()).total_seconds()
    assert first.status_code == 500 and first.error == "http_500" and len(first.excerpt) <= 200
    assert 4.0 <= wait <= 5.6 and delivery.status == "pending"  # 5 s ± 10 %
    assert nudges[-1][0] == delivery.id and 4.0 <= nudges[-1][1] <= 5.6
    assert services.delivery_attempt(delivery_id=str(delivery.id)) is None  # not due yet: nothing sent
    for _ in range(2):
        make_due(delivery)
        attempt(delivery)

    delivery.refresh_from_db()
    assert delivery.status == "failed" and delivery.attempts == 3 and delivery.next_attempt_at is None
    assert len(receiver.on("/fail")) == 3
    assert [a.number for a in delivery.attempt_rows.all()] == [1, 2, 3]
    assert "Traceback" not in str(alice.get(f"/api/runs/{delivery.run_id}/webhook-deliveries").json())


def test_a_receiver_that_recovers_gets_the_same_event(alice: Caller, receiver: Receiver, nudges: list[Any]) -> None:
    delivery = WebhookDelivery.objects.get(run=ended_run(alice, webhook_url=receiver.url("/flaky")))
    receiver.flaky_failures = 1

    attempt(delivery)
    make_due(delivery)
    attempt(delivery)

    first, second = receiver.wait_for(2)
    assert first.body == second.body and first.headers["webhook-id"] == second.headers["webhook-id"]
    assert first.headers["webhook-timestamp"] <= second.headers["webhook-timestamp"]
    delivery.refresh_from_db()
    assert delivery.status == "succeeded" and delivery.attempts == 2


def test_retry_after_on_429_sets_the_next_attempt(alice: Caller, receiver: Receiver, nudges: list[Any]) -> None:
    delivery = WebhookDelivery.objects.get(run=ended_run(alice, webhook_url=receiver.url("/busy")))

    attempt(delivery)

    delivery.refresh_from_db()
    assert delivery.next_attempt_at is not None
    assert 6.0 <= (delivery.next_attempt_at - timezone.now()).total_seconds() <= 7.1
    assert delivery.last_status_code == 429


def test_410_disables_the_endpoint_and_stops(alice: Caller, receiver: Receiver, nudges: list[Any]) -> None:
    endpoint = alice.post("/api/webhook-endpoints", {"url": receiver.url("/gone")}).json()
    delivery = WebhookDelivery.objects.get(run=ended_run(alice))
    sent = len(nudges)

    attempt(delivery)

    delivery.refresh_from_db()
    assert delivery.status == "failed" and delivery.last_status_code == 410
    assert len(nudges) == sent  # nothing more is scheduled
    shown = alice.get(f"/api/webhook-endpoints/{endpoint['id']}").json()
    assert shown["disabled"] and shown["disabled_reason"] == "gone"
    assert not WebhookDelivery.objects.filter(run=ended_run(alice)).exists()


def test_a_redirect_is_not_followed(alice: Caller, receiver: Receiver, nudges: list[Any]) -> None:
    delivery = WebhookDelivery.objects.get(run=ended_run(alice, webhook_url=receiver.url("/redirect")))

    made = attempt(delivery)

    assert made.status_code == 302 and made.error == "http_302"
    assert receiver.on("/ok") == []


def test_a_receiver_that_does_not_answer_is_given_up_on_at_the_timeout(
    alice: Caller, receiver: Receiver, nudges: list[Any], settings: Any
) -> None:
    settings.WEBHOOK = {**settings.WEBHOOK, "TIMEOUT_S": 0.5}
    delivery = WebhookDelivery.objects.get(run=ended_run(alice, webhook_url=receiver.url("/slow")))

    made = attempt(delivery)

    assert made.error == "timeout" and made.status_code is None and made.duration_ms < 2_000


def test_a_name_that_rebinds_to_an_internal_address_is_never_connected_to(
    alice: Caller, receiver: Receiver, nudges: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    answers = iter([["93.184.216.34"], ["10.0.0.7"]])
    connected: list[str] = []

    def never(*args: Any, **kwargs: Any) -> Any:
        connected.append("tried")
        raise AssertionError("connected")

    monkeypatch.setattr(targets, "system_resolver", lambda host, port: next(answers))
    monkeypatch.setattr("httpx.Client.stream", never)

    delivery = WebhookDelivery.objects.get(run=ended_run(alice, webhook_url="https://hooks.rebind.example/in"))
    made = attempt(delivery)

    assert made.error == "target_forbidden" and connected == []
    delivery.refresh_from_db()
    assert delivery.status == "failed"


# --- the schedule's bookkeeping --------------------------------------------------------------


def test_two_messages_for_one_delivery_send_one_attempt(alice: Caller, receiver: Receiver, nudges: list[Any]) -> None:
    delivery = WebhookDelivery.objects.get(run=ended_run(alice, webhook_url=receiver.url("/slow")))
    receiver.slow_s = 0.5
    results: list[Any] = []

    def deliver() -> None:
        from django.db import connection

        results.append(services.delivery_attempt(delivery_id=str(delivery.id)))
        connection.close()

    threads = [threading.Thread(target=deliver) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len([r for r in results if r is not None]) == 1
    assert len(receiver.on("/slow")) == 1


def test_redelivery_sends_the_same_event_on_a_fresh_schedule(
    alice: Caller, receiver: Receiver, nudges: list[Any]
) -> None:
    delivery = WebhookDelivery.objects.get(run=ended_run(alice, webhook_url=receiver.url("/fail")))
    for _ in range(3):
        make_due(delivery)
        attempt(delivery)
    delivery.refresh_from_db()
    assert delivery.status == "failed"

    response = alice.post(f"/api/webhook-deliveries/{delivery.id}/redeliver")
    assert response.status_code == 202 and response.json()["status"] == "pending"
    attempt(delivery)

    delivery.refresh_from_db()
    assert delivery.status == "pending" and delivery.attempts == 4  # a retry is due, not a failure
    assert {r.headers["webhook-id"] for r in receiver.on("/fail")} == {delivery.message_id}


def test_the_sweep_resends_a_due_delivery_whose_message_was_lost(
    alice: Caller, receiver: Receiver, nudges: list[Any]
) -> None:
    delivery = WebhookDelivery.objects.get(run=ended_run(alice, webhook_url=receiver.url("/ok")))
    nudges.clear()
    assert services.deliveries_sweep() == 0  # just due: its message may still be on its way
    WebhookDelivery.objects.filter(id=delivery.id).update(next_attempt_at=timezone.now() - timedelta(minutes=5))

    assert services.deliveries_sweep() == 1
    assert nudges == [(delivery.id, 0.0)]


def test_a_secret_that_cannot_be_unsealed_fails_the_delivery_without_sending(
    alice: Caller, receiver: Receiver, nudges: list[Any], settings: Any
) -> None:
    delivery = WebhookDelivery.objects.get(run=ended_run(alice, webhook_url=receiver.url("/ok")))
    settings.WEBHOOK = {**settings.WEBHOOK, "SECRETS_KEY": "a different key"}

    made = attempt(delivery)

    assert made.error == "secret_unreadable" and receiver.received == []


def test_the_console_shows_a_runs_deliveries_and_redelivers_through_the_service(
    alice: Caller, receiver: Receiver, nudges: list[Any]
) -> None:
    from django.contrib.auth import get_user_model
    from django.test import Client

    run = ended_run(alice, webhook_url=receiver.url("/fail"))
    delivery = WebhookDelivery.objects.get(run=run)
    attempt(delivery)
    WebhookDelivery.objects.filter(id=delivery.id).update(status=WebhookDelivery.Status.FAILED)
    console = Client()
    console.force_login(get_user_model().objects.create_superuser("hooks-admin", "h@example.com", "pw-hooks-1"))
    page = console.get(f"/admin/traces/run/{run.id}/change/").content.decode()
    assert "webhook attempt 1" in page and f'value="{delivery.id}"' in page
    nudges.clear()

    answer = console.post(f"/admin/traces/run/{run.id}/change/", {"redeliver": str(delivery.id)}, follow=True)

    assert answer.status_code == 200 and b"scheduled for delivery again" in answer.content
    assert WebhookDelivery.objects.get(id=delivery.id).status == WebhookDelivery.Status.PENDING
    assert [d for d, _ in nudges] == [delivery.id]
    other = console.post(f"/admin/traces/run/{run.id}/change/", {"redeliver": str(uuid.uuid4())}, follow=True)
    assert b"No such delivery" in other.content
