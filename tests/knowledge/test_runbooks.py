"""Runbooks: parsing Markdown files, loading them into the database (function and command),
matching them to English and Chinese questions with BM25, noticing edits without a restart,
and editing them in the admin."""

from __future__ import annotations

import shutil
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.db import DatabaseError
from django.test import Client
from django.utils import timezone

from harness.prompts import agent_instructions
from harness.text import has_cjk
from knowledge import runbooks as runbooks_module
from knowledge.models import Chunk, Document, LogEntry, LogLevel, Runbook
from knowledge.runbooks import (
    RUNBOOK_DIR,
    SECTIONS,
    DatabaseRunbooks,
    LoadReport,
    RunbookRejected,
    index_terms,
    load_runbooks,
    missing_sections,
    parse_runbook,
)

SHIPPED = sorted(path.stem for path in RUNBOOK_DIR.glob("*.md"))

RUNBOOK_MD = """# Diagnose a full disk

**When to use:** writes fail with `No space left on device`.

## Workflow
1. Search the logs for `No space left`.
"""


class FakeClock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def shipped(service: Any) -> LoadReport:
    """An empty database with the shipped runbooks loaded."""
    return load_runbooks()


@pytest.fixture
def source(shipped: LoadReport) -> DatabaseRunbooks:
    return DatabaseRunbooks(check_interval_s=0)


def slugs(source: DatabaseRunbooks, question: str, limit: int = 3) -> list[str]:
    return [book.slug for book in source.match(question, limit=limit)]


# --- parsing -------------------------------------------------------------------------------


def test_a_file_gives_its_stem_as_slug_the_first_heading_as_title_and_the_rest_as_body(tmp_path: Path) -> None:
    path = tmp_path / "disk-full.md"
    path.write_text("\n\n" + RUNBOOK_MD + "\n\n", encoding="utf-8")

    slug, title, body = parse_runbook(path)

    assert (slug, title) == ("disk-full", "Diagnose a full disk")
    assert body.startswith("**When to use:**") and body.endswith("`No space left`.")
    assert parse_runbook(str(path)) == (slug, title, body), "a one-line string naming a file is read as the file"


def test_text_gives_a_slug_made_from_the_title_unless_one_is_given() -> None:
    assert parse_runbook(RUNBOOK_MD)[:2] == ("diagnose-a-full-disk", "Diagnose a full disk")
    assert parse_runbook(RUNBOOK_MD, slug="disk")[0] == "disk"


def test_line_endings_a_bom_and_closing_hashes_are_normalised() -> None:
    slug, title, body = parse_runbook("\ufeff# Disk full ##\r\n\r\nSymptoms\r\n## Workflow\r\n1. look\r\n")
    assert (slug, title) == ("disk-full", "Disk full")
    assert body == "Symptoms\n## Workflow\n1. look"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "no title"),
        ("## Workflow\n1. look at the logs\n", "no title"),
        ("#Title without a space\nbody\n", "no title"),
        ("Some notes first.\n# Title\nbody\n", "text before the '# Title' line"),
        ("# Title only\n\n   \n", "no body"),
        ("# " + "t" * 201 + "\nbody\n", "title longer than 200"),
    ],
)
def test_runbooks_without_a_title_or_a_body_are_refused(text: str, reason: str) -> None:
    with pytest.raises(RunbookRejected) as refused:
        parse_runbook(text)
    assert reason in refused.value.reason


def test_invalid_slugs_and_unreadable_files_are_refused(tmp_path: Path) -> None:
    with pytest.raises(RunbookRejected, match="invalid slug"):
        parse_runbook(RUNBOOK_MD, slug="not a slug!")
    chinese_name = tmp_path / "磁盘.md"
    chinese_name.write_text(RUNBOOK_MD, encoding="utf-8")
    with pytest.raises(RunbookRejected, match="no slug"):
        parse_runbook(chinese_name)
    assert parse_runbook(chinese_name, slug="disk")[0] == "disk"
    latin1 = tmp_path / "latin1.md"
    latin1.write_bytes("# Café\nbody\n".encode("latin-1"))
    with pytest.raises(RunbookRejected, match="not UTF-8"):
        parse_runbook(latin1)
    with pytest.raises(RunbookRejected, match="cannot be read"):
        parse_runbook(tmp_path / "missing.md")


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_runbook_has_the_sections_symptoms_and_chinese_keywords(name: str) -> None:
    slug, title, body = parse_runbook(RUNBOOK_DIR / f"{name}.md")
    assert slug == name and title
    assert missing_sections(body) == [], f"{name} lacks sections"
    assert body.startswith("**When to use:**")
    assert any(line.startswith("关键词:") and has_cjk(line) for line in body.splitlines())
    assert len(body) <= 4_000, "the agent's instructions keep 4,000 characters of runbooks"
    headings = [line[3:] for line in body.splitlines() if line.startswith("## ")]
    assert headings == list(SECTIONS), "sections in the usual order"


def test_missing_sections_names_the_absent_ones() -> None:
    assert missing_sections("## Workflow\n1.\n## report rules\n- quote") == ["Required evidence", "Stop conditions"]


# --- loading -------------------------------------------------------------------------------


def test_loading_the_shipped_runbooks_creates_them_then_finds_them_unchanged(service: Any) -> None:
    first = load_runbooks()
    assert len(first.created) >= 8 and sorted(first.created) == SHIPPED
    assert (first.updated, first.unchanged, first.rejected) == ([], [], [])
    assert Runbook.objects.filter(enabled=True).count() == len(SHIPPED)
    disk = Runbook.objects.get(slug="disk-full")
    assert disk.title == "Disk full: no space left on device" and "## Stop conditions" in disk.body

    second = load_runbooks(RUNBOOK_DIR)
    assert (second.created, second.updated, second.rejected) == ([], [], [])
    assert sorted(second.unchanged) == SHIPPED
    assert second.summary() == f"0 created, 0 updated, {len(SHIPPED)} unchanged, 0 rejected"


def test_an_edited_file_updates_its_runbook_and_keeps_it_disabled(service: Any, tmp_path: Path) -> None:
    directory = tmp_path / "runbooks"
    shutil.copytree(RUNBOOK_DIR, directory)
    load_runbooks(directory)
    Runbook.objects.filter(slug="disk-full").update(enabled=False)
    before = Runbook.objects.get(slug="disk-full").updated_at
    path = directory / "disk-full.md"
    path.write_text(path.read_text(encoding="utf-8") + "\n- Also check /var/lib/docker.\n", encoding="utf-8")

    report = load_runbooks(directory)

    assert report.updated == ["disk-full"] and report.created == []
    assert len(report.unchanged) == len(SHIPPED) - 1
    row = Runbook.objects.get(slug="disk-full")
    assert row.body.endswith("- Also check /var/lib/docker.") and row.updated_at > before
    assert row.enabled is False, "loading does not re-enable what staff disabled"


def test_bad_files_are_rejected_with_a_reason_and_the_others_loaded(service: Any, tmp_path: Path) -> None:
    (tmp_path / "a-disk.md").write_text(RUNBOOK_MD, encoding="utf-8")
    (tmp_path / "notes.md").write_text("just some notes\n", encoding="utf-8")
    (tmp_path / "empty.md").write_text("# Empty\n", encoding="utf-8")
    (tmp_path / "A Disk.md").write_text(RUNBOOK_MD, encoding="utf-8")  # also "a-disk", and sorted first
    (tmp_path / "ignored.txt").write_text(RUNBOOK_MD, encoding="utf-8")

    report = load_runbooks(tmp_path)

    assert report.created == ["a-disk"]
    assert dict(report.rejected) == {
        "a-disk.md": "slug 'a-disk' already used by A Disk.md",
        "empty.md": "no body after the title",
        "notes.md": "no title: the first line must be '# Title'",
    }
    assert list(Runbook.objects.values_list("slug", flat=True)) == ["a-disk"]


def test_loading_a_missing_directory_fails(service: Any, tmp_path: Path) -> None:
    with pytest.raises(NotADirectoryError):
        load_runbooks(tmp_path / "nope")


def test_the_command_loads_the_shipped_runbooks_and_prints_the_report(service: Any) -> None:
    out = StringIO()
    call_command("load_runbooks", stdout=out)
    text = out.getvalue()
    assert f"runbooks from {RUNBOOK_DIR}: {len(SHIPPED)} created, 0 updated, 0 unchanged, 0 rejected" in text
    assert "  created    db-connection-pool-exhaustion" in text

    again = StringIO()
    call_command("load_runbooks", str(RUNBOOK_DIR), verbosity=2, stdout=again)
    assert f"0 created, 0 updated, {len(SHIPPED)} unchanged, 0 rejected" in again.getvalue()
    assert "  unchanged  tls-certificate" in again.getvalue()


def test_the_command_reports_rejected_files_and_fails_when_strict(service: Any, tmp_path: Path) -> None:
    (tmp_path / "ok.md").write_text(RUNBOOK_MD, encoding="utf-8")
    (tmp_path / "notes.md").write_text("no heading here\n", encoding="utf-8")
    out = StringIO()
    call_command("load_runbooks", str(tmp_path), stdout=out)
    assert "1 created, 0 updated, 0 unchanged, 1 rejected" in out.getvalue()
    assert "  rejected   notes.md: no title" in out.getvalue()

    with pytest.raises(CommandError, match="1 runbook file"):
        call_command("load_runbooks", str(tmp_path), "--strict", stdout=StringIO())
    with pytest.raises(CommandError, match="not a directory"):
        call_command("load_runbooks", str(tmp_path / "nope"), stdout=StringIO())


# --- matching ------------------------------------------------------------------------------

#: Question → the runbook that must come first. Each topic in English and in Chinese.
MATCHING = [
    ("payments timing out, HikariPool connection not available", "db-connection-pool-exhaustion"),
    ("the pool is exhausted", "db-connection-pool-exhaustion"),
    ("支付接口超时，连接池耗尽", "db-connection-pool-exhaustion"),
    ("queries got slow after yesterday's deploy and the new migration", "slow-queries-after-change"),
    ("上线后数据库慢查询变多", "slow-queries-after-change"),
    ("cache miss spike after a hot key expired, database overloaded", "cache-stampede"),
    ("缓存击穿，数据库压力大", "cache-stampede"),
    ("磁盘满了，写入失败", "disk-full"),
    ("No space left on device when writing logs", "disk-full"),
    ("SSL handshake failed, certificate expired", "tls-certificate"),
    ("证书过期导致调用失败", "tls-certificate"),
    ("pods OOMKilled and restarting, heap keeps growing", "memory-leak-oom"),
    ("服务内存泄漏，频繁重启", "memory-leak-oom"),
    ("upstream timeouts and a retry storm against the card processor", "downstream-timeout-retry-storm"),
    ("调用下游服务超时，大量重试", "downstream-timeout-retry-storm"),
    ("UnknownHostException: orders-db.prod.internal", "dns-resolution-failure"),
    ("域名解析失败", "dns-resolution-failure"),
    ("kafka consumer lag keeps growing, orders delayed", "queue-consumer-lag"),
    ("消息队列积压，消费延迟", "queue-consumer-lag"),
    ("RejectedExecutionException, thread pool exhausted, all requests slow", "worker-pool-saturation"),
    ("线程池满了，请求排队", "worker-pool-saturation"),
]


def test_a_question_is_read_with_the_english_terms_of_its_chinese_words_and_phrasings() -> None:
    assert {"支付", "超时", "payment", "pay", "timeout"} <= set(index_terms("支付超时"))
    assert {"payment", "timeout"} <= set(index_terms("Payments are timing out"))
    assert index_terms("since 10:00, a b") == ["sinc"], "numbers and single letters are not topics"


@pytest.mark.parametrize(("question", "expected"), MATCHING)
def test_the_right_runbook_comes_first(source: DatabaseRunbooks, question: str, expected: str) -> None:
    found = slugs(source, question)
    assert found and found[0] == expected, (found, source.ranked(question)[:3])
    assert len(found) <= 2, "a question about one incident does not get every runbook"


@pytest.mark.parametrize(
    "question", ["what's the weather", "今天天气怎么样", "hello, who are you?", "error in the service"]
)
def test_an_unrelated_or_vague_question_gets_no_runbook(source: DatabaseRunbooks, question: str) -> None:
    assert source.match(question, limit=3) == []


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        ("disk is full and the TLS certificate expired", {"disk-full", "tls-certificate"}),
        ("磁盘满了，同时证书也过期了", {"disk-full", "tls-certificate"}),
        (
            "connection pool exhausted and kafka consumer lag growing",
            {"db-connection-pool-exhaustion", "queue-consumer-lag"},
        ),
    ],
)
def test_a_question_about_two_incidents_gets_both_runbooks(
    source: DatabaseRunbooks, question: str, expected: set[str]
) -> None:
    assert set(slugs(source, question)) == expected


def test_runbooks_that_fit_alike_come_back_together_within_the_limit(source: DatabaseRunbooks) -> None:
    # "payment timeout": a downstream timing out, or the database pool running out.
    both = {"downstream-timeout-retry-storm", "db-connection-pool-exhaustion"}
    assert set(slugs(source, "支付超时")) == both
    assert set(slugs(source, "Payments are timing out since about 10:00 UTC — what is going on?")) == both
    assert len(source.match("支付超时", limit=1)) == 1
    assert source.match("支付超时", limit=0) == []
    ranked = source.ranked("支付超时")
    assert len(ranked) > 2 and ranked == sorted(ranked, key=lambda pair: -pair[1])


def test_matched_runbooks_reach_the_agent_instructions(source: DatabaseRunbooks) -> None:
    text = agent_instructions(source.match("payments timing out, HikariPool connection not available", limit=3))
    assert "--- runbook: db-connection-pool-exhaustion — Database connection pool exhaustion ---" in text
    assert "## Stop conditions" in text


def test_no_runbooks_means_no_match(service: Any) -> None:
    assert DatabaseRunbooks().match("磁盘满了", limit=3) == []


def test_an_edit_is_noticed_by_a_running_source_after_the_check_interval(shipped: LoadReport) -> None:
    clock = FakeClock()
    source = DatabaseRunbooks(check_interval_s=5, clock=clock)
    question = "etcd quorum lost, leader election keeps failing"
    assert source.match(question, limit=3) == []

    book = Runbook.objects.get(slug="dns-resolution-failure")
    book.body += "\n\nAlso for etcd: `quorum lost`, `leader election` timeouts, etcd members unreachable."
    book.save()
    clock.advance(2)
    assert source.match(question, limit=3) == [], "checked at most every check_interval_s"
    clock.advance(4)
    assert slugs(source, question) == ["dns-resolution-failure"]
    assert "etcd" in source.match(question, limit=1)[0].body


def test_disabling_adding_and_deleting_runbooks_are_noticed(shipped: LoadReport) -> None:
    clock = FakeClock()
    source = DatabaseRunbooks(check_interval_s=5, clock=clock)
    assert slugs(source, "磁盘满了，写入失败")[0] == "disk-full"

    disk = Runbook.objects.get(slug="disk-full")
    disk.enabled = False
    disk.save()
    clock.advance(6)
    assert "disk-full" not in slugs(source, "磁盘满了，写入失败")

    # A bulk update does not touch updated_at, but changes the number of enabled runbooks.
    Runbook.objects.filter(slug="disk-full").update(enabled=True)
    clock.advance(6)
    assert slugs(source, "磁盘满了，写入失败")[0] == "disk-full"

    Runbook.objects.create(slug="etcd-quorum", title="etcd quorum loss", body="etcd `quorum lost`, leader election.")
    clock.advance(6)
    assert slugs(source, "etcd quorum lost") == ["etcd-quorum"]

    Runbook.objects.filter(slug="etcd-quorum").delete()
    source.refresh()
    assert source.match("etcd quorum lost", limit=3) == []


def test_the_last_index_is_used_when_the_database_cannot_be_read(
    shipped: LoadReport, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    source = DatabaseRunbooks(check_interval_s=0)
    assert slugs(source, "域名解析失败")[0] == "dns-resolution-failure"

    def unavailable() -> Any:
        raise DatabaseError("server has gone away")

    monkeypatch.setattr(runbooks_module, "_signature", unavailable)
    assert slugs(source, "域名解析失败")[0] == "dns-resolution-failure"
    assert "runbooks could not be read" in caplog.text
    assert DatabaseRunbooks().match("域名解析失败", limit=3) == [], "nothing to fall back on yet"


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="relative_score"):
        DatabaseRunbooks(relative_score=0)
    with pytest.raises(ValueError, match="scores > 0"):
        DatabaseRunbooks(min_score=0)


# --- admin ---------------------------------------------------------------------------------


@pytest.fixture
def console(shipped: LoadReport) -> Client:
    """The admin, logged in as a staff superuser."""
    user = get_user_model().objects.create_user("oncall-lead", is_staff=True, is_superuser=True)
    client = Client()
    client.force_login(user)
    return client


def test_the_runbook_list_shows_and_searches_the_runbooks(console: Client) -> None:
    response = console.get("/admin/knowledge/runbook/")
    assert response.status_code == 200
    page = response.content.decode()
    for slug in SHIPPED:
        assert slug in page
    assert "complete" in page  # the sections column

    found = console.get("/admin/knowledge/runbook/", {"q": "HikariPool"}).content.decode()
    assert "db-connection-pool-exhaustion" in found and "disk-full" not in found
    assert console.get("/admin/knowledge/runbook/?enabled__exact=1").status_code == 200


def test_the_runbook_change_page_previews_the_body_as_the_agent_sees_it(console: Client) -> None:
    book = Runbook.objects.get(slug="tls-certificate")
    response = console.get(f"/admin/knowledge/runbook/{book.pk}/change/")
    assert response.status_code == 200
    page = response.content.decode()
    assert "--- runbook: tls-certificate — Expired or misconfigured TLS certificate ---" in page
    assert "Missing sections" not in page
    assert console.get("/admin/knowledge/runbook/add/").status_code == 200


def test_the_body_is_edited_in_the_admin_and_the_matcher_picks_it_up(console: Client) -> None:
    source = DatabaseRunbooks(check_interval_s=0)
    question = "etcd quorum lost"
    assert source.match(question, limit=3) == []
    book = Runbook.objects.get(slug="dns-resolution-failure")
    body = book.body.replace("\n", "\r\n") + "\r\n\r\n- etcd: `quorum lost` is resolution of members failing.\r\n"

    response = console.post(
        f"/admin/knowledge/runbook/{book.pk}/change/",
        {"slug": book.slug, "title": book.title, "body": body, "enabled": "on"},
    )

    assert response.status_code == 302, response.content.decode()[:2000]
    book.refresh_from_db()
    assert "\r" not in book.body and book.body.endswith("- etcd: `quorum lost` is resolution of members failing.")
    assert slugs(source, question) == ["dns-resolution-failure"]
    reload = load_runbooks()
    assert reload.updated == ["dns-resolution-failure"], "the file wins over the admin edit"


def test_an_empty_body_is_refused_by_the_admin_form(console: Client) -> None:
    book = Runbook.objects.get(slug="disk-full")
    response = console.post(
        f"/admin/knowledge/runbook/{book.pk}/change/",
        {"slug": book.slug, "title": book.title, "body": "\r\n  \r\n", "enabled": "on"},
    )
    assert response.status_code == 200 and "This field is required" in response.content.decode()
    assert Runbook.objects.get(slug="disk-full").body == book.body


def test_the_disable_action_takes_runbooks_out_of_matching(console: Client) -> None:
    source = DatabaseRunbooks(check_interval_s=0)
    assert slugs(source, "磁盘满了，写入失败")[0] == "disk-full"
    book = Runbook.objects.get(slug="disk-full")
    response = console.post("/admin/knowledge/runbook/", {"action": "disable", "_selected_action": [book.pk]})
    assert response.status_code == 302
    assert Runbook.objects.get(slug="disk-full").enabled is False
    assert "disk-full" not in slugs(source, "磁盘满了，写入失败")


def test_documents_chunks_and_logs_are_listed_read_only(console: Client) -> None:
    document = Document.objects.create(
        title="Payment architecture",
        filename="payments.md",
        content_type="text/markdown",
        size_bytes=120,
        sha256="0" * 64,
        text="# Payment architecture\nThe payment service uses HikariCP.",
        chunk_count=1,
    )
    chunk = Chunk.objects.create(
        document=document,
        ordinal=0,
        title="Payment architecture",
        heading_path="Payment architecture › Dependencies",
        text="The payment service uses HikariCP.",
        char_count=34,
        token_count=6,
    )
    entry = LogEntry.objects.create(
        ts=timezone.now(),
        service="payment-service",
        level=LogLevel.ERROR,
        message="HikariPool-1 - Connection is not available, request timed out after 30000ms " + "x" * 300,
    )
    listings = {
        "/admin/knowledge/document/": ["Payment architecture", "pending"],
        "/admin/knowledge/document/?q=payment": ["Payment architecture"],
        "/admin/knowledge/chunk/": ["Payment architecture › Dependencies"],
        "/admin/knowledge/logentry/": ["payment-service", "Connection is not available"],
        "/admin/knowledge/logentry/?service=payment-service&level__exact=3": ["payment-service"],
    }
    for path, expected in listings.items():
        response = console.get(path)
        assert response.status_code == 200, path
        for text in expected:
            assert text in response.content.decode(), (path, text)
    assert "x" * 300 not in console.get("/admin/knowledge/logentry/").content.decode(), "messages are excerpts"
    for model, obj in (("document", document), ("chunk", chunk), ("logentry", entry)):
        assert console.get(f"/admin/knowledge/{model}/{obj.pk}/change/").status_code == 200
        assert console.get(f"/admin/knowledge/{model}/add/").status_code == 403
        assert console.post(f"/admin/knowledge/{model}/{obj.pk}/delete/", {"post": "yes"}).status_code == 403
    assert LogEntry.objects.filter(pk=entry.pk).exists()
