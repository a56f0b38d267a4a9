"""Reads of the chat API. Every read is scoped: a user sees their own objects, staff see all."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from django.conf import settings
from django.db.models import QuerySet

from core.errors import NotFound
from traces.models import ChatSession, Run


def _visible(qs: QuerySet[Any], user: Any) -> QuerySet[Any]:
    return qs if user.is_staff else qs.filter(owner=user)


def run_get(*, user: Any, run_id: uuid.UUID) -> Run:
    run: Run | None = _visible(Run.objects.all(), user).filter(id=run_id).first()
    if run is None:
        raise NotFound("No such run.")
    return run


def session_list(*, user: Any) -> QuerySet[ChatSession]:
    return ChatSession.objects.filter(owner=user)


def session_get(*, user: Any, session_id: uuid.UUID) -> ChatSession:
    session: ChatSession | None = _visible(ChatSession.objects.all(), user).filter(id=session_id).first()
    if session is None:
        raise NotFound("No such session.")
    return session


def session_runs(*, session: ChatSession) -> QuerySet[Run]:
    return session.runs.all()


def run_trace(*, run: Run) -> dict[str, Any]:
    """A run's metadata-only trace: steps, tool invocations and timeline."""
    return {
        "steps": list(
            run.steps.order_by("index").values(
                "index",
                "purpose",
                "role",
                "message_count",
                "message_roles",
                "has_text",
                "tool_call_names",
                "input_tokens",
                "output_tokens",
                "duration_ms",
                "error_code",
                "created_at",
            )
        ),
        "tool_invocations": list(
            run.tool_invocations.order_by("id").values(
                "tool_call_id",
                "tool",
                "status",
                "evidence_status",
                "error_code",
                "duration_ms",
                "request_bytes",
                "result_bytes",
                "created_at",
            )
        ),
        "timeline": list(run.timeline.order_by("at", "id").values("category", "name", "at", "details")),
    }


def run_reasoning(*, run: Run) -> list[dict[str, Any]]:
    rows = run.reasoning.order_by("step_index").values(
        "step_index", "purpose", "reasoning", "assistant_text", "created_at"
    )
    return [dict(row) for row in rows]


def service_queues() -> tuple[str, ...]:
    """The Celery queues the service publishes to: the runs' (the default) and those routed to."""
    routed = [str(route["queue"]) for route in settings.CELERY_TASK_ROUTES.values() if "queue" in route]
    return tuple(dict.fromkeys([settings.CELERY_TASK_DEFAULT_QUEUE, *routed]))


def queue_depths(queues: Sequence[str] | None = None) -> dict[str, int]:
    """Messages waiting in each queue (the broker's list lengths, one round trip for all).
    Raises when the broker cannot be read."""
    from chat.redis_store import client

    names = list(queues if queues is not None else service_queues())
    pipe = client().pipeline(transaction=False)
    for name in names:
        pipe.llen(name)
    return {name: int(length) for name, length in zip(names, pipe.execute(), strict=True)}
