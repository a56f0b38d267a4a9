"""Ingesting log files: their parsed entries stored as :class:`~knowledge.models.LogEntry` rows.

:func:`ingest` (and ``manage.py ingest_logs``) bulk-inserts in batches, with a progress bar, and
reports what it read, stored and could not parse (:func:`format_report`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tqdm import tqdm  # type: ignore[import-untyped]

from harness.logs import LEVEL_RANK
from knowledge.logs.parsing import LineError, Readable, open_log, parse_stream
from knowledge.models import LogEntry

__all__ = ["LOG_SUFFIXES", "IngestReport", "format_report", "ingest", "log_files"]

_SOURCE_CHARS = LogEntry._meta.get_field("source").max_length or 200


@dataclass(frozen=True, slots=True)
class IngestReport:
    """What an ingest did. ``read`` counts non-blank lines: ``stored + failed + continuation``."""

    read: int
    stored: int
    failed: int
    #: the first unparsable lines (at most 20)
    errors: tuple[LineError, ...]
    #: lines folded into the entry before them (stack traces)
    continuation: int = 0
    files: tuple[str, ...] = ()


MAX_REPORTED_ERRORS = 20
#: a batch is also written once the lines it came from reach this size (MySQL's packet limit)
_MAX_BATCH_BYTES = 4_000_000


class _ProgressReader:
    """A binary stream whose ``readline`` counts the bytes read and advances a progress bar."""

    def __init__(self, stream: Readable, bar: Any) -> None:
        self._stream = stream
        self._bar = bar
        self.bytes_read = 0

    def readline(self, limit: int = -1, /) -> bytes:
        data = self._stream.readline(limit)
        self.bytes_read += len(data)
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
    """Parse the files and store their entries as :class:`~knowledge.models.LogEntry` rows.

    Rows are bulk-created ``batch`` at a time (each batch commits on its own, so an interrupted
    ingest keeps what it stored). ``replace_existing`` first deletes the rows an earlier ingest
    stored from the same file, so a file can be ingested again without duplicates. Raises
    :class:`FileNotFoundError` before writing anything if a path is not a file.
    """
    files = [Path(p) for p in paths]
    for path in files:
        if not path.is_file():
            raise FileNotFoundError(f"not a file: {path}")
    batch = max(1, batch)
    read = stored = failed = continuation = 0
    errors: list[LineError] = []
    now = datetime.now(UTC)
    for path in files:
        source = _source(path)
        if replace_existing:
            LogEntry.objects.filter(source=source).delete()
        rows: list[LogEntry] = []
        written_at = 0
        total = path.stat().st_size if path.suffix != ".gz" else None
        with (
            open_log(path) as stream,
            tqdm(total=total, unit="B", unit_scale=True, desc=path.name, disable=not progress, leave=False) as bar,
        ):
            reader = _ProgressReader(stream, bar)
            for item in parse_stream(reader, default_service=default_service, now=now, source=str(path)):
                if isinstance(item, LineError):
                    read += 1
                    failed += 1
                    if len(errors) < MAX_REPORTED_ERRORS:
                        errors.append(item)
                    continue
                read += 1 + item.continued
                continuation += item.continued
                rows.append(
                    LogEntry(
                        ts=item.ts,
                        service=item.service,
                        level=LEVEL_RANK[item.level],
                        message=item.message,
                        attributes=dict(item.attributes),
                        source=source,
                    )
                )
                if len(rows) >= batch or reader.bytes_read - written_at >= _MAX_BATCH_BYTES:
                    stored += _store(rows, batch)
                    rows, written_at = [], reader.bytes_read
        stored += _store(rows, batch)
    return IngestReport(read, stored, failed, tuple(errors), continuation, tuple(str(p) for p in files))


def _store(rows: list[LogEntry], batch: int) -> int:
    if rows:
        LogEntry.objects.bulk_create(rows, batch_size=batch)
    return len(rows)


def _source(path: Path) -> str:
    """The path as recorded on the rows: its last 200 characters if it is longer."""
    text = str(path)
    return text if len(text) <= _SOURCE_CHARS else text[-_SOURCE_CHARS:]


def format_report(report: IngestReport) -> str:
    """The report as the ``ingest_logs`` command prints it, with the first unparsable lines."""
    files = len(report.files)
    lines = [
        f"Read {report.read:,} line{'s' * (report.read != 1)} from {files} file{'s' * (files != 1)}: "
        f"{report.stored:,} stored, {report.failed:,} unparsable"
        + (f", {report.continuation:,} folded into the entry before them" if report.continuation else "")
        + "."
    ]
    if report.errors:
        shown = len(report.errors)
        heading = f"first {shown} of {report.failed:,}" if shown < report.failed else f"{shown}"
        lines.append(f"Unparsable lines ({heading}):")
        for error in report.errors:
            where = f"{error.source}:{error.line_number}" if error.source else f"line {error.line_number}"
            lines.append(f"  {where}: {error.reason}" + (f"  | {error.excerpt}" if error.excerpt else ""))
    return "\n".join(lines)
