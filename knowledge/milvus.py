"""The knowledge base in Milvus: the local engine's hybrid retrieval, in an index the team shares.

``KNOWLEDGE_ENGINE=milvus`` keeps the chunks' terms and vectors in a Milvus collection
(``MILVUS_URI``: a Milvus server, or a milvus-lite ``.db`` file on one machine) instead of in
every process's memory. The database stays the source of truth. Before a search the engine
reads the knowledge-base version (one primary-key lookup); when it changed, the collection is
brought in line with the chunk table first (the chunks it lacks are written, those gone are
deleted), so the worker that indexes documents never talks to Milvus, and a collection that
was lost or emptied is rebuilt from the database by the next search.

A search is one Milvus hybrid request: BM25 (a Milvus function over a text field) and dense
cosine over the chunk vectors, fused by Milvus's reciprocal-rank ranker. The hits' texts and
vectors are then read from the database and graded exactly as ``LocalIndex`` grades them
(IDF-weighted coverage of the query's terms, or cosine), so a deleted chunk is never returned
and both engines agree on what is ``no_evidence``.

Milvus is given our terms, not our text: a chunk's text field holds its ``knowledge.lexical``
terms (stemmed, CJK bigrams, identifier parts), each written as an opaque word that every Milvus
analyzer keeps whole. BM25 in Milvus thus counts the terms the local engine counts, whatever
analyzers the server offers (milvus-lite has no stemmer), and a term's document frequency, for
its IDF, is one ``text_match`` count.

A milvus-lite file can be opened by one process only: the service (web server and worker) needs
a Milvus server, or ``milvus-lite server``, behind ``MILVUS_URI``.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import numpy as np
from pymilvus import (  # type: ignore[import-untyped]
    AnnSearchRequest,
    DataType,
    Function,
    FunctionType,
    MilvusClient,
    MilvusException,
    RRFRanker,
)

from core.errors import ApplicationError, ErrorKind
from core.viewer import current_viewer
from harness.ports import KnowledgeResult
from knowledge.chunking import search_text
from knowledge.dense import exact_scores
from knowledge.embeddings import Embedder, Vectors, from_bytes
from knowledge.lexical import terms
from knowledge.models import Chunk
from knowledge.retrieval import Hit, RetrievalConfig, duplicate_key
from knowledge.search import HIT_FIELDS, LOAD_BATCH, index_version, knowledge_result, query_vector
from knowledge.selectors import chunks_hidden_from, document_visibility

logger = logging.getLogger(__name__)

#: the collection's layout; a collection of another layout (or embedder) is dropped and rebuilt
LAYOUT = "1"
_OWNER = "superbizagent.layout"
_EMBEDDER = "superbizagent.embedder"
_DIMENSION = "superbizagent.dimension"
_TEXT_MAX = 65_535
_WORD_LEN = 18  # "t" + 16 hex digits + a space
WRITE_BATCH = 500


class SearchUnavailable(ApplicationError):
    code = "knowledge_unavailable"
    kind = ErrorKind.UNAVAILABLE
    message = "The knowledge index cannot be reached right now; try again shortly."


def term_word(term: str) -> str:
    """One index term as a word any analyzer keeps whole and lower-case: ``t`` and 16 hex digits."""
    return "t" + hashlib.blake2b(term.encode(), digest_size=8).hexdigest()


def term_text(words: Iterable[str]) -> str:
    """The text field of a chunk (or a query): its terms as words, in order, within the field's limit."""
    encoded = [term_word(w) for w in words]
    return " ".join(encoded[: _TEXT_MAX // _WORD_LEN])


def safe_uri(uri: str) -> str:
    """The URI without credentials, for status pages and logs."""
    parts = urlsplit(uri)
    if parts.scheme and parts.hostname and (parts.username or parts.password):
        netloc = parts.hostname + (f":{parts.port}" if parts.port else "")
        return urlunsplit(parts._replace(netloc=netloc))
    return uri


@contextlib.contextmanager
def _reaching_milvus() -> Iterator[None]:
    try:
        yield
    except (MilvusException, OSError) as exc:
        logger.warning("milvus failed: %s", type(exc).__name__)
        raise SearchUnavailable() from exc


class MilvusKnowledgeSearch:
    """``KnowledgeSearch`` over a Milvus collection kept in line with the chunk table.

    Same public methods as ``DatabaseKnowledgeSearch`` (``search``, ``matches``, ``status``);
    failures to reach Milvus raise :class:`SearchUnavailable`.
    """

    def __init__(
        self,
        *,
        embedder: Embedder | None,
        uri: str,
        collection: str,
        token: str = "",
        timeout_s: float = 10.0,
        config: RetrievalConfig | None = None,
    ) -> None:
        self.embedder = embedder
        self.uri = uri
        self.collection = collection
        self.config = config or RetrievalConfig()
        self._token = token
        self._timeout_s = timeout_s
        self._lock = threading.Lock()
        self._client: MilvusClient | None = None
        self._version = -1
        #: of the synced version: how many chunks, whether any has a usable vector, document frequencies
        self._size = 0
        self._hybrid = False
        self._df: dict[str, int] = {}

    # --- the connection and the collection ----------------------------------------------

    @property
    def _dimension(self) -> int:
        return self.embedder.dimension if self.embedder else 0

    def _connect(self) -> MilvusClient:
        """The client, made on first use (under ``_lock``): configuring the engine connects to nothing."""
        if self._client is None:
            if self.uri.endswith(".db"):  # milvus-lite: a local file, started in this process
                Path(self.uri).parent.mkdir(parents=True, exist_ok=True)
            self._client = MilvusClient(uri=self.uri, token=self._token, timeout=self._timeout_s)
        return self._client

    def close(self) -> None:
        """Let go of the connection (and of a milvus-lite file, which one process holds at a time)."""
        with self._lock:
            client, self._client, self._version = self._client, None, -1
        if client is None:
            return
        with contextlib.suppress(MilvusException):
            client.close()
        if self.uri.endswith(".db"):
            from milvus_lite.server_manager import server_manager_instance  # type: ignore[import-untyped]

            server_manager_instance.release_server(self.uri)

    def _wanted(self) -> dict[str, str]:
        name = self.embedder.name if self.embedder else ""
        return {_OWNER: LAYOUT, _EMBEDDER: name, _DIMENSION: str(self._dimension)}

    def _ensure_collection(self, client: MilvusClient) -> None:
        wanted = self._wanted()
        if client.has_collection(self.collection):
            properties = client.describe_collection(self.collection).get("properties") or {}
            if _OWNER not in properties:
                # Not ours: never drop what another application stored under this name.
                raise SearchUnavailable(f"The Milvus collection {self.collection!r} was not made by this service.")
            if all(properties.get(key) == value for key, value in wanted.items()):
                client.load_collection(self.collection)
                return
            logger.info("milvus collection %s: layout or embedder changed, rebuilding it", self.collection)
            client.drop_collection(self.collection)
        schema = MilvusClient.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field("id", DataType.INT64, is_primary=True)
        schema.add_field("terms", DataType.VARCHAR, max_length=_TEXT_MAX, enable_analyzer=True, enable_match=True)
        schema.add_field("bm25", DataType.SPARSE_FLOAT_VECTOR)
        schema.add_field("model", DataType.VARCHAR, max_length=120)
        schema.add_function(
            Function(
                name="terms_bm25",
                function_type=FunctionType.BM25,
                input_field_names=["terms"],
                output_field_names=["bm25"],
            )
        )
        index = client.prepare_index_params()
        # k1 and b of bm25s, which the local engine uses
        index.add_index(
            field_name="bm25",
            index_type="SPARSE_INVERTED_INDEX",
            metric_type="BM25",
            params={"bm25_k1": 1.5, "bm25_b": 0.75},
        )
        if self._dimension:
            schema.add_field("dense", DataType.FLOAT_VECTOR, dim=self._dimension)
            schema.add_field("has_vector", DataType.BOOL)
            index.add_index(field_name="dense", index_type="AUTOINDEX", metric_type="COSINE")
        client.create_collection(
            self.collection, schema=schema, index_params=index, consistency_level="Strong", properties=wanted
        )

    # --- keeping the collection in line with the database -------------------------------

    def _stored(self, client: MilvusClient) -> dict[int, str]:
        """Every chunk id in the collection, with the embedding model of its stored vector."""
        out: dict[int, str] = {}
        iterator = client.query_iterator(
            self.collection, batch_size=LOAD_BATCH, filter="id >= 0", output_fields=["id", "model"]
        )
        try:
            while batch := iterator.next():
                out.update((int(row["id"]), str(row["model"])) for row in batch)
        finally:
            iterator.close()
        return out

    def _rows(self, pks: list[int]) -> list[dict[str, Any]]:
        name = self.embedder.name if self.embedder else ""
        dimension = self._dimension
        placeholder = [1.0] + [0.0] * (dimension - 1) if dimension else []
        fields = ("id", "document__title", "heading_path", "text", "embedding", "embedding_model")
        rows = []
        for pk, title, heading, text, blob, model in Chunk.objects.filter(pk__in=pks).values_list(*fields):
            row: dict[str, Any] = {
                "id": pk,
                "terms": term_text(terms(search_text(title, heading, text))),
                "model": model,
            }
            if dimension:
                vector = from_bytes(blob, dimension) if (blob and model == name) else None
                # Milvus wants a vector in every row; has_vector keeps the placeholder out of searches.
                row["dense"] = vector.tolist() if vector is not None else placeholder
                row["has_vector"] = vector is not None
            rows.append(row)
        return rows

    def _sync(self, client: MilvusClient) -> tuple[int, int]:
        """Write the chunks the collection lacks, delete those the database no longer has."""
        self._ensure_collection(client)
        # The collection is read before the database: an id it holds that the database then
        # lacks was deleted for good (ids are never reused), whoever else is syncing.
        stored = self._stored(client)
        wanted = dict(Chunk.objects.values_list("id", "embedding_model").iterator(chunk_size=LOAD_BATCH))
        missing = [pk for pk, model in wanted.items() if stored.get(pk) != model]
        gone = [pk for pk in stored if pk not in wanted]
        for start in range(0, len(missing), WRITE_BATCH):
            rows = self._rows(missing[start : start + WRITE_BATCH])
            if rows:
                client.upsert(self.collection, rows)
        for start in range(0, len(gone), WRITE_BATCH):
            client.delete(self.collection, ids=gone[start : start + WRITE_BATCH])
        name = self.embedder.name if self.embedder else ""
        self._size = len(wanted)
        self._hybrid = bool(name) and any(model == name for model in wanted.values())
        self._df = {}
        return len(missing), len(gone)

    def synced(self) -> MilvusClient:
        """The client, after the collection was brought up to the database's current version."""
        version = index_version()
        if self._client is not None and version == self._version:
            return self._client
        with self._lock:
            client = self._connect()
            if self._version != version:
                started = time.perf_counter()
                written, deleted = self._sync(client)
                self._version = version
                logger.info(
                    "milvus collection %s synced to v%s: %s chunks, %s written, %s deleted in %.0f ms",
                    self.collection,
                    version,
                    self._size,
                    written,
                    deleted,
                    (time.perf_counter() - started) * 1000,
                )
            return client

    # --- grading, as LocalIndex grades ----------------------------------------------------

    def _idf(self, df: int) -> float:
        return math.log(1.0 + (self._size - df + 0.5) / (df + 0.5))

    def _document_frequency(self, client: MilvusClient, term: str) -> int:
        df = self._df.get(term)
        if df is None:
            rows = client.query(
                self.collection, filter=f"text_match(terms, '{term_word(term)}')", output_fields=["count(*)"]
            )
            df = self._df[term] = int(rows[0]["count(*)"]) if rows else 0
        return df

    # --- the port -----------------------------------------------------------------------

    def _query_vector(self, query: str) -> Vectors | None:
        return query_vector(self.embedder, query) if self._hybrid else None

    def _ranked(
        self, client: MilvusClient, words: list[str], vector: Vectors | None, hidden: frozenset[int] = frozenset()
    ) -> list[tuple[int, float]]:
        """Chunk ids and fused scores, best first: BM25 and cosine candidates fused by RRF,
        none of them ``hidden`` (chunks the searcher may not see: no candidates at all)."""
        config = self.config
        allowed = f"id not in [{', '.join(str(pk) for pk in sorted(hidden))}]" if hidden else ""
        requests = []
        if words:
            requests.append(
                AnnSearchRequest(
                    data=[term_text(words)],
                    anns_field="bm25",
                    param={"metric_type": "BM25"},
                    limit=config.candidates,
                    expr=allowed or None,
                )
            )
        if vector is not None:
            requests.append(
                AnnSearchRequest(
                    data=[np.asarray(vector, dtype=np.float32).tolist()],
                    anns_field="dense",
                    param={"metric_type": "COSINE"},
                    limit=config.candidates,
                    expr="has_vector == true" + (f" and {allowed}" if allowed else ""),
                )
            )
        if not requests:
            return []
        result = client.hybrid_search(
            self.collection,
            requests,
            RRFRanker(config.rrf_k),
            limit=config.candidates,
            output_fields=["id"],
            timeout=self._timeout_s,
        )
        return [(int(hit["id"]), float(hit["distance"])) for hit in result[0]] if result else []

    def matches(self, query: str, top_k: int) -> tuple[list[tuple[Hit, Chunk]], str]:
        """The best chunks the bound viewer sees (``core.viewer``; none bound: approved documents
        only), with their grades, and the retrieval mode that found them. Other users'
        unapproved chunks are no candidates in Milvus, and their rows are filtered out again."""
        viewer = current_viewer()
        with _reaching_milvus():
            client = self.synced()
            vector = self._query_vector(query)
            mode = "hybrid" if vector is not None else "lexical"
            if not self._size or top_k <= 0:
                return [], mode
            words = list(dict.fromkeys(terms(query)))
            ranked = self._ranked(client, words, vector, chunks_hidden_from(viewer))
            if not ranked:
                return [], mode
            idf = {w: self._idf(self._document_frequency(client, w)) for w in words}
        total_idf = sum(idf.values())
        rows = Chunk.objects.filter(document_visibility(viewer, prefix="document__"), pk__in=[pk for pk, _ in ranked])
        by_pk = {
            row.pk: row for row in rows.select_related("document").only(*HIT_FIELDS, "embedding", "embedding_model")
        }
        name = self.embedder.name if self.embedder else ""
        found: list[tuple[Hit, Chunk]] = []
        seen: set[int] = set()
        for pk, fused in ranked:
            row = by_pk.get(pk)
            if row is None:  # deleted since the collection was synced, or not the viewer's to see
                continue
            text = search_text(row.document.title, row.heading_path, row.text)
            present = set(terms(text))
            coverage = sum(v for w, v in idf.items() if w in present) / total_idf if total_idf > 0 else 0.0
            cosine = None
            if vector is not None and row.embedding and row.embedding_model == name:
                stored = from_bytes(row.embedding, self._dimension)
                cosine = float(exact_scores(stored[None, :], vector)[0]) if stored is not None else None
            if coverage < self.config.min_coverage and (cosine is None or cosine < self.config.min_cosine):
                continue
            dup = duplicate_key(text)
            if dup in seen:
                continue
            seen.add(dup)
            found.append((Hit(key=pk, fused=fused, coverage=coverage, cosine=cosine), row))
            if len(found) == top_k:
                break
        return found, mode

    def search(self, query: str, top_k: int) -> KnowledgeResult:
        return knowledge_result(*self.matches(query, top_k))

    def status(self) -> dict[str, Any]:
        """For readyz and the admin: how retrieval works right now, without secrets.

        Asks Milvus how many chunks the collection holds, so an unreachable Milvus shows here.
        """
        name = self.embedder.name if self.embedder else ""
        chunks = Chunk.objects.count()
        without = chunks - Chunk.objects.filter(embedding_model=name).count() if name else chunks
        with _reaching_milvus():
            with self._lock:
                client = self._connect()
            indexed = 0
            if client.has_collection(self.collection):
                rows = client.query(self.collection, filter="", output_fields=["count(*)"])
                indexed = int(rows[0]["count(*)"]) if rows else 0
        return {
            "engine": "milvus",
            "uri": safe_uri(self.uri),
            "collection": self.collection,
            "mode": "hybrid" if name and without < chunks else "lexical",  # as searches run
            "embedder": name or "none",
            "chunks": chunks,
            "chunks_without_vectors": without,
            "indexed_chunks": indexed,
            "version": index_version(),
            "synced_version": self._version,
        }
