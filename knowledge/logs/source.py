"""The ``query_logs`` backend: :class:`DatabaseLogSource` over the stored log lines."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import Any, cast

from django.db import close_old_connections, connection
from django.db.models import Case, Count, IntegerField, Max, Min, Q, QuerySet, Value, When
from drain3 import TemplateMiner  # type: ignore[import-untyped]
from drain3.template_miner_config import TemplateMinerConfig  # type: ignore[import-untyped]

from harness.logs import TemplateTally, keep_templates, level_name, level_rank, log_template
from harness.ports import LogLine, LogQuery, LogResult
from knowledge.logs.parsing import normalise_level
from knowledge.models import LogEntry

__all__ = ["DatabaseLogSource"]

logger = logging.getLogger(__name__)
# drain3 announces every new miner at INFO; a fresh miner per query would flood the service log.
logging.getLogger("drain3.template_miner").setLevel(logging.WARNING)

#: Sorts a template that no line was counted for before every other.
_MIN_TS = datetime(1970, 1, 1, tzinfo=UTC)

#: What is known of one mined template: over the mined lines, or refined over all matches.
_Cluster = TemplateTally[datetime]


class DatabaseLogSource:
    """The :class:`~harness.ports.LogSource` over :class:`~knowledge.models.LogEntry`.

    Semantics are those of :class:`harness.inmemory.InMemoryLogs`: every word of the query must
    occur in the message (case-insensitively), ``level`` is a minimum, ``start``/``end`` are
    inclusive, lines come newest first up to ``limit``, ``total`` and the counts by level and
    service cover every match.

    Templates are mined with drain3 (a fresh in-memory miner per query) from messages whose
    variable parts (numbers, ids, IPs, uuids, hex, timestamps) were first masked as ``<*>`` by
    :func:`harness.logs.log_template`; each has its count, highest level, services, first and
    last time, and an actual message as example; :func:`harness.logs.keep_templates` chooses the
    ``max_templates`` kept.

    **The mined set is capped** at the newest ``mine_limit`` matches (20 000 by default), to
    keep the tool fast. When a query matches more, templates are only *discovered* among the
    newest ``mine_limit`` lines; the count, level, services and time range of each template kept
    are then measured over all matches in one more query, matching the template's constant parts
    as substrings (an approximation: a template's text may also occur in other messages).
    A pattern that appears only in older lines is not found; narrow the query to see it.
    """

    def __init__(self, *, max_templates: int = 15, mine_limit: int = 20_000, max_mined_chars: int = 2_000) -> None:
        self.max_templates = max_templates
        self.mine_limit = mine_limit
        #: messages are cut to this length before mining (the example is the whole message)
        self.max_mined_chars = max_mined_chars

    def query(self, query: LogQuery) -> LogResult:
        with _usable_connection():
            return self._query(query)

    def matching(self, query: LogQuery) -> QuerySet[LogEntry]:
        """The entries that match the query's filters, in no particular order."""
        qs = LogEntry.objects.order_by()
        if query.service:
            qs = qs.filter(service=query.service)
        floor = level_rank(normalise_level(query.level)) if query.level else 0
        if floor > 0:
            qs = qs.filter(level__gte=floor)
        if query.start is not None:
            qs = qs.filter(ts__gte=_utc(query.start))
        if query.end is not None:
            qs = qs.filter(ts__lte=_utc(query.end))
        for word in dict.fromkeys(query.query.lower().split()):
            qs = qs.filter(message__icontains=word)
        return qs

    def _query(self, query: LogQuery) -> LogResult:
        qs = self.matching(query)
        by_level: dict[str, int] = {}
        by_service: dict[str, int] = {}
        for level, service, n in qs.values_list("level", "service").annotate(n=Count("id")):
            by_level[level_name(level)] = by_level.get(level_name(level), 0) + n
            by_service[service] = by_service.get(service, 0) + n
        total = sum(by_level.values())
        if total == 0:
            return LogResult(lines=(), total=0)
        newest = qs.order_by("-ts", "-id").values_list("ts", "service", "level", "message", "attributes__host")
        limit = max(query.limit, 0)
        lines: list[LogLine] = []
        if limit > self.mine_limit:
            lines = [_line(*row[:4]) for row in newest[:limit]]
        clusters, mined = self._mine(newest[: self.mine_limit].iterator(chunk_size=2_000), lines, limit)
        ranked = sorted(clusters, key=lambda c: (-c.count, c.first or _MIN_TS))
        if total > mined:
            logger.info("log templates discovered in the newest %d of %d matching lines", mined, total)
            ranked = self._refine(qs, ranked[: self.max_templates * 2])
        templates = keep_templates([c.summary(_iso) for c in ranked], self.max_templates)
        return LogResult(tuple(lines[:limit]), total, by_level, by_service, templates)

    def _mine(
        self, rows: Iterator[tuple[datetime, str, int, str, Any]], lines: list[LogLine], limit: int
    ) -> tuple[list[_Cluster], int]:
        """Cluster the rows with drain3; the first ``limit`` rows also become ``lines``."""
        config = TemplateMinerConfig()
        config.drain_sim_th = 0.5
        config.parametrize_numeric_tokens = True
        miner = TemplateMiner(config=config)
        # Masking is cached per message, and the cluster per masked text: identical masked
        # texts always land in the same cluster, so drain3 sees each distinct one once.
        masked: dict[str, str] = {}
        cluster_of: dict[str, int] = {}
        clusters: dict[int, _Cluster] = {}
        mined = 0
        collect = not lines
        for ts, service, level, message, host in rows:
            if collect and len(lines) < limit:
                lines.append(_line(ts, service, level, message))
            mined += 1
            key = message[: self.max_mined_chars]
            text = masked.get(key)
            if text is None:
                text = masked[key] = log_template(key) or "<*>"
            cluster_id = cluster_of.get(text)
            if cluster_id is None:
                cluster_id = cluster_of[text] = miner.add_log_message(text)["cluster_id"]
            clusters.setdefault(cluster_id, _Cluster()).add(
                ts, service, level, message, host if isinstance(host, str) else ""
            )
        for cluster_id, found in clusters.items():
            found.template = miner.drain.id_to_cluster[cluster_id].get_template()
        return list(clusters.values()), mined

    def _refine(self, qs: QuerySet[LogEntry], ranked: list[_Cluster]) -> list[_Cluster]:
        """Measure the templates over every match, in one grouped query: each line is counted
        for the most specific template (the most constant text) whose constant parts it contains."""
        candidates = [(i, parts) for i, c in enumerate(ranked) if (parts := _constant_parts(c.template))]
        if not candidates:
            return ranked
        candidates.sort(key=lambda item: -sum(len(p) for p in item[1]))
        which = Case(
            *(When(Q(*(Q(message__contains=p) for p in parts)), then=Value(i)) for i, parts in candidates),
            default=Value(-1),
            output_field=IntegerField(),
        )
        grouped = cast(
            Iterable[dict[str, Any]],
            qs.annotate(template_index=which)
            .values("template_index", "service")
            .annotate(n=Count("id"), first=Min("ts"), last=Max("ts"), top=Max("level")),
        )
        # (the hosts stay those of the mined lines: where a template was seen, not all it matches)
        measured = {i: _Cluster(template=c.template, example=c.example, hosts=c.hosts) for i, c in enumerate(ranked)}
        for row in grouped:
            m = measured.get(row["template_index"])
            if m is not None:
                m.count += row["n"]
                m.rank = max(m.rank, row["top"])
                m.services.add(row["service"])
                m.first = row["first"] if m.first is None else min(m.first, row["first"])
                m.last = row["last"] if m.last is None else max(m.last, row["last"])
        # Where the substrings found fewer lines than the miner did (whitespace drain3
        # normalised, say), the approximation failed: keep what was mined.
        refined = [m if m.count >= c.count else c for c, m in zip(ranked, measured.values(), strict=True)]
        return sorted(refined, key=lambda c: (-c.count, c.first or _MIN_TS))


def _constant_parts(template: str) -> list[str]:
    """The constant text between a template's masks that is worth matching (3+ characters)."""
    parts = [p.strip() for p in template.split("<*>")]
    return [p for p in parts if len(p) >= 3 and any(ch.isalnum() for ch in p)]


@contextlib.contextmanager
def _usable_connection() -> Iterator[None]:
    """Drop a broken or expired connection before and after the query, as Django does around a
    request: tools run on long-lived pool threads, where nothing else would."""
    managed = not connection.in_atomic_block
    if managed:
        close_old_connections()
    try:
        yield
    finally:
        if managed and not connection.in_atomic_block:
            close_old_connections()


def _utc(ts: datetime) -> datetime:
    return ts.replace(tzinfo=UTC) if ts.tzinfo is None else ts.astimezone(UTC)


def _iso(ts: datetime) -> str:
    return _utc(ts).isoformat().replace("+00:00", "Z")


def _line(ts: datetime, service: str, level: int, message: str) -> LogLine:
    return LogLine(_iso(ts), service, level_name(level), message)
