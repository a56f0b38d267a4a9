"""The harness's RunStore and audit sinks, on the Django ORM.

Every write that changes a run's state is a conditional UPDATE, so two writers can never
both win: ``queued → running`` is claimed once, and exactly one terminal state is written.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db import IntegrityError, connection
from django.db.models.constants import OnConflict
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


def _uuid(value: str | uuid.UUID) -> str:
    """Run and session ids as the database stores them (Django's UUIDField: 32 hex chars)."""
    return (value if isinstance(value, uuid.UUID) else uuid.UUID(value)).hex


def _when(value: datetime) -> Any:
    return connection.ops.adapt_datetimefield_value(value)


def _json(value: Any) -> str | None:
    return None if value is None else json.dumps(value, cls=DjangoJSONEncoder)


def _run_table() -> str:
    return connection.ops.quote_name(Run._meta.db_table)


def _read_when(value: Any) -> datetime | None:
    """A datetime column as read by the driver (SQLite: text; MySQL: naive UTC) → aware UTC."""
    if value is None:
        return None
    when = datetime.fromisoformat(value) if isinstance(value, str) else value
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def load_run_for_execution(run_id: str) -> Run | None:
    """The fields a worker needs to start a run, in one light query (a Run, not saved)."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT status, question, owner_id, session_id, started_at FROM {_run_table()} WHERE id = %s",  # noqa: S608
            [_uuid(run_id)],
        )
        row = cursor.fetchone()
    if row is None:
        return None
    started_at = _read_when(row[4])
    run = Run(
        id=uuid.UUID(run_id),
        status=row[0],
        question=row[1],
        owner_id=row[2],
        session_id=uuid.UUID(str(row[3])),
        started_at=started_at,
    )
    run._state.adding = False
    return run


class DjangoRunStore:
    """The harness's RunStore.

    Its queries run once or more per run on the hot path, so they are written as plain SQL
    (with the backend's own value adapters) instead of being compiled by the ORM every time.
    """

    def resolve_session(self, *, owner: str, session_id: str | None, title: str) -> str:
        if session_id is not None:
            # The API created the run in this session after checking the session is the
            # owner's; start_run then claims that very row, so there is nothing to re-check.
            return session_id
        return str(ChatSession.objects.create(owner_id=int(owner), title=title[:200]).id)

    #: how many of a session's latest runs one query reads for both pieces of memory
    RECENT_RUNS = 20

    #: how long rows read for routing_context wait for latest_published_diagnosis
    MEMO_S = 2.0

    def __init__(self) -> None:
        self._recent: dict[tuple[str, str], tuple[float, list[tuple[Any, ...]]]] = {}

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
                f"SELECT intent, question, outcome, published_result FROM {_run_table()} "  # noqa: S608 - the model's table
                "WHERE session_id = %s AND id <> %s AND intent <> '' ORDER BY created_at DESC, id DESC LIMIT %s",
                [_uuid(session_id), _uuid(exclude_run_id), self.RECENT_RUNS],
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
                    f"SELECT published_result FROM {_run_table()} WHERE session_id = %s AND id <> %s AND intent = %s "  # noqa: S608
                    "AND outcome = %s AND published_result IS NOT NULL ORDER BY created_at DESC, id DESC LIMIT 1",
                    [_uuid(session_id), _uuid(exclude_run_id), Intent.DIAGNOSIS.value, Outcome.SUCCESS.value],
                )
                row = cursor.fetchone()
            published = row[0] if row else None
        if published is None:
            return None
        stored = json.loads(published) if isinstance(published, str | bytes) else published
        return stored if isinstance(stored, Mapping) else None

    def start_run(self, start: RunStart) -> bool:
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {_run_table()} SET status = %s, started_at = %s WHERE id = %s AND status = %s",  # noqa: S608
                [RunStatus.RUNNING.value, _when(start.started_at), _uuid(start.run_id), RunStatus.QUEUED.value],
            )
            if cursor.rowcount:
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
        with connection.cursor() as cursor:
            cursor.execute(f"UPDATE {_run_table()} SET intent = %s WHERE id = %s", [intent, _uuid(run_id)])  # noqa: S608

    def finish_run(self, finish: RunFinish) -> bool:
        result = finish.result
        usage = result.usage
        values = {
            "status": result.status.value,
            "outcome": result.outcome.value,
            "intent": result.intent or "",
            "content": _json(result.content.to_dict() if result.content else None),
            "published_result": _json(dict(result.published_result) if result.published_result else None),
            "fallback_reason": result.fallback_reason or "",
            "failure_code": result.failure.code if result.failure else "",
            "failure_message": result.failure.message[:300] if result.failure else "",
            "model_calls": usage.model_calls,
            "tool_calls": usage.tool_calls,
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "finished_at": _when(finish.finished_at),
            "duration_ms": result.duration_ms,
            "model_ms": result.model_ms,
            "backend_ms": result.backend_ms,
        }
        assignments = ", ".join(f"{connection.ops.quote_name(column)} = %s" for column in values)
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {_run_table()} SET {assignments} WHERE id = %s AND status = %s",  # noqa: S608
                [*values.values(), _uuid(finish.run_id), RunStatus.RUNNING.value],
            )
            return bool(cursor.rowcount)


Row = tuple[type[Any], dict[str, Any]]


def _db_value(value: Any) -> Any:
    if isinstance(value, datetime):
        return _when(value)
    if isinstance(value, uuid.UUID):
        return value.hex
    if isinstance(value, dict | list | tuple):
        return json.dumps(value, cls=DjangoJSONEncoder)
    return value


def insert_rows(rows: Sequence[Row], *, skip_duplicates: bool = False) -> None:
    """Insert rows of several tables, one multi-row statement per table. Plain SQL: the ORM's
    bulk_create spends more time preparing a run's few dozen rows than the database spends
    storing them. ``skip_duplicates`` ignores rows that break a unique constraint (for rows
    that may be written twice); it is off by default because on MySQL it also hides other
    errors (foreign keys, truncation) as mere warnings."""
    by_model: dict[type[Any], list[dict[str, Any]]] = defaultdict(list)
    for model, values in rows:
        by_model[model].append(values)
    quote = connection.ops.quote_name
    insert = connection.ops.insert_statement(on_conflict=OnConflict.IGNORE if skip_duplicates else None)
    with connection.cursor() as cursor:
        for model, batch in by_model.items():
            columns = list(batch[0])
            cursor.executemany(
                f"{insert} {quote(model._meta.db_table)} ({', '.join(quote(c) for c in columns)}) "
                f"VALUES ({', '.join(['%s'] * len(columns))})",
                [[_db_value(values[c]) for c in columns] for values in batch],
            )


_INSERT_SQL: dict[type[Any], tuple[str, list[Any]]] = {}


def fast_insert(obj: Any) -> None:
    """INSERT one model instance, its values prepared by the fields themselves (defaults,
    auto_now, JSON, UUIDs) but without the ORM's query compiler: for rows written on every
    request. Database errors (IntegrityError…) surface as Django's, as with ``save()``."""
    model = type(obj)
    cached = _INSERT_SQL.get(model)
    if cached is None:
        fields = [f for f in model._meta.concrete_fields if not getattr(f, "db_returning", False)]
        quote = connection.ops.quote_name
        sql = (
            f"INSERT INTO {quote(model._meta.db_table)} ({', '.join(quote(f.column) for f in fields)}) "  # noqa: S608 - names from the model
            f"VALUES ({', '.join(['%s'] * len(fields))})"
        )
        cached = _INSERT_SQL[model] = (sql, fields)
    sql, fields = cached
    values = [f.get_db_prep_save(f.pre_save(obj, True), connection) for f in fields]
    with connection.cursor() as cursor:
        cursor.execute(sql, values)
    obj._state.adding = False
    obj._state.db = connection.alias


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
        values["run_id"] = _uuid(run_id)
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

    def flush(self, run_id: str, *, also: Sequence[Row] = ()) -> None:
        """Write the run's buffered rows, and ``also``'s rows, which may already exist (the
        run's archived events). No transaction: each table's rows go in one statement, and a
        partial audit trail is better than BEGIN/COMMIT round trips on every run."""
        with self._lock:
            rows = self._pending.pop(run_id, [])
        if not rows and not also:
            return
        try:
            if rows:
                insert_rows(rows)
            if also:
                insert_rows(also, skip_duplicates=True)
        except Exception as exc:  # noqa: BLE001 - audit is fail-open
            logger.warning("audit flush failed for run %s: %s", run_id, type(exc).__name__)
