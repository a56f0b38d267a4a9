"""Ingesting log files: their parsed entries stored as :class:`~knowledge.models.LogEntry` rows.

:func:`ingest` (and ``manage.py ingest_logs``) bulk-inserts in batches, with a progress bar, and
reports what it read, stored, found already stored and could not parse (:func:`format_report`).

Ingesting is safe to repeat: every row carries its digest (:mod:`knowledge.logs.identity`), and a
line whose digest is stored is not stored again, so a retried, interrupted or repeated ingest,
an appended file or a renamed copy adds only the lines that are new. A file whose exact content
was ingested before is not parsed again (:class:`~knowledge.models.LogFile`).

Ingesting is bounded (:class:`IngestLimits`): a file is read once without parsing, and refused
whole (:class:`RefusedFile`) when its content — a ``.gz`` decompressed, never further than the
limit — is too large or has too many lines, so a small compressed file cannot make an ingest
read gigabytes.
"""

from __future__ import annotations

import gzip
import hashlib
import re
import zlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import IntegrityError, OperationalError, connection, transaction
from django.db.models import Max

from core.progress import ProgressBar
from harness.logs import LEVEL_RANK, workload_of
from knowledge.logs.identity import Occurrences, entry_key
from knowledge.logs.parsing import UNKNOWN_SERVICE, LineError, Readable, open_log, parse_stream
from knowledge.models import LogEntry, LogFile

__all__ = [
    "LOG_SUFFIXES",
    "IngestLimits",
    "IngestReport",
    "RefusedFile",
    "format_report",
    "ingest",
    "log_files",
    "service_of_file",
]

_SOURCE_CHARS = LogEntry._meta.get_field("source").max_length or 200


@dataclass(frozen=True, slots=True)
class IngestReport:
    """What an ingest did. ``read`` counts the non-blank lines of the files it read:
    ``stored + already + failed + continuation``."""

    read: int
    #: entries stored by this ingest (none of a refused file)
    stored: int
    failed: int
    #: the first unparsable lines (at most 20)
    errors: tuple[LineError, ...]
    #: lines folded into the entry before them (stack traces)
    continuation: int = 0
    files: tuple[str, ...] = ()
    #: entries read that were stored before (by an earlier ingest of these or other files)
    already: int = 0
    #: files not parsed: their content was ingested before and is still stored
    unchanged: tuple[str, ...] = ()
    #: the entries of the unchanged files
    unchanged_entries: int = 0
    #: files beyond the limits or unreadable, of which nothing is stored (not counted above)
    refused: tuple[RefusedFile, ...] = ()

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


@dataclass(frozen=True, slots=True)
class IngestLimits:
    """How much of one log file an ingest reads. A file beyond ``max_bytes`` (its content, after
    decompression) or ``max_lines`` is refused whole; a line beyond ``max_line_bytes`` is one
    unparsable line, and the lines after it are read.

    :meth:`from_settings` reads ``LOG_MAX_DECOMPRESSED_BYTES``, ``LOG_MAX_LINES`` and
    ``LOG_MAX_LINE_BYTES``. Raises :class:`ValueError` (naming the setting) for a bound below 1.
    """

    max_bytes: int
    max_lines: int
    max_line_bytes: int

    def __post_init__(self) -> None:
        for name, value in (
            ("LOG_MAX_DECOMPRESSED_BYTES", self.max_bytes),
            ("LOG_MAX_LINES", self.max_lines),
            ("LOG_MAX_LINE_BYTES", self.max_line_bytes),
        ):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a whole number of at least 1, not {value!r}")

    @classmethod
    def from_settings(cls) -> IngestLimits:
        return cls(settings.LOG_MAX_DECOMPRESSED_BYTES, settings.LOG_MAX_LINES, settings.LOG_MAX_LINE_BYTES)

    def check(self, size: int, lines: int) -> None:
        """Raise :class:`_Refused` once ``size`` bytes or ``lines`` lines are beyond the limits."""
        if size > self.max_bytes:
            raise _Refused(
                "log_too_large", f"its content is larger than {self.max_bytes:,} bytes (LOG_MAX_DECOMPRESSED_BYTES)"
            )
        if lines > self.max_lines:
            raise _Refused("log_too_many_lines", f"it has more than {self.max_lines:,} lines (LOG_MAX_LINES)")


@dataclass(frozen=True, slots=True)
class RefusedFile:
    """A file an ingest refused: nothing of it is stored, and it is not recorded as ingested, so
    it is read again next time (with larger limits, say)."""

    path: str
    #: ``log_too_large``, ``log_too_many_lines`` or ``log_unreadable``
    code: str
    reason: str


class _Refused(Exception):
    """Raised while a file is read: the file is refused, for ``reason``."""

    def __init__(self, code: str, reason: str) -> None:
        super().__init__(code, reason)
        self.code, self.reason = code, reason


#: what reading a damaged, truncated or unreadable file raises (gzip.BadGzipFile is an OSError)
_READ_ERRORS = (OSError, EOFError, zlib.error)


def _unreadable(exc: BaseException) -> _Refused:
    if isinstance(exc, gzip.BadGzipFile):
        reason = "it is not valid gzip data"
    elif isinstance(exc, EOFError):
        reason = "its compressed data ends before the end of the stream (truncated)"
    elif isinstance(exc, zlib.error):
        reason = "its compressed data is corrupt"
    else:
        reason = f"it cannot be read ({getattr(exc, 'strerror', None) or type(exc).__name__})"
    return _Refused("log_unreadable", reason)


@contextmanager
def _reading() -> Iterator[None]:
    """Errors of the file being read (not of the database) as the file's refusal."""
    try:
        yield
    except _READ_ERRORS as exc:
        raise _unreadable(exc) from None


@dataclass(frozen=True, slots=True)
class _Survey:
    """What the counting pass found: the content's digest (as :class:`LogFile` records it) and size."""

    sha256: str
    size: int


#: the counting pass reads this much at a time
_SURVEY_CHUNK = 1 << 20


def _survey(path: Path, default_service: str, limits: IngestLimits) -> _Survey:
    """Read the file once, without parsing, and stop as soon as it is beyond the limits (raising
    :class:`_Refused`): a compressed file is never decompressed further than ``max_bytes``."""
    sha = _file_hash(default_service)
    size = newlines = 0
    ends_line = True
    with _reading(), open_log(path) as stream:
        while chunk := stream.read(min(_SURVEY_CHUNK, limits.max_bytes + 1 - size)):
            size += len(chunk)
            newlines += chunk.count(b"\n")
            limits.check(size, newlines)
            sha.update(chunk)
            ends_line = chunk.endswith(b"\n")
    limits.check(size, newlines + (not ends_line))  # a last line without its newline counts too
    return _Survey(sha.hexdigest(), size)


class _BoundedReader:
    """A binary stream whose ``readline`` counts and hashes what it reads, advances a progress
    bar, and refuses the file (:class:`_Refused`) once it reads past the limits, which it never
    reads more than one byte beyond: a file that grew since its survey stops there too."""

    def __init__(self, stream: Readable, bar: Any, sha256: Any, limits: IngestLimits) -> None:
        self._stream = stream
        self._bar = bar
        self._limits = limits
        self._line_start = True
        self.bytes_read = 0
        self.lines = 0
        self.sha256 = sha256

    def readline(self, limit: int = -1, /) -> bytes:
        room = self._limits.max_bytes + 1 - self.bytes_read
        try:
            data = self._stream.readline(room if limit < 0 else min(limit, room))
        except _READ_ERRORS as exc:
            raise _unreadable(exc) from None
        if data:
            self.bytes_read += len(data)
            self.lines += self._line_start
            self._line_start = data.endswith(b"\n")
            self._limits.check(self.bytes_read, self.lines)
            self.sha256.update(data)
            self._bar.update(len(data))
        return data


@dataclass(slots=True)
class _Tally:
    """What reading one file found (added to the report only if the file was not refused)."""

    read: int = 0
    stored: int = 0
    already: int = 0
    failed: int = 0
    continuation: int = 0
    errors: list[LineError] = field(default_factory=list)


#: file names that name no workload: their lines without a service stay ``unknown``
_GENERIC_NAMES = frozenset(
    [
        "app",
        "application",
        "all",
        "combined",
        "console",
        "container",
        "current",
        "events",
        "kubelet",
        "log",
        "logs",
        "messages",
        "output",
        "out",
        "err",
        "error",
        "stderr",
        "stdout",
        "syslog",
        "system",
        "journal",
        "k8s",
        "kubernetes",
    ]
)


def service_of_file(path: Path) -> str:
    """The service a log file's name names, for its lines that name none: ``checkout-api.log``,
    ``checkout-api-7d9f8b6c5d-xk2p9.log.gz`` and ``checkout-api-7d9f8b6c5d-xk2p9.istio-proxy.log``
    → ``checkout-api``, as ``kubectl logs … > <pod>.log`` saves them; a generic name (``events.jsonl``, ``app.log``, ``stdout.txt``) names
    none, and its lines are ``unknown``."""
    stem = path.name.lower()
    while (suffix := Path(stem).suffix) and suffix in (*LOG_SUFFIXES, ".ndjson", ".out", ".err"):
        stem = stem[: -len(suffix)]
    stem = re.sub(r"[-_.](?:\d{4}-?\d{2}-?\d{2}(?:t?\d{2,6})?|\d+|current|previous|prev|old)$", "", stem)
    if not re.fullmatch(r"[a-z0-9][a-z0-9._-]{0,99}", stem) or stem in _GENERIC_NAMES:
        return UNKNOWN_SERVICE
    # ``<pod>.<container>.log``, as ``kubectl logs <pod> -c <container>`` is often saved: the pod's workload
    pod, dot, _container = stem.partition(".")
    if dot and workload_of(pod) != pod:
        return workload_of(pod)
    return workload_of(stem)


def ingest(
    paths: Iterable[str | Path],
    *,
    default_service: str | None = None,
    batch: int = 2000,
    progress: bool = True,
    replace_existing: bool = False,
    limits: IngestLimits | None = None,
) -> IngestReport:
    """Parse the files and store their new entries as :class:`~knowledge.models.LogEntry` rows.

    A line that names no service is ``default_service``'s, or by default the one its file's
    name names (:func:`service_of_file`).

    Rows are inserted ``batch`` at a time (each batch commits on its own, so an interrupted
    ingest keeps what it stored, and running it again stores the rest). Entries already stored,
    from this file or any other, are counted as ``already`` and not stored again; a file whose
    exact content was ingested before is not read (``unchanged``). ``replace_existing`` first
    deletes the rows an earlier ingest stored from the same file and reads it whatever it holds:
    the store then mirrors a file that was edited or truncated rather than appended to. Raises
    :class:`FileNotFoundError` before writing anything if a path is not a file.

    Each file is first read once without parsing, as far as ``limits`` (default: the settings,
    :meth:`IngestLimits.from_settings`) allow: a file beyond them, or one that cannot be read
    (a corrupt or truncated ``.gz``), is refused (``refused``) before anything of it is stored,
    and the other files are ingested. The limits hold while it is parsed too: if it grew past
    them since, the rows it stored are deleted again and it is refused all the same (with
    ``replace_existing`` what it stored before is then gone as well). A refused file is not
    recorded as ingested, so a later ingest reads it again.
    """
    files = [Path(p) for p in paths]
    for path in files:
        if not path.is_file():
            raise FileNotFoundError(f"not a file: {path}")
    limits = limits or IngestLimits.from_settings()
    batch = max(1, batch)
    total = _Tally()
    unchanged_entries = 0
    unchanged: list[str] = []
    refused: list[RefusedFile] = []
    now = datetime.now(UTC)
    for path in files:
        source = _source(path)
        service = default_service or service_of_file(path)
        try:
            survey = _survey(path, service, limits)
        except _Refused as refusal:
            refused.append(RefusedFile(str(path), refusal.code, refusal.reason))
            continue
        if replace_existing:
            LogEntry.objects.filter(source=source).delete()
        elif (known := _ingested_before(survey.sha256)) is not None:
            unchanged.append(str(path))
            unchanged_entries += known.entries
            continue
        # Every row this ingest of the file inserts gets a larger key than any row already there.
        floor = LogEntry.objects.aggregate(last=Max("pk"))["last"] or 0
        try:
            tally = _ingest_file(
                path,
                source=source,
                default_service=service,
                now=now,
                batch=batch,
                progress=progress,
                limits=limits,
                size=survey.size,
            )
        except _Refused as refusal:
            LogEntry.objects.filter(source=source, pk__gt=floor).delete()
            refused.append(RefusedFile(str(path), refusal.code, refusal.reason))
            continue
        total.read += tally.read
        total.stored += tally.stored
        total.already += tally.already
        total.failed += tally.failed
        total.continuation += tally.continuation
        total.errors.extend(tally.errors[: MAX_REPORTED_ERRORS - len(total.errors)])
    return IngestReport(
        total.read,
        total.stored,
        total.failed,
        tuple(total.errors),
        total.continuation,
        tuple(str(p) for p in files),
        total.already,
        tuple(unchanged),
        unchanged_entries,
        tuple(refused),
    )


def _ingest_file(
    path: Path,
    *,
    source: str,
    default_service: str,
    now: datetime,
    batch: int,
    progress: bool,
    limits: IngestLimits,
    size: int,
) -> _Tally:
    """Parse one file and store its new entries; raises :class:`_Refused` past the limits."""
    tally = _Tally()
    rows: list[_Row] = []
    written_at = 0
    occurrences = Occurrences()
    entries = 0
    first = last = ""
    with _reading():  # only the reading: a database error is no reason to refuse the file
        opened = open_log(path)
    with (
        opened as stream,
        ProgressBar(total=size, unit="B", unit_scale=True, desc=path.name, disable=not progress, leave=False) as bar,
    ):
        reader = _BoundedReader(stream, bar, _file_hash(default_service), limits)
        items = parse_stream(
            reader, default_service=default_service, now=now, source=str(path), max_line_bytes=limits.max_line_bytes
        )
        for item in items:
            if isinstance(item, LineError):
                tally.read += 1
                tally.failed += 1
                if len(tally.errors) < MAX_REPORTED_ERRORS:
                    tally.errors.append(item)
                continue
            tally.read += (0 if item.echo else 1) + item.continued
            tally.continuation += item.continued
            level, attributes = LEVEL_RANK[item.level], dict(item.attributes)
            digest = occurrences.digest(entry_key(item.ts, item.service, level, item.message, attributes))
            rows.append((item.ts, item.service, level, item.message, attributes, source, digest))
            entries += 1
            first, last = first or digest, digest
            if len(rows) >= batch or reader.bytes_read - written_at >= _MAX_BATCH_BYTES:
                new, old = _store(rows)
                tally.stored, tally.already = tally.stored + new, tally.already + old
                rows, written_at = [], reader.bytes_read
    new, old = _store(rows)
    tally.stored, tally.already = tally.stored + new, tally.already + old
    if entries:
        _remember(reader.sha256.hexdigest(), source=source, entries=entries, first=first, last=last)
    return tally


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


def _ingested_before(sha256: str) -> LogFile | None:
    """The record of an earlier ingest of exactly this content, if its lines are still stored."""
    known = LogFile.objects.filter(sha256=sha256).first()
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
    """The report as the ``ingest_logs`` command prints it, with the first unparsable lines and
    one line per refused file."""
    lines = []
    files = len(report.files) - len(report.unchanged) - len(report.refused)
    if files or not (report.unchanged or report.refused):
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
    for refused in report.refused:
        lines.append(f"{refused.path}: refused ({refused.code}): {refused.reason}; nothing of it was stored.")
    if report.errors:
        shown = len(report.errors)
        heading = f"first {shown} of {report.failed:,}" if shown < report.failed else f"{shown}"
        lines.append(f"Unparsable lines ({heading}):")
        for error in report.errors:
            where = f"{error.source}:{error.line_number}" if error.source else f"line {error.line_number}"
            lines.append(f"  {where}: {error.reason}" + (f"  | {error.excerpt}" if error.excerpt else ""))
    return "\n".join(lines)
