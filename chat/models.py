"""API keys, and the event rows behind each run's SSE stream."""

from __future__ import annotations

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
