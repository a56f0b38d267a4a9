"""The knowledge base end to end: a document uploaded over HTTP is indexed by the real Celery
worker, found by search in the real ASGI server, and gone from search once deleted — with no
restart, because the web process notices the knowledge-base version change.

The stack runs with the local embedder (``EMBEDDINGS_PROVIDER=local``, whatever the developer's
environment says), so the worker writes vectors and the web process embeds the query: search is
hybrid, as in production. The documents are small, so this costs about a second — except the
hostile one, which the knowledge worker parses until the extraction deadline while a run,
on its own queue and worker, is answered as if nothing were happening.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import httpx
import pytest

from chat.stack import Stack
from knowledge import services
from knowledge.models import Chunk, Document
from tests.django_fixtures import Caller
from tests.e2e.conftest import running_stack

pytestmark = pytest.mark.timeout(180)

#: the stack's extraction deadline: long enough for the small documents, short for a test
EXTRACT_TIMEOUT_S = 4.0


@pytest.fixture(scope="module")
def knowledge_stack(
    django_db_setup: Any, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    env = {"EMBEDDINGS_PROVIDER": "local", "KNOWLEDGE_EXTRACT_TIMEOUT_S": str(EXTRACT_TIMEOUT_S)}
    with running_stack(django_db_blocker, tmp_path_factory, env=env, worker_concurrency=1) as stack:
        yield stack


def client_for(stack: Stack, key: str | None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.Client(base_url=stack.base_url, headers=headers, timeout=httpx.Timeout(10, read=30))


@pytest.fixture
def api(knowledge_stack: Stack, alice: Caller) -> Iterator[httpx.Client]:
    with client_for(knowledge_stack, alice.key) as client:
        yield client


@pytest.fixture
def other(knowledge_stack: Stack, bob: Caller) -> Iterator[httpx.Client]:
    with client_for(knowledge_stack, bob.key) as client:
        yield client


def runbook(marker: str) -> bytes:
    return f"""# Ledger replication runbook

## Symptoms

The ledger-{marker} replica falls behind the primary and balance reads return stale values.

## Remedy

Pause the nightly reconciliation job for ledger-{marker}, then resynchronise the replica from the
latest snapshot before resuming reads.
""".encode()


def upload(client: httpx.Client, data: bytes, filename: str = "ledger-runbook.md") -> httpx.Response:
    return client.post("/api/documents", files={"file": (filename, data, "text/markdown")}, data={"title": ""})


def wait_indexed(client: httpx.Client, document_id: str, timeout_s: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        response = client.get(f"/api/documents/{document_id}")
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        if body["status"] != "pending":
            return body
        time.sleep(0.1)
    raise AssertionError("the worker did not index the document")


def search(client: httpx.Client, query: str) -> dict[str, Any]:
    response = client.post("/api/knowledge/search", json={"query": query, "top_k": 5})
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def found(body: dict[str, Any], document_id: str) -> list[dict[str, Any]]:
    return [c for c in body["chunks"] if c["document_id"] == document_id]


def test_upload_index_search_delete_over_http(api: httpx.Client) -> None:
    marker = uuid.uuid4().hex[:10]
    query = f"ledger-{marker} replica stale balance reconciliation"
    # The web process builds its index now, before the document exists …
    before = search(api, query)
    assert before["evidence_status"] == "no_evidence" and before["chunks"] == []

    created = upload(api, runbook(marker))
    assert created.status_code == 201, created.text
    document = created.json()
    assert document["status"] == "pending" and document["chunk_count"] == 0
    assert document["uploaded_by_you"] is True
    assert document["links"]["self"] == f"/api/documents/{document['id']}"

    indexed = wait_indexed(api, document["id"])
    assert indexed["status"] == "indexed", indexed["failure_reason"]
    assert indexed["title"] == "Ledger replication runbook"
    assert indexed["chunk_count"] >= 1 and indexed["indexed_at"] is not None
    chunks = Chunk.objects.filter(document_id=document["id"])
    assert chunks.count() == indexed["chunk_count"]
    assert not chunks.filter(embedding__isnull=True).exists()  # the worker embedded them

    # … and notices the worker's change without a restart.
    after = search(api, query)
    assert after["evidence_status"] == "ok"
    assert after["retrieval_mode"] == "hybrid"
    hits = found(after, document["id"])
    assert hits, after
    assert hits[0]["title"] == "Ledger replication runbook"
    assert f"ledger-{marker}" in " ".join(h["text"] for h in hits)
    listed = api.get("/api/documents").json()
    assert document["id"] in [d["id"] for d in listed["results"]]

    # The same bytes again are the same document, not a second one.
    again = upload(api, runbook(marker), filename="copy.md")
    assert again.status_code == 200 and again.json()["id"] == document["id"]

    deleted = api.delete(f"/api/documents/{document['id']}")
    assert deleted.status_code == 204
    assert api.get(f"/api/documents/{document['id']}").status_code == 404
    gone = search(api, query)
    assert found(gone, document["id"]) == []
    assert gone["evidence_status"] == "no_evidence"
    assert not Document.objects.filter(id=document["id"]).exists()
    assert not Chunk.objects.filter(document_id=document["id"]).exists()


def test_another_key_cannot_delete_it_and_no_key_cannot_read_it(
    api: httpx.Client, other: httpx.Client, knowledge_stack: Stack
) -> None:
    marker = uuid.uuid4().hex[:10]
    document = upload(api, runbook(marker)).json()
    assert wait_indexed(api, document["id"])["status"] == "indexed"

    # An upload by a non-staff key is its uploader's alone until staff approve it
    # (knowledge/selectors.py): to another key it does not exist.
    assert other.get(f"/api/documents/{document['id']}").status_code == 404
    assert other.delete(f"/api/documents/{document['id']}").status_code == 404
    assert not found(search(other, f"ledger-{marker} replica"), document["id"])
    assert other.post(f"/api/documents/{document['id']}/approve").status_code == 404
    assert api.post(f"/api/documents/{document['id']}/approve").status_code == 403  # staff only

    # Approved, it is the team's knowledge: another key reads and searches it, but only the
    # uploader (or staff) may delete it.
    services.document_approve(document=Document.objects.get(id=document["id"]), by=None)
    seen = other.get(f"/api/documents/{document['id']}")
    assert seen.status_code == 200 and seen.json()["uploaded_by_you"] is False and seen.json()["approved"] is True
    refused = other.delete(f"/api/documents/{document['id']}")
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "permission_denied"
    assert found(search(other, f"ledger-{marker} replica"), document["id"])

    with client_for(knowledge_stack, None) as anonymous:
        assert anonymous.get(f"/api/documents/{document['id']}").status_code == 401
        assert anonymous.post("/api/knowledge/search", json={"query": "ledger"}).status_code == 401
        assert anonymous.delete(f"/api/documents/{document['id']}").status_code == 401
        assert upload(anonymous, runbook("anonymous")).status_code == 401
    with client_for(knowledge_stack, "sba_forged") as forged:
        assert forged.delete(f"/api/documents/{document['id']}").json()["error"]["code"] == "invalid_api_key"

    assert wait_indexed(api, document["id"])["status"] == "indexed"  # still there
    assert api.delete(f"/api/documents/{document['id']}").status_code == 204


def test_a_document_that_cannot_be_indexed_fails_with_a_reason(api: httpx.Client) -> None:
    created = upload(api, b"   \n\n\t\n", filename="blank.md")
    assert created.status_code == 201, created.text
    failed = wait_indexed(api, created.json()["id"])
    assert failed["status"] == "failed"
    assert failed["failure_reason"] and failed["chunk_count"] == 0


def wait_run(client: httpx.Client, run_id: str, timeout_s: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        body: dict[str, Any] = client.get(f"/api/runs/{run_id}").json()
        if body["status"] not in ("queued", "running"):
            return body
        time.sleep(0.05)
    raise AssertionError("the run did not end")


def test_a_hostile_upload_being_indexed_keeps_no_run_waiting_and_fails_at_the_deadline(api: httpx.Client) -> None:
    # A million unclosed headings (5 MB): linear to parse now, but tens of seconds of it.
    uploaded_at = time.monotonic()
    created = upload(api, b"<h1>x" * 1_000_000, filename="nested.html")
    assert created.status_code == 201, created.text
    document_id = created.json()["id"]
    time.sleep(0.5)  # the knowledge worker has taken it and is parsing
    assert api.get(f"/api/documents/{document_id}").json()["status"] == "pending"

    asked = api.post("/api/chat", json={"question": "hello, what can you do?"})
    assert asked.status_code == 202, asked.text
    run = wait_run(api, asked.json()["run_id"])
    answered_at = time.monotonic()

    assert run["status"] == "completed" and run["outcome"] == "success", run
    queue_wait = (datetime.fromisoformat(run["started_at"]) - datetime.fromisoformat(run["created_at"])).total_seconds()
    assert queue_wait < EXTRACT_TIMEOUT_S / 4, queue_wait
    assert api.get(f"/api/documents/{document_id}").json()["status"] == "pending"  # still being parsed meanwhile
    assert answered_at - uploaded_at < EXTRACT_TIMEOUT_S

    failed = wait_indexed(api, document_id, timeout_s=EXTRACT_TIMEOUT_S + 30)
    assert failed["status"] == "failed" and failed["failure_code"] == "extraction_timeout", failed
    assert failed["failure_reason"] == f"reading the file took longer than {EXTRACT_TIMEOUT_S:g} s"
    assert time.monotonic() - uploaded_at < EXTRACT_TIMEOUT_S + 15
