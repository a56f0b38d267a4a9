"""Sessions, runs and their traces.

A run's row is the truth about it: status, outcome, what was published, usage and timings.
The trace tables (steps, tool invocations, timeline) hold metadata only: never prompts, model
text, tool arguments or results. The reasoning audit is the one restricted exception.
"""

from __future__ import annotations

import enum
import uuid

from django.conf import settings
from django.db import models

# The run's states are the harness's own: one definition, which the columns' choices follow.
from harness.context import Outcome as Outcome
from harness.context import RunStatus as RunStatus
from harness.routing import Intent as Intent


def choices(values: type[enum.StrEnum]) -> list[tuple[str, str]]:
    """A harness enum as model field choices, labelled as Django's ``TextChoices`` would be."""
    return [(member.value, member.name.replace("_", " ").title()) for member in values]


ACTIVE_STATUSES = (RunStatus.QUEUED, RunStatus.RUNNING)
TERMINAL_STATUSES = (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED)


class ChatSession(models.Model):
    """A conversation: its runs, and nothing else (no message history is kept)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="chat_sessions")
    title = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ("-created_at",)
        indexes = [models.Index(fields=("owner", "-created_at"), name="session_owner_recent")]

    def __str__(self) -> str:
        return self.title or str(self.id)


class Run(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    session = models.ForeignKey(ChatSession, on_delete=models.CASCADE, related_name="runs")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="runs")
    question = models.TextField()
    status = models.CharField(max_length=16, choices=choices(RunStatus), default=RunStatus.QUEUED)
    intent = models.CharField(max_length=32, choices=choices(Intent), blank=True)
    outcome = models.CharField(max_length=16, choices=choices(Outcome), blank=True)
    fallback_reason = models.CharField(max_length=64, blank=True)
    failure_code = models.CharField(max_length=64, blank=True)
    failure_message = models.CharField(max_length=300, blank=True)
    #: what was released (content_type + payload); only ever a verified report or a fixed text
    content = models.JSONField(null=True, blank=True)
    #: the bounded PublishedResult a later run in the session may read as its PreviousTurn
    published_result = models.JSONField(null=True, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    #: where ``run.completed`` goes (else to the API key's endpoints); checked when given
    webhook_url = models.CharField(max_length=2000, blank=True)
    #: the API key that submitted the run (``chat.ApiKey``; no foreign key: traces does not
    #: depend on the chat app), for its webhook endpoints and its per-key limits
    api_key_id = models.PositiveIntegerField(null=True, blank=True)
    idempotency_key = models.CharField(max_length=200, null=True, blank=True)
    #: a fingerprint of the request that carried the key: the same key with another body is refused
    request_digest = models.CharField(max_length=64, blank=True)
    model_calls = models.PositiveIntegerField(default=0)
    #: provider attempts beyond the first (429s, timeouts, unreadable answers that were retried)
    model_retries = models.PositiveIntegerField(default=0)
    tool_calls = models.PositiveIntegerField(default=0)
    input_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    #: queued: when its task was last published; ``publishes`` counts how often (re-published
    #: by the sweeper when the broker lost the message)
    published_at = models.DateTimeField(null=True, blank=True)
    publishes = models.PositiveSmallIntegerField(default=0)
    #: running: when its worker last said it is alive (a silent run's worker is lost)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    duration_ms = models.FloatField(null=True, blank=True)
    model_ms = models.FloatField(null=True, blank=True)
    backend_ms = models.FloatField(null=True, blank=True)

    class Meta:
        ordering = ("-created_at",)
        constraints = [
            models.UniqueConstraint(fields=("owner", "idempotency_key"), name="run_owner_idempotency_key"),
        ]
        indexes = [
            models.Index(fields=("session", "status"), name="run_session_status"),
            models.Index(fields=("session", "intent", "outcome", "-created_at"), name="run_previous_turn"),
            models.Index(fields=("owner", "-created_at"), name="run_owner_recent"),
            models.Index(fields=("-created_at",), name="run_recent"),  # the console's run list
            models.Index(fields=("status", "created_at"), name="run_status_age"),
            models.Index(fields=("api_key_id", "status"), name="run_key_status"),
        ]

    def __str__(self) -> str:
        return str(self.id)

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL_STATUSES


class AgentStep(models.Model):
    """One model call of a run: metadata only."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="steps")
    index = models.PositiveIntegerField()
    purpose = models.CharField(max_length=32)
    role = models.CharField(max_length=16)
    message_count = models.PositiveIntegerField()
    message_roles = models.JSONField(default=list)
    has_text = models.BooleanField(default=False)
    tool_call_names = models.JSONField(default=list)
    input_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    duration_ms = models.FloatField()
    #: when the call began, in ms since the harness started the run (null on older rows)
    started_ms = models.FloatField(null=True, blank=True)
    error_code = models.CharField(max_length=64, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ("run", "index")
        constraints = [models.UniqueConstraint(fields=("run", "index"), name="step_run_index")]


class ToolInvocation(models.Model):
    """One tool call of a run: metadata only (the full invocation lives in Redis, with a TTL)."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="tool_invocations")
    tool_call_id = models.CharField(max_length=64)
    tool = models.CharField(max_length=64)
    status = models.CharField(max_length=32)
    evidence_status = models.CharField(max_length=16, blank=True)
    error_code = models.CharField(max_length=64, blank=True)
    duration_ms = models.FloatField()
    request_bytes = models.PositiveIntegerField(default=0)
    result_bytes = models.PositiveIntegerField(default=0)
    #: the step whose reply asked for the call; when it began, in ms since the run started
    step_index = models.PositiveIntegerField(null=True, blank=True)
    started_ms = models.FloatField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ("run", "id")
        constraints = [models.UniqueConstraint(fields=("run", "tool_call_id"), name="invocation_run_call")]


class TraceEvent(models.Model):
    """The append-only timeline of a run, with bounded safe details."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="timeline")
    category = models.CharField(max_length=16)
    name = models.CharField(max_length=64)
    at = models.DateTimeField()
    details = models.JSONField(default=dict)

    class Meta:
        ordering = ("run", "at", "id")
        indexes = [models.Index(fields=("run", "at"), name="trace_run_at")]


class ReasoningAudit(models.Model):
    """Restricted: what the provider reasoned and said at each step. Staff reads only."""

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="reasoning")
    step_index = models.PositiveIntegerField()
    purpose = models.CharField(max_length=32)
    reasoning = models.TextField(null=True, blank=True)
    assistant_text = models.TextField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ("run", "step_index")


class Feedback(models.Model):
    class Rating(models.TextChoices):
        UP = "up"
        DOWN = "down"

    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="feedback")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="feedback")
    rating = models.CharField(max_length=8, choices=Rating.choices)
    comment = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=("run", "owner"), name="feedback_run_owner")]
