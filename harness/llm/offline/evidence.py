"""Reading the evidence: what a conversation's tool results say, as the analyst weighs it.

Log templates become :class:`Pattern` (the same template from an all-time query and from an
incident window is merged: the window says how often and where, all time says when it began),
knowledge chunks become the :class:`Passage` sentences that talk about a focus, and query rows
become :class:`ChangeRow`. Text in the evidence that addresses an assistant is never used: it is
counted, so the report can say so, and left out.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from harness.guards.injection import looks_like_instruction
from harness.guards.quotes import quote_weight, scalar_leaves
from harness.llm.offline.chat import sentences
from harness.llm.offline.conversation import Conversation, untruncated
from harness.llm.offline.lexicon import CHANGE_TERMS, TIME_COLUMN, salient, terms
from harness.logs import group_templates, level_rank
from harness.ports import LogLine
from harness.tools.evidence import LOOKUP_KNOWLEDGE, QUERY_LOGS, QUERY_MYSQL

#: A pattern seen this soon after the window opened may well have begun before it.
WINDOW_EDGE = timedelta(minutes=2)
#: A sparse pattern also seen this shortly before its first line in a window was already going on.
RECURRING = timedelta(hours=12)
#: A quote is cut to this many characters: enough to recognise, short enough to check.
MAX_QUOTE_CHARS = 240


def parse_ts(value: Any) -> datetime | None:
    """An aware time from an ISO-8601 value of a tool result (UTC when it names no zone), or ``None``."""
    if not isinstance(value, str) or not value:
        return None
    try:
        ts = datetime.fromisoformat(value.strip().replace("Z", "+00:00").replace(" ", "T", 1))
    except ValueError:
        return None
    return ts if ts.tzinfo else ts.replace(tzinfo=UTC)


_DANGLING = re.compile(r"(?:\s+(?:after|for|in|of|to|by|with|from|at|on|is|was|=))+$", re.IGNORECASE)


def literal(template: str, *, headline: bool = False) -> str:
    """The readable constant part of a log template: its longest run of words between masks (or,
    as a ``headline``, the first run nearly as long: a message says first what it is about)."""
    segments = [seg.strip(" -:,;=([{)]}") for seg in template.split("<*>")]
    best = max(segments, key=lambda seg: (len(seg.split()), len(seg)), default="")
    if headline:
        best = next(seg for seg in segments if len(seg.split()) >= 0.6 * len(best.split()))
    return _DANGLING.sub("", best).strip(" -:,;=")[:160]


#: a cause's message up to this long is named whole; a longer one by its longest constant run
NAMED_WHOLE_CHARS = MAX_QUOTE_CHARS


def named(template: str, example: str, *reasons: re.Pattern[str]) -> str:
    """What a report calls a line: its message when short (the reason is often in a part a
    template masks, "0/3 nodes are available: 3 Insufficient cpu"); else the clause that states
    the first of the ``reasons`` the message holds; else its headline (:func:`literal`)."""
    text = untruncated(example).strip()
    if 0 < len(text) <= NAMED_WHOLE_CHARS:
        return text
    for reason in reasons:
        if (found := reason.search(text)) is not None:
            return _clause_around(text, found.start())
    return literal(template, headline=True) or excerpt(example)


#: where a clause of a log message begins: after a sentence, a bracketed prefix, a label
_CLAUSE_BREAK = re.compile(r"[.;!?]\s+|\]\s+|:\s+")


def _clause_around(text: str, start: int) -> str:
    """The message from the start of the clause holding ``start`` (at most a third of a quote
    before it), as long as a quote may be, ending at a word."""
    floor = max(0, start - MAX_QUOTE_CHARS // 3)
    begin = max((m.end() for m in _CLAUSE_BREAK.finditer(text, floor, start)), default=floor)
    clause = text[begin : begin + MAX_QUOTE_CHARS]
    if begin + MAX_QUOTE_CHARS < len(text) and " " in clause:
        clause = clause.rsplit(" ", 1)[0]
    return clause.strip()


def excerpt(text: str) -> str:
    """The text as a claim quotes it: without a truncation marker, at most ``MAX_QUOTE_CHARS``."""
    text = untruncated(text).strip()
    return text if len(text) <= MAX_QUOTE_CHARS else text[:MAX_QUOTE_CHARS].rstrip()


@dataclass
class Pattern:
    """A log template: how often, how severe, where and when, and the call that returned it."""

    template: str
    count: int
    level: str
    services: tuple[str, ...]
    first: datetime | None
    last: datetime | None
    example: str
    call_id: str
    #: from a query over a time window rather than over all the logs
    windowed: bool = False
    #: the table of the state row this stands for (``pod_status``), or ``""`` for a log template
    table: str = ""
    #: seen only over all time, never in the incident's window that was read whole
    outside_window: bool = False
    #: the machines its lines came from (a node's journal, the kubelet that reported an event)
    hosts: tuple[str, ...] = ()

    @property
    def rank(self) -> int:
        return level_rank(self.level)

    @property
    def words(self) -> frozenset[str]:
        return salient(f"{self.template} {' '.join(self.services)}")

    def window(self) -> str:
        def fmt(ts: datetime | None) -> str:
            return ts.strftime("%Y-%m-%d %H:%M:%S") if ts else "?"

        return f"{fmt(self.first)} – {fmt(self.last)}"


@dataclass
class Passage:
    """A sentence of a retrieved chunk, scored by how much it says about a focus."""

    call_id: str
    title: str
    section: str
    sentence: str
    score: float


@dataclass
class ChangeRow:
    """A row of a query result, as the quote a claim can cite and the words it touches."""

    call_id: str
    quote: str
    columns: list[str]
    at: datetime | None
    words: frozenset[str]
    #: from a table that records changes (by its name or its columns), not a business table
    is_change: bool
    #: the table queried (``""`` when the statement names none plainly)
    table: str = ""


def log_patterns(conv: Conversation) -> tuple[list[Pattern], int]:
    """The log templates of every ``query_logs`` result, one per template, and how many were left
    out for addressing an assistant."""
    patterns: dict[str, Pattern] = {}
    #: what a query of one service returned, by template and service: that service's own account
    own: dict[tuple[str, str], Pattern] = {}
    ignored = 0
    for obs in conv.results(QUERY_LOGS):
        items = obs.view.get("templates") or _templates_from_lines(obs.view.get("lines") or [])
        service = obs.args.get("service")
        for item in items:
            if not isinstance(item, dict):
                continue
            template, example = str(item.get("template", "")), untruncated(str(item.get("example", "")))
            if looks_like_instruction(template) or looks_like_instruction(example):
                ignored += 1
                continue
            services = item.get("services") or []
            hosts = item.get("hosts") or []
            found = Pattern(
                template=untruncated(template),
                count=int(item.get("count") or 0),
                level=str(item.get("level", "")).upper(),
                services=tuple(str(s) for s in services) if isinstance(services, list) else (),
                first=parse_ts(item.get("first_ts")),
                last=parse_ts(item.get("last_ts")),
                example=example,
                call_id=obs.call_id,
                windowed=bool(obs.args.get("start") or obs.args.get("end")),
                hosts=tuple(str(h) for h in hosts) if isinstance(hosts, list) else (),
            )
            if found.windowed and found.first is not None and _opens_window(found.first, obs.args.get("start")):
                # Already there when the window opened: when it began is unknown, not "just now".
                found.first = None
            if isinstance(service, str) and service and not found.windowed:
                own[(found.template, service)] = found
                continue
            known = patterns.get(found.template)
            if known is None:
                patterns[found.template] = found
            elif found.windowed != known.windowed:
                window, overall = (found, known) if found.windowed else (known, found)
                _date_the_window(window, overall)
                patterns[found.template] = window
            elif found.count > known.count:
                patterns[found.template] = found
    # A service's own query says when and how often that service logged a template; a query of
    # all services merges it with the same words from others (another incident's pods).
    for (template, service), found in own.items():
        merged = patterns.get(template)
        if merged is None:
            patterns[template] = found
        elif merged.windowed:
            _date_the_window(merged, found)
        elif rest := tuple(s for s in merged.services if s != service):
            merged.services = rest
            patterns[f"{template}\x00{service}"] = found
        else:
            patterns[template] = found
    # A window read whole (every line it holds returned) shows all that happened in it: a warning
    # only the query over all time shows did not happen then, whatever its first and last say.
    whole = [obs for obs in conv.results(QUERY_LOGS) if _whole_window(obs.args, obs.view)]
    if whole:
        shown = min(level_rank(o.args.get("level")) for o in whole)
        for p in patterns.values():
            if not p.windowed and level_rank(p.level) >= shown:
                p.outside_window = True
    return list(patterns.values()), ignored


def _date_the_window(window: Pattern, overall: Pattern) -> None:
    """The incident window says how often, where and until when around the incident (the same
    message on another day would blur it); a query over all time says when it began if it was
    already there when the window opened."""
    if window.first is None or (overall.first is not None and timedelta(0) < window.first - overall.first <= RECURRING):
        window.first = overall.first


def _whole_window(args: Mapping[str, Any], view: Mapping[str, Any]) -> bool:
    """Whether a query over a time window, of all services, returned every line it matched."""
    if not (args.get("start") and args.get("end")) or args.get("query") or args.get("service"):
        return False
    total, returned = view.get("total"), view.get("returned")
    return isinstance(total, int) and isinstance(returned, int) and 0 < total <= returned


def empty_windows(conv: Conversation) -> list[tuple[datetime, datetime]]:
    """The time windows a query of every service's warnings read and found nothing in."""
    out = []
    for obs in conv.results(QUERY_LOGS):
        args = obs.args
        if args.get("query") or args.get("service") or obs.view.get("total") != 0:
            continue
        start, end = parse_ts(args.get("start")), parse_ts(args.get("end"))
        if start is not None and end is not None:
            out.append((start, end))
    return out


def _opens_window(first: datetime, start: Any) -> bool:
    opened = parse_ts(start)
    return opened is not None and first - opened <= WINDOW_EDGE


def _templates_from_lines(lines: list[Any]) -> list[dict[str, Any]]:
    """The templates of the returned lines, for a log source that reports none."""
    read = [
        LogLine(
            ts=str(line.get("ts") or ""),
            service=str(line.get("service") or ""),
            level=str(line.get("level") or ""),
            message=untruncated(str(line.get("message", ""))),
        )
        for line in lines
        if isinstance(line, dict)
    ]
    return [{**asdict(t), "services": list(t.services)} for t in group_templates(read)]


def knowledge_passages(conv: Conversation, focus: AbstractSet[str], *, minimum: int = 3) -> list[Passage]:
    """Sentences of the retrieved chunks that talk about ``focus``, best first."""
    out = []
    for obs in conv.results(LOOKUP_KNOWLEDGE):
        for rank, chunk in enumerate(obs.view.get("chunks") or []):
            if not isinstance(chunk, dict):
                continue
            heading = salient(f"{chunk.get('title', '')} {chunk.get('section', '')}")
            for sentence in sentences(str(chunk.get("text", ""))):
                if looks_like_instruction(sentence) or quote_weight(sentence) < 16:
                    continue
                overlap = len(focus & salient(sentence))
                if overlap >= min(minimum, max(len(focus), 1)):
                    score = overlap + 0.5 * len(focus & heading) - 0.1 * rank
                    out.append(
                        Passage(
                            obs.call_id,
                            str(chunk.get("title", "")),
                            str(chunk.get("section", "")),
                            excerpt(sentence),
                            score,
                        )
                    )
    out.sort(key=lambda p: -p.score)
    return out


def _is_scalar(value: Any) -> bool:
    return value is not None and not isinstance(value, dict | list)


_OLD_VALUE = frozenset({"before", "old", "old_value", "from", "from_value", "previous", "prev", "was"})
_NEW_VALUE = frozenset({"after", "new", "new_value", "to", "to_value", "now", "value", "version", "current"})


def _unchanged(columns: list[str], row: list[Any]) -> bool:
    """Whether the row records a value replaced by the same value: its one "before"-like column
    and its one "after"-like column hold the same scalar."""
    names = [c.lower() for c in columns]
    old = [i for i, c in enumerate(names) if c in _OLD_VALUE]
    new = [i for i, c in enumerate(names) if c in _NEW_VALUE]
    if len(old) != 1 or len(new) != 1 or max(old[0], new[0]) >= len(row):
        return False
    before, after = row[old[0]], row[new[0]]
    return _is_scalar(before) and _is_scalar(after) and str(before).strip() == str(after).strip() != ""


def change_rows(conv: Conversation) -> list[ChangeRow]:
    """The rows of every ``query_mysql`` result, but those with text addressed to an assistant."""
    out = []
    for obs in conv.results(QUERY_MYSQL):
        columns = [str(c) for c in obs.view.get("columns") or []]
        table = re.search(r"\bfrom\s+([\w.]+)", str(obs.args.get("sql", "")), re.IGNORECASE)
        is_change = bool(terms(f"{table.group(1) if table else ''} {' '.join(columns)}") & CHANGE_TERMS)
        time_indexes = [i for i, c in enumerate(columns) if TIME_COLUMN.search(c.lower())]
        for row in obs.view.get("rows") or []:
            if not isinstance(row, list):
                continue
            cells = [c for c, _ in scalar_leaves(row)]
            if any(looks_like_instruction(c) for c in cells):
                continue
            # Quote from the first descriptive cell to the last whole one (ids say nothing; empty
            # cells are no text at all).
            has_id = bool(columns) and columns[0].lower() in ("id", "pk") and bool(row) and _is_scalar(row[0])
            whole = []
            for cell, _ in scalar_leaves(row[1:] if has_id else row):
                if cell.endswith("[truncated]"):
                    break
                whole.append(cell)
            quote = (
                " ".join(whole)[:MAX_QUOTE_CHARS].rsplit(" ", 1)[0]
                if len(" ".join(whole)) > MAX_QUOTE_CHARS
                else " ".join(whole)
            )
            # A setting written back as it was ("DB_POOL_SIZE 10 → 10") changed nothing.
            unchanged = _unchanged(columns, row)
            # the first time the row has (a table of several kinds of record dates each its own way)
            at = next((t for i in time_indexes if i < len(row) and (t := parse_ts(row[i])) is not None), None)
            out.append(
                ChangeRow(
                    obs.call_id,
                    quote,
                    columns,
                    at,
                    salient(" ".join(cells)),
                    is_change and not unchanged,
                    table.group(1) if table else "",
                )
            )
    return out
