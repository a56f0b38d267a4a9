"""Ingesting log files: their parsed entries stored as :class:`~knowledge.models.LogEntry` rows.

:func:`ingest` (and ``manage.py ingest_logs``) bulk-inserts in batches, with a progress bar, and
reports what it read, stored, found already stored and could not parse (:func:`format_report`).

Ingesting is safe to repeat: every row carries its digest (:mod:`knowledge.logs.identity`), and a
line whose digest is stored is not stored again, so a retried, interrupted or repeated ingest,
an appended file or a renamed copy adds only the lines that are new. A file whose exact content
was ingested before is not even read (:class:`~knowledge.models.LogFile`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.db import IntegrityError, OperationalError, connection, transaction

from core.progress import ProgressBar
from harness.logs import LEVEL_RANK
from knowledge.logs.identity import Occurrences, entry_key
from knowledge.logs.parsing import LineError, Readable, open_log, parse_stream
from knowledge.models import LogEntry, LogFile

__all__ = ["LOG_SUFFIXES", "IngestReport", "format_report", "ingest", "log_files"]

_SOURCE_CHARS = LogEntry._meta.get_field("source").max_length or 200


@dataclass(frozen=True, slots=True)
class IngestReport:
    """What an ingest did. ``read`` counts the non-blank lines of the files it read:
    ``stored + already + failed + continuation``."""

    read: int
    #: entries stored by this ingest
    stored: int
    failed: int
    #: the first unparsable lines (at most 20)
    errors: tuple[LineError, ...]
    #: lines folded into the entry before them (stack traces)
    continuation: int = 0
    files: tuple[str, ...] = ()
    #: entries read that were stored before (by an earlier ingest of these or other files)
    already: int = 0
    #: files not read at all: their content was ingested before and is still stored
    unchanged: tuple[str, ...] = ()
    #: the entries of the unchanged files
    unchanged_entries: int = 0

    @property
    def entries(self) -> int:
        """The entries of the files read, new or not."""
        return self.stored + self.already


MAX_REPORTED_ERRORS = 20
#: a batch is also written once the lines it came from reach this size (MySQL's packet limit)
_MAX_BATCH_BYTES = 4_000_000
#: digests looked up per query (below SQLite's limit on parameters)
_LOOKUP_CHUNK = 900
#: a batch that meets rows a concurrent ingest just stored is tried again this many times
_MYSQL_DEADLOCK = 1213
_STORE_ATTEMPTS = 5


class _ProgressReader:
    """A binary stream whose ``readline`` counts and hashes the bytes read and advances a
    progress bar."""

    def __init__(self, stream: Readable, bar: Any, sha256: Any) -> None:
        self._stream = stream
        self._bar = bar
        self.bytes_read = 0
        self.sha256 = sha256

    def readline(self, limit: int = -1, /) -> bytes:
        data = self._stream.readline(limit)
        self.bytes_read += len(data)
        self.sha256.update(data)
        self._bar.update(len(data))
        return data


LOG_SUFFIXES = (".jsonl", ".json", ".log", ".txt", ".gz")


def log_files(paths: Iterable[Path | str]) -> list[Path]:
    """Files as given; a folder stands for the log files under it (by suffix, sorted)."""
    out: list[Path] = []
    for item in map(Path, paths):
        if item.is_dir():
            out.extend(sorted(p for p in item.rglob("*") if p.is_file() and p.suffix.lower() in LOG_SUFFIXES))
        else:
            out.append(item)
    return out


def ingest(
    paths: Iterable[str | Path],
    *,
    default_service: str,
    batch: int = 2000,
    progress: bool = True,
    replace_existing: bool = False,
) -> IngestReport:
    """Parse the files and store their new entries as :class:`~knowledge.models.LogEntry` rows.

    Rows are inserted ``batch`` at a time (each batch commits on its own, so an interrupted
    ingest keeps what it stored, and running it again stores the rest). Entries already stored,
    from this file or any other, are counted as ``already`` and not stored again; a file whose
    exact content was ingested before is not read (``unchanged``). ``replace_existing`` first
    deletes the rows an earlier ingest stored from the same file and reads it whatever it holds:
    the store then mirrors a file that was edited or truncated rather than appended to. Raises
    :class:`FileNotFoundError` before writing anything if a path is not a file.
    """
    files = [Path(p) for p in paths]
    for path in files:
        if not path.is_file():
            raise FileNotFoundError(f"not a file: {path}")
    batch = max(1, batch)
    read = stored = already = failed = continuation = unchanged_entries = 0
    errors: list[LineError] = []
    unchanged: list[str] = []
    now = datetime.now(UTC)
    for path in files:
        source = _source(path)
        if replace_existing:
            LogEntry.objects.filter(source=source).delete()
        elif (known := _ingested_before(path, default_service)) is not None:
            unchanged.append(str(path))
            unchanged_entries += known.entries
            continue
        rows: list[_Row] = []
        written_at = 0
        occurrences = Occurrences()
        entries = 0
        first = last = ""
        total = path.stat().st_size if path.suffix != ".gz" else None
        with (
            open_log(path) as stream,
            ProgressBar(
                total=total, unit="B", unit_scale=True, desc=path.name, disable=not progress, leave=False
            ) as bar,
        ):
            reader = _ProgressReader(stream, bar, _file_hash(default_service))
            for item in parse_stream(reader, default_service=default_service, now=now, source=str(path)):
                if isinstance(item, LineError):
                    read += 1
                    failed += 1
                    if len(errors) < MAX_REPORTED_ERRORS:
                        errors.append(item)
                    continue
                read += 1 + item.continued
                continuation += item.continued
                level, attributes = LEVEL_RANK[item.level], dict(item.attributes)
                digest = occurrences.digest(entry_key(item.ts, item.service, level, item.message, attributes))
                rows.append((item.ts, item.service, level, item.message, attributes, source, digest))
                entries += 1
                first, last = first or digest, digest
                if len(rows) >= batch or reader.bytes_read - written_at >= _MAX_BATCH_BYTES:
                    new, old = _store(rows)
                    stored, already = stored + new, already + old
                    rows, written_at = [], reader.bytes_read
        new, old = _store(rows)
        stored, already = stored + new, already + old
        if entries:
            _remember(reader.sha256.hexdigest(), source=source, entries=entries, first=first, last=last)
    return IngestReport(
        read,
        stored,
        failed,
        tuple(errors),
        continuation,
        tuple(str(p) for p in files),
        already,
        tuple(unchanged),
        unchanged_entries,
    )


#: a LogEntry row as inserted: the values of ``_COLUMNS``
_Row = tuple[datetime, str, int, str, dict[str, Any], str, str]
_COLUMNS = ("ts", "service", "level", "message", "attributes", "source", "digest")


def _store(rows: list[_Row]) -> tuple[int, int]:
    """Store the rows whose digest is not stored yet: (how many were stored, how many were not)."""
    if not rows:
        return 0, 0
    for attempt in range(_STORE_ATTEMPTS):
        try:
            # On SQLite (immediate transactions) the lookup and the insert are one writer's turn;
            # elsewhere an ingest of the same lines at the same moment can win the race, and the
            # unique digest makes this batch fail and be sorted again.
            with transaction.atomic():
                known = _stored_digests([row[-1] for row in rows])
                fresh = [row for row in rows if row[-1] not in known]
                _insert(fresh)
        except (IntegrityError, OperationalError) as exc:
            # InnoDB may report the same lost race as a deadlock (1213) instead of a duplicate
            if attempt == _STORE_ATTEMPTS - 1 or not _lost_race(exc):
                raise
            continue
        return len(fresh), len(rows) - len(fresh)
    raise AssertionError("unreachable")  # pragma: no cover


def _lost_race(exc: Exception) -> bool:
    """A duplicate digest, or MySQL/MariaDB's deadlock between two inserts of the same digests."""
    if isinstance(exc, IntegrityError):
        return True
    cause = exc.__cause__ or exc
    return bool(getattr(cause, "args", None)) and cause.args[0] == _MYSQL_DEADLOCK


def _insert(rows: list[_Row]) -> None:
    """One multi-row insert. Not ``bulk_create``: building model instances and compiling the
    statement per value cost more than parsing the lines; the values are adapted by the fields'
    own ``get_db_prep_save`` where that changes them (time, JSON), as ``bulk_create`` would."""
    if not rows:
        return
    meta, ops = LogEntry._meta, connection.ops
    by_name = {field.name: field for field in meta.concrete_fields}
    fields = [by_name[name] for name in _COLUMNS]
    sql = "INSERT INTO {} ({}) VALUES ({})".format(  # noqa: S608 - names from the model, values as parameters
        ops.quote_name(meta.db_table),
        ", ".join(ops.quote_name(field.column or field.name) for field in fields),
        ", ".join(["%s"] * len(fields)),
    )
    ts_field, attributes_field = fields[0], fields[4]
    params = [
        (
            ts_field.get_db_prep_save(ts, connection),
            service,
            level,
            message,
            attributes_field.get_db_prep_save(attributes, connection),
            source,
            digest,
        )
        for ts, service, level, message, attributes, source, digest in rows
    ]
    with connection.cursor() as cursor:
        cursor.executemany(sql, params)


def _stored_digests(digests: list[str]) -> set[str]:
    found: set[str] = set()
    for i in range(0, len(digests), _LOOKUP_CHUNK):
        chunk = digests[i : i + _LOOKUP_CHUNK]
        found.update(d for d in LogEntry.objects.filter(digest__in=chunk).values_list("digest", flat=True) if d)
    return found


def _file_hash(default_service: str) -> Any:
    """The hash a file's content (decompressed) is recorded by: the default service is part of
    it, since it is the service of the lines that name none."""
    return hashlib.sha256(default_service.encode() + b"\0")


def _ingested_before(path: Path, default_service: str) -> LogFile | None:
    """The record of an earlier ingest of exactly this content, if its lines are still stored."""
    if not LogFile.objects.exists():
        return None
    sha = _file_hash(default_service)
    with open_log(path) as stream:
        while chunk := stream.read(1 << 20):
            sha.update(chunk)
    known = LogFile.objects.filter(sha256=sha.hexdigest()).first()
    if known is None:
        return None
    ends = {known.first_digest, known.last_digest}
    return known if LogEntry.objects.filter(digest__in=ends).count() == len(ends) else None


def _remember(sha256: str, *, source: str, entries: int, first: str, last: str) -> None:
    """Record the file's content as ingested (an upsert: two ingests of it may finish together)."""
    fields = {"source": source, "entries": entries, "first_digest": first, "last_digest": last}
    # MySQL's ON DUPLICATE KEY UPDATE names no target; SQLite's ON CONFLICT must.
    target = ["sha256"] if connection.features.supports_update_conflicts_with_target else None
    LogFile.objects.bulk_create(
        [LogFile(sha256=sha256, **fields)],
        update_conflicts=True,
        unique_fields=target,
        update_fields=[*fields, "ingested_at"],
    )


def _source(path: Path) -> str:
    """The path as recorded on the rows: its last 200 characters if it is longer."""
    text = str(path)
    return text if len(text) <= _SOURCE_CHARS else text[-_SOURCE_CHARS:]


def format_report(report: IngestReport) -> str:
    """The report as the ``ingest_logs`` command prints it, with the first unparsable lines."""
    lines = []
    files = len(report.files) - len(report.unchanged)
    if files or not report.unchanged:
        parts = [f"{report.stored:,} stored"]
        if report.already:
            parts.append(f"{report.already:,} already ingested")
        parts.append(f"{report.failed:,} unparsable")
        if report.continuation:
            parts.append(f"{report.continuation:,} folded into the entry before them")
        lines.append(
            f"Read {report.read:,} line{'s' * (report.read != 1)} from {files} file{'s' * (files != 1)}: "
            + ", ".join(parts)
            + "."
        )
    if report.unchanged:
        n, entries = len(report.unchanged), report.unchanged_entries
        which = report.unchanged[0] if n == 1 else f"{n} files"
        lines.append(
            f"{which}: already ingested: {entries:,} line{'s' * (entries != 1)}, 0 new "
            f"(unchanged since; --replace ingests {'it' if n == 1 else 'them'} again)."
        )
    elif report.already:
        lines.append("Lines already ingested are not stored twice (--replace first deletes what a file stored before).")
    if report.errors:
        shown = len(report.errors)
        heading = f"first {shown} of {report.failed:,}" if shown < report.failed else f"{shown}"
        lines.append(f"Unparsable lines ({heading}):")
        for error in report.errors:
            where = f"{error.source}:{error.line_number}" if error.source else f"line {error.line_number}"
            lines.append(f"  {where}: {error.reason}" + (f"  | {error.excerpt}" if error.excerpt else ""))
    return "\n".join(lines)
