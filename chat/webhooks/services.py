"""Webhook deliveries and endpoints: the business writes.

**When a run ends.** ``deliveries_for_run`` is one of the run lifecycle's post-terminal hooks
(``chat.wiring.lifecycle``), so it runs once per terminal transition, after commit, whatever
ended the run. It creates one delivery per receiver — the run's own ``webhook_url`` (signed with
its API key's secret), else every enabled endpoint of that key — whose body is the event
``{"type": "run.completed", "timestamp", "data": <the run as GET /api/runs/{id} shows it>}``,
fixed once, and asks a worker to attempt it at once. A delivery's unique ``(run, target)``
makes a repeated hook a no-op.

**Attempts.** The database holds each delivery's schedule (``next_attempt_at``) and a lease;
a Celery message only says "look at this delivery now". ``delivery_attempt`` claims the
delivery with a conditional UPDATE (so two messages never send one attempt twice), makes the
attempt, records it and, unless it succeeded or must stop, sets the next time on the Standard
Webhooks schedule (with jitter) or the receiver's ``Retry-After``. A message may wait only so
long in Redis (its visibility timeout), so a longer wait is made of hops; and
``deliveries_sweep`` sends whatever is due and nobody holds, should a message ever be lost.
"""

from __future__ import annotations

import logging
import random
import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import F, Q
from django.utils import timezone
from rest_framework.renderers import JSONRenderer

from chat import metrics
from chat.models import WebhookAttempt, WebhookDelivery, WebhookEndpoint
from chat.representations import run_resource
from chat.webhooks import delivery as http
from chat.webhooks import signing
from chat.webhooks.targets import TargetPolicy, check
from core.errors import NotFound
from traces.lifecycle import RunEnded
from traces.models import Run

logger = logging.getLogger(__name__)

EVENT = "run.completed"
REQUEST_TARGET = "request"
#: how long past its time a delivery nobody holds is picked up by the sweep
SWEEP_GRACE = timedelta(seconds=30)


def _conf() -> dict[str, Any]:
    conf: dict[str, Any] = settings.WEBHOOK
    return conf


def target_policy() -> TargetPolicy:
    w = _conf()
    return TargetPolicy.from_settings(w["ALLOWED_PORTS"], w["ALLOWED_CIDRS"])


def webhook_url_check(url: str) -> str:
    """``url`` if a webhook may be sent there now, else 400 ``webhook_url_forbidden``."""
    return check(url, target_policy()).url


# --- when a run ends ---------------------------------------------------------------------


def _webhook_targets_of(run_id: uuid.UUID) -> tuple[str, int | None, bool] | None:
    """The run's webhook_url, its API key and whether that key has an enabled endpoint: in one
    plain query, since it runs after every run (the ORM's compiler would cost more than it)."""
    quote = connection.ops.quote_name
    runs, endpoints = quote(Run._meta.db_table), quote(WebhookEndpoint._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT r.webhook_url, r.api_key_id, EXISTS (SELECT 1 FROM {endpoints} e "  # noqa: S608 - model tables
            f"WHERE e.api_key_id = r.api_key_id AND e.disabled_at IS NULL) FROM {runs} r WHERE r.id = %s",
            [run_id.hex],
        )
        row = cursor.fetchone()
    return (row[0], row[1], bool(row[2])) if row else None


def deliveries_for_run(ended: RunEnded) -> list[WebhookDelivery]:
    """The lifecycle hook: create the run's deliveries and send their first attempts."""
    row = _webhook_targets_of(ended.run_id)
    if row is None or not (row[0] or (row[1] and row[2])):
        return []  # the common case: one small query, nothing to send
    run = Run.objects.get(id=ended.run_id)
    # Rendered as the API renders the run, so that ``data`` is what GET /api/runs/{id} returns.
    body = JSONRenderer().render({"type": EVENT, "timestamp": timezone.now(), "data": run_resource(run)}).decode()
    now = timezone.now()
    common = {"run": run, "owner_id": run.owner_id, "body": body, "next_attempt_at": now, "event_type": EVENT}
    if run.webhook_url:
        wanted = [WebhookDelivery(target=REQUEST_TARGET, url=run.webhook_url, api_key_id=run.api_key_id, **common)]
    else:
        wanted = [
            WebhookDelivery(target=str(e.id), url=e.url, endpoint=e, api_key_id=run.api_key_id, **common)
            for e in WebhookEndpoint.objects.filter(api_key_id=run.api_key_id, disabled_at__isnull=True)
        ]
    WebhookDelivery.objects.bulk_create(wanted, ignore_conflicts=True)  # a repeated hook adds nothing
    created = list(WebhookDelivery.objects.filter(id__in=[d.id for d in wanted]))
    for delivery in created:
        _nudge(delivery.id)
    return created


# --- attempts --------------------------------------------------------------------------------


def _nudge(delivery_id: uuid.UUID, *, countdown_s: float = 0.0) -> None:
    from chat.tasks import deliver_webhook

    try:
        deliver_webhook.apply_async(args=[str(delivery_id)], countdown=countdown_s or None, retry=False)
    except Exception as exc:  # noqa: BLE001 - the sweep sends it once the broker is back
        logger.warning("webhook delivery %s: broker unavailable: %s", delivery_id, type(exc).__name__)


def _hop_s() -> float:
    """The longest a message may wait in the broker before it would be redelivered."""
    return max(1.0, settings.CELERY_VISIBILITY_TIMEOUT_S / 2)


def delivery_attempt(*, delivery_id: str) -> WebhookAttempt | None:
    """Make the delivery's next attempt if it is due and nobody else holds it (the task's body)."""
    timeout_s = float(_conf()["TIMEOUT_S"])
    now = timezone.now()
    due = Q(next_attempt_at__isnull=True) | Q(next_attempt_at__lte=now)
    free = Q(leased_until__isnull=True) | Q(leased_until__lt=now)
    claimed = WebhookDelivery.objects.filter(due, free, id=delivery_id, status=WebhookDelivery.Status.PENDING).update(
        leased_until=now + timedelta(seconds=timeout_s * 3 + 30)
    )
    if not claimed:
        pending = (
            WebhookDelivery.objects.filter(id=delivery_id, status=WebhookDelivery.Status.PENDING)
            .values_list("next_attempt_at", flat=True)
            .first()
        )
        if pending is not None and pending > now:  # woken early by a hop: wait on
            _nudge(uuid.UUID(delivery_id), countdown_s=min((pending - now).total_seconds(), _hop_s()))
        return None
    delivery = WebhookDelivery.objects.select_related("endpoint", "api_key").get(id=delivery_id)
    number = delivery.attempts + 1
    started = timezone.now()
    try:
        keys = _signing_secrets(delivery, started)
    except signing.SecretUnreadable:
        result = http.AttemptResult(http.Verdict.FAILED, 0.0, error="secret_unreadable")
    else:
        if delivery.endpoint is not None and delivery.endpoint.disabled_at is not None:
            result = http.AttemptResult(http.Verdict.FAILED, 0.0, error="endpoint_disabled")
        else:
            result = http.attempt(
                url=delivery.url,
                body=delivery.body,
                headers=signing.headers(
                    message_id=delivery.message_id, timestamp=started, body=delivery.body, secrets_=keys
                ),
                policy=target_policy(),
                timeout_s=timeout_s,
                max_retry_after_s=float(_conf()["MAX_RETRY_AFTER_S"]),
            )
    return _record(delivery, number, started, result)


def _signing_secrets(delivery: WebhookDelivery, now: datetime) -> list[str]:
    endpoint = delivery.endpoint
    if endpoint is not None:
        sealed = [endpoint.secret]
        if (
            endpoint.previous_secret
            and endpoint.previous_secret_expires_at
            and endpoint.previous_secret_expires_at > now
        ):
            sealed.append(endpoint.previous_secret)
    elif delivery.api_key is not None and delivery.api_key.webhook_secret:
        sealed = [delivery.api_key.webhook_secret]
    else:
        raise signing.SecretUnreadable()
    return [signing.unseal(s) for s in sealed]


def _record(delivery: WebhookDelivery, number: int, started: datetime, result: http.AttemptResult) -> WebhookAttempt:
    metrics.webhook_attempted(result.verdict.value)
    row = WebhookAttempt.objects.create(
        delivery=delivery,
        number=number,
        started_at=started,
        duration_ms=round(result.duration_ms, 3),
        status_code=result.status_code,
        error=result.error,
        excerpt=result.excerpt,
    )
    now = timezone.now()
    fields: dict[str, Any] = {
        "attempts": number,
        "leased_until": None,
        "last_status_code": result.status_code,
        "last_error": result.error,
    }
    verdict = result.verdict
    delay = (
        _next_delay(number - delivery.schedule_offset, result.retry_after_s) if verdict is http.Verdict.RETRY else None
    )
    if verdict is http.Verdict.SUCCEEDED:
        fields |= {"status": WebhookDelivery.Status.SUCCEEDED, "finished_at": now, "next_attempt_at": None}
    elif delay is None:
        fields |= {"status": WebhookDelivery.Status.FAILED, "finished_at": now, "next_attempt_at": None}
    else:
        fields |= {"next_attempt_at": now + timedelta(seconds=delay)}
    WebhookDelivery.objects.filter(id=delivery.id).update(**fields)
    if verdict is http.Verdict.GONE and delivery.endpoint_id is not None:
        WebhookEndpoint.objects.filter(id=delivery.endpoint_id, disabled_at__isnull=True).update(
            disabled_at=now, disabled_reason="gone"
        )
    if delay is not None:
        _nudge(delivery.id, countdown_s=min(delay, _hop_s()))
    return row


def _next_delay(attempts_made: int, retry_after_s: float | None) -> float | None:
    """Seconds until the next attempt, or None when the schedule is used up."""
    schedule: Sequence[float] = _conf()["RETRY_SCHEDULE_S"]
    if attempts_made >= len(schedule):
        return None
    if retry_after_s is not None:
        return retry_after_s
    base = float(schedule[attempts_made])
    jitter = float(_conf()["RETRY_JITTER"])
    return base * (1 + random.uniform(-jitter, jitter)) if base > 0 else 0.0  # noqa: S311 - spreading, not secrecy


def deliveries_sweep(*, limit: int = 500) -> int:
    """Send every delivery that is past due and held by nobody (a lost message); how many."""
    now = timezone.now()
    due = WebhookDelivery.objects.filter(
        Q(leased_until__isnull=True) | Q(leased_until__lt=now),
        status=WebhookDelivery.Status.PENDING,
        next_attempt_at__lt=now - SWEEP_GRACE,
    ).values_list("id", flat=True)[:limit]
    ids = list(due)
    for delivery_id in ids:
        _nudge(delivery_id)
    return len(ids)


def delivery_redeliver(*, user: Any, delivery_id: uuid.UUID) -> WebhookDelivery:
    """Send the same event (same ``webhook-id``, same body) again, as a fresh schedule."""
    delivery = WebhookDelivery.objects.filter(id=delivery_id, owner=user).first()
    if delivery is None:
        raise NotFound("No such delivery.")
    WebhookDelivery.objects.filter(id=delivery.id).update(
        status=WebhookDelivery.Status.PENDING,
        next_attempt_at=timezone.now(),
        finished_at=None,
        leased_until=None,
        schedule_offset=F("attempts"),
    )
    if delivery.endpoint_id is not None:  # asked for by hand: the receiver is back
        WebhookEndpoint.objects.filter(id=delivery.endpoint_id, disabled_reason="gone").update(
            disabled_at=None, disabled_reason=""
        )
    _nudge(delivery.id)
    delivery.refresh_from_db()
    return delivery


# --- endpoints ------------------------------------------------------------------------------


def endpoint_create(*, user: Any, api_key_id: int, url: str, description: str = "") -> tuple[WebhookEndpoint, str]:
    """A default endpoint for the API key; its secret is returned here, once."""
    secret = signing.new_secret()
    endpoint = WebhookEndpoint.objects.create(
        owner=user,
        api_key_id=api_key_id,
        url=webhook_url_check(url),
        description=description,
        secret=signing.seal(secret),
    )
    return endpoint, secret


def endpoint_get(*, user: Any, endpoint_id: uuid.UUID) -> WebhookEndpoint:
    endpoint = WebhookEndpoint.objects.filter(id=endpoint_id, owner=user).first()
    if endpoint is None:
        raise NotFound("No such webhook endpoint.")
    return endpoint


def endpoint_rotate_secret(*, endpoint: WebhookEndpoint) -> tuple[WebhookEndpoint, str]:
    """A new secret; the current one keeps signing beside it for ``WEBHOOK_SECRET_GRACE_S``."""
    secret = signing.new_secret()
    endpoint.previous_secret = endpoint.secret
    endpoint.previous_secret_expires_at = timezone.now() + timedelta(seconds=_conf()["SECRET_GRACE_S"])
    endpoint.secret = signing.seal(secret)
    endpoint.save(update_fields=["secret", "previous_secret", "previous_secret_expires_at"])
    return endpoint, secret


def endpoint_disable(*, endpoint: WebhookEndpoint) -> WebhookEndpoint:
    if endpoint.disabled_at is None:
        endpoint.disabled_at = timezone.now()
        endpoint.disabled_reason = "disabled"
        endpoint.save(update_fields=["disabled_at", "disabled_reason"])
    return endpoint
