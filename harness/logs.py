"""Log levels and message templates, defined once for every log source and for the analyst.

The database log source (:mod:`knowledge.logs.source`), the in-memory one
(:class:`harness.inmemory.InMemoryLogs`), the ``query_logs`` tool and the offline analyst all
speak of the same levels and group lines into the same templates, so that a diagnosis reads the
same whichever source answers it:

- **Levels.** :data:`LEVELS` in order of severity (a level filter is a minimum: WARN returns
  WARN, ERROR and FATAL), and the other spellings a caller may use for them
  (:data:`LEVEL_ALIASES`: ``WARNING``, ``ERR``, ``CRITICAL``, ``TRACE``). The log store keeps a
  line's rank; the parser of log files adds the vocabulary of particular formats (syslog's
  ``notice``, java.util.logging's ``severe``…) on top of these.
- **Templates.** :func:`log_template` masks a message's variable parts (ids, numbers, addresses,
  times) as ``<*>``; :class:`TemplateTally` adds up the lines of one template (count, highest
  level, services, first and last time, the earliest line as example), and
  :func:`group_templates` groups lines by their masked message. The database source, whose
  messages are many and varied, clusters the masked messages further with drain3, and tallies
  each cluster the same way.
- **Ranking.** :func:`keep_templates`: which of the ranked templates a result keeps.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Generic, Literal, TypeVar, get_args

from harness.ports import LogLine, LogTemplate

__all__ = [
    "LEVELS",
    "LEVEL_ALIASES",
    "LEVEL_RANK",
    "Level",
    "TemplateTally",
    "canonical_level",
    "group_templates",
    "keep_templates",
    "level_name",
    "level_rank",
    "log_template",
    "workload_of",
]

# --- levels --------------------------------------------------------------------------------

#: A level name, as the ``query_logs`` tool accepts it and every log source reports it.
Level = Literal["DEBUG", "INFO", "WARN", "ERROR", "FATAL"]
#: The level names, least severe first: a level's rank is its index.
LEVELS: tuple[Level, ...] = get_args(Level)
LEVEL_RANK: Mapping[str, int] = {name: rank for rank, name in enumerate(LEVELS)}
#: Other names callers use for a level (upper case).
LEVEL_ALIASES: Mapping[str, Level] = {"WARNING": "WARN", "ERR": "ERROR", "CRITICAL": "FATAL", "TRACE": "DEBUG"}


def canonical_level(word: str) -> Level | None:
    """The level a name or alias stands for, in any case; ``None`` for any other word."""
    upper = word.upper()
    if upper in LEVEL_RANK:
        return LEVELS[LEVEL_RANK[upper]]
    return LEVEL_ALIASES.get(upper)


def level_rank(level: str | None) -> int:
    """The rank of a level name or alias (DEBUG 0 … FATAL 4); 0 for none or an unknown word."""
    canonical = canonical_level(level) if level else None
    return LEVEL_RANK[canonical] if canonical is not None else 0


def level_name(rank: int) -> Level:
    """The name of a stored rank; INFO for a rank no level has."""
    return LEVELS[rank] if 0 <= rank < len(LEVELS) else "INFO"


# --- workloads -----------------------------------------------------------------------------

#: The random parts Kubernetes appends to the names of the pods it creates: the pod template
#: hash of a Deployment's ReplicaSet, then five characters. Both are drawn from an alphabet
#: without vowels (``bcdfghjklmnpqrstvwxz2456789``), so no word of a workload's own name
#: ("redis", "api") is ever taken for one.
_GENERATED = "[bcdfghjklmnpqrstvwxz2456789]"
_POD_SUFFIX = re.compile(rf"^(?P<workload>[a-z0-9][a-z0-9.-]*?)(?:-{_GENERATED}{{6,10}})?-{_GENERATED}{{5}}$")


_REPLICA_SET_SUFFIX = re.compile(rf"^(?P<workload>[a-z0-9][a-z0-9.-]*?)-{_GENERATED}{{6,10}}$")
#: a StatefulSet's pods are its name and an ordinal
_ORDINAL_SUFFIX = re.compile(r"^(?P<workload>[a-z0-9][a-z0-9.-]*?)-\d{1,4}$")
#: a CronJob names each Job it starts by its scheduled time, in minutes since the epoch
_SCHEDULED_SUFFIX = re.compile(r"^(?P<workload>[a-z0-9][a-z0-9.-]*?)-\d{8,10}$")


def workload_of(name: str, kind: str | None = None) -> str:
    """The workload a pod's name belongs to: ``checkout-api-7d9f8b6c5d-xk2p9`` → ``checkout-api``
    (a Deployment's pod), ``nightly-export-x7k2q`` → ``nightly-export`` (a Job's or DaemonSet's),
    ``nightly-export-28596540-x7k2q`` → ``nightly-export`` (a CronJob's), ``ledger-db-2`` →
    ``ledger-db`` (a StatefulSet's); any other name is returned unchanged. With ``kind`` the name is an
    object of that kind: a ReplicaSet's (``checkout-api-7d9f8b6c5d``) and a CronJob's Job's
    (``nightly-export-28596540``) lose their generated part too; other kinds name themselves."""
    if kind in (None, "Pod"):
        match = _POD_SUFFIX.match(name)
    elif kind == "ReplicaSet":
        match = _REPLICA_SET_SUFFIX.match(name)
    else:
        match = None
    if match is not None:
        name = match.group("workload")
    if kind in (None, "Pod", "Job"):
        scheduled = _SCHEDULED_SUFFIX.match(name)
        if scheduled is not None:
            return scheduled.group("workload")
    if match is None and kind in (None, "Pod") and (ordinal := _ORDINAL_SUFFIX.match(name)) is not None:
        return ordinal.group("workload")
    return name


#: The levels of a failure: a few of the rarer templates at these levels are always kept.
_SEVERE = LEVELS[LEVEL_RANK["ERROR"] :]

# --- templates -----------------------------------------------------------------------------

_MASKS = [
    re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I),
    re.compile(r"\b\d{4}-\d{2}-\d{2}[t ]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:z|[+-]\d{2}:?\d{2})?\b", re.I),
    re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b"),
    re.compile(r"\b0x[0-9a-f]+\b", re.I),
    # hex ids and mixed letter-digit tokens (request ids, hashes, pod suffixes)
    re.compile(r"\b(?=[0-9a-f]*\d)[0-9a-f]{6,}\b", re.I),
    re.compile(r"\b(?=[a-z]*\d)(?=\d*[a-z])[a-z0-9]{8,}\b", re.I),
    # prefixed ids: acc_77568041, bk_b67xulzdvp, pk_live_7f3c (a digit somewhere; max_connections stays)
    re.compile(r"\b[a-z]{1,8}_(?=[a-z0-9_]*\d)[a-z0-9_]{4,}\b", re.I),
    re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d+)?(?:ms|s|m|h|kb|mb|gb|%)?(?!\w)", re.I),
]


def log_template(message: str) -> str:
    """The message with its variable parts (ids, numbers, addresses, timestamps) as ``<*>``."""
    template = message
    for mask in _MASKS:
        template = mask.sub("<*>", template)
    return re.sub(r"(?:<\*>[\s,/:]*){2,}", "<*> ", template).strip()


#: A line's time as a source holds it: ISO-8601 text, or an aware datetime.
Timestamp = TypeVar("Timestamp", str, datetime)


@dataclass
class TemplateTally(Generic[Timestamp]):
    """What the lines of one template add up to, as they are read."""

    template: str = ""
    count: int = 0
    #: the rank of the highest level seen
    rank: int = 0
    services: set[str] = field(default_factory=set)
    hosts: set[str] = field(default_factory=set)
    first: Timestamp | None = None
    last: Timestamp | None = None
    #: the earliest line's message (of lines with the same time, the last one read)
    example: str = ""

    def add(self, ts: Timestamp, service: str, rank: int, message: str, host: str = "") -> None:
        self.count += 1
        self.rank = max(self.rank, rank)
        self.services.add(service)
        if host:
            self.hosts.add(host)
        if self.first is None or ts <= self.first:
            self.first, self.example = ts, message
        if self.last is None or ts > self.last:
            self.last = ts

    def summary(self, iso: Callable[[Timestamp], str]) -> LogTemplate:
        """The tally as the port reports it, times written by ``iso``."""
        return LogTemplate(
            template=self.template,
            count=self.count,
            level=level_name(self.rank),
            services=tuple(sorted(self.services)),
            first_ts="" if self.first is None else iso(self.first),
            last_ts="" if self.last is None else iso(self.last),
            example=self.example,
            hosts=tuple(sorted(self.hosts)),
        )


def group_templates(lines: Iterable[LogLine]) -> list[LogTemplate]:
    """The templates of ``lines``, one per masked message: most frequent first, and of equally
    frequent ones the one that began first."""
    tallies: dict[str, TemplateTally[str]] = {}
    for line in lines:
        template = log_template(line.message)
        tally = tallies.get(template)
        if tally is None:
            tally = tallies[template] = TemplateTally(template=template)
        tally.add(line.ts, line.service, level_rank(line.level), line.message, line.host)
    return sorted((tally.summary(str) for tally in tallies.values()), key=lambda t: (-t.count, t.first_ts))


# --- ranking -------------------------------------------------------------------------------


def keep_templates(ranked: Sequence[LogTemplate], keep: int) -> tuple[LogTemplate, ...]:
    """The ``keep`` most frequent of ``ranked`` (most frequent first), except that up to a third of
    the slots go to rarer ERROR and FATAL templates, in place of the least frequent milder ones of
    the lower half: a process that dies logs its FATAL once, while the proxy in front of it logs
    every failed request."""
    kept = list(ranked[:keep])
    severe = sorted(
        (t for t in ranked[keep:] if t.level in _SEVERE),
        key=lambda t: (-_SEVERE.index(t.level), -t.count),
    )
    milder = [t for t in reversed(kept[keep // 2 :]) if t.level not in _SEVERE]
    swap = min(len(severe), len(milder), keep // 3)
    if not swap:
        return tuple(kept)
    dropped = {id(t) for t in milder[:swap]}
    chosen = [t for t in kept if id(t) not in dropped] + severe[:swap]
    return tuple(sorted(chosen, key=lambda t: (-t.count, t.first_ts)))
