"""DatabaseKnowledgeSearch, the harness's KnowledgeSearch over the database: every process's
snapshot follows the knowledge-base version (new, re-indexed and deleted documents are seen
without a restart), lexical-only and hybrid modes as status() and readyz report them, a query
embedding that fails falls back to lexical search, and what each hit carries."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pytest
from rest_framework.test import APIClient

from knowledge import services
from knowledge.embeddings import Embedder, EmbeddingUnavailable, Vectors, embedder_from_config
from knowledge.models import Chunk, Document
from knowledge.search import DatabaseKnowledgeSearch, index_version
from tests.knowledge.corpus import CERT, CHINESE, DISK, POOL, lexical_wiring


def add(filename: str, data: bytes, embedder: Embedder | None = None) -> Document:
    """A document uploaded and indexed, as another process (a worker) would do it."""
    document = services.document_upload(owner=None, filename=filename, data=data, enqueue=False).document
    assert services.document_index(document_id=str(document.id), embedder=embedder) == "indexed"
    document.refresh_from_db()
    return document


def found_ids(engine: DatabaseKnowledgeSearch, query: str, top_k: int = 5) -> list[str]:
    return [chunk.document_id for chunk in engine.search(query, top_k).chunks]


@pytest.fixture(scope="module")
def minilm() -> Embedder:
    """The local all-MiniLM-L6-v2, loaded once per process (the same one the service uses)."""
    embedder = embedder_from_config({"PROVIDER": "local"})
    assert embedder is not None
    return embedder


class QueriesFail:
    """The same model as ``inner`` (so stored vectors count) whose endpoint now refuses."""

    def __init__(self, inner: Embedder) -> None:
        self.name, self.dimension = inner.name, inner.dimension
        self.calls = 0

    def embed(self, texts: Sequence[str]) -> Vectors:
        self.calls += 1
        raise EmbeddingUnavailable("the embeddings endpoint failed (APIConnectionError)")


class OtherModel:
    """A different embedding model of the same dimension: its vectors are not comparable."""

    name, dimension = "openai-compatible:other", 384

    def embed(self, texts: Sequence[str]) -> Vectors:
        return np.tile(np.eye(1, 384, dtype=np.float32), (len(texts), 1))


# --- the snapshot follows the knowledge base ----------------------------------------------


def test_another_instance_sees_a_new_document_without_a_restart(db: None) -> None:
    web, worker = DatabaseKnowledgeSearch(embedder=None), DatabaseKnowledgeSearch(embedder=None)
    disk = add("disk.md", DISK)
    assert found_ids(web, "ENOSPC") == [str(disk.id)]
    assert found_ids(worker, "ENOSPC") == [str(disk.id)]
    assert found_ids(web, "max_connections") == []
    before = index_version()

    pool = add("pool.md", POOL)  # by "another process": only the database tells

    assert index_version() > before
    assert found_ids(web, "max_connections") == [str(pool.id)]
    assert found_ids(worker, "max_connections") == [str(pool.id)]


def test_an_unchanged_knowledge_base_is_not_rebuilt_for_each_search(
    db: None, django_assert_max_num_queries: Any
) -> None:
    add("disk.md", DISK)
    engine = DatabaseKnowledgeSearch(embedder=None)
    snapshot = engine.index()

    with django_assert_max_num_queries(1):  # the version, one primary-key lookup
        assert engine.index() is snapshot
    add("pool.md", POOL)
    rebuilt = engine.index()
    assert rebuilt is not snapshot and rebuilt.size == snapshot.size + 1


def test_another_instance_stops_returning_a_deleted_document_at_once(db: None) -> None:
    engine = DatabaseKnowledgeSearch(embedder=None)
    disk, pool = add("disk.md", DISK), add("pool.md", POOL)
    assert found_ids(engine, "ENOSPC") == [str(disk.id)]

    services.document_delete(document=disk)

    result = engine.search("ENOSPC", 5)
    assert result.chunks == () and result.evidence_status == "no_evidence"
    assert found_ids(engine, "max_connections") == [str(pool.id)]


def test_chunks_gone_from_the_database_are_not_returned_even_by_a_stale_snapshot(db: None) -> None:
    engine = DatabaseKnowledgeSearch(embedder=None)
    disk = add("disk.md", DISK)
    snapshot = engine.index()
    assert found_ids(engine, "ENOSPC") == [str(disk.id)]

    Chunk.objects.filter(document=disk).delete()  # no version bump: the snapshot is stale

    assert engine.index() is snapshot
    assert engine.search("ENOSPC", 5).evidence_status == "no_evidence"


def test_a_rebuilt_document_answers_from_its_new_chunks(db: None, settings: Any) -> None:
    engine = DatabaseKnowledgeSearch(embedder=None)
    long_section = "# Ledger\n\n## Notes\n\n" + "\n\n".join(
        f"Paragraph {i}: the ledger volume fills with rotated logs every week." for i in range(40)
    )
    document = add("ledger.md", long_section.encode())
    old_chunk_ids = set(Chunk.objects.values_list("id", flat=True))
    assert len(old_chunk_ids) > 1 and engine.search("rotated logs", 5).evidence_status == "ok"

    settings.KNOWLEDGE = {**settings.KNOWLEDGE, "CHUNK_MAX_CHARS": 4_000, "CHUNK_MAX_TOKENS": 1_000}
    assert services.knowledge_rebuild(enqueue=False) == 1
    assert services.document_index(document_id=str(document.id), embedder=None) == "indexed"

    new_chunks = list(Chunk.objects.all())
    assert not old_chunk_ids & {c.id for c in new_chunks}
    assert len(new_chunks) < len(old_chunk_ids)
    hits, _ = engine.matches("rotated logs", 5)
    assert hits and {row.pk for _, row in hits} <= {c.id for c in new_chunks}


# --- what a hit carries, and how many -----------------------------------------------------


def test_hits_carry_the_document_id_title_section_and_text(db: None) -> None:
    engine = DatabaseKnowledgeSearch(embedder=None)
    disk = add("disk.md", DISK)
    add("pool.md", POOL)

    result = engine.search("how do I grow the ledger volume", 3)

    assert result.evidence_status == "ok" and result.retrieval_mode == "lexical"
    best = result.chunks[0]
    assert best.document_id == str(disk.id)
    assert best.title == "Disk full runbook"
    assert best.section == "Disk full runbook › Remedy"
    assert "grow the volume by 20 GiB" in best.text
    assert 0 < best.score <= 1
    assert [c.score for c in result.chunks] == sorted((c.score for c in result.chunks), reverse=True)


def test_top_k_bounds_the_hits(db: None) -> None:
    engine = DatabaseKnowledgeSearch(embedder=None)
    for i in range(7):
        add(f"incident-{i}.txt", f"Incident {i}: the ledger disk filled up on node {i}.\n".encode())

    assert len(engine.search("ledger disk filled", 1).chunks) == 1
    assert len(engine.search("ledger disk filled", 3).chunks) == 3
    assert len(engine.search("ledger disk filled", 50).chunks) == 7
    empty = engine.search("ledger disk filled", 0)
    assert empty.chunks == () and empty.evidence_status == "no_evidence"


def test_a_document_uploaded_twice_with_trivial_differences_is_one_hit(db: None) -> None:
    engine = DatabaseKnowledgeSearch(embedder=None)
    add("disk.md", DISK)
    add("disk-copy.md", DISK.replace(b"\n\n", b"\n\n\n") + b"\n")  # other bytes, the same text
    assert Document.objects.count() == 2

    texts = [c.text for c in engine.search("no space left on device", 5).chunks]
    assert len(texts) == len(set(texts)) == 1


def test_queries_that_match_nothing_find_no_evidence(db: None) -> None:
    engine = DatabaseKnowledgeSearch(embedder=None)
    add("disk.md", DISK)

    for query in ("banana smoothie recipe", "the of and is", "", "   ", "🙂🙂🙂", "'; DROP TABLE knowledge_chunk; --"):
        result = engine.search(query, 5)
        assert result.chunks == () and result.evidence_status == "no_evidence", query
    assert Chunk.objects.count() == 2


def test_an_empty_knowledge_base_finds_no_evidence(db: None) -> None:
    result = DatabaseKnowledgeSearch(embedder=None).search("disk full", 5)
    assert result.chunks == () and result.evidence_status == "no_evidence"


def test_chinese_questions_find_chinese_documents(db: None) -> None:
    engine = DatabaseKnowledgeSearch(embedder=None)
    document = add("连接池.md", CHINESE)
    add("disk.md", DISK)

    result = engine.search("连接池耗尽了怎么办", 5)

    assert [c.document_id for c in result.chunks] == [str(document.id)]
    assert result.chunks[0].section == "数据库连接池 › 耗尽"


# --- lexical only, hybrid, and falling back -----------------------------------------------


def test_without_an_embedder_search_is_lexical_and_status_says_so(db: None) -> None:
    engine = DatabaseKnowledgeSearch(embedder=None)
    add("disk.md", DISK)
    add("pool.md", POOL)

    assert engine.status() == {
        "engine": "local",
        "mode": "lexical",
        "embedder": "none",
        "chunks": 3,
        "chunks_without_vectors": 3,
        "version": index_version(),
    }
    result = engine.search("ENOSPC", 5)
    assert result.retrieval_mode == "lexical" and result.evidence_status == "ok"
    hits, mode = engine.matches("ENOSPC", 5)
    assert mode == "lexical" and all(hit.cosine is None for hit, _ in hits)


def test_with_the_local_embedder_search_is_hybrid_and_finds_by_meaning(db: None, minilm: Embedder) -> None:
    engine = DatabaseKnowledgeSearch(embedder=minilm)
    disk = add("disk.md", DISK, minilm)
    add("pool.md", POOL, minilm)
    add("cert.md", CERT, minilm)

    status = engine.status()
    assert status["mode"] == "hybrid" and status["embedder"] == minilm.name
    assert status["chunks"] == 4 and status["chunks_without_vectors"] == 0

    # Few of the words, all of the meaning: only the dense side can find it.
    query = "the storage device has run out of room"
    lexical = DatabaseKnowledgeSearch(embedder=None).search(query, 3)
    result = engine.search(query, 3)
    assert lexical.evidence_status == "no_evidence"
    assert result.retrieval_mode == "hybrid" and result.evidence_status == "ok"
    assert result.chunks[0].document_id == str(disk.id)
    assert result.chunks[0].section == "Disk full runbook › Symptoms"
    assert engine.search("banana smoothie recipe with mango", 3).evidence_status == "no_evidence"


def test_a_failing_query_embedding_falls_back_to_lexical_search(
    db: None, minilm: Embedder, caplog: pytest.LogCaptureFixture
) -> None:
    disk = add("disk.md", DISK, minilm)
    add("pool.md", POOL, minilm)
    broken = QueriesFail(minilm)
    engine = DatabaseKnowledgeSearch(embedder=broken)

    with caplog.at_level(logging.WARNING, logger="knowledge.search"):
        result = engine.search("ENOSPC on the ledger volume", 3)

    assert broken.calls == 1
    assert result.retrieval_mode == "lexical" and result.evidence_status == "ok"
    assert result.chunks[0].document_id == str(disk.id)
    assert "lexically" in caplog.text
    assert "ENOSPC" not in caplog.text and "ledger" not in caplog.text  # no query text in the logs


def test_chunks_embedded_by_another_model_are_searched_lexically(db: None, minilm: Embedder) -> None:
    disk = add("disk.md", DISK, minilm)
    other = OtherModel()
    engine = DatabaseKnowledgeSearch(embedder=other)

    status = engine.status()
    assert status["embedder"] == other.name and status["chunks_without_vectors"] == status["chunks"] == 2
    result = engine.search("ENOSPC", 3)
    assert result.retrieval_mode == "lexical"
    assert [c.document_id for c in result.chunks] == [str(disk.id)]


def test_status_reports_the_mode_searches_actually_use(db: None, minilm: Embedder) -> None:
    add("disk.md", DISK, minilm)
    engine = DatabaseKnowledgeSearch(embedder=OtherModel())

    assert engine.status()["mode"] == engine.search("ENOSPC", 3).retrieval_mode


def test_a_partly_embedded_knowledge_base_is_hybrid_and_still_finds_the_rest(db: None, minilm: Embedder) -> None:
    engine = DatabaseKnowledgeSearch(embedder=minilm)
    add("disk.md", DISK, minilm)
    pool = add("pool.md", POOL)  # indexed while the embedder was off

    assert engine.status()["chunks_without_vectors"] == 1
    result = engine.search("max_connections db.pool.max_size", 3)
    assert result.retrieval_mode == "hybrid"
    assert result.chunks[0].document_id == str(pool.id)


# --- readyz -------------------------------------------------------------------------------


@pytest.fixture
def database_evidence(settings: Any) -> Iterator[None]:
    with lexical_wiring(settings, EVIDENCE_SOURCE="database"):
        yield


def test_readyz_reports_the_knowledge_base_and_its_retrieval_mode(service: Any, database_evidence: None) -> None:
    add("disk.md", DISK)

    response = APIClient().get("/api/readyz")

    evidence = response.json()["checks"]["evidence"]
    assert evidence["ok"] is True
    assert evidence["detail"] == {
        "source": "database",
        "knowledge": {
            "engine": "local",
            "mode": "lexical",
            "embedder": "none",
            "chunks": 2,
            "chunks_without_vectors": 2,
            "version": index_version(),
        },
    }
    assert "ENOSPC" not in response.content.decode()
