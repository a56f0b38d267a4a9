"""Exact cosine top-k over the chunks' vectors, without reading every float32 on every query.

A full float32 scan of 100k × 384 vectors reads 150 MB per query and costs about 8 ms here, most
of a search. ``DenseIndex`` keeps, beside the float32 matrix, an int8 copy (one scale per row)
that onnxruntime scans in a quarter of the bytes. The int8 scores are only used to prune: the
error of each is bounded (below), so every row that could be among the best ``n`` by its true
cosine is rescored in float32, and the answer is the same as a full float32 scan's — not an
approximation with a recall figure.

Error bound. A row ``v = s_v·c + e_v`` (``|e_v| ≤ s_v/2`` per component) and the query
``q = s_q·(u − 128) + e_q`` give an int8 score ``a`` with
``|a − v·q| ≤ s_v/2·‖q‖₁ + s_q/2·‖v‖₁ + d·s_v·s_q/4``. Taking the largest ``s_v`` and ``‖v‖₁``
of the index bounds every row at once.

Small indexes are scanned in float32 directly: below ``QUANTIZE_FROM`` rows that is already
well under a millisecond.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from knowledge.compute import IR_VERSION, OPSET, inference_session

Vectors = npt.NDArray[np.float32]
Rows = npt.NDArray[np.intp]

#: indexes with fewer rows are scanned in float32 only
QUANTIZE_FROM = 16_384
#: float32 rounding of the scaled int8 scores, far above what it can be
_ROUNDING = 1e-5


def top_rows(scores: npt.NDArray[np.float32], n: int, floor: float) -> Rows:
    """The rows of the ``n`` best scores above ``floor``, best first: exact, without a full sort.

    A strided sample suggests a threshold a few times ``n`` rows deep; when at least ``n`` rows
    reach it, they hold every one of the best ``n``, and only they are partitioned. On 100k rows
    that takes a fraction of a millisecond instead of one.
    """
    n = min(n, len(scores))
    if n <= 0:
        return np.zeros(0, dtype=np.intp)
    rows: Rows | None = None
    step = len(scores) // (_SAMPLE_PER_RESULT * n)
    if step >= 2:
        sample = scores[::step]
        deep = min(len(sample), -(-_DEPTH * n // step))
        threshold = float(np.partition(sample, len(sample) - deep)[len(sample) - deep])
        if threshold > floor:
            rows = np.flatnonzero(scores >= threshold)
            if len(rows) < n:
                rows = None
    if rows is None:
        rows = np.flatnonzero(scores > floor)
    if len(rows) > n:
        rows = rows[np.argpartition(-scores[rows], n - 1)[:n]]
    rows = rows[scores[rows] > floor]
    ordered: Rows = rows[np.argsort(-scores[rows], kind="stable")]
    return ordered


#: ``top_rows``' sample holds this many rows per wanted result, and its threshold lies this many
#: times deeper than the results wanted
_SAMPLE_PER_RESULT, _DEPTH = 32, 3


class DenseIndex:
    """Cosine similarity of a query to every usable row; a zero row has no vector and never matches."""

    def __init__(self, vectors: Vectors, *, threads: int = 0, quantize_from: int = QUANTIZE_FROM) -> None:
        self.vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        l1 = np.abs(self.vectors).sum(axis=1)
        self.usable = l1 > 0
        self._scan: Any = None
        if len(self.vectors) >= quantize_from and self.usable.any():
            self._quantize(threads, max_row_l1=float(l1.max()))

    def _quantize(self, threads: int, *, max_row_l1: float) -> None:
        from onnx import TensorProto, helper, numpy_helper

        largest = np.abs(self.vectors).max(axis=1)
        self._row_scale = (np.where(largest > 0, largest, 1.0) / 127.0).astype(np.float32)
        codes = np.rint(self.vectors / self._row_scale[:, None]).astype(np.int8)
        self._max_row_scale = float(self._row_scale.max())
        self._max_row_l1 = max_row_l1
        rows, dimension = codes.shape
        graph = helper.make_graph(
            [helper.make_node("MatMulInteger", ["query", "codes", "zero"], ["scores"])],
            "int8_scan",
            [helper.make_tensor_value_info("query", TensorProto.UINT8, [1, dimension])],
            [helper.make_tensor_value_info("scores", TensorProto.INT32, [1, rows])],
            [
                numpy_helper.from_array(np.ascontiguousarray(codes.T), "codes"),
                numpy_helper.from_array(np.array(128, dtype=np.uint8), "zero"),
            ],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)
        self._scan = inference_session(model.SerializeToString(), threads=threads)

    @property
    def quantized(self) -> bool:
        return self._scan is not None

    def cosines(self, query: Vectors, rows: Rows) -> npt.NDArray[np.float32]:
        """Exact cosines of ``rows`` (``-1`` for a row without a vector)."""
        out: npt.NDArray[np.float32] = self.vectors[rows] @ query
        out[~self.usable[rows]] = -1.0
        return out

    def top(self, query: Vectors, n: int) -> Rows:
        """The ``n`` usable rows of highest cosine, best first: the same rows a float32 scan ranks."""
        query = np.asarray(query, dtype=np.float32)
        if self._scan is None:
            scores: npt.NDArray[np.float32] = self.vectors @ query
            scores[~self.usable] = -2.0
            return top_rows(scores, n, -1.5)
        largest = float(np.abs(query).max())
        query_scale = (largest if largest > 0 else 1.0) / 127.0
        codes = (np.rint(query / query_scale) + 128).astype(np.uint8)[None, :]
        approximate = self._scan.run(None, {"query": codes})[0][0].astype(np.float32)
        approximate *= self._row_scale
        approximate *= np.float32(query_scale)
        approximate[~self.usable] = -np.inf
        bound = (
            self._max_row_scale / 2 * float(np.abs(query).sum())
            + query_scale / 2 * self._max_row_l1
            + len(query) * self._max_row_scale * query_scale / 4
            + _ROUNDING
        )
        first = top_rows(approximate, n, -np.inf)
        if not len(first):
            return first
        # At least n rows reach the least exact cosine among the first picks, so each of the true
        # best n does too, and its int8 score is within the bound of it.
        reach = float(self.cosines(query, first).min()) - bound
        candidates = np.union1d(first, np.flatnonzero(approximate >= reach))
        exact = self.cosines(query, candidates)
        exact[~self.usable[candidates]] = -2.0
        return candidates[top_rows(exact, n, -1.5)]
