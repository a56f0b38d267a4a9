"""The offline diagnosis analyst: plans evidence gathering and writes a draft from what it got.

It reasons the way an on-call engineer reads evidence, with no knowledge of any particular
incident:

1. Look broadly: the knowledge base for the question, and every WARN-or-worse log pattern.
2. Find the *symptom*: the error pattern that matches what the engineer reported and began
   when they say it did (a time in the question is resolved against the logs), then look at
   the log window around it. The *cause* candidates are other error patterns that begin
   shortly before the symptom, use the vocabulary of something running out or breaking, share
   its service or are blamed by other services' errors (a proxy reporting its upstream is a
   witness, not a cause), and are backed by a document or by a recent change.
3. Follow up: look up the cause in the knowledge base, and read the tables where changes live.
   A change is weighed by how shortly before the pattern it came, what it touches (the
   pattern's service, a blamed dependency, words the two share and little else does) and how
   many new warnings began right after it and before the next change.
4. Write claims that quote the evidence verbatim; when the evidence shows no cause, make no
   claim and say what is missing, so the run falls back honestly.

Text in the evidence that addresses an assistant is never used.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Set as AbstractSet
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from harness.guards.injection import looks_like_instruction
from harness.guards.quotes import quote_weight, scalar_leaves
from harness.llm.offline.chat import sentences
from harness.llm.offline.conversation import Conversation, sql_tables, untruncated
from harness.llm.offline.lexicon import (
    CAUSE_TERMS,
    CHANGE_TERMS,
    SYMPTOM_TERMS,
    TIME_COLUMN,
    is_recommendation,
    salient,
    terms,
)
from harness.llm.offline.when import resolve, stated_time
from harness.logs import group_templates, level_rank
from harness.ports import LogLine
from harness.text import has_cjk
from harness.tools.evidence import LOOKUP_KNOWLEDGE, QUERY_LOGS, QUERY_MYSQL

MIN_CAUSE_SCORE = 3.0
#: The log window searched around a symptom's onset: causes start shortly before it.
INCIDENT_LEAD = timedelta(minutes=60)
INCIDENT_TAIL = timedelta(minutes=15)
#: A pattern seen this soon after the window opened may well have begun before it.
WINDOW_EDGE = timedelta(minutes=2)
#: A sparse pattern also seen this shortly before its first line in a window was already going on.
RECURRING = timedelta(hours=12)
#: A symptom begins around the time the report gives: at most this long before it, or after it.
REPORT_LEAD = timedelta(minutes=45)
REPORT_LAG = timedelta(minutes=90)
#: A recorded change can explain a pattern that starts up to a day after it.
CHANGE_LOOKBACK = timedelta(days=1)
CHANGE_GRACE = timedelta(minutes=5)
#: What a change breaks begins within this long after it.
ALIGNED = timedelta(minutes=15)
#: How many of the tables that look like change records are read (best matching first).
MAX_CHANGE_TABLES = 3
#: Fewer recommendations than this: look up the remediation of the explaining document.
MIN_RECOMMENDATIONS = 2
#: How many services named in the question get a log query of their own.
MAX_NAMED_SERVICES = 2
_SERVICE_NAME = re.compile(r"(?<![\w./-])[a-z][a-z0-9]*(?:-[a-z0-9]+)+(?![\w/-])")
MAX_QUOTE_CHARS = 240


def parse_ts(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        ts = datetime.fromisoformat(value.strip().replace("Z", "+00:00").replace(" ", "T", 1))
    except ValueError:
        return None
    return ts if ts.tzinfo else ts.replace(tzinfo=UTC)


_DANGLING = re.compile(r"(?:\s+(?:after|for|in|of|to|by|with|from|at|on|is|was|=))+$", re.IGNORECASE)


def literal(template: str) -> str:
    """The readable constant part of a log template: its longest run of words between masks."""
    segments = [seg.strip(" -:,;=([{)]}") for seg in template.split("<*>")]
    best = max(segments, key=lambda seg: (len(seg.split()), len(seg)), default="")
    return _DANGLING.sub("", best).strip(" -:,;=")[:160]


def _quote(text: str) -> str:
    text = untruncated(text).strip()
    return text if len(text) <= MAX_QUOTE_CHARS else text[:MAX_QUOTE_CHARS].rstrip()


@dataclass
class Pattern:
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
    call_id: str
    title: str
    section: str
    sentence: str
    score: float


@dataclass
class ChangeRow:
    call_id: str
    quote: str
    columns: list[str]
    at: datetime | None
    words: frozenset[str]
    #: from a table that records changes (by its name or its columns), not a business table
    is_change: bool


@dataclass
class Analysis:
    symptom: Pattern | None = None
    cause: Pattern | None = None
    passage: Passage | None = None
    change: ChangeRow | None = None
    recommendations: list[str] = field(default_factory=list)
    limitations: list[str] = field(default_factory=list)
    ignored_instructions: int = 0


# --- reading the evidence ------------------------------------------------------------------


def log_patterns(conv: Conversation) -> tuple[list[Pattern], int]:
    patterns: dict[str, Pattern] = {}
    ignored = 0
    for obs in conv.results(QUERY_LOGS):
        items = obs.view.get("templates") or _templates_from_lines(obs.view.get("lines") or [])
        for item in items:
            if not isinstance(item, dict):
                continue
            template, example = str(item.get("template", "")), untruncated(str(item.get("example", "")))
            if looks_like_instruction(template) or looks_like_instruction(example):
                ignored += 1
                continue
            services = item.get("services") or []
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
            )
            if found.windowed and found.first is not None and _opens_window(found.first, obs.args.get("start")):
                # Already there when the window opened: when it began is unknown, not "just now".
                found.first = None
            known = patterns.get(found.template)
            if known is None:
                patterns[found.template] = found
            elif found.windowed != known.windowed:
                # The incident window says how often, where and until when around the incident (the
                # same message on another day would blur it); a query over all time says when it
                # began if it was already there when the window opened.
                window, overall = (found, known) if found.windowed else (known, found)
                if window.first is None or (
                    overall.first is not None and timedelta(0) < window.first - overall.first <= RECURRING
                ):
                    window.first = overall.first
                patterns[found.template] = window
            elif found.count > known.count:
                patterns[found.template] = found
    return list(patterns.values()), ignored


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
                            _quote(sentence),
                            score,
                        )
                    )
    out.sort(key=lambda p: -p.score)
    return out


def change_rows(conv: Conversation) -> list[ChangeRow]:
    out = []
    for obs in conv.results(QUERY_MYSQL):
        columns = [str(c) for c in obs.view.get("columns") or []]
        table = re.search(r"\bfrom\s+([\w.]+)", str(obs.args.get("sql", "")), re.IGNORECASE)
        is_change = bool(terms(f"{table.group(1) if table else ''} {' '.join(columns)}") & CHANGE_TERMS)
        time_index = next((i for i, c in enumerate(columns) if TIME_COLUMN.search(c.lower())), None)
        for row in obs.view.get("rows") or []:
            if not isinstance(row, list):
                continue
            cells = [c for c, _ in scalar_leaves(row)]
            if any(looks_like_instruction(c) for c in cells):
                continue
            # Quote from the first descriptive cell to the last whole one (ids say nothing).
            start = 1 if columns and columns[0].lower() in ("id", "pk") and len(cells) == len(row) else 0
            whole = []
            for cell in cells[start:]:
                if cell.endswith("[truncated]"):
                    break
                whole.append(cell)
            quote = (
                " ".join(whole)[:MAX_QUOTE_CHARS].rsplit(" ", 1)[0]
                if len(" ".join(whole)) > MAX_QUOTE_CHARS
                else " ".join(whole)
            )
            at = parse_ts(row[time_index]) if time_index is not None and time_index < len(row) else None
            out.append(ChangeRow(obs.call_id, quote, columns, at, salient(" ".join(cells)), is_change))
    return out


def _onset_score(candidate: Pattern, began: datetime | None) -> float:
    """A cause starts shortly before the symptom ``began`` and is still going when it does."""
    if began is None or candidate.first is None:
        return 0.0
    lead = (began - candidate.first).total_seconds()
    if lead < -120:
        score = -2.0  # begins after the symptom: an effect, not a cause
    elif lead <= 900:
        score = 3.0  # within a quarter of an hour before the symptom
    elif lead <= 3_600:
        score = 1.5
    elif lead <= 6 * 3_600:
        score = -0.5  # it was there well before anything broke
    else:
        score = -1.5  # chronic
    if candidate.last is not None and candidate.last < began - timedelta(minutes=1):
        score -= 1.5  # over before the symptom began
    return score


def _proximity(lead: timedelta) -> float:
    """How suspicious a change is for how long before a pattern began: minutes, not hours."""
    if lead <= timedelta(minutes=15):
        return 1.5
    if lead <= timedelta(hours=1):
        return 1.0
    if lead <= timedelta(hours=6):
        return 0.5
    return 0.0


def _followed_by(row: ChangeRow, ev: _Evidence) -> int:
    """How many warning patterns began within minutes after the change, and before any later
    change: what a change breaks shows up right after it, in whatever services it reaches."""
    onset = ev.onset
    if row.at is None or onset is None:
        return 0
    at = row.at
    later = [r.at for r in ev.rows if r.is_change and r.at is not None and r.at > at]
    # Only what began around the incident counts: other noise starts at random times all day.
    since, until = max(at, onset - INCIDENT_LEAD), min([at + ALIGNED, onset + INCIDENT_TAIL, *later])
    return sum(1 for p in ev.patterns if p.rank >= 2 and p.first is not None and since <= p.first <= until)


def _change_support(p: Pattern, ev: _Evidence) -> tuple[float, ChangeRow | None]:
    """The recorded change that best explains the pattern, and how well: it precedes the pattern
    (the closer the better), touches what the pattern is about (its service, the words the two
    share and little else has) and was followed at once by new warnings."""
    own = p.words
    best: tuple[float, ChangeRow | None] = (0.0, None)
    for row in ev.rows:
        if not row.is_change:
            continue
        if (
            p.first is not None
            and row.at is not None
            and not (p.first - CHANGE_LOOKBACK <= row.at <= p.first + CHANGE_GRACE)
        ):
            continue
        topic = min(sum(ev.rarity.get(w, 0.0) for w in own & row.words), 3.0)
        # the pattern's own service, or one the incident's errors point at (its dependency)
        touches = 1.0 if set(p.services) & row.words else 0.5 if ev.blamed & row.words else 0.0
        if not topic and not touches:
            continue
        near = _proximity(p.first - row.at) if p.first is not None and row.at is not None else 0.0
        value = topic + touches + near + 0.5 * min(ev.followed.get(id(row), 0), 4)
        if value > best[0]:
            best = (value, row)
    return best


def _rarity(patterns: list[Pattern], rows: list[ChangeRow]) -> dict[str, float]:
    """Inverse document frequency of each word over the patterns and the change records, scaled so
    that a word only one of them uses counts 1: "booking" links everything, "dc1" one thing."""
    docs = [p.words for p in patterns] + [r.words for r in rows if r.is_change]
    counts: dict[str, int] = {}
    for words in docs:
        for w in words:
            counts[w] = counts.get(w, 0) + 1
    top = math.log(len(docs) + 1) or 1.0
    return {w: math.log((len(docs) + 1) / c) / top for w, c in counts.items()}


@dataclass
class _Evidence:
    patterns: list[Pattern]
    ignored: int
    symptom: Pattern | None
    rows: list[ChangeRow]
    knowledge_words: set[str]
    asked: frozenset[str]
    #: when the report says the problem began, resolved against the logs' timestamps
    reported: datetime | None = None
    rarity: dict[str, float] = field(default_factory=dict)
    #: services that other services' warnings name
    blamed: set[str] = field(default_factory=set)
    #: how many new warnings followed each change row (by ``id``), see ``_followed_by``
    followed: dict[int, int] = field(default_factory=dict)

    @property
    def symptom_began(self) -> datetime | None:
        """When the symptom began: its first line, or the reported time if that is later (older
        lines can share the symptom's template)."""
        first = self.symptom.first if self.symptom else None
        if first is None or self.reported is None:
            return first or self.reported
        return max(first, self.reported)

    @property
    def onset(self) -> datetime | None:
        """When the incident began: the time the reporter gives, else the symptom's first line (a
        pattern can begin earlier than the incident, when older lines share its template)."""
        if self.reported is not None:
            return self.reported
        return self.symptom.first if self.symptom else None


def reported_onset(conv: Conversation, patterns: list[Pattern]) -> datetime | None:
    """The time the question gives for the start of the problem, if any, as a UTC instant."""
    stated = stated_time(conv.question)
    if stated is None:
        return None
    return resolve(stated, [ts for p in patterns for ts in (p.first, p.last) if ts is not None])


def _fits_report(p: Pattern, reported: datetime | None) -> int:
    """1 when the pattern begins around the reported time, -1 when it cannot be what was reported
    (long there before, or over before it), 0 when unknown."""
    if reported is None or p.first is None:
        return 0
    if p.last is not None and p.last < reported - CHANGE_GRACE:
        return -1
    return 1 if reported - REPORT_LEAD <= p.first <= reported + REPORT_LAG else -1


def _gather(conv: Conversation) -> _Evidence:
    patterns, ignored = log_patterns(conv)
    asked = terms(conv.question)
    reported = reported_onset(conv, patterns)
    relevant = [p for p in patterns if p.rank >= 2 and asked & p.words]
    # The symptom is what the question describes, beginning when the reporter says it did; between
    # equally close patterns, one that does not name a cause ("timed out", not "pool exhausted") is
    # the better description of an effect.
    symptom = (
        max(
            relevant,
            key=lambda p: (
                _fits_report(p, reported),
                len(asked & p.words),
                not terms(p.template) & CAUSE_TERMS,
                p.rank,
                p.count,
            ),
        )
        if relevant
        else None
    )
    knowledge_words = {
        w
        for o in conv.results(LOOKUP_KNOWLEDGE)
        for c in o.view.get("chunks") or []
        if isinstance(c, dict)
        for w in salient(str(c.get("text", "")))
    }
    rows = change_rows(conv)
    ev = _Evidence(
        patterns,
        ignored,
        symptom,
        rows,
        knowledge_words,
        asked,
        reported,
        _rarity(patterns, rows),
        _blamed_services(patterns),
    )
    ev.followed = {id(row): _followed_by(row, ev) for row in rows if row.is_change}
    return ev


_UPSTREAM = re.compile(r"\b(?:upstream|downstream)\b", re.IGNORECASE)


def _blamed_services(patterns: list[Pattern]) -> set[str]:
    """Services that other services' warnings name (``price check failed: POST http://fare-api…``)."""
    known = {service for p in patterns for service in p.services if service}
    named: set[str] = set()
    for p in patterns:
        if p.rank < 2:
            continue
        text = f"{p.template} {p.example}".lower()
        named.update(s for s in known if s not in p.services and len(s) > 3 and s.lower() in text)
    return named


def _reports_elsewhere(p: Pattern, blamed: set[str]) -> bool:
    """The pattern reports a failure of another service: an upstream, or one it names."""
    text = f"{p.template} {p.example}".lower()
    return bool(_UPSTREAM.search(text)) or any(s.lower() in text for s in blamed if s not in p.services)


def rank_causes(ev: _Evidence) -> list[tuple[float, Pattern]]:
    """Cause candidates for the symptom, best first, with their scores."""
    symptom = ev.symptom
    if symptom is None:
        return []

    blamed = ev.blamed

    def score(p: Pattern) -> float:
        words = terms(p.template)
        causal = len(words & CAUSE_TERMS)
        value = 1.0 * min(causal, 3) - (1.0 if words & SYMPTOM_TERMS and not causal else 0.0)
        value += _onset_score(p, ev.symptom_began) + (1.0 if p.rank >= 3 else 0.0)
        if _reports_elsewhere(p, blamed):
            value -= 1.0  # a proxy or client telling of its upstream's failure: a witness, not a cause
        elif set(p.services) & set(symptom.services):
            value += 1.5
        if set(p.services) & blamed:
            value += 1.0  # other services' errors point at this one
        value += 0.5 * min(len(salient(p.template) & (ev.asked | symptom.words)), 2)
        if len(salient(p.template) & ev.knowledge_words) >= 2:
            value += 1.5
        value += min(_change_support(p, ev)[0], 4.0) * 0.75
        return value + 0.5 * min(math.log10(max(p.count, 1)), 2.0)

    ranked = [(score(p), p) for p in ev.patterns if p.rank >= 2 and p is not symptom]
    ranked.sort(key=lambda sp: -sp[0])
    return ranked


def analyse(conv: Conversation, ev: _Evidence | None = None) -> Analysis:
    ev = ev or _gather(conv)
    result = Analysis(symptom=ev.symptom, ignored_instructions=ev.ignored)
    symptom = ev.symptom
    if symptom is not None:
        ranked = rank_causes(ev)
        if ranked and ranked[0][0] >= MIN_CAUSE_SCORE:
            result.cause = ranked[0][1]
        elif terms(symptom.template) & CAUSE_TERMS:
            result.cause = symptom  # a self-explaining error: "certificate has expired"
    cause = result.cause
    if cause is None:
        return _limitations(conv, result)

    focus = cause.words | (symptom.words if symptom else set())
    passages = knowledge_passages(conv, cause.words) or knowledge_passages(conv, focus)
    result.passage = passages[0] if passages else None
    result.change = _change_support(cause, ev)[1]
    result.recommendations = _recommendations(
        conv, focus | (result.change.words if result.change else set()), result.passage, cause.words
    )
    return _limitations(conv, result)


def _recommendations(
    conv: Conversation, focus: AbstractSet[str], passage: Passage | None, cause_words: AbstractSet[str]
) -> list[str]:
    """Instructions of the document that explains the cause, or of others about the cause itself."""
    picked = []
    chinese = has_cjk(conv.question)
    for p in knowledge_passages(conv, focus, minimum=1):
        if not is_recommendation(p.sentence, chinese=chinese):
            continue
        same_document = passage is not None and p.title == passage.title
        if not same_document and len(salient(p.sentence) & cause_words) < 2:
            continue  # advice from a document about something else
        picked.append((p.score + (3.0 if same_document else 0.0), p.sentence))
    picked.sort(key=lambda item: -item[0])
    return list(dict.fromkeys(sentence for _, sentence in picked))[:3]


def _limitations(conv: Conversation, result: Analysis) -> Analysis:
    zh = has_cjk(conv.question)
    notes = result.limitations
    if result.ignored_instructions:
        notes.append(
            f"证据中有 {result.ignored_instructions} 处文本试图向助手下达指令，已作为数据忽略。" if zh
            else f"{result.ignored_instructions} piece(s) of evidence contained text addressed to an assistant; it was treated as data and ignored."
        )  # fmt: skip
    if any(o.truncated for o in conv.observations):
        notes.append(
            "部分工具结果被截断。" if zh else "Some tool results were truncated; rarer patterns may be missing."
        )
    if QUERY_MYSQL not in conv.tools and not conv.results(QUERY_MYSQL):
        notes.append(
            "未连接业务数据库，未核对配置变更。"
            if zh
            else "No business database was available, so recent changes were not checked."
        )
    if result.symptom is None:
        notes.append(
            "日志中没有与所报告问题匹配的告警或错误。"
            if zh
            else "No WARN-or-worse log pattern matches the reported problem."
        )
    elif result.cause is None:
        notes.append(
            "日志显示了症状，但没有可以解释它的先发错误。"
            if zh
            else "The logs show the symptom but no earlier error that would explain it."
        )
    return result


# --- planning ------------------------------------------------------------------------------


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
        ev = _gather(conv)
        if QUERY_LOGS in conv.tools and ev.onset is not None and not _saw_every_warning(conv):
            # What else went wrong around the time the problem began: causes start shortly before.
            calls.append((QUERY_LOGS, _incident_window(ev.onset)))
        calls.extend(_candidate_calls(conv, ev))
    elif conv.tool_steps in (2, 3):
        # The incident window may have brought new candidates: look them up too, then look up
        # how to fix the cause once there is one.
        ev = _gather(conv)
        calls.extend(_candidate_calls(conv, ev))
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
    order-export, ledger-api), in order of mention."""
    return list(dict.fromkeys(m.group(0) for m in _SERVICE_NAME.finditer(question)))


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


def _candidate_calls(conv: Conversation, ev: _Evidence) -> list[tuple[str, dict[str, Any]]]:
    """Documents about the leading cause candidates (not just the first, so documents can tell
    them apart) and the recent changes that touch the leading one."""
    calls: list[tuple[str, dict[str, Any]]] = []
    leading = [p for _, p in rank_causes(ev)[:2]] or ([ev.symptom] if ev.symptom else [])
    if LOOKUP_KNOWLEDGE in conv.tools:
        for p in leading:
            query = literal(p.template)[:200] or conv.question[:200]
            calls.append((LOOKUP_KNOWLEDGE, {"query": query, "top_k": 5}))
    if QUERY_MYSQL in conv.tools and leading:
        # Changes before the leading cause began, up to the incident: the symptom may be their effect.
        starts = [ts for ts in (leading[0].first, ev.symptom.first if ev.symptom else None, ev.onset) if ts]
        span = (min(starts), max(starts)) if starts else None
        calls.extend((QUERY_MYSQL, {"sql": sql}) for sql in _change_queries(conv, leading[0], span))
    return calls


def _change_queries(conv: Conversation, focus: Pattern, span: tuple[datetime, datetime] | None) -> list[str]:
    tables = sql_tables(conv.tools.get(QUERY_MYSQL))
    wanted = focus.words | terms(conv.question)
    ranked = []
    for table, columns in tables.items():
        words = terms(f"{table} {' '.join(columns)}")
        value = 2 * len(words & CHANGE_TERMS) + len(words & wanted)
        if value >= 2:
            ranked.append((value, table, columns))
    ranked.sort(key=lambda item: -item[0])
    out = []
    for _, table, columns in ranked[:MAX_CHANGE_TABLES]:
        if not re.fullmatch(r"[A-Za-z_][\w]*", table):
            continue
        time_column = next((c for c in columns if TIME_COLUMN.search(c.lower()) and re.fullmatch(r"\w+", c)), None)
        where = order = ""
        if time_column:
            order = f" ORDER BY {time_column} DESC"
            if span is not None:
                # Only the changes that could explain it, whatever came later.
                start, end = (_sql_ts(span[0] - CHANGE_LOOKBACK), _sql_ts(span[1] + CHANGE_GRACE))
                where = f" WHERE {time_column} >= '{start}' AND {time_column} <= '{end}'"
        out.append(f"SELECT * FROM {table}{where}{order} LIMIT 20")  # noqa: S608 - identifiers checked above
    return out


def _sql_ts(ts: datetime) -> str:
    return ts.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


# --- writing -------------------------------------------------------------------------------


def _claim(statement: str, call_id: str, quote: str) -> dict[str, Any]:
    return {"statement": statement, "citations": [{"tool_call_id": call_id, "quote": quote}]}


def write_draft(conv: Conversation, analysis: Analysis | None = None) -> dict[str, Any]:
    a = analysis or analyse(conv)
    zh = has_cjk(conv.question)
    s, c = a.symptom, a.cause
    if s is None or c is None:
        return {
            "conclusion": (
                "收集到的证据不足以确定原因。"
                if zh
                else "The evidence gathered does not support a conclusion about the cause."
            ),
            "root_cause": "",
            "claims": [],
            "recommendations": [],
            "limitations": a.limitations,
        }
    claims = []
    services = ", ".join(s.services) or "?"
    s_quote = _quote(s.example)
    claims.append(
        _claim(
            f"{services} 在 {s.window()} 期间记录了 {s.count} 条 {s.level} 日志，例如“{s_quote}”。" if zh
            else f"{services} logged {s.count} {s.level} events like “{s_quote}” between {s.window()}.",
            s.call_id, s_quote,
        )
    )  # fmt: skip
    c_services = ", ".join(c.services) or "?"
    if c is not s:
        c_quote = _quote(c.example)
        lead = ""
        if c.first and s.first and c.first < s.first:
            minutes = max(1, round((s.first - c.first).total_seconds() / 60))
            lead = f"，比症状早 {minutes} 分钟" if zh else f", {minutes} min before the first symptom"
        claims.append(
            _claim(
                f"{c_services} 自 {c.window().split(' – ')[0]} 起记录了 {c.count} 条“{c_quote}”{lead}。" if zh
                else f"{c_services} logged “{c_quote}” {c.count} times starting {c.window().split(' – ')[0]}{lead}.",
                c.call_id, c_quote,
            )
        )  # fmt: skip
    if a.passage is not None:
        p = a.passage
        section = p.section.removeprefix(p.title).removeprefix(" › ") if p.title else p.section
        where = " › ".join(x for x in (p.title, section) if x)
        claims.append(
            _claim(
                f"知识库（{where}）指出：“{p.sentence}”"
                if zh
                else f"The knowledge base ({where}) says: “{p.sentence}”",
                p.call_id,
                p.sentence,
            )
        )
    if a.change is not None:
        row = a.change
        claims.append(
            _claim(
                f"变更记录：“{row.quote}”（{', '.join(row.columns)}）。" if zh else f"A recorded change: “{row.quote}” ({', '.join(row.columns)}).",
                row.call_id, row.quote,
            )
        )  # fmt: skip
    cause_text = literal(c.template) or _quote(c.example)
    symptom_text = literal(s.template) or s_quote
    change_text = ""
    if a.change is not None:
        change_text = f"，发生在变更“{a.change.quote}”之后" if zh else f", after the change “{a.change.quote}”"
    if c is s:
        conclusion = (
            f"{c_services} 的问题直接由“{cause_text}”引起{change_text}。" if zh
            else f"The reported problem is the error “{cause_text}” in {c_services}{change_text}."
        )  # fmt: skip
    else:
        conclusion = (
            f"“{symptom_text}”最可能由 {c_services} 的“{cause_text}”导致{change_text}。" if zh
            else f"“{symptom_text}” is most likely caused by “{cause_text}” in {c_services}{change_text}."
        )  # fmt: skip
    root_cause = f"{c_services}：{cause_text}{change_text}" if zh else f"{cause_text} ({c_services}){change_text}"
    if a.passage is not None and a.passage.title:
        root_cause += f"（参见“{a.passage.title}”）" if zh else f" — see “{a.passage.title}”"
    recommendations = a.recommendations or [
        "在变更系统之前，先在受影响的服务上确认以上发现。"
        if zh
        else "Confirm these findings on the affected service before changing anything."
    ]
    return {
        "conclusion": conclusion,
        "root_cause": root_cause,
        "claims": claims,
        "recommendations": recommendations,
        "limitations": a.limitations,
    }


def repair_draft(conv: Conversation, findings_text: str) -> dict[str, Any]:
    """Rewrite the draft without the claims the evidence check rejected."""
    draft = write_draft(conv)
    findings = re.search(r"\[.*\]", findings_text, re.DOTALL)
    rejected: set[int] = set()
    if findings:
        try:
            rejected = {
                int(f["claim"])
                for f in json.loads(findings.group(0))
                if isinstance(f, dict) and f.get("claim") is not None
            }
        except (ValueError, TypeError, KeyError):
            rejected = set()
    draft["claims"] = [c for i, c in enumerate(draft["claims"]) if i not in rejected]
    if not draft["claims"]:
        draft["root_cause"] = ""
    return draft
