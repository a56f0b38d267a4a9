"""How runs and sessions look on the wire. One place, shared by the API and (later) webhooks."""

from __future__ import annotations

from typing import Any

from django.urls import reverse

from traces.models import ChatSession, Run


def run_links(run: Run) -> dict[str, str]:
    rid = str(run.id)
    return {
        "self": reverse("run-detail", args=[rid]),
        "events": reverse("run-events", args=[rid]),
        "cancel": reverse("run-cancel", args=[rid]),
        "trace": reverse("run-trace", args=[rid]),
    }


def run_resource(run: Run) -> dict[str, Any]:
    """The public run: published content only once it is terminal, never anything else."""
    failure = {"code": run.failure_code, "message": run.failure_message} if run.failure_code else None
    return {
        "id": str(run.id),
        "session_id": str(run.session_id),
        "status": run.status,
        "intent": run.intent or None,
        "outcome": run.outcome or None,
        "question": run.question,
        "content": run.content if run.is_terminal else None,
        "fallback_reason": run.fallback_reason or None,
        "failure": failure,
        "created_at": run.created_at,
        "started_at": run.started_at,
        "finished_at": run.finished_at,
        "duration_ms": run.duration_ms,
        "usage": {
            "input_tokens": run.input_tokens,
            "output_tokens": run.output_tokens,
            "model_calls": run.model_calls,
            "model_retries": run.model_retries,
            "tool_calls": run.tool_calls,
        },
        "links": run_links(run),
    }


def session_resource(session: ChatSession) -> dict[str, Any]:
    return {
        "id": str(session.id),
        "title": session.title,
        "created_at": session.created_at,
        "updated_at": session.updated_at,
        "links": {"runs": reverse("session-runs", args=[str(session.id)])},
    }
