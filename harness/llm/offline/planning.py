"""Planning: the next tool calls of the offline analyst, or none when it is time to write.

1. Look broadly: the knowledge base for the question, every WARN-or-worse log pattern, and the
   warnings of the services the question names.
2. Look around the onset (the reported time, else the symptom's first line): the log window in
   which causes begin, the documents about the leading cause candidates, and the change tables
   for what changed before them.
3. Follow up: the candidates the window brought, and how to fix the cause once there is one.

Each step asks only what it has not asked before.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Set as AbstractSet
from datetime import UTC, datetime, timedelta
from typing import Any

from harness.llm.offline.conversation import Conversation, sql_tables
from harness.llm.offline.evidence import empty_windows, literal
from harness.llm.offline.lexicon import CHANGE_TERMS, STATE_TERMS, TIME_COLUMN, terms
from harness.llm.offline.reasoning import (
    CHANGE_GRACE,
    CHANGE_LOOKBACK,
    INCIDENT_LEAD,
    INCIDENT_TAIL,
    STATE_SPAN,
    Evidence,
    analyse,
    gather,
    rank_causes,
)
from harness.llm.offline.when import YEARS_BACK, stated_time
from harness.logs import workload_of
from harness.text import has_cjk
from harness.tools.evidence import LOOKUP_KNOWLEDGE, QUERY_LOGS, QUERY_MYSQL

#: How many of the tables that look like change records are read (best matching first).
MAX_CHANGE_TABLES = 4
#: How many of the tables that record workloads' state are read.
MAX_STATE_TABLES = 2
#: Fewer recommendations than this: look up the remediation of the explaining document.
MIN_RECOMMENDATIONS = 2
#: How many services named in the question get a log query of their own.
MAX_NAMED_SERVICES = 2
_SERVICE_NAME = re.compile(r"(?<![\w./-])[a-z][a-z0-9]*(?:-[a-z0-9]+)+(?![\w/-])")


def plan(conv: Conversation) -> list[tuple[str, dict[str, Any]]]:
    """The next tool calls, or nothing when it is time to write the draft."""
    calls: list[tuple[str, dict[str, Any]]] = []
    if conv.tool_steps == 0:
        if LOOKUP_KNOWLEDGE in conv.tools:
            calls.append((LOOKUP_KNOWLEDGE, {"query": conv.question[:500], "top_k": 5}))
        if QUERY_LOGS in conv.tools:
            calls.append((QUERY_LOGS, {"query": "", "level": "WARN", "limit": 100}))
            # The services the reporter names: their warnings, even if louder ones fill the rest.
            calls.extend(
                (QUERY_LOGS, {"query": "", "service": name, "level": "WARN", "limit": 100})
                for name in named_services(conv.question)[:MAX_NAMED_SERVICES]
            )
    elif conv.tool_steps == 1:
        ev = gather(conv)
        unread = _unread_subject(conv, ev)[:MAX_NAMED_SERVICES] if QUERY_LOGS in conv.tools else []
        # The workloads the question is about, by the names the store knows them by: their
        # warnings, when the latest lines of a busy store are all another incident's.
        calls.extend((QUERY_LOGS, {"query": "", "service": name, "level": "WARN", "limit": 100}) for name in unread)
        if (
            LOOKUP_KNOWLEDGE in conv.tools
            and len(ev.subject) <= MAX_NAMED_SERVICES
            and not any(o.view.get("chunks") for o in conv.results(LOOKUP_KNOWLEDGE))
        ):
            # No document answers the question in full (it holds too many other words): what the
            # team wrote about the workload asked about (else the hosts and components the question
            # names, that no log line is of), what it calls and serves, what is known noise.
            about = sorted(ev.subject) or named_services(conv.question)[:MAX_NAMED_SERVICES]
            calls.extend((LOOKUP_KNOWLEDGE, {"query": name, "top_k": 5}) for name in about)
        if not unread:
            # (else the subject's own lines may move the onset, the symptom and the candidates:
            # the window and the changes around them are read at the next step)
            calls.extend(_around_the_onset(conv, ev))
        calls.extend(_listening_calls(conv, ev))
    elif conv.tool_steps in (2, 3, 4):
        # The subject's own warnings or the incident window may have brought the onset or new
        # candidates: read the window, look them up too, then look up how to fix the cause once
        # there is one.
        ev = gather(conv)
        calls.extend(_around_the_onset(conv, ev))
        if not [c for c in calls if not conv.called(*c)] and LOOKUP_KNOWLEDGE in conv.tools:
            analysis = analyse(conv, ev)
            if analysis.cause is not None and len(analysis.recommendations) < MIN_RECOMMENDATIONS:
                # The document that explains the cause usually says how to fix it, in its own section.
                word = "处置" if has_cjk(conv.question) else "remediation"
                topic = analysis.passage.title if analysis.passage else literal(analysis.cause.template)
                calls.append((LOOKUP_KNOWLEDGE, {"query": f"{topic} {word}"[:200], "top_k": 5}))
    return [(name, args) for name, args in calls if not conv.called(name, args)]


def named_services(question: str) -> list[str]:
    """Service-like names in the question: lower-case words joined by hyphens (billing-service,
    order-export, ledger-api), in order of mention; a pod's name stands for its workload's
    (transcode-gw-6d8f7b9c4-q7lmn is transcode-gw), as the logs name it."""
    return list(dict.fromkeys(workload_of(m.group(0)) for m in _SERVICE_NAME.finditer(question)))


def _unread_subject(conv: Conversation, ev: Evidence) -> list[str]:
    """The subject's services that no query read by name and no returned warning is of."""
    read = {str(obs.args.get("service")) for obs in conv.results(QUERY_LOGS) if obs.args.get("service")}
    seen = {s for p in ev.patterns for s in p.services}
    return sorted(s for s in ev.subject if s not in read and s not in seen)


def _around_the_onset(conv: Conversation, ev: Evidence) -> list[tuple[str, dict[str, Any]]]:
    """The window around the onset; once it is read, the documents and changes about the
    candidates it shows (before that, the candidates may be another day's)."""
    window = [call for call in _window_calls(conv, ev) if not conv.called(*call)]
    return window or _candidate_calls(conv, ev)


def _window_calls(conv: Conversation, ev: Evidence) -> list[tuple[str, dict[str, Any]]]:
    """What else went wrong around the time the problem began: causes start shortly before."""
    if QUERY_LOGS not in conv.tools or ev.onset is None or _saw_every_warning(conv):
        return []
    calls = [(QUERY_LOGS, _incident_window(ev.onset))]
    if conv.called(*calls[0]):
        return []
    stated = stated_time(conv.question)
    if stated is not None and stated.day is None and stated.month_day is not None and empty_windows(conv):
        # a date without a year whose day was read empty in one year: the years before it at
        # once, rather than one a step (a store of many years would spend every step on them)
        for back in range(1, YEARS_BACK + 1):
            with contextlib.suppress(ValueError):  # 29 February
                calls.append((QUERY_LOGS, _incident_window(ev.onset.replace(year=ev.onset.year - back))))
    return calls


def _listening_calls(conv: Conversation, ev: Evidence) -> list[tuple[str, dict[str, Any]]]:
    """Connections to the workload asked about are refused: where does it say it listens? (An
    ordinary start-up line, which a search for warnings never returns.)"""
    if QUERY_LOGS not in conv.tools:
        return []
    refused = ev.refused & ev.subject
    return [
        (QUERY_LOGS, {"query": "listening", "service": name, "level": "INFO", "limit": 20})
        for name in sorted(refused)[:MAX_NAMED_SERVICES]
    ]


def _saw_every_warning(conv: Conversation) -> bool:
    """Whether an unfiltered WARN query already returned every matching line: then a window
    could show nothing new."""
    for obs in conv.results(QUERY_LOGS):
        unfiltered = not any(obs.args.get(k) for k in ("query", "service", "start", "end"))
        lines = obs.view.get("lines") or []
        total = obs.view.get("total")
        if unfiltered and not obs.truncated and isinstance(total, int) and total <= len(lines):
            return True
    return False


def _incident_window(onset: datetime) -> dict[str, Any]:
    start, end = onset - INCIDENT_LEAD, onset + INCIDENT_TAIL
    return {"query": "", "level": "WARN", "start": _iso(start), "end": _iso(end), "limit": 100}


def _iso(ts: datetime) -> str:
    return ts.astimezone(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def _candidate_calls(conv: Conversation, ev: Evidence) -> list[tuple[str, dict[str, Any]]]:
    """Documents about the leading cause candidates (not just the first, so documents can tell
    them apart) and the recent changes that touch the leading one."""
    calls: list[tuple[str, dict[str, Any]]] = []
    leading = [p for _, p in rank_causes(ev)[:2]] or ([ev.symptom] if ev.symptom else [])
    if LOOKUP_KNOWLEDGE in conv.tools:
        for p in leading:
            query = literal(p.template)[:200] or conv.question[:200]
            calls.append((LOOKUP_KNOWLEDGE, {"query": query, "top_k": 5}))
    if QUERY_MYSQL in conv.tools:
        # Changes before the leading cause began, up to the incident: the symptom may be their effect.
        focus = leading[0].words if leading else frozenset()
        starts = [
            ts
            for ts in (leading[0].first if leading else None, ev.symptom.first if ev.symptom else None, ev.onset)
            if ts
        ]
        span = (min(starts), max(starts)) if starts else None
        if leading or span:
            # with nothing to explain yet, the changes around the reported time all the same: an
            # engineer checks them before saying the evidence shows no cause
            calls.extend(
                (QUERY_MYSQL, {"sql": sql})
                for sql in _table_queries(conv, focus, span, CHANGE_TERMS, MAX_CHANGE_TABLES)
            )
        # And what the orchestrator records of the workloads' state (a pod's last state, exit
        # code): the reason can be there when no log line gives it.
        calls.extend(
            (QUERY_MYSQL, {"sql": sql})
            for sql in _table_queries(conv, focus, span, STATE_TERMS, MAX_STATE_TABLES, after=STATE_SPAN)
        )
    return calls


def _table_queries(
    conv: Conversation,
    focus: AbstractSet[str],
    span: tuple[datetime, datetime] | None,
    kind: frozenset[str],
    limit: int,
    after: timedelta = CHANGE_GRACE,
) -> list[str]:
    """Queries of the tables whose name or columns speak of ``kind`` (changes, or states), best
    matching first, over the time the incident could have begun in (and, for states, ``after``
    it: what the workloads went through)."""
    tables = sql_tables(conv.tools.get(QUERY_MYSQL))
    wanted = focus | terms(conv.question)
    ranked = []
    for table, columns in tables.items():
        words = terms(f"{table} {' '.join(columns)}")
        if not words & kind:
            continue
        # A state table says so in its name (pod_status) or in several columns (phase, exit_code,
        # restarts), not by one status column of a business table (orders.status).
        if kind is STATE_TERMS and (words & CHANGE_TERMS or not (terms(table) & kind or len(words & kind) >= 2)):
            continue
        value = 2 * len(words & kind) + len(words & wanted)
        if value >= 2:
            ranked.append((value, table, columns))
    ranked.sort(key=lambda item: -item[0])
    out = []
    for _, table, columns in ranked[:limit]:
        if not re.fullmatch(r"[A-Za-z_][\w]*", table):
            continue
        times = [c for c in columns if TIME_COLUMN.search(c.lower()) and re.fullmatch(r"\w+", c)]
        # a table of several kinds of record may date each by a column of its own
        time_column = times[0] if len(times) == 1 else f"COALESCE({', '.join(times)})" if times else None
        where = order = ""
        if time_column:
            order = f" ORDER BY {time_column} DESC"
            if span is not None:
                # Only the rows that could explain it, whatever came later.
                start, end = (_sql_ts(span[0] - CHANGE_LOOKBACK), _sql_ts(span[1] + after))
                where = f" WHERE {time_column} >= '{start}' AND {time_column} <= '{end}'"
        out.append(f"SELECT * FROM {table}{where}{order} LIMIT 20")  # noqa: S608 - identifiers checked above
    return out


def _sql_ts(ts: datetime) -> str:
    return ts.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")
