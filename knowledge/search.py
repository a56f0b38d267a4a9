"""The knowledge base as the harness's ``KnowledgeSearch``: the local engine over the database.

Each process keeps one :class:`~knowledge.retrieval.LocalIndex`, built from every chunk, and
the knowledge-base version it was built from. Before a search it reads the version (one
primary-key lookup); when a document was added, re-indexed or deleted since, the index is
rebuilt first. The hits' texts are read from the database, so nothing deleted is returned.

What a search returns depends on who asks (``core.viewer``, bound around a run and a search
request): the index holds every chunk, and the chunks of other users' unapproved documents
(``knowledge.selectors.chunks_hidden_from``) are left out while the hits are ranked, so they
take no place among the top k and cannot hide a visible copy of their text from the
de-duplication. The rows read afterwards are filtered by the same rule again, which also
covers a document uploaded between the two reads.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import numpy as np

from core.viewer import current_viewer
from harness.ports import KnowledgeChunk, KnowledgeResult
from knowledge.chunking import search_text
from knowledge.embeddings import Embedder, EmbeddingUnavailable, Vectors, from_bytes
from knowledge.models import Chunk, IndexState
from knowledge.retrieval import Hit, LocalIndex, RetrievalConfig
from knowledge.selectors import chunks_hidden_from, document_visibility

logger = logging.getLogger(__name__)

LOAD_BATCH = 2_000
#: what a hit's row is read with: its text, section, document and the document's approval
HIT_FIELDS = ("id", "ordinal", "heading_path", "text", "document__id", "document__title", "document__approved_at")


def index_version() -> int:
    row = IndexState.objects.filter(pk=1).values_list("version", flat=True).first()
    return int(row or 0)


def query_vector(embedder: Embedder | None, query: str) -> Vectors | None:
    """The query's embedding, or None (lexical search) when there is no embedder or it fails."""
    if embedder is None:
        return None
    try:
        vector: Vectors = embedder.embed([query])[0]
        return vector
    except EmbeddingUnavailable as exc:
        logger.warning("query embedding failed (%s); searching lexically", type(exc).__name__)
        return None


def knowledge_result(found: list[tuple[Hit, Chunk]], mode: str) -> KnowledgeResult:
    """The graded hits of either engine as the harness's ``KnowledgeResult``."""
    chunks = tuple(
        KnowledgeChunk(
            document_id=str(row.document_id),
            title=row.document.title,
            section=row.heading_path,
            text=row.text,
            score=round(hit.relevance, 4),
            approved=row.document.approved,
        )
        for hit, row in found
    )
    return KnowledgeResult(chunks=chunks, evidence_status="ok" if chunks else "no_evidence", retrieval_mode=mode)


class DatabaseKnowledgeSearch:
    def __init__(self, *, embedder: Embedder | None, config: RetrievalConfig | None = None) -> None:
        self.embedder = embedder
        self.config = config or RetrievalConfig()
        self._lock = threading.Lock()
        self._index: LocalIndex | None = None
        self._version = -1

    # --- the snapshot -------------------------------------------------------------------

    def _build(self) -> LocalIndex:
        keys: list[int] = []
        texts: list[str] = []
        rows: list[Any] = []
        dimension = self.embedder.dimension if self.embedder else 0
        name = self.embedder.name if self.embedder else ""
        fields = ("id", "document__title", "heading_path", "text", "embedding", "embedding_model")
        for pk, title, heading, text, blob, model in (
            Chunk.objects.order_by("id").values_list(*fields).iterator(chunk_size=LOAD_BATCH)
        ):
            keys.append(pk)
            texts.append(search_text(title, heading, text))
            rows.append(from_bytes(blob, dimension) if (dimension and blob and model == name) else None)
        vectors = None
        if dimension:
            vectors = np.zeros((len(rows), dimension), dtype=np.float32)
            for i, vector in enumerate(rows):
                if vector is not None:
                    vectors[i] = vector
        return LocalIndex(keys, texts, vectors, config=self.config)

    def index(self) -> LocalIndex:
        """The current snapshot, rebuilt first when the knowledge base changed."""
        version = index_version()
        index = self._index
        if index is not None and version == self._version:
            return index
        with self._lock:
            if self._index is None or self._version != version:
                started = time.perf_counter()
                self._index = self._build()
                self._version = version
                logger.info(
                    "knowledge index v%s built: %s chunks in %.0f ms",
                    version,
                    self._index.size,
                    (time.perf_counter() - started) * 1000,
                )
            return self._index

    # --- the port -----------------------------------------------------------------------

    def _query_vector(self, query: str, index: LocalIndex) -> Vectors | None:
        return query_vector(self.embedder, query) if index.mode == "hybrid" else None

    def matches(self, query: str, top_k: int) -> tuple[list[tuple[Hit, Chunk]], str]:
        """The best chunks the bound viewer sees (``core.viewer``; none bound: approved documents
        only), with their grades, and the retrieval mode that found them."""
        viewer = current_viewer()
        index = self.index()
        hidden = chunks_hidden_from(viewer)  # read after the snapshot: it covers all its chunks
        vector = self._query_vector(query, index)
        mode = "hybrid" if vector is not None else "lexical"
        # a few more than asked: a hit deleted since the snapshot is skipped below
        hits = index.search(query, top_k=top_k + 4, query_vector=vector, exclude=hidden)
        rows = Chunk.objects.filter(document_visibility(viewer, prefix="document__"), pk__in=[h.key for h in hits])
        by_pk = {row.pk: row for row in rows.select_related("document").only(*HIT_FIELDS)}
        found = [(hit, row) for hit in hits if (row := by_pk.get(hit.key)) is not None]
        return found[:top_k], mode

    def search(self, query: str, top_k: int) -> KnowledgeResult:
        return knowledge_result(*self.matches(query, top_k))

    def status(self) -> dict[str, Any]:
        """For readyz and the admin: how retrieval works right now, without secrets."""
        name = self.embedder.name if self.embedder else ""
        chunks = Chunk.objects.count()
        without = chunks - Chunk.objects.filter(embedding_model=name).count() if name else chunks
        return {
            "engine": "local",
            # What a search does now: dense retrieval needs chunks embedded by this very model.
            "mode": "hybrid" if name and without < chunks else "lexical",
            "embedder": name or "none",
            "chunks": chunks,
            "chunks_without_vectors": without,
            "version": index_version(),
        }
