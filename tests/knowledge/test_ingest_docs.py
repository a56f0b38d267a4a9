"""``manage.py ingest_docs``: files and folders indexed here and now or queued for the workers,
re-runs that skip unchanged files, every file that cannot be added reported with its reason,
the progress bar and --quiet, and the exit status a script sees."""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command, execute_from_command_line
from django.core.management.base import CommandError

from knowledge import backends, services
from knowledge.models import Chunk, Document
from knowledge.search import index_version
from knowledge.tasks import index_document
from tests.django_fixtures import broker_pointed_at_nothing
from tests.knowledge.corpus import DISK, lexical_wiring
from tests.knowledge.pdfs import make_pdf_bomb

POOL = b"Connection pool exhausted: raise db.pool.max_size to 50 after checking max_connections.\n"
GATEWAY = b"<html><head><title>Gateway</title></head><body><h2>Timeouts</h2><p>Acquirer timeouts.</p></body></html>"
MINIMAL_PDF = (
    b"%PDF-1.4\n1 0 obj\n<< /Type /Catalog /Pages 2 0 R >>\nendobj\n"
    b"2 0 obj\n<< /Type /Pages /Kids [3 0 R] /Count 1 >>\nendobj\n"
    b"3 0 obj\n<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
    b"/Resources << /Font << /F1 4 0 R >> >> /Contents 5 0 R >>\nendobj\n"
    b"4 0 obj\n<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>\nendobj\n"
    b"5 0 obj\n<< /Length 57 >>\nstream\nBT /F1 12 Tf 72 720 Td (Certificate expiry runbook) Tj ET\nendstream\nendobj\n"
    b"trailer\n<< /Root 1 0 R >>\nstartxref\n0\n%%EOF\n"
)  # no xref table and a wrong startxref: pypdf rebuilds the table, as for many real-world files


@pytest.fixture(autouse=True)
def lexical_only(settings: Any) -> Iterator[None]:
    """No embedder: the command is about files, not vectors (and this keeps it fast)."""
    with lexical_wiring(settings):
        yield


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    """A docs folder as teams keep them: nested, with files the knowledge base does not take."""
    root = tmp_path / "docs"
    (root / "runbooks" / "storage").mkdir(parents=True)
    (root / "runbooks" / "storage" / "disk-full.md").write_bytes(DISK)
    (root / "runbooks" / "pool.txt").write_bytes(POOL)
    (root / "gateway.HTML").write_bytes(GATEWAY)
    (root / "cert.pdf").write_bytes(MINIMAL_PDF)
    (root / "diagram.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 16)
    (root / "build.sh").write_bytes(b"#!/bin/sh\necho hi\n")
    return root


def ingest(*args: str | Path) -> str:
    out = io.StringIO()
    call_command("ingest_docs", *[str(a) for a in args], "--quiet", stdout=out)
    return out.getvalue()


def queued(redis: Any) -> list[list[Any]]:
    """The args of every indexing message waiting in the Celery queue, oldest first."""
    out = []
    for raw in reversed(redis.lrange("knowledge", 0, -1)):
        message = json.loads(raw)
        assert message["headers"]["task"] == "knowledge.index_document"
        args, _kwargs, _embed = json.loads(base64.b64decode(message["body"]))
        out.append(args)
    return out


# --- files and folders --------------------------------------------------------------------


def test_a_folder_is_walked_and_its_supported_files_indexed(db: None, docs: Path) -> None:
    output = ingest(docs)

    assert output.splitlines()[0] == "4 files: 4 indexed"
    documents = {d.filename: d for d in Document.objects.all()}
    assert set(documents) == {"disk-full.md", "pool.txt", "gateway.HTML", "cert.pdf"}
    assert {d.status for d in documents.values()} == {"indexed"}
    assert all(d.owner is None for d in documents.values())
    assert documents["disk-full.md"].title == "Disk full runbook"
    assert documents["cert.pdf"].chunk_count == 1
    assert set(Chunk.objects.filter(document=documents["disk-full.md"]).values_list("heading_path", flat=True)) == {
        "Disk full runbook › Symptoms",
        "Disk full runbook › Remedy",
    }
    assert Chunk.objects.get(document=documents["gateway.HTML"]).heading_path == "Timeouts"
    assert "Certificate expiry runbook" in Chunk.objects.get(document=documents["cert.pdf"]).text


def test_files_and_folders_can_be_mixed(db: None, docs: Path, tmp_path: Path) -> None:
    loose = tmp_path / "loose-notes.md"
    loose.write_bytes(b"# Loose notes\n\nThe cache warms up in five minutes.\n")

    output = ingest(docs / "runbooks", loose)

    assert output.splitlines()[0] == "3 files: 3 indexed"
    assert set(Document.objects.values_list("filename", flat=True)) == {"disk-full.md", "pool.txt", "loose-notes.md"}


def test_the_ingested_documents_are_searchable(db: None, docs: Path) -> None:
    ingest(docs)

    result = backends.knowledge_search().search("ENOSPC on the ledger volume", 3)

    assert result.evidence_status == "ok"
    assert result.chunks[0].title == "Disk full runbook"
    assert result.chunks[0].section == "Disk full runbook › Symptoms"


# --- re-runs ------------------------------------------------------------------------------


def test_a_rerun_skips_unchanged_files_and_duplicates_nothing(db: None, docs: Path) -> None:
    ingest(docs)
    before = sorted(Chunk.objects.values_list("id", "text")), index_version()

    output = ingest(docs)

    assert output.splitlines()[0] == "4 files: 4 unchanged"
    assert Document.objects.count() == 4
    assert (sorted(Chunk.objects.values_list("id", "text")), index_version()) == before


def test_the_same_content_under_two_names_is_one_document(db: None, tmp_path: Path) -> None:
    (tmp_path / "a.md").write_bytes(DISK)
    (tmp_path / "b.md").write_bytes(DISK)

    output = ingest(tmp_path)

    assert output.splitlines()[0] == "2 files: 1 indexed, 1 unchanged"
    assert Document.objects.count() == 1


def test_a_new_file_in_a_folder_is_added_on_the_next_run(db: None, docs: Path) -> None:
    ingest(docs)
    (docs / "runbooks" / "cert.md").write_bytes(b"# TLS\n\nRenew with cert-manager.\n")

    output = ingest(docs)

    assert output.splitlines()[0] == "5 files: 1 indexed, 4 unchanged"
    assert Document.objects.filter(filename="cert.md", status="indexed").exists()


def test_an_edited_file_replaces_its_previous_version(db: None, tmp_path: Path) -> None:
    runbook = tmp_path / "disk-full.md"
    runbook.write_bytes(DISK)
    ingest(runbook)
    runbook.write_bytes(DISK.replace(b"20 GiB", b"50 GiB"))

    ingest(runbook)

    texts = " ".join(Chunk.objects.values_list("text", flat=True))
    assert "50 GiB" in texts and "20 GiB" not in texts
    assert Document.objects.filter(filename="disk-full.md").count() == 1


def test_a_queued_new_version_replaces_the_old_one_only_once_it_is_indexed(service: Any, tmp_path: Path) -> None:
    runbook = tmp_path / "disk-full.md"
    runbook.write_bytes(DISK)
    ingest(runbook)
    runbook.write_bytes(DISK.replace(b"20 GiB", b"50 GiB"))

    ingest(runbook, "--queue")

    old, new = Document.objects.filter(filename="disk-full.md").order_by("created_at")
    assert (old.status, new.status) == ("indexed", "pending")
    assert "20 GiB" in " ".join(Chunk.objects.values_list("text", flat=True))  # still answering
    services.document_index(document_id=str(new.id), embedder=None)
    assert list(Document.objects.filter(filename="disk-full.md").values_list("id", flat=True)) == [new.id]
    texts = " ".join(Chunk.objects.values_list("text", flat=True))
    assert "50 GiB" in texts and "20 GiB" not in texts


def test_the_same_content_under_two_paths_is_one_document_and_editing_one_keeps_the_other(
    db: None, tmp_path: Path
) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first, second = tmp_path / "a" / "disk.md", tmp_path / "b" / "disk.md"
    first.write_bytes(DISK)
    second.write_bytes(POOL)
    ingest(first, second)
    second.write_bytes(POOL + b"\nOne more line about pools.\n")

    ingest(first, second)

    assert Document.objects.count() == 2
    texts = " ".join(Chunk.objects.values_list("text", flat=True))
    assert "One more line about pools" in texts and "20 GiB" in texts


# --- what cannot be added -----------------------------------------------------------------


def test_a_named_unsupported_file_is_reported_and_the_others_are_added(db: None, tmp_path: Path) -> None:
    good, bad = tmp_path / "disk.md", tmp_path / "setup.exe"
    good.write_bytes(DISK)
    bad.write_bytes(b"MZ\x90\x00")

    output = ingest(good, bad)

    lines = output.splitlines()
    assert lines[0] == "2 files: 1 failed, 1 indexed"
    assert lines[1].strip().startswith(f"{bad}: unsupported file type '.exe'")
    assert list(Document.objects.values_list("filename", flat=True)) == ["disk.md"]


@pytest.mark.parametrize(
    ("name", "data", "reason"),
    [
        ("broken.pdf", b"%PDF-1.7\nthis is not really a pdf", "the PDF cannot be read"),
        ("photo.pdf", b"\xff\xd8\xff\xe0 a JPEG renamed", "the file is not a PDF"),
        ("dump.txt", b"core\x00dump\x00", "the file holds binary data, not text"),
        ("empty.md", b"", "The file is empty."),
    ],
)
def test_a_file_whose_text_cannot_be_extracted_is_reported_with_its_reason(
    db: None, tmp_path: Path, name: str, data: bytes, reason: str
) -> None:
    (tmp_path / "disk.md").write_bytes(DISK)
    (tmp_path / name).write_bytes(data)

    output = ingest(tmp_path)

    assert output.splitlines()[0] == "2 files: 1 failed, 1 indexed"
    assert f"{tmp_path / name}: {reason}" in output
    assert "Traceback" not in output
    assert not Chunk.objects.filter(document__filename=name).exists()


def test_a_file_over_the_upload_limit_is_reported_and_not_stored(db: None, tmp_path: Path, settings: Any) -> None:
    settings.KNOWLEDGE = {**settings.KNOWLEDGE, "MAX_UPLOAD_BYTES": 500}
    (tmp_path / "small.md").write_bytes(b"# Small\n\nfits.\n")
    (tmp_path / "big.txt").write_bytes(b"log line\n" * 100)

    output = ingest(tmp_path)

    assert output.splitlines()[0] == "2 files: 1 failed, 1 indexed"
    assert f"{tmp_path / 'big.txt'}: larger than 500 bytes" in output
    assert list(Document.objects.values_list("filename", flat=True)) == ["small.md"]


def test_a_path_that_does_not_exist_stops_the_command_before_anything_is_added(db: None, docs: Path) -> None:
    with pytest.raises(CommandError, match="no such file or folder"):
        ingest(docs, docs / "missing.md")
    assert not Document.objects.exists()


def test_a_folder_without_supported_files_is_an_error(db: None, tmp_path: Path) -> None:
    (tmp_path / "diagram.png").write_bytes(b"\x89PNG")
    with pytest.raises(CommandError, match=r"no supported files found \(.*\.md.*\.pdf"):
        ingest(tmp_path)


# --- exit status --------------------------------------------------------------------------


# run_from_argv closes the database connections when it ends: these tests commit for real.


def test_the_command_exits_1_when_no_document_could_be_added(
    transactional_db: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "broken.pdf").write_bytes(b"%PDF-1.7\nnope")
    (tmp_path / "dump.txt").write_bytes(b"\x00\x00")

    with pytest.raises(SystemExit) as exited:
        execute_from_command_line(["manage.py", "ingest_docs", "--quiet", str(tmp_path)])

    assert exited.value.code == 1
    captured = capsys.readouterr()
    assert "2 files: 2 failed" in captured.out
    assert "CommandError: no document could be added" in captured.err
    assert "Traceback" not in captured.err


def test_a_pdf_bomb_is_one_line_with_its_code_and_the_command_exits_1(
    transactional_db: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "bomb.pdf").write_bytes(make_pdf_bomb(80_000_000))

    with pytest.raises(SystemExit) as exited:
        execute_from_command_line(["manage.py", "ingest_docs", "--quiet", str(tmp_path)])

    assert exited.value.code == 1
    captured = capsys.readouterr()
    assert captured.out.splitlines() == [
        "1 files: 1 failed",
        f"  {tmp_path / 'bomb.pdf'}: the PDF expands beyond the decompression limit [decompression_limit]",
    ]
    assert "Traceback" not in captured.err and "LimitReachedError" not in captured.err
    assert Document.objects.get().status == "failed"


def test_a_file_whose_indexing_breaks_unexpectedly_is_one_line_and_the_others_go_on(
    db: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "a-broken.md").write_bytes(b"# Broken\n\nThis one breaks.\n")
    (tmp_path / "b-disk.md").write_bytes(DISK)
    original = services.document_index

    def breaks_on_the_first(*, document_id: str, **kwargs: Any) -> str:
        if Document.objects.get(pk=document_id).filename == "a-broken.md":
            raise RuntimeError("secret detail of the failure")
        return original(document_id=document_id, **kwargs)

    monkeypatch.setattr(services, "document_index", breaks_on_the_first)

    output = ingest(tmp_path)

    assert output.splitlines() == [
        "2 files: 1 failed, 1 indexed",
        f"  {tmp_path / 'a-broken.md'}: could not be indexed (RuntimeError); it stays pending",
    ]
    assert "secret detail" not in output


def test_the_command_exits_0_when_some_files_were_added(transactional_db: None, tmp_path: Path) -> None:
    """Partial success is success: the failures are listed for the operator to fix."""
    (tmp_path / "disk.md").write_bytes(DISK)
    (tmp_path / "broken.pdf").write_bytes(b"%PDF-1.7\nnope")

    execute_from_command_line(["manage.py", "ingest_docs", "--quiet", str(tmp_path)])  # no SystemExit(1)

    assert set(Document.objects.values_list("filename", "status")) == {("disk.md", "indexed"), ("broken.pdf", "failed")}


def test_a_misconfigured_embedder_is_a_clear_command_error(db: None, docs: Path, settings: Any) -> None:
    settings.EMBEDDINGS = {**settings.EMBEDDINGS, "PROVIDER": "openai", "BASE_URL": "", "API_KEY": ""}
    with pytest.raises(CommandError, match="EMBEDDINGS_"):
        ingest(docs)


def test_an_embeddings_endpoint_that_is_down_fails_each_file_with_the_reason(
    db: None, tmp_path: Path, settings: Any
) -> None:
    settings.EMBEDDINGS = {
        **settings.EMBEDDINGS,
        "PROVIDER": "openai",
        "BASE_URL": "http://127.0.0.1:1/v1",  # nothing listens there
        "API_KEY": "sk-test-not-a-real-key",
        "MODEL": "text-embedding-3-small",
        "DIMENSION": 8,
        "MAX_RETRIES": 0,
    }
    (tmp_path / "disk.md").write_bytes(DISK)

    with pytest.raises(CommandError, match="no document could be added"):
        ingest(tmp_path)

    document = Document.objects.get()
    assert document.status == "failed" and document.failure_reason.startswith("embedding failed")
    assert "sk-test" not in document.failure_reason and not Chunk.objects.exists()


# --- progress bar -------------------------------------------------------------------------


def test_the_progress_bar_goes_to_stderr_and_quiet_turns_it_off(
    db: None, docs: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = io.StringIO()
    call_command("ingest_docs", str(docs), stdout=out)
    noisy = capsys.readouterr()
    assert "documents" in noisy.err and "file" in noisy.err
    assert out.getvalue().splitlines()[0] == "4 files: 4 indexed"  # the summary stays clean

    Document.objects.all().delete()
    out = io.StringIO()
    call_command("ingest_docs", str(docs), "--quiet", stdout=out)
    quiet = capsys.readouterr()
    assert quiet.err == "" and quiet.out == ""
    assert out.getvalue().splitlines()[0] == "4 files: 4 indexed"


# --- --queue ------------------------------------------------------------------------------


def test_queue_leaves_indexing_to_the_workers(service: Any, docs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_model() -> None:
        raise AssertionError("--queue must not load the embedding model")

    monkeypatch.setattr(backends, "embedder", no_model)

    output = ingest(docs, "--queue")

    assert output.splitlines()[0] == "4 files: 4 queued"
    assert set(Document.objects.values_list("status", flat=True)) == {"pending"}
    assert not Chunk.objects.exists()
    assert sorted(args[0] for args in queued(service)) == sorted(
        str(i) for i in Document.objects.values_list("id", flat=True)
    )

    monkeypatch.setattr(backends, "embedder", lambda: None)
    for args in queued(service):
        index_document.apply(args=args).get()
    assert set(Document.objects.values_list("status", flat=True)) == {"indexed"}
    assert ingest(docs, "--queue").splitlines()[0] == "4 files: 4 unchanged"


def test_still_pending_documents_are_indexed_by_a_run_without_queue(service: Any, docs: Path) -> None:
    ingest(docs, "--queue")
    service.delete("knowledge")  # the messages were lost (a flushed broker, say)

    output = ingest(docs)

    assert output.splitlines()[0] == "4 files: 4 indexed"
    assert set(Document.objects.values_list("status", flat=True)) == {"indexed"}


def test_a_queue_rerun_does_not_claim_to_queue_what_it_did_not(service: Any, docs: Path) -> None:
    ingest(docs, "--queue")
    service.delete("knowledge")

    output = ingest(docs, "--queue")

    assert "queued" not in output.splitlines()[0] or len(queued(service)) == 4


def test_queue_with_the_broker_down_fails_every_file_and_says_why(service: Any, docs: Path) -> None:
    out = io.StringIO()
    with broker_pointed_at_nothing(), pytest.raises(CommandError, match="no document could be added"):
        call_command("ingest_docs", str(docs / "runbooks"), "--queue", "--quiet", stdout=out)

    assert out.getvalue().splitlines()[0] == "2 files: 2 failed"
    assert "queue is unavailable" in out.getvalue()
    assert "redis://" not in out.getvalue()
    assert set(Document.objects.values_list("status", flat=True)) == {"failed"}
