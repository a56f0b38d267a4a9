"""Bounded log ingestion: a file beyond ``LOG_MAX_DECOMPRESSED_BYTES`` or ``LOG_MAX_LINES``, or
unreadable, is refused whole — before anything of it is stored, and after reading no more than
about the limit, however far a compressed file would expand — while the other files are
ingested; a line beyond ``LOG_MAX_LINE_BYTES`` is one unparsable line."""

from __future__ import annotations

import gzip
import io
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from knowledge.logs import ingest as ingest_module
from knowledge.logs.ingest import IngestLimits, ingest
from knowledge.logs.parsing import MAX_LINE_BYTES, MAX_MESSAGE_CHARS, open_log
from knowledge.models import LogEntry, LogFile

pytestmark = pytest.mark.usefixtures("transactional_db")

MIB = 1 << 20
LIMIT_BYTES = 1 * MIB
LIMIT_LINES = 1000


def log_line(i: int, message: str = "request served") -> str:
    return f"2026-11-30T10:{i // 3600 % 60:02d}:{i // 60 % 60:02d}.{i % 60:06d}Z INFO svc-a {message} {i}\n"


def write_gz(path: Path, block: bytes, repeat: int) -> Path:
    """``block`` ``repeat`` times, compressed as it is written (the expanded file never exists)."""
    with gzip.open(path, "wb", compresslevel=6) as out:
        for _ in range(repeat):
            out.write(block)
    return path


class CountingStream:
    """A decompressed log stream that counts the bytes read from it."""

    def __init__(self, stream: Any, counts: Counter[str], name: str) -> None:
        self._stream, self._counts, self._name = stream, counts, name

    def read(self, size: int = -1, /) -> bytes:
        data: bytes = self._stream.read(size)
        self._counts[self._name] += len(data)
        return data

    def readline(self, size: int = -1, /) -> bytes:
        data: bytes = self._stream.readline(size)
        self._counts[self._name] += len(data)
        return data

    def __enter__(self) -> CountingStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stream.close()


@pytest.fixture
def bytes_read(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Bytes read from each file (by name), decompressed, over every pass of the ingest."""
    counts: Counter[str] = Counter()
    monkeypatch.setattr(
        "knowledge.logs.ingest.open_log", lambda path: CountingStream(open_log(path), counts, Path(path).name)
    )
    return counts


@pytest.fixture
def small_limits(settings: Any) -> Any:
    settings.LOG_MAX_DECOMPRESSED_BYTES = LIMIT_BYTES
    settings.LOG_MAX_LINES = LIMIT_LINES
    return settings


def ingest_command(*args: str) -> tuple[str, str | None]:
    """The command's output, and the message it failed with (``None`` if it succeeded)."""
    out = io.StringIO()
    try:
        call_command("ingest_logs", *args, "--quiet", stdout=out)
    except CommandError as exc:
        return out.getvalue(), str(exc)
    return out.getvalue(), None


def sources() -> set[str]:
    return set(LogEntry.objects.values_list("source", flat=True))


def test_files_beyond_the_limits_are_refused_whole_and_the_others_ingested(
    tmp_path: Path, small_limits: Any, bytes_read: Counter[str]
) -> None:
    good = tmp_path / "a-good.log"
    good.write_text("".join(log_line(i) for i in range(3)))
    large = tmp_path / "b-large.log"  # 700 lines of 2 KiB: under the line limit, over the byte limit
    large.write_text("".join(log_line(i, "x" * 2048) for i in range(700)))
    many = write_gz(tmp_path / "c-many.log.gz", "".join(log_line(i) for i in range(LIMIT_LINES + 1)).encode(), 1)
    newlines = write_gz(tmp_path / "d-newlines.log.gz", b"\n" * MIB, 16)  # 16 MiB of empty lines
    one_line = write_gz(tmp_path / "e-one-line.log.gz", b"x" * MIB, 32)  # one line of 32 MiB
    assert large.stat().st_size > LIMIT_BYTES and many.stat().st_size < LIMIT_BYTES
    assert newlines.stat().st_size < 64 * 1024 and one_line.stat().st_size < 64 * 1024

    out, failure = ingest_command(str(tmp_path))

    assert failure == "4 of 5 files refused"
    assert out.splitlines() == [
        "Read 3 lines from 1 file: 3 stored, 0 unparsable.",
        f"{large}: refused (log_too_large): its content is larger than 1,048,576 bytes"
        " (LOG_MAX_DECOMPRESSED_BYTES); nothing of it was stored.",
        f"{many}: refused (log_too_many_lines): it has more than 1,000 lines (LOG_MAX_LINES); nothing of it was stored.",
        f"{newlines}: refused (log_too_many_lines): it has more than 1,000 lines (LOG_MAX_LINES);"
        " nothing of it was stored.",
        f"{one_line}: refused (log_too_large): its content is larger than 1,048,576 bytes"
        " (LOG_MAX_DECOMPRESSED_BYTES); nothing of it was stored.",
    ]
    assert sources() == {str(good)} and LogEntry.objects.count() == 3
    assert list(LogFile.objects.values_list("source", flat=True)) == [str(good)]
    # Each refused file was read once, and no further than just past the byte limit: not the
    # 16 and 32 MiB the bombs expand to.
    for name in ("b-large.log", "c-many.log.gz", "d-newlines.log.gz", "e-one-line.log.gz"):
        assert bytes_read[name] <= LIMIT_BYTES + 1, name
    assert bytes_read["a-good.log"] == 2 * good.stat().st_size  # counted, then parsed


def test_a_compressed_bomb_is_refused_after_reading_about_the_limit(tmp_path: Path, bytes_read: Counter[str]) -> None:
    """1 GiB of newlines compresses to 1 MiB; here 64 MiB of log lines (a 256 KiB file) against
    a 2 MiB limit: the ingest stops after the limit's worth, not the 64 MiB."""
    line = log_line(1).encode()
    bomb = write_gz(tmp_path / "bomb.log.gz", line * (MIB // len(line)), 64)
    limits = IngestLimits(max_bytes=2 * MIB, max_lines=10**9, max_line_bytes=MAX_LINE_BYTES)

    report = ingest([bomb], default_service="x", progress=False, limits=limits)

    ((path, code, _reason),) = [(r.path, r.code, r.reason) for r in report.refused]
    assert (path, code) == (str(bomb), "log_too_large")
    assert bytes_read["bomb.log.gz"] <= 2 * MIB + 1
    assert (report.read, report.stored) == (0, 0)
    assert not LogEntry.objects.exists() and not LogFile.objects.exists()


def test_a_file_at_the_limits_is_ingested_and_one_more_line_or_byte_is_refused(tmp_path: Path) -> None:
    lines = "".join(log_line(i) for i in range(10))
    exact = tmp_path / "exact.log"
    exact.write_text(lines[:-1])  # ten lines, the last without its newline
    limits = IngestLimits(max_bytes=len(lines) - 1, max_lines=10, max_line_bytes=MAX_LINE_BYTES)
    longer = tmp_path / "longer.log"
    longer.write_text(lines)  # one byte more
    more = tmp_path / "more.log"
    more.write_text(lines[:-1] + "\n" + "x")  # an eleventh line, of one byte (and more bytes)
    more_lines = IngestLimits(max_bytes=MIB, max_lines=10, max_line_bytes=MAX_LINE_BYTES)

    assert ingest([exact], default_service="x", progress=False, limits=limits).stored == 10
    assert [r.code for r in ingest([longer], default_service="x", progress=False, limits=limits).refused] == [
        "log_too_large"
    ]
    assert [r.code for r in ingest([more], default_service="x", progress=False, limits=more_lines).refused] == [
        "log_too_many_lines"
    ]
    assert ingest([exact], default_service="x", progress=False, limits=more_lines).unchanged == (str(exact),)


def test_a_file_that_grows_past_the_limits_while_it_is_ingested_keeps_nothing_of_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    earlier = tmp_path / "earlier.log"
    earlier.write_text("".join(log_line(i) for i in range(5)))
    ingest([earlier], default_service="x", progress=False)
    growing = tmp_path / "growing.log"
    growing.write_text("".join(log_line(i) for i in range(60)))  # the 5 lines above, and 55 more
    limits = IngestLimits(max_bytes=MIB, max_lines=100, max_line_bytes=MAX_LINE_BYTES)
    real_survey, real_store = ingest_module._survey, ingest_module._store
    inserted: list[int] = []

    def survey_then_grow(*args: Any) -> Any:
        survey = real_survey(*args)
        with growing.open("a") as out:  # a writer appends between the count and the ingest
            out.write("".join(log_line(i) for i in range(60, 120)))
        return survey

    def store(rows: list[Any]) -> tuple[int, int]:
        new, old = real_store(rows)
        inserted.append(new)
        return new, old

    monkeypatch.setattr(ingest_module, "_survey", survey_then_grow)
    monkeypatch.setattr(ingest_module, "_store", store)
    report = ingest([growing], default_service="x", progress=False, batch=10, limits=limits)

    assert [(r.path, r.code) for r in report.refused] == [(str(growing), "log_too_many_lines")]
    assert sum(inserted) >= 80  # batches of it were stored as it was read, and then deleted again
    assert (report.read, report.stored, report.already) == (0, 0, 0)
    assert sources() == {str(earlier)} and LogEntry.objects.count() == 5
    assert list(LogFile.objects.values_list("source", flat=True)) == [str(earlier)]

    monkeypatch.setattr(ingest_module, "_survey", real_survey)
    larger = IngestLimits(max_bytes=MIB, max_lines=200, max_line_bytes=MAX_LINE_BYTES)
    again = ingest([growing], default_service="x", progress=False, limits=larger)

    assert (again.refused, again.stored, again.already) == ((), 115, 5)
    assert LogFile.objects.filter(source=str(growing), entries=120).exists()


def test_a_refused_file_is_ingested_when_run_again_with_larger_limits(tmp_path: Path, small_limits: Any) -> None:
    path = tmp_path / "busy.log"
    path.write_text("".join(log_line(i) for i in range(LIMIT_LINES + 500)))

    out, failure = ingest_command(str(path))
    assert failure == "1 of 1 file refused"
    assert out.splitlines() == [
        f"{path}: refused (log_too_many_lines): it has more than 1,000 lines (LOG_MAX_LINES); nothing of it was stored."
    ]
    assert not LogEntry.objects.exists() and not LogFile.objects.exists()

    small_limits.LOG_MAX_LINES = 2000
    out, failure = ingest_command(str(path))

    assert failure is None
    assert out.splitlines() == ["Read 1,500 lines from 1 file: 1,500 stored, 0 unparsable."]
    assert LogFile.objects.get().entries == 1500


def test_replace_keeps_what_a_file_stored_when_it_is_now_refused(tmp_path: Path, small_limits: Any) -> None:
    path = tmp_path / "app.log"
    path.write_text("".join(log_line(i) for i in range(10)))
    assert ingest_command(str(path))[1] is None
    with path.open("a") as log:
        log.write("".join(log_line(i) for i in range(10, LIMIT_LINES + 1)))

    out, failure = ingest_command(str(path), "--replace")

    assert failure == "1 of 1 file refused"
    assert f"{path}: refused (log_too_many_lines)" in out
    assert LogEntry.objects.filter(source=str(path)).count() == 10


def test_unreadable_compressed_files_are_refused_and_the_others_ingested(tmp_path: Path) -> None:
    good = tmp_path / "a-good.log"
    good.write_text(log_line(1))
    packed = gzip.compress("".join(log_line(i, "y" * 40) for i in range(5000)).encode())
    truncated = tmp_path / "b-truncated.log.gz"
    truncated.write_bytes(packed[: len(packed) // 2])
    damaged = bytearray(packed)
    damaged[len(damaged) // 2 : len(damaged) // 2 + 4] = b"\xff\x00\xff\x00"
    corrupt = tmp_path / "c-corrupt.log.gz"
    corrupt.write_bytes(bytes(damaged))
    plain = tmp_path / "d-plain.log.gz"
    plain.write_text(log_line(2))

    out, failure = ingest_command(str(tmp_path))

    assert failure == "3 of 4 files refused"
    lines = out.splitlines()
    assert lines[0] == "Read 1 line from 1 file: 1 stored, 0 unparsable."
    assert lines[1] == (
        f"{truncated}: refused (log_unreadable): its compressed data ends before the end of the stream"
        " (truncated); nothing of it was stored."
    )
    assert lines[2].startswith(f"{corrupt}: refused (log_unreadable): ")
    assert lines[3] == f"{plain}: refused (log_unreadable): it is not valid gzip data; nothing of it was stored."
    assert len(lines) == 4 and "Traceback" not in out
    assert sources() == {str(good)}


def test_a_line_beyond_the_line_limit_is_one_unparsable_line(tmp_path: Path, settings: Any) -> None:
    path = tmp_path / "app.log"
    path.write_text(log_line(1, "z" * 300) + log_line(2))
    settings.LOG_MAX_LINE_BYTES = 200

    out, failure = ingest_command(str(path))

    assert failure is None
    assert "Read 2 lines from 1 file: 1 stored, 1 unparsable." in out
    assert f"{path}:1: line is longer than 200 bytes" in out
    assert list(LogEntry.objects.values_list("message", flat=True)) == ["request served 2"]

    # Raised beyond the parser's default, a longer line is read (and its message cut as always).
    settings.LOG_MAX_LINE_BYTES = MAX_LINE_BYTES * 2
    path.write_text(log_line(3, "w" * (MAX_LINE_BYTES + 1000)))
    out, failure = ingest_command(str(path))

    assert failure is None and "1 stored, 0 unparsable" in out
    assert LogEntry.objects.get(message__startswith="w").attributes["message_chars"] > MAX_MESSAGE_CHARS


@pytest.mark.parametrize("name", ["LOG_MAX_DECOMPRESSED_BYTES", "LOG_MAX_LINES", "LOG_MAX_LINE_BYTES"])
def test_a_limit_below_one_is_a_clear_error_and_nothing_is_read(tmp_path: Path, settings: Any, name: str) -> None:
    path = tmp_path / "app.log"
    path.write_text(log_line(1))
    setattr(settings, name, 0)

    with pytest.raises(CommandError, match=rf"^{name} must be a whole number of at least 1, not 0$"):
        call_command("ingest_logs", str(path), "--quiet", stdout=io.StringIO())
    assert not LogEntry.objects.exists()
