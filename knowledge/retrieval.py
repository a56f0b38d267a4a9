"""Hybrid retrieval over the chunks: BM25 and dense cosine, fused by reciprocal rank.

``LocalIndex`` is the in-memory index of one snapshot of the knowledge base: a ``bm25s``
sparse index over the chunks' terms (``knowledge.lexical``) and a ``DenseIndex`` of their
embeddings (``knowledge.dense``: exact cosine top-k). A query is scored both ways, the two rankings are fused with reciprocal rank
fusion, duplicate chunks (same text, e.g. a document uploaded twice) are dropped, and every hit
is graded against a threshold: a chunk counts as evidence when it holds enough of the query's
informative terms (IDF-weighted coverage) or is close enough in meaning (cosine). No hit that
passes means ``no_evidence``.

The index keeps only numbers per chunk; the texts are read from the database for the few hits,
so a deleted document's chunks are never returned, even by an index not yet rebuilt.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass

import bm25s as bm25s  # type: ignore[import-untyped]  # re-exported: see below
import numpy as np
import numpy.typing as npt

from knowledge.dense import QUANTIZE_FROM, DenseIndex, top_rows
from knowledge.lexical import terms

# bm25s sets its logger to DEBUG when it is imported, over the configured levels; import it from
# here (runbooks do too) so that this always follows.
logging.getLogger("bm25s").setLevel(logging.WARNING)

_SPACE = re.compile(r"\s+")


@dataclass(frozen=True, slots=True)
class RetrievalConfig:
    #: how many chunks each ranking contributes to the fusion
    candidates: int = 50
    #: the k of reciprocal rank fusion: 1 / (k + rank)
    rrf_k: int = 60
    #: least share of the query's IDF mass a chunk must contain to count as evidence
    min_coverage: float = 0.5
    #: least cosine similarity for a chunk to count as evidence on meaning alone
    min_cosine: float = 0.40
    #: threads of the dense scan (0: one per core)
    threads: int = 0
    #: from this many chunks on, the dense scan prunes with int8 scores (``knowledge.dense``)
    quantize_from: int = QUANTIZE_FROM


@dataclass(frozen=True, slots=True)
class Hit:
    """One graded, fused result: ``key`` identifies the chunk to whoever built the index."""

    key: int
    fused: float
    coverage: float
    cosine: float | None

    @property
    def relevance(self) -> float:
        return max(self.coverage, self.cosine or 0.0)


def duplicate_key(text: str) -> int:
    """Equal for texts that differ only in case and spacing."""
    normal = _SPACE.sub(" ", text).strip().lower().encode()
    return int.from_bytes(hashlib.blake2b(normal, digest_size=8).digest(), "big", signed=True)


class LocalIndex:
    """An immutable snapshot: build it once per knowledge-base version, search it many times."""

    def __init__(
        self,
        keys: Sequence[int],
        texts: Sequence[str],
        vectors: npt.NDArray[np.float32] | None = None,
        *,
        config: RetrievalConfig | None = None,
    ) -> None:
        if vectors is not None and len(vectors) != len(keys):
            raise ValueError("one vector per chunk, or none")
        self.config = config or RetrievalConfig()
        self.keys = np.asarray(keys, dtype=np.int64)
        self.dup_keys = np.fromiter((duplicate_key(t) for t in texts), dtype=np.int64, count=len(texts))
        self.size = len(keys)
        self._ascending = bool(np.all(self.keys[1:] > self.keys[:-1]))
        #: a zero row marks a chunk without a usable vector (e.g. embedded by another model)
        self.dense = (
            None
            if vectors is None
            else DenseIndex(vectors, threads=self.config.threads, quantize_from=self.config.quantize_from)
        )
        self._bm25 = bm25s.BM25()
        if self.size:
            self._bm25.index([terms(t) or [""] for t in texts], show_progress=False)
            scores = self._bm25.scores
            self._data = np.asarray(scores["data"], dtype=np.float32)
            self._indices = np.asarray(scores["indices"])
            self._indptr = np.asarray(scores["indptr"])
            self._vocab: dict[str, int] = self._bm25.vocab_dict
        else:
            self._vocab = {}

    def _rows(self, keys: Collection[int]) -> npt.NDArray[np.intp]:
        """The rows of those of ``keys`` this index holds."""
        if not keys:
            return np.zeros(0, dtype=np.intp)
        wanted = np.fromiter(keys, dtype=np.int64, count=len(keys))
        if self._ascending:  # the usual case (chunks in id order): a binary search per key
            at = np.minimum(np.searchsorted(self.keys, wanted), self.size - 1)
            return np.unique(at[self.keys[at] == wanted]).astype(np.intp)
        return np.flatnonzero(np.isin(self.keys, wanted))

    @property
    def mode(self) -> str:
        return "hybrid" if self.dense is not None and bool(self.dense.usable.any()) else "lexical"

    def _idf(self, df: int) -> float:
        return float(np.log(1.0 + (self.size - df + 0.5) / (df + 0.5)))

    def _lexical(self, query: str) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
        """BM25 score and IDF-weighted query-term coverage of every chunk."""
        bm25 = np.zeros(self.size, dtype=np.float32)
        covered = np.zeros(self.size, dtype=np.float32)
        total_idf = 0.0
        for term in dict.fromkeys(terms(query)):
            token = self._vocab.get(term)
            start, end = (int(self._indptr[token]), int(self._indptr[token + 1])) if token is not None else (0, 0)
            idf = self._idf(end - start)
            total_idf += idf
            if end > start:
                docs = self._indices[start:end]
                bm25[docs] += self._data[start:end]
                covered[docs] += idf
        if total_idf > 0:
            covered /= total_idf
        return bm25, covered

    def search(
        self,
        query: str,
        *,
        top_k: int,
        query_vector: npt.NDArray[np.float32] | None = None,
        exclude: Collection[int] = (),
    ) -> list[Hit]:
        """The best ``top_k`` chunks that pass the grade, best first (possibly none).

        ``exclude``: keys of chunks that are no candidates at all (those the searcher may not
        see). They are taken out before each ranking picks its candidates, so however many of
        them match they neither crowd allowed chunks out of the fusion nor, as duplicates,
        hide an allowed copy of their text.
        """
        if not self.size or top_k <= 0:
            return []
        config = self.config
        excluded = self._rows(exclude)
        bm25, coverage = self._lexical(query)
        bm25[excluded] = 0.0
        lexical_rank = top_rows(bm25, config.candidates, 0.0)
        dense, vector = self.dense, None if query_vector is None else np.asarray(query_vector, dtype=np.float32)
        dense_rank = np.zeros(0, dtype=np.intp)
        if dense is not None and vector is not None:
            dense_rank = dense.top(vector, config.candidates + len(excluded))
            if len(excluded):
                dense_rank = dense_rank[~np.isin(dense_rank, excluded)][: config.candidates]
        fused: dict[int, float] = {}
        for ranking in (lexical_rank, dense_rank):
            for rank, row in enumerate(ranking.tolist()):
                fused[row] = fused.get(row, 0.0) + 1.0 / (config.rrf_k + rank + 1)
        cosine: dict[int, float] = {}
        if dense is not None and vector is not None and fused:
            rows = np.fromiter(fused, dtype=np.intp, count=len(fused))
            rows = rows[dense.usable[rows]]
            cosine = dict(zip(rows.tolist(), dense.cosines(vector, rows).tolist(), strict=True))
        hits: list[Hit] = []
        seen: set[int] = set()
        for row, score in sorted(fused.items(), key=lambda item: (-item[1], item[0])):
            cos = cosine.get(row)
            if coverage[row] < config.min_coverage and (cos is None or cos < config.min_cosine):
                continue
            dup = int(self.dup_keys[row])
            if dup in seen:
                continue
            seen.add(dup)
            hits.append(Hit(key=int(self.keys[row]), fused=score, coverage=float(coverage[row]), cosine=cos))
            if len(hits) == top_k:
                break
        return hits
