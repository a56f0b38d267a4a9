"""The harness's RunStore and audit sinks, on the Django ORM.

The store reads a session's memory itself and hands every write to the run's lifecycle
(``traces.lifecycle``), the one place a run changes state.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from django.db import InterfaceError, OperationalError, connection
from django.utils import timezone

from harness.ports import (
    ReasoningRecord,
    RoutingContext,
    RunFinish,
    RunStart,
    StepRecord,
    TimelineEvent,
    ToolAuditRecord,
)
from traces.lifecycle import RunLifecycle
from traces.models import (
    AgentStep,
    Intent,
    Outcome,
    ReasoningAudit,
    ToolInvocation,
    TraceEvent,
)
from traces.sql import Row, insert_rows, run_table, uuid_hex

logger = logging.getLogger(__name__)

#: The largest reasoning text kept per step; the audit is for reading, not for archiving.
MAX_REASONING_CHARS = 50_000


class DjangoRunStore:
    """The harness's RunStore.

    Its queries run once or more per run on the hot path, so they are written as plain SQL
    (with the backend's own value adapters) instead of being compiled by the ORM every time.
    """

    #: how many of a session's latest runs one query reads for both pieces of memory
    RECENT_RUNS = 20

    #: how long rows read for routing_context wait for latest_published_diagnosis
    MEMO_S = 2.0

    def __init__(self, lifecycle: RunLifecycle | None = None, audit: DjangoAuditSinks | None = None) -> None:
        #: every write goes through the run's lifecycle; alone, the store streams nothing
        self.lifecycle = lifecycle or RunLifecycle()
        #: the run's buffered audit rows, written before its terminal state so that a client
        #: who sees the run finished reads its whole trace
        self.audit = audit
        self._recent: dict[tuple[str, str], tuple[float, list[tuple[Any, ...]]]] = {}

    def resolve_session(self, *, owner: str, session_id: str | None, title: str) -> str:
        return self.lifecycle.session_for(owner=owner, session_id=session_id, title=title)

    def _recent_runs(self, session_id: str, exclude_run_id: str, *, remember: bool) -> list[tuple[Any, ...]]:
        """The session's latest routed runs, read once for routing_context and then
        latest_published_diagnosis (the harness asks for both, in that order, one after the
        other). Only routing_context leaves its rows behind, and only for ``MEMO_S``."""
        key = (session_id, exclude_run_id)
        memo = self._recent.pop(key, None)
        if memo is not None and time.monotonic() - memo[0] <= self.MEMO_S:
            rows = memo[1]
        else:
            rows = self._query_recent(session_id, exclude_run_id)
        if remember:
            if len(self._recent) > 64:
                self._recent.clear()
            self._recent[key] = (time.monotonic(), rows)
        return rows

    def _query_recent(self, session_id: str, exclude_run_id: str) -> list[tuple[Any, ...]]:
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT intent, question, outcome, published_result FROM {run_table()} "  # noqa: S608 - the model's table
                "WHERE session_id = %s AND id <> %s AND intent <> '' ORDER BY created_at DESC, id DESC LIMIT %s",
                [uuid_hex(session_id), uuid_hex(exclude_run_id), self.RECENT_RUNS],
            )
            return [tuple(row) for row in cursor.fetchall()]

    def routing_context(self, *, session_id: str, exclude_run_id: str) -> RoutingContext:
        rows = self._recent_runs(session_id, exclude_run_id, remember=True)
        return RoutingContext(rows[0][0], rows[0][1]) if rows else RoutingContext()

    def latest_published_diagnosis(self, *, session_id: str, exclude_run_id: str) -> Mapping[str, Any] | None:
        rows = self._recent_runs(session_id, exclude_run_id, remember=False)
        published = next(
            (r[3] for r in rows if r[0] == Intent.DIAGNOSIS and r[2] == Outcome.SUCCESS and r[3] is not None), None
        )
        if published is None and len(rows) == self.RECENT_RUNS:
            with connection.cursor() as cursor:  # the last success is older than the recent runs
                cursor.execute(
                    f"SELECT published_result FROM {run_table()} WHERE session_id = %s AND id <> %s AND intent = %s "  # noqa: S608
                    "AND outcome = %s AND published_result IS NOT NULL ORDER BY created_at DESC, id DESC LIMIT 1",
                    [uuid_hex(session_id), uuid_hex(exclude_run_id), Intent.DIAGNOSIS.value, Outcome.SUCCESS.value],
                )
                row = cursor.fetchone()
            published = row[0] if row else None
        if published is None:
            return None
        stored = json.loads(published) if isinstance(published, str | bytes) else published
        return stored if isinstance(stored, Mapping) else None

    def start_run(self, start: RunStart) -> bool:
        return self.lifecycle.claim(start)

    def record_intent(self, *, run_id: str, intent: str) -> None:
        self.lifecycle.record_intent(run_id=run_id, intent=intent)

    def finish_run(self, finish: RunFinish) -> bool:
        if self.audit is not None:
            self.audit.flush(finish.run_id)
        try:
            return self.lifecycle.complete(run_id=finish.run_id, result=finish.result, finished_at=finish.finished_at)
        except (OperationalError, InterfaceError):
            # The connection dropped (a database restart, a network blip). The update is
            # conditional, so it is safe once more, on a new connection.
            logger.warning("run %s: the database connection dropped; finishing on a new one", finish.run_id)
            connection.close()
            return self.lifecycle.complete(run_id=finish.run_id, result=finish.result, finished_at=finish.finished_at)


class DjangoAuditSinks:
    """Step, tool, timeline and reasoning records as rows, written in bulk.

    Records are buffered per run and written together by ``flush`` (one INSERT per table,
    no transaction) when the run ends, or sooner once a run has buffered ``FLUSH_AT``.
    The harness calls the record methods fail-open; ``flush`` is fail-open too.
    """

    FLUSH_AT = 200

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[str, list[Row]] = defaultdict(list)

    def _add(self, run_id: str, model: type[Any], values: dict[str, Any]) -> None:
        values["run_id"] = uuid_hex(run_id)
        with self._lock:
            pending = self._pending[run_id]
            pending.append((model, values))
            full = len(pending) >= self.FLUSH_AT
        if full:
            self.flush(run_id)

    def record_step(self, record: StepRecord) -> None:
        self._add(
            record.run_id,
            AgentStep,
            {
                "index": record.index,
                "purpose": record.purpose,
                "role": record.role,
                "message_count": record.message_count,
                "message_roles": list(record.message_roles),
                "has_text": record.has_text,
                "tool_call_names": list(record.tool_call_names),
                "input_tokens": record.input_tokens,
                "output_tokens": record.output_tokens,
                "duration_ms": record.duration_ms,
                "started_ms": record.started_ms,
                "error_code": record.error_code or "",
                "created_at": timezone.now(),
            },
        )

    def record_tool(self, record: ToolAuditRecord) -> None:
        self._add(
            record.run_id,
            ToolInvocation,
            {
                "tool_call_id": record.tool_call_id,
                "tool": record.tool,
                "status": record.status.value,
                "evidence_status": record.evidence_status or "",
                "error_code": record.error_code or "",
                "duration_ms": record.duration_ms,
                "request_bytes": record.request_bytes,
                "result_bytes": record.result_bytes,
                "step_index": record.step_index,
                "started_ms": record.started_ms,
                "created_at": timezone.now(),
            },
        )

    def append(self, event: TimelineEvent) -> None:
        self._add(
            event.run_id,
            TraceEvent,
            {
                "category": event.category.value,
                "name": event.name,
                "at": event.at,
                "details": {k: v for k, v in event.details.items() if v is not None},
            },
        )

    def record_reasoning(self, record: ReasoningRecord) -> None:
        self._add(
            record.run_id,
            ReasoningAudit,
            {
                "step_index": record.step_index,
                "purpose": record.purpose,
                "reasoning": record.reasoning[:MAX_REASONING_CHARS] if record.reasoning else None,
                "assistant_text": record.assistant_text[:MAX_REASONING_CHARS] if record.assistant_text else None,
                "created_at": timezone.now(),
            },
        )

    def flush(self, run_id: str) -> None:
        """Write the run's buffered rows. No transaction: each table's rows go in one statement,
        and a partial audit trail is better than BEGIN/COMMIT round trips on every run."""
        with self._lock:
            rows = self._pending.pop(run_id, [])
        if not rows:
            return
        try:
            insert_rows(rows)
        except Exception as exc:  # noqa: BLE001 - audit is fail-open
            logger.warning("audit flush failed for run %s: %s", run_id, type(exc).__name__)
