"""The harness's RunStore and audit sinks, on the Django ORM.

Every write that changes a run's state is a conditional UPDATE, so two writers can never
both win: ``queued → running`` is claimed once, and exactly one terminal state is written.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from typing import Any

from django.db import IntegrityError

from harness.ports import (
    ReasoningRecord,
    RoutingContext,
    RunFinish,
    RunStart,
    StepRecord,
    TimelineEvent,
    ToolAuditRecord,
)
from traces.models import (
    AgentStep,
    ChatSession,
    Intent,
    Outcome,
    ReasoningAudit,
    Run,
    RunStatus,
    ToolInvocation,
    TraceEvent,
)

logger = logging.getLogger(__name__)

#: The largest reasoning text kept per step; the audit is for reading, not for archiving.
MAX_REASONING_CHARS = 50_000


class DjangoRunStore:
    def resolve_session(self, *, owner: str, session_id: str | None, title: str) -> str:
        if session_id is not None:
            if not ChatSession.objects.filter(id=uuid.UUID(session_id), owner_id=int(owner)).exists():
                raise LookupError("no such session for this owner")
            return session_id
        return str(ChatSession.objects.create(owner_id=int(owner), title=title[:200]).id)

    def routing_context(self, *, session_id: str, exclude_run_id: str) -> RoutingContext:
        last = (
            Run.objects.filter(session_id=uuid.UUID(session_id))
            .exclude(id=exclude_run_id)
            .exclude(intent="")
            .order_by("-created_at", "-id")
            .values_list("intent", "question")
            .first()
        )
        return RoutingContext(last[0], last[1]) if last else RoutingContext()

    def latest_published_diagnosis(self, *, session_id: str, exclude_run_id: str) -> Mapping[str, Any] | None:
        stored: Mapping[str, Any] | None = (
            Run.objects.filter(
                session_id=uuid.UUID(session_id),
                intent=Intent.DIAGNOSIS,
                outcome=Outcome.SUCCESS,
                published_result__isnull=False,
            )
            .exclude(id=exclude_run_id)
            .order_by("-created_at", "-id")
            .values_list("published_result", flat=True)
            .first()
        )
        return stored

    def start_run(self, start: RunStart) -> bool:
        claimed = Run.objects.filter(id=start.run_id, status=RunStatus.QUEUED).update(
            status=RunStatus.RUNNING, started_at=start.started_at
        )
        if claimed:
            return True
        if Run.objects.filter(id=start.run_id).exists():
            return False
        # A run nobody queued (the harness used without the API): create it already running.
        try:
            Run.objects.create(
                id=start.run_id,
                session_id=start.session_id,
                owner_id=start.owner,
                question=start.question,
                status=RunStatus.RUNNING,
                started_at=start.started_at,
            )
        except IntegrityError:
            return False
        return True

    def record_intent(self, *, run_id: str, intent: str) -> None:
        Run.objects.filter(id=run_id).update(intent=intent)

    def finish_run(self, finish: RunFinish) -> bool:
        result = finish.result
        usage = result.usage
        return bool(
            Run.objects.filter(id=finish.run_id, status=RunStatus.RUNNING).update(
                status=result.status.value,
                outcome=result.outcome.value,
                intent=result.intent or "",
                content=result.content.to_dict() if result.content else None,
                published_result=dict(result.published_result) if result.published_result else None,
                fallback_reason=result.fallback_reason or "",
                failure_code=result.failure.code if result.failure else "",
                failure_message=result.failure.message[:300] if result.failure else "",
                model_calls=usage.model_calls,
                tool_calls=usage.tool_calls,
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                finished_at=finish.finished_at,
                duration_ms=result.duration_ms,
                model_ms=result.model_ms,
                backend_ms=result.backend_ms,
            )
        )


class DjangoAuditSinks:
    """Step, tool, timeline and reasoning records as rows. The harness calls these fail-open."""

    def record_step(self, record: StepRecord) -> None:
        AgentStep.objects.create(
            run_id=record.run_id,
            index=record.index,
            purpose=record.purpose,
            role=record.role,
            message_count=record.message_count,
            message_roles=list(record.message_roles),
            has_text=record.has_text,
            tool_call_names=list(record.tool_call_names),
            input_tokens=record.input_tokens,
            output_tokens=record.output_tokens,
            duration_ms=record.duration_ms,
            error_code=record.error_code or "",
        )

    def record_tool(self, record: ToolAuditRecord) -> None:
        ToolInvocation.objects.create(
            run_id=record.run_id,
            tool_call_id=record.tool_call_id,
            tool=record.tool,
            status=record.status.value,
            evidence_status=record.evidence_status or "",
            error_code=record.error_code or "",
            duration_ms=record.duration_ms,
            request_bytes=record.request_bytes,
            result_bytes=record.result_bytes,
        )

    def append(self, event: TimelineEvent) -> None:
        TraceEvent.objects.create(
            run_id=event.run_id,
            category=event.category.value,
            name=event.name,
            at=event.at,
            details={k: v for k, v in event.details.items() if v is not None},
        )

    def record_reasoning(self, record: ReasoningRecord) -> None:
        ReasoningAudit.objects.create(
            run_id=record.run_id,
            step_index=record.step_index,
            purpose=record.purpose,
            reasoning=record.reasoning[:MAX_REASONING_CHARS] if record.reasoning else None,
            assistant_text=record.assistant_text[:MAX_REASONING_CHARS] if record.assistant_text else None,
        )
