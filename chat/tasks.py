"""Celery tasks: thin, idempotent, taking primitive ids."""

from __future__ import annotations

from celery import shared_task
from django.conf import settings

from chat import services
from chat.webhooks import services as webhooks


@shared_task(  # type: ignore[untyped-decorator]
    name="chat.run_chat",
    acks_late=True,
    reject_on_worker_lost=True,
    ignore_result=True,
    # The harness stops the run at its deadline; these limits only catch a stuck worker.
    soft_time_limit=settings.RUN_DEADLINE_S + 30,
    time_limit=settings.RUN_DEADLINE_S + 60,
)
def run_chat(run_id: str) -> None:
    """Execute a queued run. A redelivered or duplicated message for a run that is running or
    finished does nothing (the claim is a conditional queued → running update)."""
    services.run_execute(run_id=run_id)


@shared_task(name="chat.noop", ignore_result=False)  # type: ignore[untyped-decorator]
def noop() -> None:
    """Does nothing: the benchmark's baseline for a broker round trip."""


@shared_task(name="chat.deliver_webhook", acks_late=True, ignore_result=True)  # type: ignore[untyped-decorator]
def deliver_webhook(delivery_id: str) -> None:
    """Attempt a webhook delivery if it is due and free; any other message for it does nothing."""
    webhooks.delivery_attempt(delivery_id=delivery_id)
