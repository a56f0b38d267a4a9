"""Weighing the evidence: which pattern is the symptom, which the cause, and what changed.

It reasons the way an on-call engineer reads evidence, with no knowledge of any particular
incident. The *symptom* is the error pattern that matches what the engineer reported and began
when they say it did (a time in the question is resolved against the logs). The *cause*
candidates are other error patterns that begin shortly before the symptom, use the vocabulary
of something running out or breaking or state a reason, share its service or its node, are
blamed by other services' errors or are what such an error depends on (a proxy reporting its
upstream is a witness, not a cause), and are backed by a document or by a recent change; what
the team's documents call noise, and a wait that ran out, are none. A change is weighed by how shortly before the pattern it came,
what it touches (the pattern's service, a blamed dependency, words the two share and little
else does) and how many new warnings began right after it and before the next change. When the
evidence shows no cause, :func:`analyse` says what is missing instead.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from harness.guards.injection import looks_like_instruction
from harness.llm.offline.chat import sentences
from harness.llm.offline.conversation import Conversation
from harness.llm.offline.evidence import (
    ChangeRow,
    Passage,
    Pattern,
    change_rows,
    empty_windows,
    knowledge_passages,
    literal,
    log_patterns,
)
from harness.llm.offline.lexicon import (
    CAUSE_TERMS,
    CREATION_TERMS,
    HANDLED_INPUT,
    LOOPBACK_LISTEN,
    NOISE_CUE,
    ORCHESTRATOR_DIAGNOSIS,
    REFUSED,
    RESTATEMENT,
    SERVER_LIMIT,
    STATE_TERMS,
    STATED_REASON,
    STATIC_REASON,
    SYMPTOM_TERMS,
    TIMED_OUT,
    is_recommendation,
    related_components,
    related_settings,
    salient,
    stem,
    terms,
)
from harness.llm.offline.when import resolve, stated_time
from harness.logs import log_template, workload_of
from harness.text import has_cjk
from harness.tools.evidence import LOOKUP_KNOWLEDGE, QUERY_LOGS, QUERY_MYSQL

#: A candidate scoring less is no cause (see :func:`rank_causes`).
MIN_CAUSE_SCORE = 3.0
#: The log window searched around a symptom's onset: causes start shortly before it.
INCIDENT_LEAD = timedelta(minutes=60)
INCIDENT_TAIL = timedelta(minutes=15)
#: a state row observed further than this from the symptom's beginning says nothing of it
STATE_SPAN = timedelta(hours=12)
#: A symptom begins around the time the report gives: at most this long before it, or after it.
REPORT_LEAD = timedelta(minutes=45)
REPORT_LAG = timedelta(minutes=90)
#: A recorded change can explain a pattern that starts up to a day after it.
CHANGE_LOOKBACK = timedelta(days=1)
CHANGE_GRACE = timedelta(minutes=5)
#: What a change breaks begins within this long after it.
ALIGNED = timedelta(minutes=15)
#: A record that only says something was created is a change this close to the onset, no earlier.
CREATION_LEAD = timedelta(minutes=30)
#: A candidate that names no failure is one only when a change explains it this well (see
#: :func:`_change_support`): what began right after a change that touches it.
TIED_TO_CHANGE = 3.0
#: A change that explains the symptom this well (just before it, touching the setting such an
#: error is about) is its cause, unless a candidate states a reason or is tied to a change as well.
CHANGE_EXPLAINS = 6.0
#: A subject's failure over before the reported time, this long before at most, may be what the
#: report is about (a nightly job that failed, its alert in the morning).
STALE_FAILURE = timedelta(hours=6)
#: Shared words this rare (summed rarity) link a component to the symptom: a host, a dependency.
SHARED_RARITY = 1.0
#: a word with a rarity under this is in nearly every pattern and change: it ties nothing
COMMON_WORD = 0.1


@dataclass
class Analysis:
    """What the evidence shows: the symptom, its cause, the document and the change that explain
    it, what to do, and what is missing."""

    symptom: Pattern | None = None
    cause: Pattern | None = None
    passage: Passage | None = None
    change: ChangeRow | None = None
    recommendations: list[str] = field(default_factory=list)
    limitations: list[str] = field(default_factory=list)
    ignored_instructions: int = 0


def _onset_score(candidate: Pattern, began: datetime | None) -> float:
    """A cause starts shortly before the symptom ``began`` and is still going when it does."""
    if began is None or candidate.first is None:
        return 0.0
    lead = (began - candidate.first).total_seconds()
    if lead < -120:
        score = -2.0  # begins after the symptom: an effect, not a cause
    elif lead < -1:
        score = 1.0  # just after it: as likely what followed as what the clocks put a moment late
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


def _followed_by(row: ChangeRow, ev: Evidence) -> int:
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


def _change_support(p: Pattern, ev: Evidence) -> tuple[float, ChangeRow | None]:
    """The recorded change that best explains the pattern, and how well: it precedes the pattern
    (the closer the better), touches what the pattern is about (its service, the words the two
    share and little else has) and was followed at once by new warnings."""
    own = p.words
    related = related_settings(f"{p.template} {p.example}")
    # A pattern older than the incident (its words logged at an earlier rollout too) may have
    # been brought back by a change just before the incident: both times are anchors. (Not one
    # that was over by then: nothing brought it back.)
    onset, began = ev.onset, ev.symptom_began
    over = p.last is not None and began is not None and p.last < began - timedelta(minutes=1)
    going = onset is not None and p.first is not None and not over
    anchors = sorted({t for t in (p.first, onset if going else None) if t is not None})
    best: tuple[float, ChangeRow | None] = (0.0, None)
    for row in ev.rows:
        # An undated row (a probe's settings) is how things are, not a change before the incident.
        if not row.is_change or row.at is None or _stale_creation(row, ev.onset):
            continue
        leads = [a - row.at for a in anchors if a - CHANGE_LOOKBACK <= row.at <= a + CHANGE_GRACE]
        if anchors and not leads:
            continue
        # (words nearly everything uses, "order" in an orders system, tie nothing together)
        topic = min(sum(r for w in own & row.words if (r := ev.rarity.get(w, 0.0)) >= COMMON_WORD), 3.0)
        # the setting such an error is about ("exec format error": the nodes' architecture)
        setting = 2.5 if related & row.words else 0.0
        topic += setting
        # the pattern's own service, or one the incident's errors point at (its dependency), or a
        # component both name (the pattern's "host profile-db", the change's "scale profile-db")
        named_both = {w for w in own & row.words if "-" in w and w not in p.services}
        # (or one of its instances: ``orders-mysql-0`` of the StatefulSet ``orders-mysql``)
        instances = {workload_of(w) for w in row.words if "-" in w}
        touches = (
            1.0 if set(p.services) & (row.words | instances) else 0.5 if ev.blamed & row.words or named_both else 0.0
        )
        if not topic and not touches:
            continue
        near = max((_proximity(lead) for lead in leads), default=0.0)
        value = topic + touches + near + 0.5 * min(ev.followed.get(id(row), 0), 4)
        if value > best[0]:
            best = (value, row)
    return best


def _stale_creation(row: ChangeRow, onset: datetime | None) -> bool:
    """A record that something was created, long before the incident: that is how things came
    to be, not what changed (a creation is a change only close to the onset)."""
    if not row.words & CREATION_TERMS or row.words & (CAUSE_TERMS | SYMPTOM_TERMS):
        return False
    return onset is not None and row.at is not None and onset - row.at > CREATION_LEAD


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
class Evidence:
    """Everything read from the conversation, with what the weighing needs precomputed."""

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
    #: the workloads the question is about (services of the evidence it names), see ``subject_of``
    subject: frozenset[str] = frozenset()
    #: the host names the question gives the subject by (``dash.ops.example.internal``): a line
    #: that names one is about it (a proxy's line for that virtual host)
    addresses: frozenset[str] = frozenset()
    #: the subject and the components its warnings name, transitively: what can be a cause
    linked: frozenset[str] = frozenset()
    #: services whose warnings say a connection to them was refused
    refused: frozenset[str] = frozenset()
    #: the machines the subject's warnings came from (its pods' nodes): what goes wrong on one of
    #: them (the kernel dropping packets, a clock stepped back) bears on the subject
    hosts: frozenset[str] = frozenset()
    #: what the team's documents about these components call noise ("Known noise: …"), see
    #: :func:`noise_notes`
    noise: tuple[str, ...] = ()

    def about_subject(self, p: Pattern) -> bool:
        """Whether the pattern is the subject's own, or names it."""
        if not self.subject:
            return True
        text = f"{p.template} {p.example}".lower()
        return bool(set(p.services) & self.subject) or any(_mentions(text, s) for s in (*self.subject, *self.addresses))

    def at_address(self, p: Pattern) -> bool:
        """Whether the pattern names a host name the question gives the subject by."""
        text = f"{p.template} {p.example}".lower()
        return any(_mentions(text, a) for a in self.addresses)

    def is_linked(self, p: Pattern) -> bool:
        """Whether the pattern can bear on the subject: it is the subject's or a dependency's its
        warnings name, it names the subject, or it shares rare words with the symptom (a host,
        a shared dependency)."""
        if self.subject and (set(p.services) & self.linked or self.about_subject(p) or set(p.hosts) & self.hosts):
            return True
        # With no workload named, the symptom's own services stand for it.
        own = frozenset(self.symptom.services) if self.symptom else frozenset()
        if not self.subject and (
            not own or set(p.services) & own or any(_mentions(f"{p.template} {p.example}".lower(), s) for s in own)
        ):
            return True
        shared = p.words & (self.symptom.words if self.symptom else frozenset()) - {*self.subject, *own}
        return sum(self.rarity.get(w, 0.0) for w in shared) >= SHARED_RARITY

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


def reported_onset(
    conv: Conversation,
    patterns: list[Pattern],
    asked: AbstractSet[str] = frozenset(),
    about: Callable[[Pattern], bool] = lambda p: True,
) -> datetime | None:
    """The time the question gives for the start of the problem, if any, as a UTC instant.

    A time without a date is resolved against the times of the warnings that speak of what the
    question describes (its words, its subject), when there are any: the reporter gives the
    time of their problem, not of whatever else the logs hold on some other day."""
    stated = stated_time(conv.question)
    if stated is None:
        return None
    spoken = [p for p in patterns if p.rank >= 2 and len(asked & p.words) >= 2 and about(p)] if asked else []
    # (a line that says more of what the question describes says more of which day it was)
    seen = [
        (ts, float(len(asked & p.words)) if spoken else 1.0)
        for p in spoken or patterns
        for ts in (p.first, p.last)
        if ts is not None
    ]
    return resolve(stated, [ts for ts, _ in seen], empty_windows(conv), [weight for _, weight in seen])


def _fits_report(p: Pattern, reported: datetime | None) -> int:
    """1 when the pattern begins around the reported time, -1 when it cannot be what was reported
    (long there before, or over before it), 0 when unknown."""
    if reported is None or p.first is None:
        return 0
    if p.last is not None and p.last < reported - CHANGE_GRACE:
        return -1
    return 1 if reported - REPORT_LEAD <= p.first <= reported + REPORT_LAG else -1


def _services_counted(conv: Conversation) -> set[str]:
    """The services a log query counted lines of: all the query matched, not only the lines and
    templates it returned (a busy store's latest lines are another incident's)."""
    return {
        str(name)
        for obs in conv.results(QUERY_LOGS)
        if isinstance(counts := obs.view.get("counts_by_service"), dict)
        for name in counts
        if name
    }


def gather(conv: Conversation) -> Evidence:
    """Read the conversation's evidence and find the symptom the question describes."""
    patterns, ignored = log_patterns(conv)
    rows = change_rows(conv)
    known = {s for p in patterns for s in p.services if s} | _services_counted(conv)
    subject = subject_of(conv.question, known)
    patterns += state_patterns(rows, known | subject)
    # The error the question quotes is the symptom's, whichever workload logs it: it is as much
    # what the question is about as the workload it names ("the prefill route" of the frontend).
    quoted = quoted_messages(conv.question)
    said = {id(p): p for p in patterns if quoted and quotes_it(p, quoted)}
    if subject:
        subject |= {s for p in said.values() for s in p.services if s}
    asked = terms(conv.question) | {w for s in subject for w in salient(s)}
    addresses = frozenset(_ADDRESS.findall(conv.question.lower())) if subject else frozenset()
    probe = Evidence(patterns, ignored, None, rows, set(), asked, subject=subject, addresses=addresses)
    reported = reported_onset(conv, patterns, asked, probe.about_subject)
    # The question names the workload it is about: the symptom is that workload's (or names it).
    # With neither a subject nor a time to anchor it, one shared word ("slow") is not enough.
    least = 1 if subject or reported is not None else 2
    # When the reported time's window was read whole, what it does not show is not the symptom.
    relevant = [
        p
        for p in patterns
        if ((p.rank >= 2 and len(asked & p.words) >= least and probe.about_subject(p)) or id(p) in said)
        and not (reported is not None and p.outside_window)
    ]
    # The symptom is what the question describes, beginning when the reporter says it did; between
    # equally close patterns, one that does not name a cause ("timed out", not "pool exhausted") is
    # the better description of an effect.
    # (what the team's documents about the subject call noise describes no incident, when
    # something else does)
    notes = noise_notes(conv, subject) if subject else ()
    symptom = (
        max(
            relevant,
            key=lambda p: (
                _fits_report(p, reported),
                id(p) in said,
                not documented_noise(p, notes),
                # the subject's own lines, not a template the subject shares with strangers
                not subject or set(p.services) <= subject or probe.at_address(p),
                not p.table,  # a state row is the symptom only when no log line is
                len(asked & p.words),
                not explains_itself(p),
                p.rank,
                p.count,
            ),
        )
        if relevant
        else None
    )
    texts = [
        str(c.get("text", ""))
        for o in conv.results(LOOKUP_KNOWLEDGE)
        for c in o.view.get("chunks") or []
        if isinstance(c, dict)
    ]
    knowledge_words = {w for text in texts for w in salient(text)}
    documented = [sentence for text in texts for sentence in sentences(text) if not looks_like_instruction(sentence)]
    ev = Evidence(
        patterns,
        ignored,
        symptom,
        rows,
        knowledge_words,
        asked,
        reported,
        _rarity(patterns, rows),
        _blamed_services(patterns),
        subject=subject,
        addresses=addresses,
        linked=_linked(patterns, subject, known, documented),
    )
    ev.followed = {id(row): _followed_by(row, ev) for row in rows if row.is_change}
    ev.refused = frozenset(s for p in patterns if p.rank >= 2 and REFUSED.search(p.example) for s in p.services)
    ev.hosts = frozenset(h for p in patterns if p.rank >= 2 and subject and ev.about_subject(p) for h in p.hosts)
    ev.noise = noise_notes(conv, ev.linked or frozenset(symptom.services if symptom else ()))
    return ev


_NAME = re.compile(r"(?<![\w.-])[a-z0-9][a-z0-9.-]*[a-z0-9](?![\w-])")
#: a host name of three labels or more ending in a word: ``dash.ops.example.internal`` (not a
#: version, ``3.9.0``, an address, nor a Java package, ``org.apache.kafka.clients``)
_ADDRESS = re.compile(
    r"(?<![\w.-])(?!(?:org|com|net|io|java|javax|jakarta)\.)[a-z0-9-]+(?:\.[a-z0-9-]+)+\.[a-z]{2,12}(?![\w.-])"
)


def _mentions(text: str, name: str) -> bool:
    """Whether lower-case ``text`` names ``name`` as a whole word (``checkout-api``, not ``checkout-api-v2``)."""
    return bool(name) and re.search(rf"(?<![\w-]){re.escape(name.lower())}(?![\w-])", text) is not None


#: a message the question quotes: 'request timed out', "…", `…`, “…”, 「…」 (not an apostrophe)
_QUESTION_QUOTE = re.compile(
    r"(?<![\w'])'([^'\n]{8,}?)'(?![\w'])|\"([^\"\n]{8,}?)\"|`([^`\n]{8,}?)`|“([^”\n]{8,}?)”|‘([^’\n]{8,}?)’|「([^」\n]{4,}?)」"
)
#: where the reporter left part of a quote out
_ELLIPSIS = re.compile(r"\s*(?:\.{3}|…)\s*")
#: a part of a quote shorter than this (a word, a number) is not looked for
QUOTE_PART = 6


def quoted_messages(question: str) -> tuple[tuple[str, ...], ...]:
    """The messages the question quotes, each as the parts (lower-cased) the reporter kept."""
    quotes = (next(g for g in m.groups() if g) for m in _QUESTION_QUOTE.finditer(question))
    parts = (tuple(x for x in _ELLIPSIS.split(q.strip().lower()) if len(x) >= QUOTE_PART) for q in quotes)
    return tuple(q for q in parts if q)


def quotes_it(p: Pattern, quoted: Sequence[tuple[str, ...]]) -> bool:
    """Whether one of the question's quoted messages is in the pattern's lines."""
    text = f"{p.template}\n{p.example}".lower()
    return any(all(part in text for part in q) for q in quoted)


def subject_of(question: str, services: AbstractSet[str]) -> frozenset[str]:
    """The workloads of the evidence the question names: by name, or by one of their pods'
    (``checkout-api-7d9f8b6c5d-xk2p9`` is ``checkout-api``)."""
    q = question.lower()
    pods = {workload_of(name) for name in _NAME.findall(q)}
    return frozenset(
        s for s in services if len(s) > 2 and (s.lower() in pods or any(_mentions(q, n) for n in _spoken(s)))
    )


_ROLE_SUFFIX = re.compile(r"[-_](service|svc|api|app|server|worker|web|backend|frontend|bff)$")


def _spoken(service: str) -> set[str]:
    """How a question names a service: ``storefront-api``, "storefront api", "storefront"."""
    name = service.lower()
    names = {name, name.replace("-", " ").replace("_", " ")}
    base = _ROLE_SUFFIX.sub("", name)
    # "storefront" for storefront-api, "order export" for order-export-worker; but a short
    # ordinary word ("search" of search-api) names nothing by itself.
    if base != name and (len(base) >= 7 or "-" in base or "_" in base):
        names.add(base.replace("-", " "))
    return names


def _linked(
    patterns: list[Pattern], subject: frozenset[str], known: AbstractSet[str], documented: Sequence[str] = ()
) -> frozenset[str]:
    """The subject and, transitively, the components its warnings name: what it depends on; and
    the components a sentence of the team's documents names together with the subject ("account-api
    serves the app through mobile-edge"): a call the logs need not show."""
    linked = set(subject)
    # the components what the subject's errors are about depends on (the cluster resolver, for a
    # name that does not resolve)
    for p in patterns:
        if p.rank >= 2 and set(p.services) & subject:
            parts = related_components(f"{p.template} {p.example}")
            linked.update(s for s in known if _names_component(s, parts))
    for sentence in documented if subject else []:
        text = sentence.lower()
        if any(_mentions(text, s) for s in subject):
            # (by its name or one of its pods': ``orders-mysql-1`` is the StatefulSet ``orders-mysql``'s)
            pods = {workload_of(name) for name in _NAME.findall(text)}
            linked.update(s for s in known if len(s) > 3 and (_mentions(text, s) or s in pods))
    grown = bool(linked)
    while grown:
        grown = False
        for p in patterns:
            if p.rank < 2 or not set(p.services) & linked:
                continue
            text = f"{p.template} {p.example}".lower()
            for s in known - linked:
                if len(s) > 3 and _mentions(text, s):
                    linked.add(s)
                    grown = True
    return frozenset(linked)


def state_patterns(rows: list[ChangeRow], services: AbstractSet[str]) -> list[Pattern]:
    """The rows of state tables (``pod_status``: phase, reason, exit code) that record a workload
    down for a reason the orchestrator states (OOMKilled, an image that cannot be pulled, a failed
    probe), as patterns of that workload: a state is evidence as much as a log line."""
    found: dict[tuple[str, str], Pattern] = {}
    seen: set[tuple[str, str]] = set()
    for row in rows:
        if row.is_change or (row.table, row.quote) in seen or not ORCHESTRATOR_DIAGNOSIS.search(row.quote):
            continue
        seen.add((row.table, row.quote))  # the same row from another query is no second row
        if not terms(f"{row.table} {' '.join(row.columns)}") & STATE_TERMS:
            continue
        text = row.quote.lower()
        named = {workload_of(name) for name in _NAME.findall(text)}
        owners = tuple(sorted(s for s in services if s.lower() in named or _mentions(text, s)))
        # else the workload of a pod the row names (ledger-worker-7c9d5b8f4-q2mzx → ledger-worker)
        owners = owners or tuple(sorted({w for n in _NAME.findall(text) if len(n) - len(w := workload_of(n)) >= 6}))
        key = (row.table, log_template(row.quote))
        known = found.get(key)
        if known is not None:
            known.count += 1
            if row.at is not None and (known.first is None or row.at < known.first):
                known.first = row.at
            if row.at is not None and (known.last is None or row.at > known.last):
                known.last = row.at
            continue
        found[key] = Pattern(
            template=key[1],
            count=1,
            level="ERROR",
            services=owners,
            first=row.at,
            last=row.at,
            example=row.quote,
            call_id=row.call_id,
            table=row.table or "?",
        )
    return list(found.values())


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


def _names_component(service: str, parts: Sequence[str]) -> bool:
    """Whether the service's name holds one of ``parts`` (``coredns`` holds "dns")."""
    return any(part in service.lower() for part in parts)


def _of_components(p: Pattern, parts: Sequence[str]) -> bool:
    """Whether the pattern is of a component whose name holds one of ``parts``."""
    return any(_names_component(s, parts) for s in p.services)


def noise_notes(conv: Conversation, about: AbstractSet[str]) -> tuple[str, ...]:
    """The sentences of the retrieved documents that say what is noise ("Known noise: …", a
    "Known noise" section, "harmless"), from documents about ``about`` (another system's noise
    says nothing of this one), or when none names them, from every document retrieved for the
    question."""
    chunks = [c for o in conv.results(LOOKUP_KNOWLEDGE) for c in o.view.get("chunks") or [] if isinstance(c, dict)]
    # a document is about them when any of its retrieved parts names one
    documents = {
        str(c.get("document_id"))
        for c in chunks
        if any(_mentions(f"{c.get('title', '')} {c.get('section', '')} {c.get('text', '')}".lower(), s) for s in about)
    } or {str(c.get("document_id")) for c in chunks}
    notes: dict[str, None] = {}
    for chunk in chunks:
        if str(chunk.get("document_id")) in documents:
            text = str(chunk.get("text", ""))
            whole = bool(NOISE_CUE.search(str(chunk.get("section", ""))))
            for sentence in sentences(text):
                if (whole or NOISE_CUE.search(sentence)) and not looks_like_instruction(sentence):
                    notes[sentence] = None
    return tuple(notes)


_QUOTED = re.compile(r"`([^`]+)`|\"([^\"]+)\"|“([^”]+)”|「([^」]+)」")
#: a quote shorter than this is a word of the item (`_ga`), not a line's words to find
_QUOTE_MIN = 6
_ITEM_BREAK = re.compile(r"[;；，、]|,\s|\s(?:and|or)\s")
_ASIDE = re.compile(r"\([^)]*\)|（[^）]*）")


def documented_noise(p: Pattern, notes: Sequence[str]) -> bool:
    """Whether a note calls the pattern noise: one item of its list quotes the pattern's words
    (every quote the item holds: "`Query exceeded 2000 ms` lines for `FinanceExport…`" is one
    query's, not every slow one), or, quoting nothing, shares most of its words with it."""
    if not notes:
        return False
    text = f"{p.template} {p.example}".lower()
    # ("font warnings": a line's level is a word of it too)
    words = p.words | salient(p.example) | salient(p.level.lower())
    for note in notes:
        for named, said in _noise_items(note):
            if named:
                if all(q in text for q in named):
                    return True
                continue
            if len(said) >= 2 and len(said & words) >= max(2, math.ceil(0.6 * len(said))):
                return True
    return False


_HELD = re.compile(r"\x00(\d+)\x00")


@functools.lru_cache(maxsize=1024)
def _noise_items(note: str) -> tuple[tuple[tuple[str, ...], frozenset[str]], ...]:
    """The items a note lists, each with the quotes it holds (lower-cased) and the words it says
    outside them and its asides: a quote is kept whole while the note is split, whatever
    punctuation it holds. Read once per note, however many patterns are held against it."""
    quotes: list[str] = []

    def hold(m: re.Match[str]) -> str:
        quoted = next(g for g in m.groups() if g)
        if len(quoted) < (4 if has_cjk(quoted) else _QUOTE_MIN):
            return f" {quoted} "
        # (what the writer left out, `Ignored ...`, is not looked for)
        parts = [part for part in _ELLIPSIS.split(quoted.lower()) if part.strip()]
        quotes.extend(parts)
        return "".join(f" \x00{len(quotes) - len(parts) + i}\x00 " for i in range(len(parts)))

    held = _QUOTED.sub(hold, note)
    items = _ITEM_BREAK.split(NOISE_CUE.sub(" ", held))
    return tuple((tuple(quotes[int(i)] for i in _HELD.findall(item)), _said(item)) for item in items)


#: where an item of a noise note goes on to say when the noise happens ("… during its own autoscaling")
_WHEN = re.compile(r"\s(?:during|while|whenever|when)\s", re.IGNORECASE)


def _said(item: str) -> frozenset[str]:
    """The words an item of a noise note names its lines by: not its quotes, asides or when it
    happens; lower-cased first, so that "CoreDNS" is the word a service's name ``coredns`` is."""
    return salient(_WHEN.split(_ASIDE.sub(" ", _HELD.sub(" ", item)))[0].lower())


def rank_causes(ev: Evidence) -> list[tuple[float, Pattern]]:
    """Cause candidates for the symptom, best first, with their scores."""
    symptom = ev.symptom
    if symptom is None:
        return []

    blamed = ev.blamed
    supported: dict[int, float] = {}

    def support(p: Pattern) -> float:
        if id(p) not in supported:
            supported[id(p)] = _change_support(p, ev)[0]
        return supported[id(p)]

    def score(p: Pattern) -> float:
        words = terms(p.template)
        causal = len(words & CAUSE_TERMS)
        value = 1.0 * min(causal, 3) - (1.0 if words & SYMPTOM_TERMS and not causal else 0.0)
        # A state row's time is when it was observed, not when the state began.
        # (a subject's failure over before the report, hours before it, is what it reports later)
        onset = 0.0 if p.table else 1.5 if _failed_before(p, ev) else _onset_score(p, ev.symptom_began)
        # (an error; or a warning that states a server's own limit reached, which many servers
        # log at WARN: Elasticsearch's flood-stage watermark, RabbitMQ's memory alarm)
        value += onset + (1.0 if p.rank >= 3 or (p.rank >= 2 and _server_limit(p)) else 0.0)
        if _reports_elsewhere(p, blamed):
            value -= 1.0  # a proxy or client telling of its upstream's failure: a witness, not a cause
        elif set(p.services) & set(symptom.services):
            value += 1.5
        if set(p.services) & blamed:
            value += 1.0  # other services' errors point at this one
        value += 0.5 * min(len(salient(p.template) & (ev.asked | symptom.words)), 2)
        if len(salient(p.template) & ev.knowledge_words) >= 2:
            value += 1.5
        value += min(support(p), 4.0) * 0.75
        if _listens_where_refused(p, ev):
            value += 3.0  # why the connections are refused, which those that are only restate
        if stated_reason(p) and not probe_timed_out(p):
            # the orchestrator or the system says why: OOMKilled, an image it cannot pull, a
            # failed probe, "exec format error", "too many clients", a table that is full
            value += 1.5
            if set(p.services) & ev.subject:
                value += 1.5  # and of the very workload asked about: what its clients say follows from it
        if only_waits(p):
            value -= 2.5  # a wait that ran out is how any slowness or loss shows: the symptom again
        if not ev.is_linked(p):
            # another component, with nothing tying it to the one the symptom is of (a weaker
            # presumption than a workload the question names, whose strangers are no cause at all)
            value -= 1.5

        return value + 0.5 * min(math.log10(max(p.count, 1)), 2.0)

    # A restart, a back-off, a crash loop: the failure restated, never its reason.
    # Nor is what began well after the symptom: an effect, or another incident.
    began = ev.symptom_began
    ranked = [
        (score(p), p)
        for p in ev.patterns
        if (p.rank >= 2 or _listens_where_refused(p, ev))
        and p is not symptom
        and p.template != symptom.template
        and not restates(p)
        and not (p.outside_window and not _failed_before(p, ev))
        # the team's own documents say it is noise
        and not documented_noise(p, ev.noise)
        # a wait that ran out in the symptom's own service, naming no other: the symptom again
        and not (only_waits(p) and set(p.services) <= set(symptom.services) and not _reports_elsewhere(p, blamed))
        # the question names the workload: another component with nothing tying it to it is no
        # cause, however loud (a log shipper's warnings, the clients' own account of the failure)
        and not (ev.subject and not ev.is_linked(p))
        # the symptom's own events told by another part of them (its stack trace's last frame, the
        # pool's line for the worker whose task then failed)
        and not _told_twice(p, symptom)
        # the symptom's own error quoted inside another line (an error handler's, a health check's
        # report of the very exception)
        and not _quotes_the_symptom(p, symptom)
        # a program passing over one item of its input and going on: handled, whatever followed
        and not (HANDLED_INPUT.search(p.template) and not stated_reason(p))
        # what says nothing broke or ran out ("cache refresh took 3s"), and follows no change that
        # touches it, explains no failure; nor does what the question itself tells of ("RabbitMQ
        # keeps closing the connections")
        and (
            names_a_failure(p)
            or _listens_where_refused(p, ev)
            or (support(p) >= TIED_TO_CHANGE and not _described_by(p, ev.asked))
        )
        and not (began is not None and p.first is not None and not p.table and p.first > began + INCIDENT_TAIL)
        # a probe that failed a few times and passed again before the symptom began: a pod starting
        # (a rollout's new pod not yet listening), not what broke later
        and not _probe_passed_again(p, began)
        # a state observed on another day is another incident's, and so are lines that ended then
        and not (began is not None and p.first is not None and p.table and abs(p.first - began) > STATE_SPAN)
        and not (began is not None and p.last is not None and not p.table and p.last < began - STATE_SPAN)
    ]
    ranked.sort(key=lambda sp: -sp[0])
    return _reason_before_waits(ranked)


def _reason_before_waits(ranked: list[tuple[float, Pattern]]) -> list[tuple[float, Pattern]]:
    """When the leading candidates only say that waits ran out, a candidate that states a reason
    (a table full, a quota reached) and began shortly before them, still going when they began,
    is why they did: it goes first."""
    waits: list[tuple[float, Pattern]] = []
    for value, p in ranked:
        if not only_waits(p):
            if waits and value >= MIN_CAUSE_SCORE and stated_reason(p):
                began = min((w.first for _, w in waits if w.first is not None), default=None)
                if (
                    began is None
                    or p.first is None
                    or (
                        began - INCIDENT_LEAD <= p.first <= began and (p.last is None or p.last >= began - CHANGE_GRACE)
                    )
                ):
                    return [(value, p), *(vp for vp in ranked if vp[1] is not p)]
            break
        waits.append((value, p))
    return ranked


#: lines of one service this close in time, as many of each, are the same events told twice
TOLD_TWICE = timedelta(seconds=1)


def _told_twice(p: Pattern, symptom: Pattern) -> bool:
    """Whether the pattern tells the symptom's own events again: the same service, about as many
    lines, beginning within a second of each other — unless it is the one of the two that states
    the reason ("sorry, too many clients already" beside the pool's timeout); or another
    service's lines of those very moments, no more of them, stating no reason."""
    if p.first is None or symptom.first is None or stated_reason(p):
        return False
    if p.services != symptom.services:
        # the other party's account of the same moments ("Connection shutdown" in the client the
        # second the broker closes it): begun with them, no more of them, over with them
        within = symptom.last is None or (p.last is not None and p.last <= symptom.last)
        return abs(p.first - symptom.first) <= TOLD_TWICE and p.count <= symptom.count and within
    if p.first == symptom.first and p.last == symptom.last:
        return True
    # (as many: a window's edge may cut one of a pair)
    alike = abs(p.count - symptom.count) <= max(1.0, 0.1 * symptom.count)
    return alike and abs(p.first - symptom.first) <= TOLD_TWICE


#: the symptom's words another line must hold, at least, to be the symptom quoted again
QUOTED_SYMPTOM_WORDS = 5


def _quotes_the_symptom(p: Pattern, symptom: Pattern) -> bool:
    """Whether the pattern is the symptom's own service holding the symptom's message ("Error
    handler threw an exception — …SQLTransientConnectionException: HikariPool-1 - Connection is
    not available, request timed out") and stating no reason of its own beside it. (Another
    service's line that holds it is where a client's error came from: the server's own words.)"""
    own = literal(symptom.template)
    if not set(p.services) & set(symptom.services):
        return False
    if len(own.split()) < QUOTED_SYMPTOM_WORDS or own.lower() not in p.template.lower():
        return False
    rest = p.template.lower().replace(own.lower(), " ")
    return not _reason_in(rest)


def _failed_before(p: Pattern, ev: Evidence) -> bool:
    """Whether the pattern is the subject's own failure in the hours before the reported time,
    over before it: a job that failed in the night shows in the morning's alert, outside the
    window read around it."""
    reported = ev.reported
    return bool(
        reported is not None
        and p.rank >= 3
        and set(p.services) & ev.subject
        and p.first is not None
        and p.last is not None
        and reported - STALE_FAILURE <= p.first
        and p.last <= reported
    )


def _described_by(p: Pattern, asked: AbstractSet[str]) -> bool:
    """Whether most of what the pattern says is in the question: it is what was reported."""
    words = salient(p.template) - set(p.services)
    return len(words) >= 2 and len(words & asked) >= 0.6 * len(words)


def names_a_failure(p: Pattern) -> bool:
    """Whether the pattern speaks of something that broke, ran out or was refused, states a
    reason in the orchestrator's or the system's words, or is a process giving up (FATAL); a
    measure under the threshold it quotes ("backlog 38 rows (threshold 500)") did not run out."""
    if p.rank >= 4 or stated_reason(p):
        return True
    return bool(terms(p.template) & CAUSE_TERMS) and not within_threshold(p.example)


#: a measure and the threshold it is held to: ``38 rows (threshold 500)``, ``412 ms, budget 1500 ms``
_AGAINST_THRESHOLD = re.compile(
    r"(?<![\w.])(\d+(?:\.\d+)?)\s*[a-z%]*\s*[(,;]?\s*(?:threshold|limit|budget|max(?:imum)?)\s*[=:]?\s*(\d+(?:\.\d+)?)",
    re.IGNORECASE,
)


def within_threshold(text: str) -> bool:
    """Whether every measure ``text`` holds against a threshold is under it."""
    pairs = [(float(a), float(b)) for a, b in _AGAINST_THRESHOLD.findall(text)]
    return bool(pairs) and all(a < b for a, b in pairs)


def _listens_where_refused(p: Pattern, ev: Evidence) -> bool:
    """An ordinary line that says a workload listens on its loopback address only, when
    connections to that workload are refused: then it is why (a probe or a service connects to
    the pod's own address)."""
    return bool(LOOPBACK_LISTEN.search(p.example)) and bool(set(p.services) & ev.refused)


def only_waits(p: Pattern) -> bool:
    """Whether all the pattern says went wrong is that a wait ran out (a timeout, a probe's
    deadline, a heartbeat's session), with no reason of its own."""
    if probe_timed_out(p):
        return True
    if stated_reason(p) or not TIMED_OUT.search(p.template):
        return False
    return not terms(TIMED_OUT.sub(" ", p.template)) & CAUSE_TERMS


_PROBE = re.compile(r"\b(?:readiness|liveness|startup)\s+probe\b", re.IGNORECASE)


#: how many failures of a probe a pod starting up may show, or over how long (a probe every 10 s
#: fails as often as the minute an application takes to start allows)
STARTUP_PROBE_FAILURES = 3
STARTUP_SPAN = timedelta(minutes=2)


def _probe_passed_again(p: Pattern, began: datetime | None) -> bool:
    """Whether the pattern is a probe that failed only a few times, or only for the while a pod
    takes to start, and was passing again a while before the symptom ``began``."""
    return (
        began is not None
        and p.last is not None
        and (p.count <= STARTUP_PROBE_FAILURES or (p.first is not None and p.last - p.first <= STARTUP_SPAN))
        and p.last < began - timedelta(minutes=1)
        and bool(_PROBE.search(p.template))
    )


def probe_timed_out(p: Pattern) -> bool:
    """Whether the reason the pattern states is a probe that waited in vain ("Readiness probe
    failed: … context deadline exceeded"): the workload answers slowly or its packets are lost,
    which is the symptom again, not why."""
    reason = stated_reason(p)
    return bool(_PROBE.search(reason)) and bool(TIMED_OUT.search(p.example))


def _beyond_restatement(p: Pattern) -> str:
    """The pattern's text without what only restates a failure."""
    return _without_restatement(f"{p.template} {p.example}")


@functools.lru_cache(maxsize=4096)
def _without_restatement(text: str) -> str:
    return RESTATEMENT.sub(" ", text)


def restates(p: Pattern) -> bool:
    """Whether the pattern only restates a failure (a restart, a back-off, a crash loop, a mount
    that timed out): nothing beyond the restatement states a reason."""
    text = f"{p.template} {p.example}"
    return bool(RESTATEMENT.search(text)) and not ORCHESTRATOR_DIAGNOSIS.search(_beyond_restatement(p))


def stated_reason(p: Pattern) -> str:
    """The reason the pattern states in an orchestrator's or the system's words ("oomkilled",
    "too many clients"), lower-cased, or ``""``."""
    return _reason_in(_beyond_restatement(p))


def _server_limit(p: Pattern) -> bool:
    """Whether the pattern states a limit of the server's own that was reached (a watermark, a
    quota, a table full, too many clients): what it then refuses, whatever level it is logged at.
    Not another reason (a service without endpoints, a failed probe), which a warning may state
    of what is only on its way to failing."""
    return SERVER_LIMIT.search(_beyond_restatement(p)) is not None


@functools.lru_cache(maxsize=4096)
def _reason_in(text: str) -> str:
    match = ORCHESTRATOR_DIAGNOSIS.search(text) or STATED_REASON.search(text)
    return _phrase(match) if match else ""


def _phrase(match: re.Match[str]) -> str:
    """A matched reason as it is compared: lower-cased, its spaces collapsed."""
    return " ".join(match.group(0).lower().split())


#: a container's state named for a static reason, without the reason's detail
_STATE_ONLY = re.compile(r"(err)?image\s*pull(back-?off)?|create\s*container\s*config\s*error", re.IGNORECASE)


def _static_reasons(p: Pattern) -> set[str]:
    """The details of the configuration or build reasons the pattern states (``STATIC_REASON``:
    "couldn't find key", "manifest unknown"; not the state they put a container in,
    "ImagePullBackOff"), lower-cased."""
    found = (_phrase(m) for m in STATIC_REASON.finditer(_beyond_restatement(p)))
    return {reason for reason in found if not _STATE_ONLY.fullmatch(reason)}


def explains_itself(p: Pattern) -> bool:
    """Whether the pattern names its own cause ("certificate has expired", "OOMKilled", "exec
    format error"), rather than restating a failure (a restart, a back-off) or telling of a wait
    that ran out ("Lock wait timeout exceeded": who held the lock is the question)."""
    if stated_reason(p):
        return True
    return bool(terms(p.template) & CAUSE_TERMS) and not restates(p) and not TIMED_OUT.search(p.template)


#: words of an orchestrator's diagnosis that say only that something failed
_FAILED = frozenset(stem(w) for w in ["failed", "failure", "fail", "error", "errored"])


def _told_by_the_question(p: Pattern, question: str) -> bool:
    """Whether the orchestrator's reason the pattern states is what the question already says
    ("kubectl describe shows liveness probe timeouts"): then it tells the reporter nothing, and
    the reason for it is still to be found."""
    match = ORCHESTRATOR_DIAGNOSIS.search(_beyond_restatement(p))
    if match is None:
        # no reason in anyone's words, only words of a cause ("failed to resolve"): the question
        # that already says them asks what lies behind them
        if stated_reason(p):
            return False
        words = terms(p.template) & CAUSE_TERMS
    else:
        words = terms(match.group(0)) - _FAILED
    return bool(words) and words <= terms(question)


def analyse(conv: Conversation, ev: Evidence | None = None) -> Analysis:
    """The symptom and its cause (a candidate scoring at least ``MIN_CAUSE_SCORE``, else the
    symptom itself when it names a cause), with the passage, change and recommendations that
    back it; the limitations either way."""
    ev = ev or gather(conv)
    result = Analysis(symptom=ev.symptom, ignored_instructions=ev.ignored)
    symptom = ev.symptom
    if symptom is not None:
        ranked = rank_causes(ev)
        names_its_cause = explains_itself(symptom) and not _told_by_the_question(symptom, conv.question)
        if names_its_cause and symptom.first is not None and STATIC_REASON.search(_beyond_restatement(symptom)):
            # A key missing from a secret, an image that cannot be pulled: no other component's
            # failure brings that about (a change does, which is looked for below); the workload's
            # own fuller account of it ("Failed to pull image …:4.12.0 … manifest unknown") may
            # say more than the symptom's words.
            details = _static_reasons(symptom)
            ranked = [
                (v, p)
                for v, p in ranked
                if set(p.services) & set(symptom.services) and len(_static_reasons(p) | details) > len(details)
            ]
        elif names_its_cause and symptom.first is not None:
            # A symptom that names its cause ("certificate has expired"): what only began after it
            # (the server's "bad certificate" from the same clients) is its echo, and what names no
            # cause of its own ("promotions lookup slow") explains less than it does.
            # What began at the very moment the symptom did, in the same service, is the same
            # failure told another way (the pool timing out on the server's refusal). What the
            # failure depends on (the resolver, for a name that does not resolve) is read however
            # it words its own failure: its worst line first.
            parts = related_components(f"{symptom.template} {symptom.example}")
            behind = [
                (v, p)
                for v, p in ranked
                if _of_components(p, parts) and p.first is not None and p.first <= symptom.first
            ]
            first = {id(p) for _, p in behind}
            ranked = sorted(behind, key=lambda vp: (-vp[1].rank, -vp[0])) + [
                (v, p)
                for v, p in ranked
                if id(p) not in first
                and explains_itself(p)
                and (
                    p.first is None
                    or p.table
                    or p.first < symptom.first
                    or (p.first == symptom.first and not set(p.services) & set(symptom.services))
                )
            ]
            # the same reason told earlier, by where it comes from (the database's own "too many
            # clients" before its clients quote it), says more than a pool's complaint beside it
            told = stated_reason(symptom)
            if told and not ORCHESTRATOR_DIAGNOSIS.search(told):
                # The system's own words for why ("certificate signed by unknown authority"): only
                # what speaks of the same thing goes deeper (not a probe refused at a restart), or
                # what such a failure depends on (the cluster resolver, for a name that does not
                # resolve).
                topic = salient(told)
                ranked = [
                    (v, p)
                    for v, p in ranked
                    if salient(stated_reason(p) or p.template) & topic or _of_components(p, parts)
                ]
            if not behind:
                # (told by another service: the same words in the symptom's own are the symptom again)
                def told_elsewhere(p: Pattern) -> float:
                    same = told and stated_reason(p) == told and set(p.services) - set(symptom.services)
                    return 2.0 if same else 0.0

                ranked.sort(key=lambda vp: -(vp[0] + told_elsewhere(vp[1])))
            if ev.subject and set(symptom.services) & ev.subject and ORCHESTRATOR_DIAGNOSIS.search(symptom.template):
                # The orchestrator says why the workload asked about is down ("Insufficient cpu"):
                # only what that workload depends on can say more, not a stranger sharing a word.
                ranked = [(v, p) for v, p in ranked if set(p.services) & ev.linked or set(p.hosts) & ev.hosts]
        if _changed_into(symptom, ranked, ev):
            result.cause = symptom  # the error began with a change to what it is about
        elif ranked and ranked[0][0] >= MIN_CAUSE_SCORE:
            result.cause = ranked[0][1]
        elif names_its_cause:
            result.cause = symptom  # a self-explaining error: "certificate has expired", "OOMKilled"
    cause = result.cause
    if cause is None:
        return _limitations(conv, result, ev)

    focus = cause.words | (symptom.words if symptom else set())
    passages = knowledge_passages(conv, cause.words) or knowledge_passages(conv, focus)
    result.passage = passages[0] if passages else None
    result.change = _change_support(cause, ev)[1]
    result.recommendations = _recommendations(
        conv, focus | (result.change.words if result.change else set()), result.passage, cause.words
    )
    return _limitations(conv, result, ev)


def _changed_into(symptom: Pattern, ranked: list[tuple[float, Pattern]], ev: Evidence) -> bool:
    """Whether a recorded change explains the symptom better than any candidate does: it came
    just before it and touches what it is about (``CHANGE_EXPLAINS``), while the leading
    candidate states no reason and no change explains it as well."""
    tied, row = _change_support(symptom, ev)
    if row is None or tied < CHANGE_EXPLAINS:
        return False
    if not ranked or ranked[0][0] < MIN_CAUSE_SCORE:
        return True
    leading = ranked[0][1]
    return not stated_reason(leading) and _change_support(leading, ev)[0] < tied


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


def _limitations(conv: Conversation, result: Analysis, ev: Evidence) -> Analysis:
    zh = has_cjk(conv.question)
    notes = result.limitations
    stated = stated_time(conv.question)
    if stated is not None and stated.day is None and stated.month_day is None and ev.reported is not None:
        # A time of day without a date: say which day was taken, so the reader can tell.
        day = ev.reported.strftime("%Y-%m-%d %H:%M UTC")
        notes.append(
            f"问题没有给出日期；按证据把所述时间定为 {day}，并阅读了其前后的日志。"
            if zh
            else f"The question gives no date; its time was taken as {day}, from the evidence, and the logs around it were read."
        )
    if ev.subject and result.symptom is None:
        names = ", ".join(sorted(ev.subject))
        notes.append(
            f"{names} 没有与所报告问题匹配的告警或错误；其他组件的告警与它没有关联，不作为原因。"
            if zh
            else f"{names} logged no WARN-or-worse line matching the report; other components' warnings are not tied to it, so none is taken as the cause."
        )
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
