"""The Milvus engine (KNOWLEDGE_ENGINE=milvus) against milvus-lite in a temporary file: indexed
documents are found with their texts from the database, deletions and new documents are
noticed through the knowledge-base version, the collection is brought in line with the
database after a restart, grades and no_evidence agree with the local engine (lexical and
hybrid), and it is what the wiring, the search API and readyz use when configured."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from django.contrib.auth import get_user_model
from django.core.exceptions import ImproperlyConfigured
from pymilvus import DataType, MilvusClient  # type: ignore[import-untyped]

from core.api import STATUS_OF
from core.viewer import Viewer, viewer_bound
from knowledge import backends, services
from knowledge.embeddings import Embedder, Vectors, embedder_from_config, normalise
from knowledge.milvus import MilvusKnowledgeSearch, SearchUnavailable, safe_uri, term_text, term_word
from knowledge.models import Chunk, Document
from knowledge.search import DatabaseKnowledgeSearch, index_version
from tests.knowledge.corpus import CERT, CHINESE, DISK, POOL

Engines = Callable[..., MilvusKnowledgeSearch]


class Topics:
    """A tiny embedder whose meaning is word families: enough to tell a paraphrase from noise."""

    name, dimension = "test:topics", 8
    FAMILIES = (
        {"disk", "storage", "space", "device", "room", "volume", "enospc", "full"},
        {"pool", "connection", "connections", "exhausted", "max_connections"},
        {"certificate", "tls", "expiry", "renewed"},
    )

    def embed(self, texts: Sequence[str]) -> Vectors:
        rows = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for i, text in enumerate(texts):
            words = re.findall(r"[a-z_]+", text.lower())
            for axis, family in enumerate(self.FAMILIES):
                rows[i, axis] = sum(word in family for word in words)
            rows[i, -1] = 0.1  # never a zero vector
        return normalise(rows)


def add(filename: str, data: bytes, embedder: Embedder | None = None) -> Document:
    """A document uploaded and indexed, as the worker does it (the worker never talks to Milvus)."""
    document = services.document_upload(owner=None, filename=filename, data=data, enqueue=False).document
    assert services.document_index(document_id=str(document.id), embedder=embedder) == "indexed"
    document.refresh_from_db()
    return document


def found_ids(engine: MilvusKnowledgeSearch | DatabaseKnowledgeSearch, query: str, top_k: int = 5) -> list[str]:
    return [chunk.document_id for chunk in engine.search(query, top_k).chunks]


def indexed(engine: MilvusKnowledgeSearch) -> int:
    return int(engine.status()["indexed_chunks"])


@pytest.fixture
def milvus_path(tmp_path: Path) -> str:
    return str(tmp_path / "milvus.db")


@pytest.fixture
def engines(milvus_path: str) -> Iterator[Engines]:
    """Engines on one milvus-lite file (a restart is a new engine); all closed afterwards."""
    made: list[MilvusKnowledgeSearch] = []

    def make(embedder: Embedder | None = None, **options: Any) -> MilvusKnowledgeSearch:
        options.setdefault("collection", "chunks")
        engine = MilvusKnowledgeSearch(embedder=embedder, uri=milvus_path, **options)
        made.append(engine)
        return engine

    yield make
    for engine in made:
        engine.close()


# --- indexing, searching, deleting --------------------------------------------------------


def test_an_indexed_document_is_found_with_its_text_from_the_database(db: None, engines: Engines) -> None:
    disk, _pool = add("disk.md", DISK), add("pool.md", POOL)
    engine = engines()

    result = engine.search("no space left on device", 5)

    assert result.evidence_status == "ok" and result.retrieval_mode == "lexical"
    assert result.chunks[0].document_id == str(disk.id)
    assert "ENOSPC" in result.chunks[0].text and result.chunks[0].section == "Disk full runbook › Symptoms"
    assert result.chunks[0].score == pytest.approx(1.0)
    assert indexed(engine) == Chunk.objects.count()


def test_a_question_the_documents_do_not_answer_is_no_evidence(db: None, engines: Engines) -> None:
    add("disk.md", DISK)
    add("pool.md", POOL)
    engine = engines()

    result = engine.search("kubernetes ingress controller upgrade", 5)

    assert result.evidence_status == "no_evidence" and result.chunks == ()
    # one shared word is not enough of the question to count as evidence
    assert engine.search("rotated kubernetes ingress controller upgrade", 5).evidence_status == "no_evidence"


def test_the_milvus_side_counts_our_terms_stems_identifiers_and_chinese(db: None, engines: Engines) -> None:
    pool, chinese = add("pool.md", POOL), add("zh.md", CHINESE)
    engine = engines()

    assert found_ids(engine, "pool max size")[:1] == [str(pool.id)]  # the parts of db.pool.max_size
    assert found_ids(engine, "connections exhausted")[:1] == [str(pool.id)]  # stems
    assert found_ids(engine, "连接池耗尽了怎么办")[:1] == [str(chinese.id)]  # bigrams, no function words
    assert term_text(["timeout", "连接"]) == f"{term_word('timeout')} {term_word('连接')}"
    assert re.fullmatch(r"t[0-9a-f]{16}", term_word("db.pool.max_size"))


def test_a_deleted_document_is_neither_returned_nor_left_in_the_collection(db: None, engines: Engines) -> None:
    disk, pool = add("disk.md", DISK), add("pool.md", POOL)
    engine = engines()
    assert found_ids(engine, "ENOSPC no space left") == [str(disk.id)]

    services.document_delete(document=disk)

    assert engine.search("ENOSPC no space left", 5).evidence_status == "no_evidence"
    assert found_ids(engine, "pool max size") == [str(pool.id)]
    assert indexed(engine) == Chunk.objects.count() == pool.chunk_count


def test_a_document_indexed_after_the_first_search_is_found_without_a_restart(db: None, engines: Engines) -> None:
    add("disk.md", DISK)
    engine = engines()
    assert engine.search("certificate renewed by cert-manager", 5).evidence_status == "no_evidence"
    before = index_version()

    cert = add("cert.md", CERT)

    assert index_version() > before
    assert found_ids(engine, "certificate renewed by cert-manager") == [str(cert.id)]
    assert engine.status()["synced_version"] == index_version()


def test_chunks_deleted_behind_the_version_are_still_never_returned(db: None, engines: Engines) -> None:
    disk = add("disk.md", DISK)
    engine = engines()
    assert found_ids(engine, "ENOSPC")
    version = index_version()

    Chunk.objects.filter(document=disk).delete()  # not yet bumped: the collection still holds them

    assert index_version() == version and indexed(engine) > 0
    assert engine.search("ENOSPC", 5).evidence_status == "no_evidence"


def test_after_a_restart_the_collection_is_brought_in_line_with_the_database(db: None, engines: Engines) -> None:
    disk, pool = add("disk.md", DISK), add("pool.md", POOL)
    first = engines()
    assert found_ids(first, "ENOSPC") == [str(disk.id)]
    first.close()
    services.document_delete(document=disk)  # while no engine was running
    cert = add("cert.md", CERT)

    again = engines()

    assert found_ids(again, "certificate renewed") == [str(cert.id)]
    assert found_ids(again, "ENOSPC") == []
    assert indexed(again) == Chunk.objects.count() == pool.chunk_count + cert.chunk_count


def test_reindexing_replaces_a_documents_chunks(db: None, engines: Engines) -> None:
    add("disk.md", DISK)
    engine = engines()
    old = set(Chunk.objects.values_list("id", flat=True))
    assert found_ids(engine, "ENOSPC")

    assert services.knowledge_rebuild(enqueue=False) == 1
    for document in Document.objects.filter(status="pending"):
        services.document_index(document_id=str(document.id), embedder=None)

    assert not old & set(Chunk.objects.values_list("id", flat=True))
    assert engine.search("ENOSPC", 5).evidence_status == "ok"
    assert indexed(engine) == Chunk.objects.count()


# --- hybrid, and agreement with the local engine ------------------------------------------


def test_with_an_embedder_search_is_hybrid_and_finds_a_paraphrase(db: None, engines: Engines) -> None:
    topics = Topics()
    disk = add("disk.md", DISK, topics)
    add("pool.md", POOL, topics)
    engine = engines(topics)

    found, mode = engine.matches("the storage has run out of room", 3)

    assert mode == "hybrid" and engine.status()["mode"] == "hybrid"
    hit, row = found[0]
    assert str(row.document_id) == str(disk.id)
    assert hit.coverage < 0.5 and hit.cosine is not None and hit.cosine > 0.9  # found by meaning alone
    assert engine.search("kubernetes ingress controller upgrade", 3).evidence_status == "no_evidence"


@pytest.mark.parametrize("embedded", [False, True], ids=["lexical", "hybrid"])
def test_both_engines_grade_the_same_chunks_the_same_way(db: None, engines: Engines, embedded: bool) -> None:
    embedder = Topics() if embedded else None
    for name, data in (("disk.md", DISK), ("pool.md", POOL), ("cert.md", CERT), ("zh.md", CHINESE)):
        add(name, data, embedder)
    local, milvus = DatabaseKnowledgeSearch(embedder=embedder), engines(embedder)
    queries = (
        "no space left on device",
        "connection pool exhausted max_connections",
        "the storage has run out of room",
        "certificate expiry",
        "连接池耗尽",
        "rotated logs volume",
        "kubernetes ingress controller upgrade",
    )

    for query in queries:
        (ours, our_mode), (theirs, their_mode) = local.matches(query, 8), milvus.matches(query, 8)
        assert our_mode == their_mode == ("hybrid" if embedded else "lexical")
        graded = {h.key: (round(h.coverage, 5), None if h.cosine is None else round(h.cosine, 5)) for h, _ in ours}
        assert {h.key: (round(h.coverage, 5), None if h.cosine is None else round(h.cosine, 5)) for h, _ in theirs} == (
            graded
        ), query
        if ours:
            assert theirs[0][0].key == ours[0][0].key, query


def test_the_local_model_works_through_milvus(db: None, engines: Engines) -> None:
    minilm = embedder_from_config({"PROVIDER": "local"})
    assert minilm is not None and minilm.dimension == 384
    disk = add("disk.md", DISK, minilm)
    add("cert.md", CERT, minilm)
    engine = engines(minilm)

    found, mode = engine.matches("the storage device has run out of room", 3)

    assert mode == "hybrid" and str(found[0][1].document_id) == str(disk.id)
    assert found[0][0].cosine is not None


# --- the collection -----------------------------------------------------------------------


def test_a_collection_made_for_another_embedder_is_rebuilt(db: None, engines: Engines) -> None:
    topics = Topics()
    add("disk.md", DISK, topics)
    assert engines(topics).search("the storage has run out of room", 3).retrieval_mode == "hybrid"

    lexical = engines(None)  # EMBEDDINGS_PROVIDER=none now

    result = lexical.search("no space left on device", 3)
    assert result.retrieval_mode == "lexical" and result.evidence_status == "ok"
    assert indexed(lexical) == Chunk.objects.count()


def test_a_collection_this_service_did_not_make_is_never_dropped(db: None, engines: Engines, milvus_path: str) -> None:
    add("disk.md", DISK)
    engine = engines(collection="theirs")
    client = MilvusClient(uri=milvus_path)
    schema = MilvusClient.create_schema(auto_id=False)
    schema.add_field("id", DataType.INT64, is_primary=True)
    schema.add_field("vector", DataType.FLOAT_VECTOR, dim=2)
    client.create_collection("theirs", schema=schema)

    with pytest.raises(SearchUnavailable) as raised:
        engine.search("ENOSPC", 3)

    assert STATUS_OF[raised.value.kind] == 503 and "theirs" in raised.value.message
    assert client.has_collection("theirs")


def test_milvus_out_of_reach_is_a_typed_503_error(db: None) -> None:
    engine = MilvusKnowledgeSearch(embedder=None, uri="http://127.0.0.1:9", collection="chunks", timeout_s=0.5)

    with pytest.raises(SearchUnavailable) as raised:
        engine.search("ENOSPC", 3)

    assert raised.value.code == "knowledge_unavailable" and STATUS_OF[raised.value.kind] == 503


def test_status_names_the_server_without_its_credentials() -> None:
    assert safe_uri("https://root:Milvus@milvus.internal:19530") == "https://milvus.internal:19530"
    assert safe_uri("http://milvus.internal:19530") == "http://milvus.internal:19530"
    assert safe_uri("/srv/var/milvus.db") == "/srv/var/milvus.db"


# --- configuration ------------------------------------------------------------------------


@pytest.fixture
def milvus_configured(settings: Any, milvus_path: str) -> Iterator[None]:
    settings.EMBEDDINGS = {**settings.EMBEDDINGS, "PROVIDER": "none"}
    settings.EVIDENCE_SOURCE = "database"
    settings.KNOWLEDGE = {**settings.KNOWLEDGE, "ENGINE": "milvus", "MILVUS_URI": milvus_path}
    backends.embedder.cache_clear()
    backends.knowledge_search.cache_clear()
    yield
    engine = backends.knowledge_search()
    if isinstance(engine, MilvusKnowledgeSearch):
        engine.close()
    backends.embedder.cache_clear()
    backends.knowledge_search.cache_clear()


def test_the_wiring_builds_the_configured_engine(settings: Any, milvus_configured: None) -> None:
    engine = backends.knowledge_search()
    assert isinstance(engine, MilvusKnowledgeSearch)
    assert engine.collection == "superbizagent_chunks" and engine.uri == settings.KNOWLEDGE["MILVUS_URI"]

    settings.KNOWLEDGE = {**settings.KNOWLEDGE, "ENGINE": "elastic"}
    backends.knowledge_search.cache_clear()
    with pytest.raises(ImproperlyConfigured, match="KNOWLEDGE_ENGINE"):
        backends.knowledge_search()
    settings.KNOWLEDGE = {**settings.KNOWLEDGE, "ENGINE": "local"}
    backends.knowledge_search.cache_clear()
    assert isinstance(backends.knowledge_search(), DatabaseKnowledgeSearch)


def test_the_search_api_and_readyz_go_through_milvus(alice: Any, milvus_configured: None) -> None:
    from chat.health import readiness

    disk = add("disk.md", DISK)

    body = alice.post("/api/knowledge/search", {"query": "no space left on device"}).json()

    assert body["evidence_status"] == "ok" and body["retrieval_mode"] == "lexical"
    assert body["chunks"][0]["document_id"] == str(disk.id)
    assert body["chunks"][0]["chunk_id"].startswith(f"{disk.id}#")
    knowledge = readiness()["evidence"]["detail"]["knowledge"]
    assert knowledge["engine"] == "milvus" and knowledge["indexed_chunks"] == Chunk.objects.count()


def test_another_users_unapproved_upload_is_found_for_its_uploader_only(db: None, engines: Engines) -> None:
    users = get_user_model().objects
    bob, alice = users.create_user("bob"), users.create_user("alice")
    # Bob's copy of the team's runbook comes first (older, lower ids), then the operator's.
    bobs = services.document_upload(owner=bob, filename="copy.md", data=DISK + b"\n", enqueue=False).document
    assert services.document_index(document_id=str(bobs.id), embedder=None) == "indexed"
    team = add("disk.md", DISK)
    pool = services.document_upload(owner=bob, filename="pool.md", data=POOL, enqueue=False).document
    assert services.document_index(document_id=str(pool.id), embedder=None) == "indexed"
    engine = engines()

    # nobody bound (a command), or another user: the approved copy, never Bob's
    assert found_ids(engine, "no space left on device") == [str(team.id)]
    assert found_ids(engine, "db.pool.max_size max_connections") == []
    with viewer_bound(Viewer(alice.pk)):
        assert found_ids(engine, "no space left on device") == [str(team.id)]
        assert found_ids(engine, "db.pool.max_size max_connections") == []
    with viewer_bound(Viewer(bob.pk)):
        chunks = engine.search("db.pool.max_size max_connections", 5).chunks
    assert [(c.document_id, c.approved) for c in chunks] == [(str(pool.id), False)]
