"""Exact cosine top-k over the chunks' vectors, the same answer on every CPU.

**What exact means here.** A row's score is ``exact_scores``: the float64 products of its
float32 components with the query's (each product is exact: 24 + 24 bits fit in 53), summed in
one fixed pairwise tree. Nothing else enters — not the other rows scored beside it, the thread
count, the BLAS build or the CPU's vector width — so a row scores the same wherever and however
it is scored. ``DenseIndex.top`` returns the ``n`` rows of highest score, ties to the lower row:
exactly what sorting every row's ``exact_scores`` gives, not an approximation with a recall
figure. (The tree's own rounding stays below ``2⁻⁴⁷·Σ|vᵢ·qᵢ|``; a float32 BLAS scan differs from
it by up to ``d·2⁻²⁴·‖v‖₂·‖q‖₂``, so a float32 scan's ranking can differ from this one only
between rows whose scores are that close.)

**How it avoids scoring every row exactly.** A fast scan gives every row an approximate score
with a proven error bound; every row that could be among the best ``n`` under that bound is
rescored exactly, and only they are ranked. Two scans:

* float32 through numpy's BLAS (small indexes, and the fallback): whatever order and threads
  the BLAS sums in, ``|fl(v·q) − v·q| ≤ γ_d·‖v‖₂·‖q‖₂`` with ``γ_d = d·u/(1 − d·u)``, ``u = 2⁻²⁴``.
* int8 through onnxruntime's ``MatMulInteger`` (from ``QUANTIZE_FROM`` rows: a quarter of the
  bytes). Rows are codes in ±127 with one scale per row; the query is a 7-bit code, ``1…127``
  around the zero point 64. That range is what keeps the kernel exact on every CPU: x86 without
  VNNI multiplies unsigned by signed bytes with ``vpmaddubsw``, which adds adjacent products into
  a *saturating* signed 16-bit lane, and ``2·127·127 = 32258`` fits where ``2·255·127`` does not
  (VNNI, AMX and ARM's dot-product and widening kernels accumulate in 32 bits anyway). The int32
  result is then the exact integer dot product, and with ``v = s_v·c + e_v`` (``|e_v| ≤ s_v/2``)
  and ``q = s_q·k + e_q`` (``|e_q| ≤ s_q/2``) the scaled score ``a`` obeys
  ``|a − v·q| ≤ s_v/2·‖q‖₁ + s_q/2·‖v‖₁ + d·s_v·s_q/4``; the largest ``s_v`` and ``‖v‖₁`` of
  the index bound every row at once.

Exactness of the int8 kernel is not taken on trust: when an index is quantised, the kernel's raw
int32 output is compared with numpy's integer product on adversarial codes (every code at its
limit, in every sign pattern) and on a sample of the index's own rows; on any difference the
index scans in float32 instead, and the process logs ``dense_int8_inexact`` once.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import numpy.typing as npt

from knowledge.compute import IR_VERSION, OPSET, inference_session

logger = logging.getLogger(__name__)

Vectors = npt.NDArray[np.float32]
Scores = npt.NDArray[np.float64]
Rows = npt.NDArray[np.intp]

#: indexes with fewer rows are scanned in float32 only
QUANTIZE_FROM = 16_384
#: a row's codes lie in ±ROW_LEVELS; the query's in ±QUERY_LEVELS, sent as ``code + QUERY_ZERO``
ROW_LEVELS, QUERY_LEVELS, QUERY_ZERO = 127, 63, 64
#: the largest sum of two adjacent unsigned × signed byte products, which must fit the signed
#: 16-bit lane of a non-VNNI x86 kernel (``tests/knowledge/test_dense.py`` checks it)
PAIR_PEAK = 2 * (QUERY_ZERO + QUERY_LEVELS) * ROW_LEVELS

_UNIT_ROUNDOFF = 2.0**-24  # float32
#: widens every proven bound a little, for the float64 arithmetic that computes the bound itself
_SLACK = 1.0 + 2.0**-20
#: rows scored by ``exact_scores`` at a time: keeps its float64 temporaries in cache
_BLOCK = 2048


def exact_scores(vectors: Vectors, query: Vectors) -> Scores:
    """Each row's dot product with ``query``, by one fixed computation (see the module's docstring).

    Every product is exact in float64; the sum is a fixed tree, each level one elementwise add
    of the upper half of the columns onto the lower (an odd last column first goes onto the
    first), so the result depends on the row and the query alone.
    """
    rows, width = vectors.shape
    q = np.asarray(query, dtype=np.float64)
    out = np.zeros(rows, dtype=np.float64)
    for start in range(0, rows if width else 0, _BLOCK):
        sums = vectors[start : start + _BLOCK] * q
        live = width
        while live > 1:
            if live % 2:
                live -= 1
                sums[:, 0] += sums[:, live]
            half = live // 2
            np.add(sums[:, :half], sums[:, half:live], out=sums[:, :half])
            live = half
        out[start : start + len(sums)] = sums[:, 0]
    return out


def top_rows(scores: npt.NDArray[np.floating[Any]], n: int, floor: float) -> Rows:
    """The rows of the ``n`` best scores above ``floor``, best first, ties to the lower row.

    Exact, without a full sort: a strided sample suggests a threshold a few times ``n`` rows
    deep; when at least ``n`` rows reach it, they hold every one of the best ``n``, and only
    they are partitioned. On 100k rows that takes a fraction of a millisecond instead of one.
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
        # rows ascend, so among the scores equal to the n-th best the lower rows come first
        kept = scores[rows]
        nth = np.partition(kept, len(kept) - n)[len(kept) - n]
        above = rows[kept > nth]
        rows = np.concatenate([above, rows[kept == nth][: n - len(above)]])
    ordered: Rows = rows[np.argsort(-scores[rows], kind="stable")]
    return ordered


#: ``top_rows``' sample holds this many rows per wanted result, and its threshold lies this many
#: times deeper than the results wanted
_SAMPLE_PER_RESULT, _DEPTH = 32, 3


class DenseIndex:
    """Cosine similarity of a query to every usable row; a zero row has no vector and never matches."""

    def __init__(self, vectors: Vectors, *, threads: int = 0, quantize_from: int = QUANTIZE_FROM) -> None:
        self.vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        self.dimension = self.vectors.shape[1] if self.vectors.ndim == 2 else 0
        magnitude = np.abs(self.vectors)
        l1 = magnitude.sum(axis=1, dtype=np.float64)
        self.usable = l1 > 0
        self._max_row_l1 = float(l1.max(initial=0.0))
        self._max_row_l2 = float(np.sqrt(np.square(self.vectors, dtype=np.float64).sum(axis=1)).max(initial=0.0))
        self._scan: Any = None
        if len(self.vectors) >= quantize_from and self.usable.any():
            self._quantize(magnitude.max(axis=1), threads)

    def _quantize(self, largest: npt.NDArray[np.float32], threads: int) -> None:
        self._row_scale = (np.where(largest > 0, largest, 1.0) / ROW_LEVELS).astype(np.float32)
        codes = np.clip(np.rint(self.vectors / self._row_scale[:, None]), -ROW_LEVELS, ROW_LEVELS).astype(np.int8)
        self._max_row_scale = float(self._row_scale.max())
        scan = int8_scan(codes, threads=threads)
        if not int8_kernel_is_exact(scan, codes, threads=threads):
            _warn_inexact()
            return
        self._scan = scan

    @property
    def quantized(self) -> bool:
        return self._scan is not None

    def cosines(self, query: Vectors, rows: Rows) -> Scores:
        """The scores of ``rows`` by ``exact_scores`` (``-1`` for a row without a vector)."""
        out = exact_scores(self.vectors[rows], np.asarray(query, dtype=np.float32))
        out[~self.usable[rows]] = -1.0
        return out

    def top(self, query: Vectors, n: int) -> Rows:
        """The ``n`` usable rows of highest ``exact_scores``, best first, ties to the lower row."""
        query = np.asarray(query, dtype=np.float32)
        if n <= 0 or not len(self.vectors):
            return np.zeros(0, dtype=np.intp)
        if self._scan is None:
            approximate, bound = self.vectors @ query, self._float32_bound(query)
        else:
            approximate, bound = self._int8_scan(query)
        approximate[~self.usable] = -np.inf
        first = top_rows(approximate, n, -np.inf)
        if not len(first):
            return first
        # At least n rows score at least ``least`` (the first picks do), so each of the best n
        # does too, and its approximate score is within the bound below it.
        least = float(self.cosines(query, first).min()) - 2.0**-40 * self._max_row_l2 * float(np.linalg.norm(query))
        candidates = np.union1d(first, np.flatnonzero(approximate >= least - bound * _SLACK))
        if self._scan is not None:
            # int8 leaves a few hundred candidates: float32 narrows them to about n, by its own bound
            closer: npt.NDArray[np.float32] = self.vectors[candidates] @ query
            candidates = candidates[closer >= least - self._float32_bound(query) * _SLACK]
        return candidates[top_rows(self.cosines(query, candidates), n, -np.inf)]

    def _float32_bound(self, query: Vectors) -> float:
        """How far a float32 BLAS dot product of any row with ``query`` may lie from the true one."""
        gamma = self.dimension * _UNIT_ROUNDOFF / (1.0 - self.dimension * _UNIT_ROUNDOFF)
        # a BLAS that flushes subnormals to zero loses at most this much more per row
        flushed = self.dimension * 2.0**-125
        return gamma * self._max_row_l2 * float(np.linalg.norm(query)) + flushed

    def _int8_scan(self, query: Vectors) -> tuple[npt.NDArray[np.float32], float]:
        largest = float(np.abs(query).max(initial=0.0))
        query_scale = (largest if largest > 0 else 1.0) / QUERY_LEVELS
        codes = np.clip(np.rint(query / np.float32(query_scale)), -QUERY_LEVELS, QUERY_LEVELS)
        raw = self._scan.run(None, {"query": (codes + QUERY_ZERO).astype(np.uint8)[None, :]})[0][0]
        approximate = raw.astype(np.float32)
        approximate *= self._row_scale
        approximate *= np.float32(query_scale)
        quantisation = (
            self._max_row_scale / 2 * float(np.abs(query).sum(dtype=np.float64))
            + query_scale / 2 * self._max_row_l1
            + self.dimension * self._max_row_scale * query_scale / 4
        )
        # int32 → float32 and two float32 products: three roundings of at most u each
        rounding = 4 * _UNIT_ROUNDOFF * float(np.abs(approximate).max(initial=0.0))
        return approximate, quantisation + rounding


# --- the int8 kernel and its self-check -------------------------------------------------------


def int8_scan(codes: npt.NDArray[np.int8], *, threads: int = 0) -> Any:
    """An onnxruntime session whose ``run(None, {"query": u8[1, d]})`` gives the int32 row scores
    ``codes @ (query − QUERY_ZERO)``."""
    from onnx import TensorProto, helper, numpy_helper

    rows, dimension = codes.shape
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["query", "codes", "zero"], ["scores"])],
        "int8_scan",
        [helper.make_tensor_value_info("query", TensorProto.UINT8, [1, dimension])],
        [helper.make_tensor_value_info("scores", TensorProto.INT32, [1, rows])],
        [
            numpy_helper.from_array(np.ascontiguousarray(codes.T), "codes"),
            numpy_helper.from_array(np.array(QUERY_ZERO, dtype=np.uint8), "zero"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)
    return inference_session(model.SerializeToString(), threads=threads)


def exact_int8_scores(codes: npt.NDArray[np.int8], query: npt.NDArray[np.uint8]) -> npt.NDArray[np.int64]:
    """What ``int8_scan`` must return, in exact integer arithmetic."""
    out: npt.NDArray[np.int64] = codes.astype(np.int64) @ (query.astype(np.int64) - QUERY_ZERO)
    return out


def adversarial_codes(dimension: int, *, rng: np.random.Generator | None = None) -> npt.NDArray[np.int8]:
    """Rows of codes at their limits in every sign pattern (where a saturating kernel goes wrong),
    plus random rows."""
    rng = rng or np.random.default_rng(0)
    top, alternating = np.full(dimension, ROW_LEVELS), np.resize([ROW_LEVELS, -ROW_LEVELS], dimension)
    paired = np.resize([ROW_LEVELS, ROW_LEVELS, -ROW_LEVELS, -ROW_LEVELS], dimension)
    rows = [top, -top, alternating, -alternating, paired, -paired]
    rows += list(rng.choice([-ROW_LEVELS, ROW_LEVELS], size=(10, dimension)))
    rows += list(rng.integers(-ROW_LEVELS, ROW_LEVELS + 1, size=(16, dimension)))
    return np.asarray(rows, dtype=np.int8)


def adversarial_queries(dimension: int, *, rng: np.random.Generator | None = None) -> list[npt.NDArray[np.uint8]]:
    """Query codes at their extremes (all high, all low, alternating both ways) and random ones."""
    rng = rng or np.random.default_rng(1)
    high, low = QUERY_ZERO + QUERY_LEVELS, QUERY_ZERO - QUERY_LEVELS
    queries = [np.full(dimension, high), np.full(dimension, low)]
    queries += [np.resize([high, low], dimension), np.resize([low, high], dimension)]
    queries += list(rng.integers(low, high + 1, size=(2, dimension)))
    return [np.asarray(q, dtype=np.uint8) for q in queries]


#: rows of the index itself that the self-check compares, spread over it (its first and last too)
_CHECKED_ROWS = 2048


def int8_kernel_is_exact(scan: Any, codes: npt.NDArray[np.int8], *, threads: int = 0) -> bool:
    """Whether onnxruntime's kernel computes exact integer dot products on this machine: on
    adversarial codes of the same width, and on a spread sample of ``codes``, the rows ``scan``
    was built from."""
    rows, dimension = codes.shape
    probe = adversarial_codes(dimension)
    probe_scan = int8_scan(probe, threads=threads)
    sample = np.unique(np.linspace(0, rows - 1, min(rows, _CHECKED_ROWS)).astype(np.intp))
    for query in adversarial_queries(dimension):
        batch = {"query": query[None, :]}
        if not np.array_equal(probe_scan.run(None, batch)[0][0], exact_int8_scores(probe, query)):
            return False
        if not np.array_equal(scan.run(None, batch)[0][0][sample], exact_int8_scores(codes[sample], query)):
            return False
    return True


_warned = False


def _warn_inexact() -> None:
    global _warned
    if not _warned:
        _warned = True
        logger.warning(
            "dense_int8_inexact: onnxruntime's int8 kernel differs from exact integer arithmetic on this "
            "CPU; dense retrieval scans in float32 (same results, slower)"
        )
