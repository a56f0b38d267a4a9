"""API keys, the event rows behind each run's SSE stream, and webhook endpoints and deliveries."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models

from traces.models import Run


class ApiKey(models.Model):
    """An API key, stored as its SHA-256: keys are random 256-bit secrets, so a fast
    cryptographic hash is as safe as a password hasher and costs microseconds per request."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=100, blank=True)
    prefix = models.CharField(max_length=16, help_text="The first characters, to recognise a key.")
    digest = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    #: sealed (``chat.webhooks.signing``): signs webhooks sent to a run's own ``webhook_url``
    webhook_secret = models.TextField(blank=True)

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.user})"


class RunEvent(models.Model):
    """One SSE event of a run, numbered from 1: the storage that replays a stream from its start."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="events")
    seq = models.PositiveIntegerField()
    event_type = models.CharField(max_length=32)
    #: the event's JSON text, exactly as it is sent
    data = models.TextField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ("run", "seq")
        constraints = [models.UniqueConstraint(fields=("run", "seq"), name="event_run_seq")]


class WebhookEndpoint(models.Model):
    """A URL that receives ``run.completed`` for every run of its API key that names none."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="webhook_endpoints")
    api_key = models.ForeignKey(ApiKey, on_delete=models.CASCADE, related_name="webhook_endpoints")
    url = models.CharField(max_length=2000)
    description = models.CharField(max_length=200, blank=True)
    #: sealed (``chat.webhooks.signing``); the previous one signs too until it expires
    secret = models.TextField()
    previous_secret = models.TextField(blank=True)
    previous_secret_expires_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    disabled_at = models.DateTimeField(null=True, blank=True)
    #: "disabled" (by its owner) or "gone" (the receiver answered 410)
    disabled_reason = models.CharField(max_length=32, blank=True)

    class Meta:
        ordering = ("-created_at", "-id")
        indexes = [models.Index(fields=("api_key", "disabled_at"), name="endpoint_key_active")]


class WebhookDelivery(models.Model):
    """One event for one receiver: the same body and ``webhook-id`` on every attempt."""

    class Status(models.TextChoices):
        PENDING = "pending"
        SUCCEEDED = "succeeded"
        FAILED = "failed"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="webhook_deliveries")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="webhook_deliveries")
    #: the endpoint, or none for the run's own ``webhook_url`` (signed with its key's secret)
    endpoint = models.ForeignKey(WebhookEndpoint, null=True, blank=True, on_delete=models.SET_NULL)
    api_key = models.ForeignKey(ApiKey, null=True, blank=True, on_delete=models.SET_NULL)
    #: which receiver of the run this is: the endpoint's id, or "request"
    target = models.CharField(max_length=64)
    url = models.CharField(max_length=2000)
    event_type = models.CharField(max_length=32, default="run.completed")
    #: the JSON body, exactly as sent on every attempt
    body = models.TextField()
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    #: attempts made before the schedule last (re)started: a redelivery starts it afresh
    schedule_offset = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    #: an attempt in progress holds the delivery until then
    leased_until = models.DateTimeField(null=True, blank=True)
    last_status_code = models.PositiveIntegerField(null=True, blank=True)
    last_error = models.CharField(max_length=64, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ("created_at", "id")
        constraints = [models.UniqueConstraint(fields=("run", "target"), name="delivery_run_target")]
        indexes = [models.Index(fields=("status", "next_attempt_at"), name="delivery_due")]

    @property
    def message_id(self) -> str:
        return f"msg_{self.id.hex}"


class WebhookAttempt(models.Model):
    """One HTTP attempt of a delivery: what came back, never the response body beyond an excerpt."""

    delivery = models.ForeignKey(WebhookDelivery, on_delete=models.CASCADE, related_name="attempt_rows")
    number = models.PositiveIntegerField()
    started_at = models.DateTimeField()
    duration_ms = models.FloatField()
    status_code = models.PositiveIntegerField(null=True, blank=True)
    #: "" on success; else the kind of failure (http_500, timeout, connect_error, target_forbidden…)
    error = models.CharField(max_length=64, blank=True)
    #: the first characters of the response, printable ASCII only
    excerpt = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ("delivery", "number")
        constraints = [models.UniqueConstraint(fields=("delivery", "number"), name="attempt_delivery_number")]
