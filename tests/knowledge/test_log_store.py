"""Storing logs and querying them: the ``ingest_logs`` command, ``DatabaseLogSource`` against the
reference semantics of ``InMemoryLogs``, its templates, and a whole diagnosis read from the database."""

from __future__ import annotations

import gzip
import importlib
import io
import json
import threading
from collections.abc import Iterable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from django.apps import apps as django_apps
from django.core.management import CommandError, call_command

from harness.application import ChatApplication, ChatRequest
from harness.examples import INJECTION, payment_incident
from harness.inmemory import (
    InMemoryAudit,
    InMemoryInvocationStore,
    InMemoryLogs,
    InMemoryRunStore,
    RecordingObserver,
)
from harness.llm.base import Models
from harness.llm.offline import OfflineAnalyst
from harness.logs import log_template
from harness.ports import LogLine, LogQuery, LogResult
from harness.tools.evidence import query_logs_tool
from knowledge.logs import ingest as ingest_module
from knowledge.logs.ingest import ingest
from knowledge.logs.source import DatabaseLogSource
from knowledge.models import LogEntry, LogFile, LogLevel
from tests.harness.scope_fixtures import tools_over

pytestmark = pytest.mark.usefixtures("service")

# --- ingestion -----------------------------------------------------------------------------

MIXED = [
    '{"timestamp": "2026-11-30T09:58:00Z", "service": "payment-service", "level": "info", "message": "Deploy finished", "version": "2.4.1"}',
    "2026-11-30T09:59:00Z INFO payment-service Config reloaded: db.pool.max_size=10",
    "2026-11-30 10:00:00,250 [payment-service] WARN HikariPool-1 - Pool stats (total=10, active=10, idle=0, waiting=12)",
    '[2026-11-30 10:01:00] checkout.ERROR: Payment authorization failed {"order":501234} []',
    "Nov 30 10:01:30 web-01 api-gateway[811]: ERROR Upstream payment-service timed out (504) path=/api/pay",
    'ts=2026-11-30T10:02:00Z level=error service=payment-service msg="HikariPool-1 - Connection is not available, request timed out after 30000ms"',
    "",
    "this line is not a log line",
    '{"timestamp": "2026-11-30T10:02:30Z", "level": "error", "message": "truncated',
    "2026-11-30T10:03:00Z ERROR payment-service Request failed",
    "java.sql.SQLTransientConnectionException: HikariPool-1 - Connection is not available",
    "\tat com.zaxxer.hikari.pool.HikariPool.createTimeoutException(HikariPool.java:696)",
    "\tat com.zaxxer.hikari.pool.HikariPool.getConnection(HikariPool.java:197)",
    '{"ts": "2026-11-30T10:04:00Z", "msg": "no service here"}',
    "\x00\x01binary\x02 junk",
    "2026-11-30T10:05:00+01:00 FATAL payment-service Out of memory",
]
MIXED_ERRORS = [(8, "unrecognised format"), (9, "invalid JSON"), (15, "binary data")]


def mixed_file(tmp_path: Path) -> Path:
    path = tmp_path / "mixed.log"
    path.write_text("\n".join(MIXED) + "\n", encoding="utf-8")
    return path


def at(hour: int, minute: int, second: int = 0) -> datetime:
    return datetime(2026, 11, 30, hour, minute, second, tzinfo=UTC)


def test_ingest_stores_every_format_and_reports_the_rest(tmp_path: Path) -> None:
    path = mixed_file(tmp_path)

    report = ingest([path], default_service="checkout-default", progress=False, batch=4)

    assert (report.read, report.stored, report.failed, report.continuation) == (15, 9, 3, 3)
    assert [(e.line_number, e.reason.split(":")[0]) for e in report.errors] == MIXED_ERRORS
    assert report.files == (str(path),)
    assert LogEntry.objects.count() == 9
    rows = {row.message: row for row in LogEntry.objects.all()}
    assert {r.source for r in rows.values()} == {str(path)}

    deploy = rows["Deploy finished"]
    assert (deploy.ts, deploy.service, deploy.level, deploy.attributes) == (
        at(9, 58),
        "payment-service",
        LogLevel.INFO,
        {"version": "2.4.1"},
    )
    monolog = rows["Payment authorization failed"]
    assert (monolog.service, monolog.level, monolog.attributes) == (
        "checkout",
        LogLevel.ERROR,
        {"context": {"order": 501234}},
    )
    syslog = rows["Upstream payment-service timed out (504) path=/api/pay"]
    assert syslog.service == "api-gateway" and syslog.level == LogLevel.ERROR
    assert (syslog.ts.month, syslog.ts.day, syslog.ts.hour, syslog.ts.minute, syslog.ts.second) == (11, 30, 10, 1, 30)
    assert syslog.attributes == {"host": "web-01", "pid": "811"}
    logfmt = rows["HikariPool-1 - Connection is not available, request timed out after 30000ms"]
    assert (logfmt.ts, logfmt.service, logfmt.level) == (at(10, 2), "payment-service", LogLevel.ERROR)
    # the exception the trace ends in is said with the message; the trace itself is kept beside it
    failed = rows[
        "Request failed — java.sql.SQLTransientConnectionException: HikariPool-1 - Connection is not available"
    ]
    assert failed.attributes["continuation"].count("\n") == 2
    assert failed.attributes["continuation"].startswith("java.sql.SQLTransientConnectionException")
    assert rows["no service here"].service == "checkout-default"
    oom = rows["Out of memory"]
    assert (oom.ts, oom.level) == (at(9, 5), LogLevel.FATAL)
    assert rows["HikariPool-1 - Pool stats (total=10, active=10, idle=0, waiting=12)"].ts == at(10, 0).replace(
        microsecond=250_000
    )


def test_the_command_prints_the_report_with_line_numbers(tmp_path: Path) -> None:
    path = mixed_file(tmp_path)
    out = io.StringIO()

    call_command("ingest_logs", str(path), "--service", "checkout-default", "--quiet", stdout=out)

    text = out.getvalue()
    assert "Read 15 lines from 1 file: 9 stored, 3 unparsable, 3 folded into the entry before them." in text
    assert "Unparsable lines (3):" in text
    for number, reason in MIXED_ERRORS:
        assert f"{path}:{number}: {reason}" in text
    assert "| this line is not a log line" in text
    assert LogEntry.objects.filter(service="checkout-default").count() == 1


@pytest.mark.parametrize(
    ("name", "named"),
    [
        ("checkout-api.log", "checkout-api"),
        ("checkout-api-7d9f8b6c5d-xk2p9.log.gz", "checkout-api"),  # kubectl logs <pod> > <pod>.log
        ("checkout-api-7d9f8b6c5d-xk2p9.istio-proxy.log", "checkout-api"),  # … -c <container> > <pod>.<container>.log
        ("nginx-proxy.docker.log", "nginx-proxy.docker"),  # not a pod's name: the name as it is
        ("ledger_worker.2026-11-30.txt", "ledger_worker"),
        ("nightly-export.1.log", "nightly-export"),
        ("events.jsonl", "unknown"),
        ("stdout.log", "unknown"),
        ("Weird Name!.log", "unknown"),
    ],
)
def test_a_line_naming_no_service_is_its_files(tmp_path: Path, name: str, named: str) -> None:
    path = tmp_path / name
    text = b"2026-11-30T10:02:00Z exec /start.sh: no such file or directory\n"
    path.write_bytes(gzip.compress(text) if name.endswith(".gz") else text)
    assert ingest_module.service_of_file(path) == named

    call_command("ingest_logs", str(path), "--quiet", stdout=io.StringIO())

    assert list(LogEntry.objects.values_list("service", "level")) == [(named, LogLevel.ERROR)]


def test_the_command_lists_only_the_first_twenty_errors(tmp_path: Path) -> None:
    path = tmp_path / "noisy.log"
    path.write_text("2026-11-30T10:00:00Z INFO svc-a ok\n" + "junk\n" * 30)
    out = io.StringIO()

    call_command("ingest_logs", str(path), "--quiet", stdout=out)

    text = out.getvalue()
    assert "Read 31 lines from 1 file: 1 stored, 30 unparsable." in text
    assert "Unparsable lines (first 20 of 30):" in text
    assert f"{path}:21: " in text and f"{path}:22: " not in text


def test_the_command_refuses_missing_files_and_fails_when_nothing_parses(tmp_path: Path) -> None:
    with pytest.raises(CommandError, match="not a file"):
        call_command("ingest_logs", str(tmp_path / "absent.log"), "--quiet")
    junk = tmp_path / "junk.log"
    junk.write_text("junk\nmore junk\n")
    out = io.StringIO()
    with pytest.raises(CommandError, match="no line could be parsed"):
        call_command("ingest_logs", str(junk), "--quiet", stdout=out)
    assert f"{junk}:2: unrecognised format" in out.getvalue()
    assert LogEntry.objects.count() == 0


def test_replace_mirrors_a_file_that_was_edited(tmp_path: Path) -> None:
    path = mixed_file(tmp_path)
    other = tmp_path / "other.log"
    other.write_text("2026-11-30T10:00:00Z INFO svc-b other file\n")
    ingest([path, other], default_service="x", progress=False)

    call_command("ingest_logs", str(path), "--replace", "--quiet", stdout=io.StringIO())
    assert LogEntry.objects.count() == 10
    # An edited line is a new line; without --replace its old version stays beside it.
    path.write_text(path.read_text().replace("Out of memory", "Out of heap"))
    call_command("ingest_logs", str(path), "--quiet", stdout=io.StringIO())
    assert LogEntry.objects.count() == 11
    call_command("ingest_logs", str(path), "--replace", "--quiet", stdout=io.StringIO())
    assert LogEntry.objects.count() == 10
    assert set(LogEntry.objects.filter(source=str(path)).values_list("message", flat=True)) >= {"Out of heap"}
    assert not LogEntry.objects.filter(message="Out of memory").exists()


# --- ingesting again -----------------------------------------------------------------------


def ingest_command(*args: str) -> str:
    out = io.StringIO()
    call_command("ingest_logs", *args, "--quiet", stdout=out)
    return out.getvalue()


def messages() -> list[str]:
    return sorted(LogEntry.objects.values_list("message", flat=True))


def test_the_same_file_again_adds_nothing_and_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = mixed_file(tmp_path)
    ingest_command(str(path))
    before = messages()

    def unread(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("an unchanged file is not read again")

    with monkeypatch.context() as patch:
        patch.setattr("knowledge.logs.ingest.parse_stream", unread)
        text = ingest_command(str(path))

    assert text.splitlines()[0] == (
        f"{path}: already ingested: 9 lines, 0 new (unchanged since; --replace ingests it again)."
    )
    assert "Read " not in text and "Unparsable" not in text
    assert messages() == before


def test_a_file_whose_lines_were_deleted_since_is_read_again_for_them(tmp_path: Path) -> None:
    path = mixed_file(tmp_path)
    ingest_command(str(path))
    before = messages()
    LogEntry.objects.filter(message="Deploy finished").delete()  # the file's first entry

    text = ingest_command(str(path))

    assert "Read 15 lines from 1 file: 1 stored, 8 already ingested, 3 unparsable" in text
    assert messages() == before


def test_an_appended_file_stores_only_the_appended_lines(tmp_path: Path) -> None:
    path = mixed_file(tmp_path)
    ingest_command(str(path))
    with path.open("a", encoding="utf-8") as out:
        out.write("2026-11-30T10:06:00Z ERROR payment-service Still failing\n")
        out.write("2026-11-30T10:03:00Z ERROR payment-service Request failed\n")  # a second such line

    text = ingest_command(str(path))

    assert "Read 17 lines from 1 file: 2 stored, 9 already ingested, 3 unparsable" in text
    assert "Lines already ingested are not stored twice (--replace" in text
    assert LogEntry.objects.count() == 11
    assert LogEntry.objects.filter(message__startswith="Request failed").count() == 2
    assert LogEntry.objects.filter(message="Still failing").count() == 1


def test_identical_lines_of_one_file_are_all_kept(tmp_path: Path) -> None:
    line = "2026-11-30T10:00:00Z ERROR payment-service Connection refused\n"
    thrice = tmp_path / "thrice.log"
    thrice.write_text(line * 3 + "2026-11-30T10:00:01Z INFO payment-service retrying\n")

    assert "4 stored" in ingest_command(str(thrice))
    assert "0 new" in ingest_command(str(thrice))
    twice = tmp_path / "twice.log"
    twice.write_text(line * 2)
    assert "0 stored, 2 already ingested" in ingest_command(str(twice))
    five = tmp_path / "five.log"
    five.write_text(line + "2026-11-30T10:00:00Z WARN payment-service something else\n" + line * 4)
    assert "3 stored, 3 already ingested" in ingest_command(str(five))

    assert LogEntry.objects.filter(message="Connection refused").count() == 5
    assert LogEntry.objects.count() == 7


def test_the_same_lines_in_another_file_or_compressed_are_not_stored_again(tmp_path: Path) -> None:
    path = mixed_file(tmp_path)
    ingest_command(str(path), "--service", "checkout-default")
    before = messages()
    copy = tmp_path / "renamed.log"
    copy.write_bytes(path.read_bytes())
    packed = tmp_path / "mixed.log.gz"
    packed.write_bytes(gzip.compress(path.read_bytes()))
    crlf = tmp_path / "exported.log"
    crlf.write_bytes(path.read_bytes().replace(b"\n", b"\r\n"))

    # the same content: recognised without reading it
    for same in (copy, packed):
        assert f"{same}: already ingested: 9 lines, 0 new" in ingest_command(str(same), "--service", "checkout-default")
    # other bytes, the same lines
    assert "0 stored, 9 already ingested" in ingest_command(str(crlf), "--service", "checkout-default")
    assert messages() == before
    # The service is part of a line: the one line that names none is another line for another default.
    assert "1 stored, 8 already ingested" in ingest_command(str(copy), "--service", "other-default")
    assert LogEntry.objects.filter(message="no service here").count() == 2


def test_a_folder_of_unchanged_files_is_summed_up(tmp_path: Path) -> None:
    mixed_file(tmp_path)
    (tmp_path / "b.jsonl").write_text('{"ts": "2026-11-30T10:00:00Z", "service": "b", "msg": "hello"}\n')
    first = ingest_command(str(tmp_path))
    assert "Read 16 lines from 2 files: 10 stored, 3 unparsable" in first

    again = ingest_command(str(tmp_path))

    assert again.splitlines() == [
        "2 files: already ingested: 10 lines, 0 new (unchanged since; --replace ingests them again)."
    ]


def test_an_interrupted_ingest_stores_the_rest_when_run_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = mixed_file(tmp_path)
    original = ingest_module._store
    calls = 0

    def fail_second_batch(rows: list[Any]) -> tuple[int, int]:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise ConnectionError("lost the database")
        return original(rows)

    with monkeypatch.context() as patch:
        patch.setattr(ingest_module, "_store", fail_second_batch)
        with pytest.raises(ConnectionError):
            ingest([path], default_service="x", batch=4, progress=False)
    assert LogEntry.objects.count() == 4
    assert not LogFile.objects.exists()  # the file was not ingested whole

    report = ingest([path], default_service="x", batch=4, progress=False)

    assert (report.stored, report.already) == (5, 4)
    assert LogEntry.objects.count() == 9
    assert LogFile.objects.get().entries == 9


def test_two_ingests_of_the_same_lines_at_once_store_each_line_once(tmp_path: Path) -> None:
    from django.db import connections

    lines = [
        f"2026-11-30T10:{i // 60:02d}:{i % 60:02d}Z {'ERROR' if i % 7 == 0 else 'INFO'} svc-{i % 3} request {i % 50}"
        for i in range(600)
    ]
    files = [tmp_path / "a.log", tmp_path / "b.log"]
    for file in files:
        file.write_text("\n".join(lines) + "\n")
    start = threading.Barrier(2)
    reports: list[Any] = []

    def run(file: Path) -> None:
        try:
            start.wait()
            reports.append(ingest([file], default_service="x", batch=50, progress=False))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(file,)) for file in files]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert LogEntry.objects.count() == 600
    assert sorted((r.stored + r.already) for r in reports) == [600, 600]
    assert sum(r.stored for r in reports) == 600


def test_rows_stored_before_digests_get_the_digests_an_ingest_gives(tmp_path: Path) -> None:
    """The migration that introduced digests: old rows, even an old ingest's duplicates, get
    them, and ingesting their file again afterwards adds nothing."""
    backfill = importlib.import_module("knowledge.migrations.0004_log_digests").give_stored_lines_digests
    path = mixed_file(tmp_path)
    path.write_text(path.read_text() + MIXED[-1] + "\n")  # a repeated line
    ingest([path], default_service="x", progress=False, batch=3)
    digests = dict(LogEntry.objects.values_list("id", "digest"))
    assert len(set(digests.values())) == 10
    # as a version without digests left them, with the file ingested twice
    LogFile.objects.all().delete()
    LogEntry.objects.update(digest=None)
    for row in LogEntry.objects.all():
        row.pk = None
        row.save()

    backfill(django_apps, SimpleNamespace(connection=SimpleNamespace(alias="default")))

    assert {pk: d for pk, d in LogEntry.objects.values_list("id", "digest") if pk in digests} == digests
    assert LogEntry.objects.filter(digest__isnull=True).count() == 0
    assert LogEntry.objects.count() == 20
    report = ingest([path], default_service="x", progress=False)
    assert (report.stored, report.already) == (0, 10)
    ingest([path], default_service="x", progress=False, replace_existing=True)
    assert LogEntry.objects.count() == 10


def test_a_progress_bar_is_shown_unless_quiet(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = mixed_file(tmp_path)
    ingest([path], default_service="x", progress=True)
    assert "mixed.log" in capsys.readouterr().err
    ingest([path], default_service="x", progress=False)
    assert capsys.readouterr().err == ""


# --- DatabaseLogSource against InMemoryLogs ------------------------------------------------


def _iso(ts: datetime) -> str:
    return ts.isoformat().replace("+00:00", "Z")


def distinct_times(lines: Iterable[LogLine]) -> list[LogLine]:
    """The lines with unique, fractional timestamps: ties are ordered differently by the two
    sources (insertion order), and InMemoryLogs sorts ``…:12Z`` after ``…:12.5Z`` as strings."""
    seen: set[datetime] = set()
    out = []
    for line in lines:
        ts = datetime.fromisoformat(line.ts.replace("Z", "+00:00"))
        if ts.microsecond == 0:
            ts += timedelta(microseconds=1)
        while ts in seen:
            ts += timedelta(microseconds=1)
        seen.add(ts)
        out.append(replace(line, ts=_iso(ts)))
    return out


def extra_lines() -> list[LogLine]:
    base = datetime(2026, 11, 30, 9, 30, 0, 500_000, tzinfo=UTC)
    return [
        LogLine(_iso(base + timedelta(minutes=i)), service, level, message)
        for i, (service, level, message) in enumerate(
            [
                ("storage-service", "DEBUG", "Disk FULL check on /var/lib/data: 91% used"),
                ("storage-service", "FATAL", "disk full: No space left on device writing /var/lib/data/seg-00017"),
                ("storage-service", "ERROR", "Disk full again on /var/lib/data"),
                ("api-gateway", "INFO", "Disk health probe OK"),
                ("storage-service", "WARN", "100% of quota used by tenant 42, CONNECTION throttled"),
            ]
        )
    ]


def write_jsonl(path: Path, lines: Iterable[LogLine]) -> Path:
    with path.open("w", encoding="utf-8") as f:
        for line in lines:
            record = {"ts": line.ts, "service": line.service, "level": line.level, "message": line.message}
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
    return path


@pytest.fixture
def reference(tmp_path: Path) -> InMemoryLogs:
    """The payment incident (plus a few lines) in memory, and the same lines ingested."""
    lines = distinct_times([*payment_incident().logs.lines, *extra_lines()])
    report = ingest([write_jsonl(tmp_path / "lines.jsonl", lines)], default_service="x", progress=False)
    assert report.stored == len(lines) and report.failed == 0
    return InMemoryLogs(lines)


QUERIES = [
    LogQuery(""),
    LogQuery("", limit=1),
    LogQuery("", level="WARN", limit=100),
    LogQuery("", level="ERROR", limit=3),
    LogQuery("", level="FATAL"),
    LogQuery("", level="DEBUG", limit=7),
    LogQuery("timeout", service="payment-service"),
    LogQuery("CONNECTION not AVAILABLE", limit=5),
    LogQuery("disk full", limit=10),
    LogQuery("connection", service="storage-service"),
    LogQuery("", service="api-gateway", level="ERROR", start=datetime(2026, 11, 30, 10, 10, tzinfo=UTC), limit=7),
    LogQuery(
        "",
        start=datetime(2026, 11, 30, 10, 1, tzinfo=UTC),
        end=datetime(2026, 11, 30, 10, 5, 30, tzinfo=UTC),
        limit=30,
    ),
    LogQuery("", end=datetime(2026, 11, 30, 9, 5, tzinfo=UTC)),
    LogQuery("", start=datetime(2026, 11, 30, 12, 0, tzinfo=UTC)),
    LogQuery("no-such-word-anywhere"),
    LogQuery("", service="no-such-service"),
    LogQuery("solar flare", level="WARN"),
    LogQuery("100%"),
    LogQuery("seg_00017"),
]


@pytest.mark.parametrize("query", QUERIES, ids=lambda q: repr(q)[9:80])
def test_the_database_agrees_with_the_reference(reference: InMemoryLogs, query: LogQuery) -> None:
    expected = reference.query(query)

    got = DatabaseLogSource().query(query)

    assert got.lines == expected.lines
    assert got.total == expected.total
    assert dict(got.counts_by_level) == dict(expected.counts_by_level)
    assert dict(got.counts_by_service) == dict(expected.counts_by_service)


def test_the_time_range_is_inclusive(reference: InMemoryLogs) -> None:
    newest = reference.lines[0]
    ts = datetime.fromisoformat(newest.ts.replace("Z", "+00:00"))
    result = DatabaseLogSource().query(LogQuery("", start=ts, end=ts))
    assert result.lines == (newest,)
    # A naive time is UTC, as the tool's arguments assume.
    assert DatabaseLogSource().query(LogQuery("", start=ts.replace(tzinfo=None))).lines == (newest,)


def test_level_aliases_are_understood(reference: InMemoryLogs) -> None:
    source = DatabaseLogSource()
    assert source.query(LogQuery("", level="warning")).total == source.query(LogQuery("", level="WARN")).total
    assert source.query(LogQuery("", level="critical")).counts_by_level == {"FATAL": 1}


def template_view(result: LogResult) -> list[tuple[Any, ...]]:
    return [(t.template, t.count, t.level, t.services, t.first_ts, t.last_ts, t.example) for t in result.templates]


@pytest.mark.parametrize("query", [LogQuery("", level="WARN", limit=1), LogQuery("", limit=2), LogQuery("payment")])
def test_templates_are_those_of_the_reference(reference: InMemoryLogs, query: LogQuery) -> None:
    assert template_view(DatabaseLogSource().query(query)) == template_view(reference.query(query))


def test_templates_mask_variable_parts_and_cover_every_match_however_small_the_limit(
    reference: InMemoryLogs,
) -> None:
    result = DatabaseLogSource().query(LogQuery("", level="WARN", limit=1))

    assert len(result.lines) == 1
    by_text = {t.template: t for t in result.templates}
    pool = by_text[
        "HikariPool-<*> - Connection is not available, request timed out after <*> "
        "(total=<*>, active=<*>, idle=<*>, waiting=<*>)"
    ]
    pool_lines = [line for line in reference.lines if "Connection is not available" in line.message]
    assert pool.count == len(pool_lines) == 60
    assert (pool.level, pool.services) == ("ERROR", ("payment-service",))
    assert pool.first_ts == min(line.ts for line in pool_lines)
    assert pool.last_ts == max(line.ts for line in pool_lines)
    assert pool.first_ts.startswith("2026-11-30T10:02:00")
    assert by_text["Payment authorization failed: upstream timeout after <*> order=<*>"].count == 80
    # Every variable number, id and hex is masked; every example is a message that was stored.
    messages = set(LogEntry.objects.values_list("message", flat=True))
    for t in result.templates:
        assert t.example in messages
        assert log_template(t.example) == t.template
        assert not any(ch.isdigit() for ch in t.template.replace("HikariPool", "").replace("<*>", "")), t.template
    assert [t.count for t in result.templates] == sorted((t.count for t in result.templates), reverse=True)
    assert sum(t.count for t in result.templates) == result.total
    # The injected instruction is a template like any other: the analyst is the one who ignores it.
    assert INJECTION in {t.example for t in result.templates}


def test_at_most_the_configured_number_of_templates(reference: InMemoryLogs) -> None:
    result = DatabaseLogSource(max_templates=3).query(LogQuery(""))
    assert [t.count for t in result.templates] == [t.count for t in reference.query(LogQuery("")).templates][:3]


def test_above_the_mining_cap_templates_are_still_measured_over_every_match(reference: InMemoryLogs) -> None:
    query = LogQuery("", level="WARN", limit=5)
    expected = {t.template: t for t in reference.query(query).templates}

    result = DatabaseLogSource(mine_limit=40).query(query)

    assert result.total == reference.query(query).total > 40
    assert len(result.lines) == 5
    assert result.templates
    for t in result.templates:
        ref = expected[t.template]
        assert (t.count, t.level, t.services, t.first_ts, t.last_ts) == (
            ref.count,
            ref.level,
            ref.services,
            ref.first_ts,
            ref.last_ts,
        ), t.template
    # Discovery is limited to the newest lines: the 09:20 search-cluster errors are not among them.
    assert "Elasticsearch shard relocation in progress for index products" in expected
    assert "Elasticsearch shard relocation in progress for index products" not in {t.template for t in result.templates}


def test_no_match_gives_an_empty_result() -> None:
    result = DatabaseLogSource().query(LogQuery("anything", level="ERROR"))
    assert result == LogResult(lines=(), total=0)


def test_the_tool_reports_no_evidence_and_ok_through_the_source(reference: InMemoryLogs) -> None:
    tool = query_logs_tool(DatabaseLogSource())
    found = tool.handler(tool.args_model(query="pool stats", level="WARN", limit=3), 5.0)
    assert found.evidence_status == "ok"
    assert found.raw["total"] == 24 and found.raw["returned"] == 3
    assert found.raw["templates"][0]["count"] == 24
    missing = tool.handler(tool.args_model(query="no-such-word"), 5.0)
    assert missing.evidence_status == "no_evidence" and missing.raw["total"] == 0


# --- a whole diagnosis from the database ---------------------------------------------------


def test_the_offline_analyst_finds_the_pool_in_the_ingested_incident(tmp_path: Path) -> None:
    incident = payment_incident()
    path = write_jsonl(tmp_path / "payment-incident.jsonl", incident.logs.lines)
    out = io.StringIO()
    call_command("ingest_logs", str(path), "--quiet", stdout=out)
    assert f"{len(incident.logs.lines)} stored, 0 unparsable" in out.getvalue()

    def diagnose(logs: Any) -> Any:
        app = ChatApplication(
            models=Models.single(OfflineAnalyst()),
            run_store=InMemoryRunStore(),
            invocations=InMemoryInvocationStore(),
            audit=InMemoryAudit().sinks(),
            tools=tools_over(knowledge=incident.knowledge, logs=logs, sql=incident.sql),
            runbooks=incident.runbooks,
        )
        return app.execute(ChatRequest(incident.question, owner="oncall"), RecordingObserver())

    result = diagnose(DatabaseLogSource())

    assert result.outcome.value == "success", result
    assert result.content is not None and result.content.content_type.value == "diagnosis_report"
    payload = dict(result.content.payload)
    root_cause = payload["root_cause"].lower()
    for keyword in incident.root_cause_keywords:
        assert keyword.lower() in root_cause
    evidence = [(e["tool"], e["quote"]) for f in payload["findings"] for e in f["evidence"]]
    assert any(tool == "query_logs" and "Connection is not available" in quote for tool, quote in evidence)
    assert "solar flare" not in json.dumps(payload).lower()
    # The same diagnosis as from the shipped in-memory logs.
    in_memory = diagnose(incident.logs)
    assert in_memory.content is not None
    assert payload["root_cause"] == in_memory.content.payload["root_cause"]
    assert payload["findings"] == in_memory.content.payload["findings"]


def test_a_templates_hosts_are_those_its_lines_came_from(tmp_path: Path) -> None:
    journal = tmp_path / "node.journal.log"
    journal.write_text(
        "2026-11-30T10:00:00+0000 node-a kernel: nf_conntrack: table full, dropping packet\n"
        "2026-11-30T10:00:01+0000 node-b kernel: nf_conntrack: table full, dropping packet\n"
        "2026-11-30T10:00:02+0000 node-a kubelet[811]: E1130 10:00:02.000000     811 pod_workers.go:1298] sync failed\n",
        encoding="utf-8",
    )
    ingest([journal], progress=False)

    by_text = {t.template: t for t in DatabaseLogSource().query(LogQuery("", level="WARN")).templates}
    assert by_text["nf_conntrack: table full, dropping packet"].hosts == ("node-a", "node-b")
    assert by_text["sync failed"].hosts == ("node-a",)
    # measured over every match, when more match than are mined, a template keeps its hosts
    refined = DatabaseLogSource(mine_limit=1).query(LogQuery("table full"))
    assert refined.templates[0].count == 2 and refined.templates[0].hosts
