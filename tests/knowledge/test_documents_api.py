"""The knowledge-base API against the real database, Redis and Celery queue: uploads of every
format indexed by the worker's task, every refusal with its envelope, who sees which document,
who may delete, search with its bad inputs, the staff-only rebuild and a broker that is down.
(Approval and the 404/403 matrix: test_provenance.py.)"""

from __future__ import annotations

import base64
import hashlib
import json
import time
from collections.abc import Iterator, Sequence
from typing import Any, cast

import numpy as np
import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from rest_framework.test import APIClient

from knowledge import backends, services
from knowledge.embeddings import Embedder, EmbeddingUnavailable, Vectors, embedder_from_config
from knowledge.models import Chunk, Document, IndexState
from knowledge.tasks import MAX_RETRIES, index_document
from tests.django_fixtures import Caller, broker_pointed_at_nothing
from tests.knowledge.corpus import lexical_wiring
from tests.knowledge.pdfs import make_pdf as pdf_pages
from tests.knowledge.pdfs import make_pdf_bomb

DISK_RUNBOOK = (
    b"# Disk full runbook\n\n"
    b"## Symptoms\n\nWrites fail with ENOSPC: no space left on device on the ledger volume.\n\n"
    b"## Remedy\n\nDelete rotated logs under /var/log/ledger and grow the volume by 20 GiB.\n"
)
POOL_NOTES = b"Connection pool exhausted: raise db.pool.max_size to 50 after checking max_connections.\n"
#: a phrase only the tests put into documents: whatever echoes it leaks document content
CANARY = "quetzalcoatl-7f3e"


# --- helpers ------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def lexical_only(settings: Any) -> Iterator[None]:
    """No embedder (lexical retrieval), and a fresh search index per test."""
    with lexical_wiring(settings):
        yield


def upload(caller: Caller | APIClient, name: str, data: bytes, **fields: Any) -> Any:
    client = caller.client if isinstance(caller, Caller) else caller
    return client.post("/api/documents", {"file": SimpleUploadedFile(name, data), **fields}, format="multipart")


def search(caller: Caller, query: str, **extra: Any) -> Any:
    return caller.post("/api/knowledge/search", {"query": query, **extra})


def queued(redis: Any) -> list[tuple[str, list[Any]]]:
    """The (task name, args) of every message waiting in the Celery queue, oldest first."""
    out = []
    for raw in reversed(redis.lrange("knowledge", 0, -1)):
        message = json.loads(raw)
        args, _kwargs, _embed = json.loads(base64.b64decode(message["body"]))
        out.append((message["headers"]["task"], args))
    return out


def work_off_queue(redis: Any) -> int:
    """What a worker does: take each queued message, oldest first, and run its task."""
    done = 0
    while (raw := redis.rpop("knowledge")) is not None:
        message = json.loads(raw)
        assert message["headers"]["task"] == "knowledge.index_document"
        args, kwargs, _embed = json.loads(base64.b64decode(message["body"]))
        index_document.apply(args=args, kwargs=kwargs).get()
        done += 1
    return done


def assert_error(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.content
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"code", "message", "details"}
    assert body["error"]["code"] == code
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    text = response.content.decode()
    assert "Traceback" not in text and 'File "' not in text
    error: dict[str, Any] = body["error"]
    return error


def index_version() -> int:
    return int(IndexState.objects.values_list("version", flat=True).first() or 0)


def make_pdf(lines: list[str], *, title: str | None = None) -> bytes:
    """A real one-page PDF, one text line per item."""
    return pdf_pages([lines], title=title)


@pytest.fixture
def eager_celery() -> Iterator[None]:
    """Celery runs tasks inline at apply_async, as in CELERY_TASK_ALWAYS_EAGER setups."""
    from config.celery import app

    app.conf.task_always_eager = True
    try:
        yield
    finally:
        app.conf.task_always_eager = False


# --- uploading and indexing ---------------------------------------------------------------


def test_an_upload_is_accepted_pending_and_queued_for_the_worker(alice: Caller, service: Any) -> None:
    response = upload(alice, "disk-full.md", DISK_RUNBOOK)

    assert response.status_code == 201, response.content
    body = response.json()
    document = Document.objects.get(id=body["id"])
    assert body["status"] == "pending" and document.status == "pending"
    assert body["filename"] == "disk-full.md"
    assert body["content_type"] == "text/markdown"
    assert body["size_bytes"] == len(DISK_RUNBOOK)
    assert body["sha256"] == hashlib.sha256(DISK_RUNBOOK).hexdigest()
    assert body["chunk_count"] == 0 and body["indexed_at"] is None and body["failure_reason"] is None
    assert body["failure_code"] is None
    assert body["uploaded_by_you"] is True and document.owner == alice.user
    assert body["links"] == {"self": f"/api/documents/{document.id}"}
    assert b"ENOSPC" not in response.content  # the resource describes the file, it does not echo it
    assert queued(service) == [("knowledge.index_document", [str(document.id)])]
    assert not Chunk.objects.exists()


def test_the_worker_indexes_a_queued_upload_into_chunks_with_title_and_heading_path(
    alice: Caller, service: Any
) -> None:
    document_id = upload(alice, "disk-full.md", DISK_RUNBOOK).json()["id"]
    version = index_version()

    assert work_off_queue(service) == 1

    detail = alice.get(f"/api/documents/{document_id}").json()
    assert detail["status"] == "indexed" and detail["failure_reason"] is None
    assert detail["title"] == "Disk full runbook"
    assert detail["indexed_at"] is not None
    chunks = list(Chunk.objects.filter(document_id=document_id).order_by("ordinal"))
    assert detail["chunk_count"] == len(chunks) == 2
    assert {c.title for c in chunks} == {"Disk full runbook"}
    assert [c.heading_path for c in chunks] == ["Disk full runbook › Symptoms", "Disk full runbook › Remedy"]
    assert "ENOSPC" in chunks[0].text and "grow the volume" in chunks[1].text
    assert all(c.embedding is None and c.embedding_model == "" for c in chunks)  # lexical only here
    assert index_version() > version
    assert Document.objects.get(id=document_id).content is None  # the bytes are not kept once indexed

    hits = search(alice, "no space left on device").json()
    assert hits["evidence_status"] == "ok"
    assert hits["chunks"][0]["document_id"] == document_id
    assert hits["chunks"][0]["section"] == "Disk full runbook › Symptoms"


HTML_PAGE = b"""<!doctype html><html><head><title>Payment gateway runbook</title>
<style>.x { color: red }</style><script>var hidden = "quetzalcoatl-7f3e";</script></head>
<body><nav>Home | About</nav><h1>Payment gateway</h1>
<h2>Timeouts</h2><p>Requests to the acquirer time out after 30 seconds; check the egress proxy.</p>
<footer>Copyright</footer></body></html>"""


@pytest.mark.parametrize(
    ("filename", "data", "content_type", "title", "section", "query"),
    [
        ("disk.md", DISK_RUNBOOK, "text/markdown", "Disk full runbook", "Disk full runbook › Remedy", "rotated logs"),
        ("pool-notes.txt", POOL_NOTES, "text/plain", "pool-notes", "", "connection pool exhausted"),
        ("gateway.html", HTML_PAGE, "text/html", "Payment gateway runbook", "Payment gateway › Timeouts", "acquirer"),
        (
            "scan0001.pdf",
            make_pdf(["Certificate expiry", "The TLS certificate of api.example expires on the first."], title="TLS"),
            "application/pdf",
            "TLS",
            "",
            "certificate expiry",
        ),
    ],
    ids=["markdown", "text", "html", "pdf"],
)
def test_every_supported_format_is_indexed_and_searchable(
    alice: Caller,
    service: Any,
    filename: str,
    data: bytes,
    content_type: str,
    title: str,
    section: str,
    query: str,
) -> None:
    response = upload(alice, filename, data)
    assert response.status_code == 201, response.content
    assert response.json()["content_type"] == content_type
    work_off_queue(service)

    detail = alice.get(response.json()["links"]["self"]).json()
    assert detail["status"] == "indexed", detail["failure_reason"]
    assert detail["title"] == title and detail["chunk_count"] >= 1
    found = search(alice, query).json()
    assert found["evidence_status"] == "ok"
    hit = found["chunks"][0]
    assert hit["document_id"] == detail["id"]
    assert hit["title"] == title and hit["section"] == section
    assert hit["chunk_id"].startswith(f"{detail['id']}#")


def test_html_scripts_styles_and_page_chrome_are_not_indexed(alice: Caller, service: Any) -> None:
    upload(alice, "gateway.html", HTML_PAGE)
    work_off_queue(service)

    texts = " ".join(Chunk.objects.values_list("text", flat=True))
    assert "acquirer" in texts
    assert CANARY not in texts and "color: red" not in texts and "Home | About" not in texts
    assert search(alice, CANARY).json()["evidence_status"] == "no_evidence"


def test_a_given_title_overrides_the_one_in_the_file(alice: Caller, service: Any) -> None:
    response = upload(alice, "disk.md", DISK_RUNBOOK, title="  Ledger disk  ")
    assert response.status_code == 201 and response.json()["title"] == "Ledger disk"
    work_off_queue(service)
    assert alice.get(response.json()["links"]["self"]).json()["title"] == "Ledger disk"
    assert set(Chunk.objects.values_list("title", flat=True)) == {"Ledger disk"}
    assert search(alice, "ledger disk").json()["chunks"][0]["title"] == "Ledger disk"


def test_with_eager_celery_the_upload_is_indexed_before_the_response(
    alice: Caller, service: Any, eager_celery: None
) -> None:
    response = upload(alice, "disk.md", DISK_RUNBOOK)

    assert response.status_code == 201
    assert Document.objects.get(id=response.json()["id"]).status == "indexed"
    assert queued(service) == []
    assert search(alice, "ENOSPC").json()["evidence_status"] == "ok"


def test_a_path_in_the_file_name_is_not_kept(alice: Caller, service: Any) -> None:
    response = upload(alice, "../../etc/cron.d/evil.md", b"# Evil\n\ntext\n")
    assert response.status_code == 201
    assert "/" not in response.json()["filename"] and "\\" not in response.json()["filename"]
    assert response.json()["filename"].endswith("evil.md")


def test_an_overlong_file_name_is_shortened_keeping_its_extension(alice: Caller, service: Any) -> None:
    response = upload(alice, "n" * 400 + ".md", b"# Notes\n\ntext\n")
    assert response.status_code == 201
    filename = response.json()["filename"]
    assert len(filename) <= 255 and filename.endswith(".md")
    assert response.json()["content_type"] == "text/markdown"


# --- refusals -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("filename", "data"),
    [
        ("setup.exe", b"MZ\x90\x00\x03\x00\x00\x00" + b"\x00" * 64),
        ("diagram.png", b"\x89PNG\r\n\x1a\n" + b"\x00" * 32),
        ("report.docx", b"PK\x03\x04" + b"\x00" * 32),
        ("Makefile", b"all:\n\techo hi\n"),
        ("runbook.md.exe", b"# looks like markdown\n"),
    ],
)
def test_an_unsupported_file_type_is_refused_and_nothing_is_stored(
    alice: Caller, service: Any, filename: str, data: bytes
) -> None:
    error = assert_error(upload(alice, filename, data), 400, "unsupported_document")

    assert ".md" in error["message"] and ".pdf" in error["message"]  # it says what is allowed
    assert not Document.objects.exists() and queued(service) == []


def test_an_empty_file_is_refused(alice: Caller, service: Any) -> None:
    error = assert_error(upload(alice, "empty.md", b""), 400, "invalid_request")

    assert "file" in error["details"]["fields"]
    assert not Document.objects.exists() and queued(service) == []


def test_a_file_over_the_upload_limit_is_refused_with_413(alice: Caller, service: Any, settings: Any) -> None:
    settings.KNOWLEDGE = {**settings.KNOWLEDGE, "MAX_UPLOAD_BYTES": 1_000}

    error = assert_error(upload(alice, "big.txt", b"x" * 1_001), 413, "payload_too_large")
    assert "1000" in error["message"]
    assert not Document.objects.exists() and queued(service) == []

    at_the_limit = upload(alice, "big.txt", b"y" * 1_000)
    assert at_the_limit.status_code == 201


def test_a_huge_upload_is_refused_before_the_body_is_parsed(
    alice: Caller, service: Any, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.KNOWLEDGE = {**settings.KNOWLEDGE, "MAX_UPLOAD_BYTES": 1_000}
    parsed: list[bool] = []
    from rest_framework.parsers import MultiPartParser

    original = MultiPartParser.parse

    def spy(self: MultiPartParser, *args: Any, **kwargs: Any) -> Any:
        parsed.append(True)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(MultiPartParser, "parse", spy)
    huge = b"z" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 2_000)

    error = assert_error(upload(alice, "huge.txt", huge), 413, "payload_too_large")
    assert "request body" in error["message"]
    assert parsed == [] and not Document.objects.exists()


def test_a_form_without_a_file_is_refused(alice: Caller, service: Any) -> None:
    error = assert_error(
        alice.client.post("/api/documents", {"title": "x"}, format="multipart"), 400, "invalid_request"
    )
    assert "file" in error["details"]["fields"]
    assert not Document.objects.exists()


def test_unknown_form_fields_and_an_overlong_title_are_refused(alice: Caller, service: Any) -> None:
    error = assert_error(upload(alice, "disk.md", DISK_RUNBOOK, owner="bob"), 400, "invalid_request")
    assert "owner" in error["details"]["fields"]
    error = assert_error(upload(alice, "disk.md", DISK_RUNBOOK, title="t" * 301), 400, "invalid_request")
    assert "title" in error["details"]["fields"]
    assert not Document.objects.exists() and queued(service) == []


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        ("multipart/form-data; boundary=XyZ", b"--XyZ\r\nContent-Disposition: form-data; name=\r\n\r\nbroken"),
        ("multipart/form-data", b"no boundary at all"),
        ("multipart/form-data; boundary=XyZ", b"\x00\xff" * 50),
    ],
    ids=["truncated", "no-boundary", "garbage"],
)
def test_a_malformed_multipart_body_is_a_4xx_envelope(
    alice: Caller, service: Any, content_type: str, body: bytes
) -> None:
    response = alice.client.generic("POST", "/api/documents", cast(Any, body), content_type=content_type)

    assert 400 <= response.status_code < 500, response.content
    assert set(response.json()) == {"error"} and "Traceback" not in response.content.decode()
    assert not Document.objects.exists() and queued(service) == []


def test_a_json_body_is_refused_as_the_wrong_media_type(alice: Caller, service: Any) -> None:
    response = alice.post("/api/documents", {"file": "disk.md"})
    assert_error(response, 415, "unsupported_media_type")
    assert not Document.objects.exists()


def test_the_wrong_media_type_on_upload_says_to_send_multipart(alice: Caller, service: Any) -> None:
    error = assert_error(alice.post("/api/documents", {"file": "disk.md"}), 415, "unsupported_media_type")
    assert "multipart" in error["message"].lower()


def test_a_malformed_multipart_body_is_not_called_invalid_json(alice: Caller, service: Any) -> None:
    response = alice.client.generic(
        "POST", "/api/documents", cast(Any, b"no boundary at all"), content_type="multipart/form-data"
    )
    error = response.json()["error"]
    assert error["code"] != "invalid_json" and "JSON" not in error["message"]


@pytest.mark.parametrize(
    ("filename", "data", "code", "reason"),
    [
        ("notes.txt", b"plain text\x00\x01\x02 with NUL bytes", "binary_content", "binary"),
        ("report.pdf", b"this is not a pdf at all", "not_a_pdf", "not a PDF"),
        ("broken.pdf", b"%PDF-1.7\nthis is not really a pdf", "pdf_unreadable", "cannot be read"),
        ("blank.pdf", make_pdf([]), "no_text", "no text"),
        ("blank.md", b"   \n\n\t\n", "no_text", "no text"),
    ],
    ids=["binary-text", "not-pdf", "broken-pdf", "blank-pdf", "whitespace-only"],
)
def test_a_file_whose_text_cannot_be_extracted_fails_with_a_reason(
    alice: Caller, service: Any, filename: str, data: bytes, code: str, reason: str
) -> None:
    response = upload(alice, filename, data)
    assert response.status_code == 201  # the extension is allowed: the content is checked by the worker
    version = index_version()
    work_off_queue(service)

    detail = alice.get(response.json()["links"]["self"]).json()
    assert detail["status"] == "failed"
    assert detail["failure_code"] == code
    assert reason in detail["failure_reason"]
    assert "Traceback" not in detail["failure_reason"]
    assert detail["chunk_count"] == 0 and not Chunk.objects.exists()
    assert index_version() == version  # nothing changed for search
    failed = alice.get("/api/documents?status=failed").json()["results"]
    assert [d["id"] for d in failed] == [detail["id"]]


# --- hostile files: limits that hold ---------------------------------------------------


def indexed_within(caller: Caller, service: Any, response: Any) -> tuple[dict[str, Any], float]:
    """The document once the worker's task is done with it, and how long the task took."""
    assert response.status_code == 201, response.content
    started = time.monotonic()
    assert work_off_queue(service) == 1
    took = time.monotonic() - started
    detail: dict[str, Any] = caller.get(response.json()["links"]["self"]).json()
    return detail, took


def test_the_nested_headings_that_took_28_seconds_are_indexed_at_once(alice: Caller, service: Any) -> None:
    nested = b"<h1>Ledger runbook " * 8_000 + b"</h1>" * 8_000
    data = nested + b"<p>Resynchronise the replica from the latest snapshot.</p>"

    detail, took = indexed_within(alice, service, upload(alice, "nested.html", data))

    assert took < 10
    assert detail["status"] == "indexed", detail["failure_reason"]
    assert Chunk.objects.get().text == "Resynchronise the replica from the latest snapshot."


def test_a_hostile_upload_is_stopped_at_the_extraction_deadline_and_fails_with_the_code(
    alice: Caller, service: Any, settings: Any
) -> None:
    settings.KNOWLEDGE = {**settings.KNOWLEDGE, "EXTRACT_TIMEOUT_S": 1.0}
    version = index_version()

    detail, took = indexed_within(alice, service, upload(alice, "nested.html", b"<h1>x" * 400_000))

    assert took < 1.0 + 3.0  # the limit, plus starting, killing and reaping the child
    assert detail["status"] == "failed" and detail["failure_code"] == "extraction_timeout"
    assert detail["failure_reason"] == "reading the file took longer than 1 s"
    assert detail["chunk_count"] == 0 and not Chunk.objects.exists() and index_version() == version
    assert Document.objects.get().content is not None  # kept: a higher limit and a rebuild can still index it


def test_a_pdf_bomb_fails_with_the_decompression_limit_not_pending_forever(alice: Caller, service: Any) -> None:
    detail, took = indexed_within(alice, service, upload(alice, "bomb.pdf", make_pdf_bomb(80_000_000)))

    assert took < 20
    assert detail["status"] == "failed" and detail["failure_code"] == "decompression_limit"
    assert detail["failure_reason"] == "the PDF expands beyond the decompression limit"
    assert not Chunk.objects.exists()


# --- duplicates ---------------------------------------------------------------------------


def test_the_same_bytes_uploaded_again_return_the_existing_document(alice: Caller, bob: Caller, service: Any) -> None:
    first = upload(alice, "disk.md", DISK_RUNBOOK).json()
    work_off_queue(service)

    again = upload(alice, "disk-copy.md", DISK_RUNBOOK)
    assert again.status_code == 200
    assert again.json()["id"] == first["id"] and again.json()["status"] == "indexed"

    assert Document.objects.count() == 1 and queued(service) == []
    assert Chunk.objects.count() == 2
    assert len(search(alice, "ENOSPC").json()["chunks"]) == 1


def test_the_same_bytes_as_an_approved_document_return_it_to_another_user(bob: Caller, service: Any) -> None:
    document = services.document_upload(owner=None, filename="disk.md", data=DISK_RUNBOOK, enqueue=False).document

    by_bob = upload(bob, "mine.md", DISK_RUNBOOK)

    assert by_bob.status_code == 200
    assert by_bob.json()["id"] == str(document.id) and by_bob.json()["uploaded_by_you"] is False
    assert Document.objects.count() == 1 and queued(service) == []


def test_the_same_bytes_as_another_users_unapproved_upload_make_a_document_of_ones_own(
    alice: Caller, bob: Caller, service: Any
) -> None:
    """Bob's copy is none of Alice's business, and is not shown to her: she gets her own. She
    finds hers although his older, identical chunks would win the tie between duplicates."""
    bobs = upload(bob, "disk.md", DISK_RUNBOOK).json()
    work_off_queue(service)

    by_alice = upload(alice, "mine.md", DISK_RUNBOOK)
    work_off_queue(service)

    assert by_alice.status_code == 201, by_alice.content
    alices = by_alice.json()
    assert alices["id"] != bobs["id"] and alices["uploaded_by_you"] is True and alices["approved"] is False
    assert Document.objects.count() == 2
    for caller, own in ((alice, alices["id"]), (bob, bobs["id"])):
        assert [d["id"] for d in caller.get("/api/documents").json()["results"]] == [own]
        assert [c["document_id"] for c in search(caller, "ENOSPC").json()["chunks"]] == [own]


def test_a_duplicate_of_a_pending_document_is_not_queued_twice(alice: Caller, service: Any) -> None:
    first = upload(alice, "disk.md", DISK_RUNBOOK)
    again = upload(alice, "disk.md", DISK_RUNBOOK)

    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["id"] == first.json()["id"] and again.json()["status"] == "pending"
    assert len(queued(service)) == 1


# --- the worker's task --------------------------------------------------------------------


class EndpointDown:
    """An embeddings endpoint that refuses every call, counting them."""

    name, dimension = "openai-compatible:down", 4
    calls = 0

    def embed(self, texts: Sequence[str]) -> Vectors:
        EndpointDown.calls += 1
        raise EmbeddingUnavailable("the embeddings endpoint failed (APIConnectionError)")


class Recovers:
    """An embeddings endpoint that times out once, then answers."""

    name, dimension = "openai-compatible:flaky", 4
    calls = 0

    def embed(self, texts: Sequence[str]) -> Vectors:
        Recovers.calls += 1
        if Recovers.calls == 1:
            raise EmbeddingUnavailable("the embeddings endpoint failed (APITimeoutError)")
        return np.tile(np.asarray([[1.0, 0.0, 0.0, 0.0]], dtype=np.float32), (len(texts), 1))


def test_an_embeddings_endpoint_that_stays_down_fails_the_document_after_the_retries(
    alice: Caller, service: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(EndpointDown, "calls", 0)
    monkeypatch.setattr(backends, "embedder", EndpointDown)
    document_id = upload(alice, "disk.md", DISK_RUNBOOK).json()["id"]

    work_off_queue(service)

    assert EndpointDown.calls == 1 + MAX_RETRIES
    failed = alice.get(f"/api/documents/{document_id}").json()
    assert failed["status"] == "failed"
    assert failed["failure_reason"] == "embedding failed: the embeddings endpoint failed (APIConnectionError)"
    assert failed["failure_code"] == "embedding_failed"
    assert not Chunk.objects.exists()


def test_an_embeddings_endpoint_that_recovers_is_retried_by_the_task(
    alice: Caller, service: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Recovers, "calls", 0)
    monkeypatch.setattr(backends, "embedder", Recovers)
    document_id = upload(alice, "disk.md", DISK_RUNBOOK).json()["id"]

    work_off_queue(service)

    assert Document.objects.get(id=document_id).status == "indexed" and Recovers.calls == 2
    assert set(Chunk.objects.values_list("embedding_model", flat=True)) == {"openai-compatible:flaky"}


def test_a_failed_document_uploaded_again_is_indexed_afresh(
    alice: Caller, service: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(backends, "embedder", EndpointDown)
    document_id = upload(alice, "disk.md", DISK_RUNBOOK).json()["id"]
    work_off_queue(service)
    assert Document.objects.get(id=document_id).status == "failed"

    monkeypatch.setattr(backends, "embedder", lambda: None)
    again = upload(alice, "disk.md", DISK_RUNBOOK)

    assert again.status_code == 200
    assert again.json()["id"] == document_id and again.json()["status"] == "pending"
    assert again.json()["failure_reason"] is None
    assert work_off_queue(service) == 1
    assert alice.get(f"/api/documents/{document_id}").json()["status"] == "indexed"


def test_a_redelivered_task_for_an_indexed_document_changes_nothing(alice: Caller, service: Any) -> None:
    document_id = upload(alice, "disk.md", DISK_RUNBOOK).json()["id"]
    work_off_queue(service)
    before = list(Chunk.objects.values_list("id", "text")), index_version()

    index_document.apply(args=[document_id]).get()

    assert (list(Chunk.objects.values_list("id", "text")), index_version()) == before


def test_a_document_deleted_before_the_worker_runs_leaves_nothing_behind(alice: Caller, service: Any) -> None:
    document_id = upload(alice, "disk.md", DISK_RUNBOOK).json()["id"]
    assert alice.client.delete(f"/api/documents/{document_id}").status_code == 204

    assert work_off_queue(service) == 1
    assert not Document.objects.exists() and not Chunk.objects.exists()


def test_a_document_deleted_while_it_is_indexed_gets_no_chunks(
    alice: Caller, service: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    document_id = upload(alice, "disk.md", DISK_RUNBOOK).json()["id"]
    from knowledge.isolation import prepare as original

    def deleted_meanwhile(*args: Any, **kwargs: Any) -> Any:
        Document.objects.filter(id=document_id).delete()  # another request, while this worker chunks
        return original(*args, **kwargs)

    monkeypatch.setattr("knowledge.services.prepare", deleted_meanwhile)

    assert services.document_index(document_id=document_id, embedder=None) == "superseded"
    assert not Chunk.objects.exists()


# --- the broker is down -------------------------------------------------------------------


def test_an_upload_while_the_broker_is_down_is_503_and_the_document_is_failed(alice: Caller, service: Any) -> None:
    with broker_pointed_at_nothing():
        response = upload(alice, "disk.md", DISK_RUNBOOK)

    error = assert_error(response, 503, "queue_unavailable")
    assert response["Retry-After"] == "5"
    text = response.content.decode()
    assert "redis://" not in text and "127.0.0.1" not in text and "Connection" not in text
    document = Document.objects.get()
    assert document.status == "failed" and "queue was unavailable" in document.failure_reason
    assert document.failure_code == "queue_unavailable"
    assert error["details"] == {}

    # Once the broker is back, uploading the file again queues it and it is indexed.
    retried = upload(alice, "disk.md", DISK_RUNBOOK)
    assert retried.status_code == 200 and retried.json()["status"] == "pending"
    assert retried.json()["id"] == str(document.id)
    assert work_off_queue(service) == 1
    assert Document.objects.get().status == "indexed"


# --- list and detail ----------------------------------------------------------------------


def test_the_list_is_newest_first_cursor_paginated_and_filterable(alice: Caller, service: Any) -> None:
    ids = [upload(alice, f"note-{i}.txt", f"note {i} about disks\n".encode()).json()["id"] for i in range(3)]
    work_off_queue(service)
    pending = upload(alice, "later.txt", b"still pending\n").json()["id"]

    page = alice.get("/api/documents?page_size=2").json()
    assert [d["id"] for d in page["results"]] == [pending, ids[2]]
    assert page["next"] and page["previous"] is None
    rest = alice.get(page["next"]).json()
    assert [d["id"] for d in rest["results"]] == [ids[1], ids[0]] and rest["next"] is None

    assert [d["id"] for d in alice.get("/api/documents?status=pending").json()["results"]] == [pending]
    assert len(alice.get("/api/documents?status=indexed").json()["results"]) == 3
    error = assert_error(alice.get("/api/documents?status=deleted"), 400, "invalid_request")
    assert "status" in error["details"]["fields"]


def test_approved_documents_are_the_teams_every_key_reads_them_and_sees_who_added_them(
    alice: Caller, bob: Caller, staff: Caller, service: Any
) -> None:
    """Approved documents are shared: they are what every run searches (knowledge/selectors.py)."""
    document_id = upload(staff, "disk.md", DISK_RUNBOOK).json()["id"]

    for caller, mine in ((alice, False), (bob, False), (staff, True)):
        listed = caller.get("/api/documents").json()["results"]
        assert [d["id"] for d in listed] == [document_id]
        detail = caller.get(f"/api/documents/{document_id}")
        assert detail.status_code == 200 and detail.json()["uploaded_by_you"] is mine
        assert detail.json()["added_by"] == "oncall-lead" and detail.json()["approved"] is True


def test_list_and_detail_never_carry_the_documents_text(alice: Caller, service: Any) -> None:
    data = f"# Secret plan\n\nThe vault code is {CANARY}.\n".encode()
    document_id = upload(alice, "plan.md", data).json()["id"]
    pending_detail = alice.get(f"/api/documents/{document_id}")
    work_off_queue(service)

    for response in (pending_detail, alice.get(f"/api/documents/{document_id}"), alice.get("/api/documents")):
        assert response.status_code == 200
        assert CANARY not in response.content.decode()
        assert "vault" not in response.content.decode()


def test_a_bad_or_unknown_document_id(alice: Caller, service: Any) -> None:
    assert_error(alice.get("/api/documents/not-a-uuid"), 400, "invalid_id")
    assert_error(alice.get("/api/documents/00000000-0000-0000-0000-000000000000"), 404, "not_found")
    assert_error(alice.client.delete("/api/documents/not-a-uuid"), 400, "invalid_id")
    assert_error(alice.client.delete("/api/documents/00000000-0000-0000-0000-000000000000"), 404, "not_found")


# --- delete -------------------------------------------------------------------------------


def test_a_deleted_documents_chunks_stop_being_found_at_once(alice: Caller, service: Any) -> None:
    keep = upload(alice, "pool.txt", POOL_NOTES).json()["id"]
    gone = upload(alice, "disk.md", DISK_RUNBOOK).json()["id"]
    work_off_queue(service)
    assert search(alice, "ENOSPC").json()["chunks"][0]["document_id"] == gone  # the index is warm

    response = alice.client.delete(f"/api/documents/{gone}")

    assert response.status_code == 204 and not response.content
    assert search(alice, "ENOSPC").json() == {
        "evidence_status": "no_evidence",
        "retrieval_mode": "lexical",
        "chunks": [],
    }
    assert not Chunk.objects.filter(document_id=gone).exists()
    assert_error(alice.get(f"/api/documents/{gone}"), 404, "not_found")
    assert [d["id"] for d in alice.get("/api/documents").json()["results"]] == [keep]
    assert search(alice, "connection pool exhausted").json()["chunks"][0]["document_id"] == keep
    assert_error(alice.client.delete(f"/api/documents/{gone}"), 404, "not_found")


def test_only_the_uploader_or_staff_may_delete(alice: Caller, bob: Caller, staff: Caller, service: Any) -> None:
    document_id = upload(alice, "disk.md", DISK_RUNBOOK).json()["id"]
    work_off_queue(service)
    assert staff.post(f"/api/documents/{document_id}/approve").status_code == 200

    assert_error(bob.client.delete(f"/api/documents/{document_id}"), 403, "permission_denied")
    assert Document.objects.filter(id=document_id).exists() and Chunk.objects.count() == 2
    assert search(bob, "ENOSPC").json()["evidence_status"] == "ok"

    assert staff.client.delete(f"/api/documents/{document_id}").status_code == 204
    assert not Document.objects.exists() and not Chunk.objects.exists()


def test_a_document_without_an_uploader_only_staff_may_delete(bob: Caller, staff: Caller, service: Any) -> None:
    document = services.document_upload(owner=None, filename="disk.md", data=DISK_RUNBOOK, enqueue=False).document

    assert_error(bob.client.delete(f"/api/documents/{document.id}"), 403, "permission_denied")
    assert staff.client.delete(f"/api/documents/{document.id}").status_code == 204


# --- authentication -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("get", "/api/documents"),
        ("post", "/api/documents"),
        ("get", "/api/documents/00000000-0000-0000-0000-000000000000"),
        ("delete", "/api/documents/00000000-0000-0000-0000-000000000000"),
        ("post", "/api/knowledge/search"),
        ("post", "/api/knowledge/rebuild"),
    ],
)
def test_every_knowledge_endpoint_needs_a_key(service: Any, method: str, path: str) -> None:
    def call(client: APIClient) -> Any:
        if path == "/api/documents" and method == "post":
            return upload(client, "disk.md", DISK_RUNBOOK)
        return getattr(client, method)(path)

    assert_error(call(APIClient()), 401, "unauthenticated")
    wrong = APIClient()
    wrong.credentials(HTTP_AUTHORIZATION="Bearer sba_not-a-real-key")
    assert_error(call(wrong), 401, "invalid_api_key")
    assert not Document.objects.exists() and queued(service) == []


# --- search -------------------------------------------------------------------------------


def test_search_returns_graded_hits_with_their_document_and_section(alice: Caller, service: Any) -> None:
    disk = upload(alice, "disk.md", DISK_RUNBOOK).json()["id"]
    upload(alice, "pool.txt", POOL_NOTES)
    work_off_queue(service)

    body = search(alice, "how do I grow the volume?", top_k=3).json()

    assert body["evidence_status"] == "ok" and body["retrieval_mode"] == "lexical"
    best = body["chunks"][0]
    assert set(best) == {
        "chunk_id",
        "document_id",
        "title",
        "section",
        "text",
        "score",
        "lexical_coverage",
        "cosine",
        "approved",
    }
    assert best["approved"] is False  # alice's own upload, which nobody has reviewed
    assert best["document_id"] == disk and best["title"] == "Disk full runbook"
    assert best["section"] == "Disk full runbook › Remedy" and "grow the volume" in best["text"]
    assert 0 < best["score"] <= 1 and best["cosine"] is None
    assert all(chunk["document_id"] == disk for chunk in body["chunks"])  # the pool notes do not match


def test_an_unrelated_question_finds_no_evidence(alice: Caller, service: Any) -> None:
    upload(alice, "disk.md", DISK_RUNBOOK)
    work_off_queue(service)

    for query in ("What is the capital of Mongolia?", "banana smoothie recipe", "!!!"):
        body = search(alice, query).json()
        assert body == {"evidence_status": "no_evidence", "retrieval_mode": "lexical", "chunks": []}, query


def test_search_of_an_empty_knowledge_base_finds_no_evidence(alice: Caller) -> None:
    response = search(alice, "disk full")
    assert response.status_code == 200
    assert response.json()["evidence_status"] == "no_evidence"


def test_search_honours_top_k(alice: Caller, service: Any) -> None:
    for i in range(6):
        upload(alice, f"incident-{i}.txt", f"Incident {i}: the ledger disk filled up on node {i}.\n".encode())
    work_off_queue(service)

    assert len(search(alice, "ledger disk filled", top_k=2).json()["chunks"]) == 2
    assert len(search(alice, "ledger disk filled", top_k=20).json()["chunks"]) == 6
    assert len(search(alice, "ledger disk filled").json()["chunks"]) == 5  # the default


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"query": ""},
        {"query": "   \n\t "},
        {"query": "x" * 2_001},
        {"query": 42},
        {"query": None},
        {"query": ["disk"]},
        {"query": {"$ne": ""}},
        {"query": "disk", "top_k": 0},
        {"query": "disk", "top_k": 21},
        {"query": "disk", "top_k": "five"},
        {"query": "disk", "top_k": -1},
        {"query": "disk", "filter": {"owner": "bob"}},
    ],
)
def test_bad_search_input_is_a_400_and_writes_nothing(alice: Caller, service: Any, body: dict[str, Any]) -> None:
    upload(alice, "disk.md", DISK_RUNBOOK)
    work_off_queue(service)
    before = index_version(), Document.objects.count(), Chunk.objects.count()

    error = assert_error(alice.post("/api/knowledge/search", body), 400, "invalid_request")

    assert error["details"]["fields"]
    assert (index_version(), Document.objects.count(), Chunk.objects.count()) == before


def test_a_malformed_or_oversized_search_body_is_refused(alice: Caller, service: Any) -> None:
    broken = alice.client.post("/api/knowledge/search", b'{"query": "disk', content_type="application/json")
    assert_error(broken, 400, "invalid_json")
    form = alice.client.post("/api/knowledge/search", {"query": "disk"}, format="multipart")
    assert_error(form, 415, "unsupported_media_type")
    huge = alice.client.post(
        "/api/knowledge/search", json.dumps({"query": "disk " * 20_000}), content_type="application/json"
    )
    assert_error(huge, 413, "payload_too_large")
    assert search(alice, "x" * 2_000).status_code == 200  # the longest query allowed


# --- rebuild ------------------------------------------------------------------------------


def test_rebuild_is_for_staff_only(alice: Caller, service: Any) -> None:
    upload(alice, "disk.md", DISK_RUNBOOK)
    work_off_queue(service)

    assert_error(alice.post("/api/knowledge/rebuild"), 403, "permission_denied")
    assert Document.objects.get().status == "indexed" and queued(service) == []


def test_rebuild_requeues_every_document_and_old_chunks_answer_meanwhile(
    alice: Caller, staff: Caller, service: Any
) -> None:
    disk = upload(alice, "disk.md", DISK_RUNBOOK).json()["id"]
    pool = upload(alice, "pool.txt", POOL_NOTES).json()["id"]
    broken = upload(alice, "broken.pdf", b"%PDF-1.7\nnot really").json()["id"]
    work_off_queue(service)
    chunks_before = sorted(Chunk.objects.values_list("document_id", "ordinal", "heading_path", "text"))

    response = staff.post("/api/knowledge/rebuild")

    assert response.status_code == 202 and response.json() == {"queued_documents": 3}
    assert set(Document.objects.values_list("status", flat=True)) == {"pending"}
    assert len(queued(service)) == 3
    assert search(alice, "ENOSPC").json()["evidence_status"] == "ok"  # old chunks still answer

    work_off_queue(service)
    assert sorted(Chunk.objects.values_list("document_id", "ordinal", "heading_path", "text")) == chunks_before
    statuses = {str(pk): status for pk, status in Document.objects.values_list("id", "status")}
    assert statuses == {disk: "indexed", pool: "indexed", broken: "failed"}


def test_a_rebuild_while_the_broker_is_down_leaves_no_document_pending_without_a_task(
    alice: Caller, staff: Caller, service: Any
) -> None:
    for name, data in (("disk.md", DISK_RUNBOOK), ("pool.txt", POOL_NOTES), ("other.txt", b"other notes\n")):
        upload(alice, name, data)
    work_off_queue(service)

    with broker_pointed_at_nothing():
        response = staff.post("/api/knowledge/rebuild")

    assert_error(response, 503, "queue_unavailable")
    assert not Document.objects.filter(status="pending").exists()


def test_the_admin_reindexes_only_the_selected_documents(alice: Caller, service: Any) -> None:
    from django.contrib.auth import get_user_model
    from django.test import Client

    disk = upload(alice, "disk.md", DISK_RUNBOOK).json()["id"]
    upload(alice, "pool.txt", POOL_NOTES)
    work_off_queue(service)
    console = Client()
    console.force_login(get_user_model().objects.create_superuser("kb-admin", "kb@example.com", "pw-kb-1"))

    answer = console.post(
        "/admin/knowledge/document/", {"action": "reindex", "_selected_action": [disk], "index": 0}, follow=True
    )

    assert answer.status_code == 200 and b"Queued 1 document" in answer.content
    assert len(queued(service)) == 1
    statuses = {str(pk): status for pk, status in Document.objects.values_list("id", "status")}
    assert statuses[disk] == "pending" and sorted(statuses.values()) == ["indexed", "pending"]
    work_off_queue(service)
    assert Document.objects.get(id=disk).status == "indexed"


# --- a real embedder, end to end ----------------------------------------------------------


@pytest.fixture(scope="module")
def minilm() -> Embedder:
    """The local all-MiniLM-L6-v2, loaded once per process (the same one the service uses)."""
    embedder = embedder_from_config({"PROVIDER": "local"})
    assert embedder is not None
    return embedder


def test_with_the_local_embedder_search_is_hybrid_and_finds_paraphrases(
    alice: Caller, service: Any, minilm: Embedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(backends, "embedder", lambda: minilm)
    backends.knowledge_search.cache_clear()
    document_id = upload(alice, "disk.md", DISK_RUNBOOK).json()["id"]
    work_off_queue(service)
    assert set(Chunk.objects.values_list("embedding_model", flat=True)) == {minilm.name}

    body = search(alice, "the storage device has run out of room").json()

    assert body["retrieval_mode"] == "hybrid" and body["evidence_status"] == "ok"
    assert body["chunks"][0]["document_id"] == document_id
    assert body["chunks"][0]["cosine"] is not None
