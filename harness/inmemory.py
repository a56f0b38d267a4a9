"""In-memory adapters for the ports: run store, invocation store, audit, observer and the
evidence backends.

They are small but honest implementations (the SQL source really is read-only; the run store
really is first-terminal-wins), so a whole run can be exercised without a service. Production
code uses them where nothing needs to outlive the process: the bundled example incident
(:mod:`harness.examples`), the scenario evaluator's run store and audit, the benchmark. Tests
use them too; what only tests need lives in :mod:`harness.testing`.
"""

from __future__ import annotations

import math
import sqlite3
import threading
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from harness.audit import AuditSinks
from harness.context import RunStatus
from harness.logs import group_templates, keep_templates, level_rank
from harness.ports import (
    CanonicalInvocation,
    KnowledgeChunk,
    KnowledgeResult,
    LogLine,
    LogQuery,
    LogResult,
    ReasoningRecord,
    RoutingContext,
    Runbook,
    RunControl,
    RunFinish,
    RunStart,
    Scalar,
    SqlRefused,
    SqlResult,
    Stage,
    StepRecord,
    TableInfo,
    TimelineEvent,
    ToolAuditRecord,
)
from harness.release import RunResult
from harness.text import content_tokens, tokens

__all__ = [
    "InMemoryAudit",
    "InMemoryInvocationStore",
    "InMemoryKnowledge",
    "InMemoryLogs",
    "InMemoryRunStore",
    "InMemoryRunbooks",
    "RecordingObserver",
    "SqliteSqlSource",
]


# --- runs ----------------------------------------------------------------------------------


@dataclass
class StoredRun:
    run_id: str
    session_id: str
    owner: str
    question: str
    status: RunStatus = RunStatus.QUEUED
    intent: str | None = None
    result: RunResult | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None


class InMemoryRunStore:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.sessions: dict[str, str] = {}
        self.runs: dict[str, StoredRun] = {}
        self.order: list[str] = []

    def resolve_session(self, *, owner: str, session_id: str | None, title: str) -> str:
        with self._lock:
            if session_id is None:
                session_id = f"session-{len(self.sessions) + 1}"
            if self.sessions.setdefault(session_id, owner) != owner:
                raise PermissionError("session belongs to another owner")
            return session_id

    def enqueue(self, *, run_id: str, session_id: str, owner: str, question: str) -> None:
        """What the API does before the task runs: a QUEUED row."""
        with self._lock:
            self.sessions.setdefault(session_id, owner)
            self.runs[run_id] = StoredRun(run_id, session_id, owner, question)
            self.order.append(run_id)

    def _session_runs(self, session_id: str, exclude: str) -> list[StoredRun]:
        return [self.runs[r] for r in reversed(self.order) if self.runs[r].session_id == session_id and r != exclude]

    def routing_context(self, *, session_id: str, exclude_run_id: str) -> RoutingContext:
        with self._lock:
            for run in self._session_runs(session_id, exclude_run_id):
                if run.intent:
                    return RoutingContext(run.intent, run.question)
        return RoutingContext()

    def latest_published_diagnosis(self, *, session_id: str, exclude_run_id: str) -> Mapping[str, Any] | None:
        with self._lock:
            for run in self._session_runs(session_id, exclude_run_id):
                r = run.result
                if r and run.intent == "DIAGNOSIS" and r.outcome.value == "success" and r.published_result:
                    return r.published_result
        return None

    def start_run(self, start: RunStart) -> bool:
        with self._lock:
            run = self.runs.get(start.run_id)
            if run is None:
                run = self.runs[start.run_id] = StoredRun(start.run_id, start.session_id, start.owner, start.question)
                self.order.append(start.run_id)
            if run.status is not RunStatus.QUEUED:
                return False
            run.status, run.started_at = RunStatus.RUNNING, start.started_at
            return True

    def record_intent(self, *, run_id: str, intent: str) -> None:
        with self._lock:
            self.runs[run_id].intent = intent

    def finish_run(self, finish: RunFinish) -> bool:
        with self._lock:
            run = self.runs[finish.run_id]
            if run.status is not RunStatus.RUNNING:
                return False
            run.status, run.result, run.finished_at = finish.result.status, finish.result, finish.finished_at
            return True


# --- canonical store and audit -------------------------------------------------------------


class InMemoryInvocationStore:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.items: dict[tuple[str, str], CanonicalInvocation] = {}
        self.fail_puts = False

    def put(self, invocation: CanonicalInvocation) -> None:
        if self.fail_puts:
            raise ConnectionError("store down")
        with self._lock:
            self.items[(invocation.run_id, invocation.tool_call_id)] = invocation

    def get(self, run_id: str, tool_call_id: str) -> CanonicalInvocation | None:
        with self._lock:
            return self.items.get((run_id, tool_call_id))


@dataclass
class InMemoryAudit:
    steps: list[StepRecord] = field(default_factory=list)
    tools: list[ToolAuditRecord] = field(default_factory=list)
    timeline: list[TimelineEvent] = field(default_factory=list)
    reasoning: list[ReasoningRecord] = field(default_factory=list)
    broken: bool = False

    def record_step(self, record: StepRecord) -> None:
        self._write(self.steps, record)

    def record_tool(self, record: ToolAuditRecord) -> None:
        self._write(self.tools, record)

    def append(self, event: TimelineEvent) -> None:
        self._write(self.timeline, event)

    def record_reasoning(self, record: ReasoningRecord) -> None:
        self._write(self.reasoning, record)

    def _write(self, target: list[Any], record: Any) -> None:
        if self.broken:
            raise OSError("audit database unavailable")
        target.append(record)

    def sinks(self) -> AuditSinks:
        return AuditSinks(steps=self, tools=self, timeline=self, reasoning=self)

    def names(self) -> list[str]:
        return [e.name for e in self.timeline]


# --- observer ------------------------------------------------------------------------------


class RecordingObserver:
    """Records what a client would see, in order: metadata, status…, result."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []
        self.control: RunControl | None = None
        self.on_status: Any = None

    def started(self, control: RunControl) -> None:
        self.control = control
        self.events.append(("metadata", {"session_id": control.session_id, "run_id": control.run_id}))

    def status(self, stage: Stage, detail: Mapping[str, Scalar] | None = None) -> None:
        self.events.append(("status", {"stage": stage.value, **(detail or {})}))
        if self.on_status is not None:
            self.on_status(self, stage, detail)

    def finished(self, result: RunResult) -> None:
        self.events.append(("result", result))

    def stages(self) -> list[str]:
        return [payload["stage"] for kind, payload in self.events if kind == "status"]


# --- evidence backends ---------------------------------------------------------------------


class InMemoryKnowledge:
    """A tiny BM25 over chunks, graded against a score threshold."""

    def __init__(self, chunks: Iterable[KnowledgeChunk] = (), *, min_score: float = 1.0) -> None:
        self.chunks = list(chunks)
        self.min_score = min_score
        self._index = [Counter(tokens(f"{c.title} {c.section} {c.text}")) for c in self.chunks]
        lengths = [sum(tf.values()) for tf in self._index]
        self._avg = (sum(lengths) / len(lengths)) if lengths else 1.0
        df: Counter[str] = Counter()
        for tf in self._index:
            df.update(tf.keys())
        n = len(self.chunks)
        self._idf = {t: math.log(1 + (n - d + 0.5) / (d + 0.5)) for t, d in df.items()}

    def search(self, query: str, top_k: int) -> KnowledgeResult:
        terms = content_tokens(query)
        scored = []
        for chunk, tf in zip(self.chunks, self._index, strict=True):
            length = sum(tf.values())
            score = 0.0
            for t in terms:
                f = tf.get(t, 0)
                if f:
                    score += self._idf[t] * f * 2.2 / (f + 1.2 * (0.25 + 0.75 * length / self._avg))
            if score > 0:
                scored.append((score, chunk))
        scored.sort(key=lambda pair: -pair[0])
        hits = tuple(replace(c, score=round(s, 4)) for s, c in scored[:top_k] if s >= self.min_score)
        return KnowledgeResult(hits, "ok" if hits else "no_evidence", "lexical")


class InMemoryLogs:
    """Log lines in a list; the reference semantics of :class:`~harness.ports.LogSource`.

    Every word of the query must occur in the message (case-insensitively), ``level`` is a
    minimum, ``start``/``end`` are inclusive, lines come newest first up to ``limit``, the totals
    and counts cover every match, and templates are grouped by :func:`harness.logs.group_templates`.
    """

    def __init__(self, lines: Iterable[LogLine] = (), *, max_templates: int = 15) -> None:
        self.lines = sorted(lines, key=lambda line: line.ts, reverse=True)
        self.max_templates = max_templates

    def query(self, query: LogQuery) -> LogResult:
        words = [w for w in query.query.lower().split() if w]
        floor = level_rank(query.level)
        start = query.start.isoformat() if query.start else None
        end = query.end.isoformat() if query.end else None
        matched = [
            line
            for line in self.lines
            if level_rank(line.level) >= floor
            and (query.service is None or line.service == query.service)
            and (start is None or _iso(line.ts) >= start)
            and (end is None or _iso(line.ts) <= end)
            and all(w in line.message.lower() for w in words)
        ]
        return LogResult(
            lines=tuple(matched[: query.limit]),
            total=len(matched),
            counts_by_level=dict(Counter(line.level for line in matched)),
            counts_by_service=dict(Counter(line.service for line in matched)),
            templates=keep_templates(group_templates(matched), self.max_templates),
        )


def _iso(ts: str) -> str:
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).isoformat()


_READ_ACTIONS = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION}
_REFUSED_FUNCTIONS = {"load_extension", "readfile", "writefile", "edit", "fts3_tokenizer"}


class SqliteSqlSource:
    """An in-memory SQLite datasource whose connection can only read.

    Enforcement is SQLite's own authorizer (every action but reading is denied) and its refusal
    to run more than one statement per call: no statement parsing to get wrong.
    """

    def __init__(
        self, tables: Mapping[str, tuple[Sequence[str], Sequence[Sequence[Scalar]]]], *, max_rows: int = 200
    ) -> None:
        self._lock = threading.Lock()
        self._max_rows = max_rows
        self._db = sqlite3.connect(":memory:", check_same_thread=False)
        self._tables = []
        for name, (columns, rows) in tables.items():
            cols = ", ".join(f'"{c}"' for c in columns)
            self._db.execute(f'CREATE TABLE "{name}" ({cols})')
            placeholders = ", ".join("?" for _ in columns)
            self._db.executemany(f'INSERT INTO "{name}" VALUES ({placeholders})', rows)  # noqa: S608 - fixture tables
            self._tables.append(TableInfo(name, tuple(columns)))
        self._db.commit()
        self._db.set_authorizer(self._authorize)

    @staticmethod
    def _authorize(action: int, arg1: str | None, arg2: str | None, _db: str | None, _src: str | None) -> int:
        if action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() in _REFUSED_FUNCTIONS:
            return sqlite3.SQLITE_DENY
        if action == sqlite3.SQLITE_READ and (arg1 or "").startswith("sqlite_"):
            return sqlite3.SQLITE_DENY
        return sqlite3.SQLITE_OK if action in _READ_ACTIONS else sqlite3.SQLITE_DENY

    def tables(self) -> Sequence[TableInfo]:
        return list(self._tables)

    def execute(self, sql: str, *, timeout_s: float) -> SqlResult:
        with self._lock:
            try:
                cursor = self._db.execute(sql)
                rows = cursor.fetchmany(self._max_rows + 1)
            except sqlite3.ProgrammingError:
                raise SqlRefused("only one statement is allowed") from None
            except (sqlite3.DatabaseError, sqlite3.Warning) as exc:
                raise SqlRefused(_sql_reason(exc)) from None
            columns = tuple(d[0] for d in cursor.description or ())
        return SqlResult(columns, tuple(tuple(r) for r in rows[: self._max_rows]), len(rows) > self._max_rows)


def _sql_reason(exc: Exception) -> str:
    text = str(exc)
    if "not authorized" in text or "prohibited" in text:
        return "only reading statements are allowed"
    return "the statement could not be run"


class InMemoryRunbooks:
    def __init__(self, runbooks: Iterable[Runbook] = (), *, min_overlap: int = 2) -> None:
        self.runbooks = list(runbooks)
        self.min_overlap = min_overlap
        self._terms = [content_tokens(f"{r.title} {r.body}") for r in self.runbooks]

    def match(self, question: str, *, limit: int) -> Sequence[Runbook]:
        terms = content_tokens(question)
        scored = [(len(terms & t), r) for r, t in zip(self.runbooks, self._terms, strict=True)]
        scored = [(s, r) for s, r in scored if s >= self.min_overlap]
        scored.sort(key=lambda pair: -pair[0])
        return [r for _, r in scored[:limit]]
