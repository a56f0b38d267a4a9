"""The dense index, and what it guarantees on any CPU.

Exact, on every machine and thread count:
- a row's score (``exact_scores``) depends on its vector and the query only, and lies within
  ``2⁻⁴⁷·Σ|vᵢ·qᵢ|`` of the true dot product;
- the int8 kernel's raw int32 output is the exact integer dot product, on adversarial codes at
  every limit (checked here against numpy's integer product, so this suite fails on the machine
  where the kernel is wrong), and a non-VNNI x86 kernel (``vpmaddubsw``'s saturating 16-bit
  pairs, emulated here) would compute the same;
- ``DenseIndex.top`` is the top-k of ``exact_scores`` over every row, ties to the lower row,
  whether it prunes with float32, with int8, or with an int8 kernel that turned out wrong.

Within a stated tolerance: a float32 BLAS scan differs from ``exact_scores`` by at most
``γ_d·‖v‖·‖q‖`` (the bound the index prunes with), so its ranking may differ only between rows
that close.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from threadpoolctl import threadpool_limits

from knowledge import dense
from knowledge.dense import (
    PAIR_PEAK,
    QUERY_LEVELS,
    QUERY_ZERO,
    ROW_LEVELS,
    DenseIndex,
    adversarial_codes,
    adversarial_queries,
    exact_int8_scores,
    exact_scores,
    int8_scan,
    top_rows,
)

Vectors = npt.NDArray[np.float32]


def unit_rows(rng: np.random.Generator, rows: int, dimension: int) -> Vectors:
    vectors = rng.standard_normal((rows, dimension)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors


def clustered(rng: np.random.Generator, rows: int, dimension: int, spread: float) -> Vectors:
    """Rows close to a few centres, as embeddings of documents about a few topics are."""
    centres = unit_rows(rng, 8, dimension)
    vectors = centres[rng.integers(0, 8, rows)] + spread * rng.standard_normal((rows, dimension)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors


def reference_top(vectors: Vectors, query: Vectors, n: int) -> list[int]:
    """Every usable row scored by ``exact_scores``, sorted: best first, ties to the lower row."""
    scores = exact_scores(vectors, query)
    usable = np.flatnonzero(np.abs(vectors).sum(axis=1) > 0)
    order = usable[np.lexsort((usable, -scores[usable]))]
    return [int(row) for row in order[:n]]


# --- the score of a row ---------------------------------------------------------------------


def test_a_rows_score_does_not_depend_on_the_rows_scored_with_it() -> None:
    rng = np.random.default_rng(11)
    vectors = unit_rows(rng, 5_000, 384)
    query = unit_rows(rng, 1, 384)[0]
    everything = exact_scores(vectors, query)

    for rows in (np.arange(3), rng.choice(5_000, 77, replace=False), np.arange(4_999, -1, -1)):
        assert exact_scores(vectors[rows], query).tolist() == everything[rows].tolist()
    assert exact_scores(vectors[17:18], query)[0] == everything[17]


@settings(max_examples=200, deadline=None)
@given(
    width=st.integers(0, 70),
    seed=st.integers(0, 2**32 - 1),
    magnitude=st.sampled_from([1e-30, 1e-3, 1.0, 1e20]),
)
def test_a_score_is_the_true_dot_product_within_two_to_the_minus_47(width: int, seed: int, magnitude: float) -> None:
    rng = np.random.default_rng(seed)
    vectors = (rng.standard_normal((3, width)) * magnitude).astype(np.float32)
    query = (rng.standard_normal(width) * magnitude).astype(np.float32)

    got = exact_scores(vectors, query)

    for row, score in zip(vectors, got, strict=True):
        products = [float(a) * float(b) for a, b in zip(row, query, strict=True)]  # exact in float64
        true = math.fsum(products)  # correctly rounded
        assert abs(score - true) <= 2.0**-47 * math.fsum(abs(p) for p in products)


def test_a_float32_blas_scan_stays_within_the_bound_the_index_prunes_with() -> None:
    """The stated tolerance: numpy's BLAS, at any thread count, within γ_d·‖v‖·‖q‖ of the score."""
    rng = np.random.default_rng(12)
    vectors = np.concatenate([unit_rows(rng, 20_000, 384), clustered(rng, 20_000, 384, 0.01)])
    index = DenseIndex(vectors, quantize_from=len(vectors) + 1)
    for threads in (1, 2):
        with threadpool_limits(limits=threads, user_api="blas"):
            for query in unit_rows(rng, 4, 384):
                drift = np.abs((vectors @ query).astype(np.float64) - exact_scores(vectors, query))
                assert float(drift.max()) <= index._float32_bound(query)


# --- the int8 kernel ------------------------------------------------------------------------


def test_no_two_adjacent_byte_products_can_saturate_a_16_bit_lane() -> None:
    assert PAIR_PEAK == 2 * 127 * 127
    assert PAIR_PEAK <= 2**15 - 1
    assert QUERY_ZERO - QUERY_LEVELS >= 0  # the query code is a valid unsigned byte…
    assert QUERY_ZERO + QUERY_LEVELS <= 127  # …of seven bits
    assert ROW_LEVELS <= 127


@pytest.mark.parametrize("dimension", [384, 1, 3, 33, 64, 1536])
@pytest.mark.parametrize("threads", [1, 2])
def test_the_int8_kernel_gives_exact_integer_dot_products_on_adversarial_codes(dimension: int, threads: int) -> None:
    """onnxruntime's raw int32 output against numpy's integer product, every code at its limit."""
    codes = adversarial_codes(dimension)

    scan = int8_scan(codes, threads=threads)

    for query in adversarial_queries(dimension):
        got = scan.run(None, {"query": query[None, :]})[0][0]
        assert got.dtype == np.int32
        assert got.tolist() == exact_int8_scores(codes, query).tolist()


def test_the_int8_kernel_is_exact_on_a_large_matrix_of_limit_codes() -> None:
    """Large enough for the packed, threaded GEMM path, with ragged row tails."""
    rng = np.random.default_rng(13)
    codes = rng.choice(np.array([-ROW_LEVELS, ROW_LEVELS, 0, 1], dtype=np.int8), size=(20_011, 384))
    codes[::7] = ROW_LEVELS

    scan = int8_scan(codes, threads=2)

    for query in adversarial_queries(384):
        assert scan.run(None, {"query": query[None, :]})[0][0].tolist() == exact_int8_scores(codes, query).tolist()


def pmaddubsw_kernel(codes: npt.NDArray[np.int8], query: npt.NDArray[np.uint8], zero: int) -> npt.NDArray[np.int32]:
    """An x86 kernel without VNNI, in numpy: unsigned × signed byte products, each adjacent pair
    added into a saturating signed 16-bit lane (``vpmaddubsw``), the lanes summed in 32 bits
    (``vpmaddwd`` by ones), the zero point taken off through the row sums."""
    products = codes.astype(np.int32) * query.astype(np.int32)
    if products.shape[1] % 2:
        products = np.pad(products, ((0, 0), (0, 1)))
    lanes = np.clip(products[:, 0::2] + products[:, 1::2], -(2**15), 2**15 - 1)
    out: npt.NDArray[np.int32] = (lanes.sum(axis=1) - zero * codes.astype(np.int32).sum(axis=1)).astype(np.int32)
    return out


def test_a_saturating_non_vnni_kernel_would_compute_the_exact_products_at_these_ranges() -> None:
    codes = adversarial_codes(384)
    for query in adversarial_queries(384):
        assert pmaddubsw_kernel(codes, query, QUERY_ZERO).tolist() == exact_int8_scores(codes, query).tolist()

    # …and at the full unsigned range (zero point 128), which the index used before, it would not
    wide = np.full(384, 255, dtype=np.uint8)
    exact = codes.astype(np.int64) @ (wide.astype(np.int64) - 128)
    assert pmaddubsw_kernel(codes, wide, 128).tolist() != exact.tolist()


class EmulatedKernel:
    """A session stand-in computing with ``pmaddubsw_kernel``, or off by one somewhere."""

    def __init__(self, codes: npt.NDArray[np.int8], *, wrong: bool = False) -> None:
        self.codes, self.wrong = codes, wrong

    def run(self, _outputs: Any, feed: dict[str, npt.NDArray[np.uint8]]) -> list[npt.NDArray[np.int32]]:
        scores = pmaddubsw_kernel(self.codes, feed["query"][0], QUERY_ZERO)
        if self.wrong:
            scores[len(scores) // 3] += 1
        return [scores[None, :]]


def test_on_a_non_vnni_cpu_the_index_stays_quantised_and_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dense, "int8_scan", lambda codes, threads=0: EmulatedKernel(codes))
    rng = np.random.default_rng(14)
    vectors = unit_rows(rng, 3_000, 64)

    index = DenseIndex(vectors, quantize_from=1)

    assert index.quantized
    for query in unit_rows(rng, 5, 64):
        assert index.top(query, 20).tolist() == reference_top(vectors, query, 20)


def test_a_kernel_that_differs_from_exact_arithmetic_is_not_used_and_said_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(dense, "int8_scan", lambda codes, threads=0: EmulatedKernel(codes, wrong=True))
    monkeypatch.setattr(dense, "_warned", False)
    rng = np.random.default_rng(15)
    vectors = unit_rows(rng, 3_000, 64)

    with caplog.at_level(logging.WARNING, logger="knowledge.dense"):
        first, second = DenseIndex(vectors, quantize_from=1), DenseIndex(vectors, quantize_from=1)

    assert not first.quantized and not second.quantized
    assert [r.getMessage().split(":")[0] for r in caplog.records] == ["dense_int8_inexact"]
    query = unit_rows(rng, 1, 64)[0]
    assert first.top(query, 20).tolist() == reference_top(vectors, query, 20)


def test_an_eight_bit_query_range_would_be_caught_by_the_self_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """Had the query kept its 8-bit range, a non-VNNI CPU would fail the start-up check."""
    monkeypatch.setattr(dense, "QUERY_ZERO", 128)
    monkeypatch.setattr(dense, "QUERY_LEVELS", 127)
    monkeypatch.setattr(dense, "_warned", True)

    class Saturating(EmulatedKernel):
        def run(self, _outputs: Any, feed: dict[str, npt.NDArray[np.uint8]]) -> list[npt.NDArray[np.int32]]:
            return [pmaddubsw_kernel(self.codes, feed["query"][0], 128)[None, :]]

    monkeypatch.setattr(dense, "int8_scan", lambda codes, threads=0: Saturating(codes))

    assert not DenseIndex(unit_rows(np.random.default_rng(16), 500, 64), quantize_from=1).quantized


# --- the top-k ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "rows", "dimension"),
    [("random", 20_000, 384), ("clustered", 20_000, 384), ("tight", 20_000, 64), ("random", 3_000, 4)],
)
def test_the_int8_pruned_top_k_is_the_exact_top_k(kind: str, rows: int, dimension: int) -> None:
    rng = np.random.default_rng(rows + dimension)
    if kind == "random":
        vectors = unit_rows(rng, rows, dimension)
    else:
        vectors = clustered(rng, rows, dimension, spread=0.3 if kind == "clustered" else 0.01)
    vectors[rng.choice(rows, rows // 50, replace=False)] = 0.0  # chunks without a vector
    index = DenseIndex(vectors, threads=1, quantize_from=1)
    assert index.quantized

    for query in [*unit_rows(rng, 10, dimension), vectors[7] + 0.01, vectors[11]]:
        query = (query / np.linalg.norm(query)).astype(np.float32)
        for n in (1, 9, 50):
            assert index.top(query, n).tolist() == reference_top(vectors, query, n)


def test_float32_int8_and_any_thread_count_give_the_same_top_k() -> None:
    rng = np.random.default_rng(3)
    vectors = clustered(rng, 6_000, 32, spread=0.05)
    small = DenseIndex(vectors)
    assert not small.quantized
    indexes = [small, DenseIndex(vectors, quantize_from=1, threads=1), DenseIndex(vectors, quantize_from=1, threads=2)]

    for query in unit_rows(rng, 5, 32):
        expected = reference_top(vectors, query, 20)
        for blas in (1, 2):
            with threadpool_limits(limits=blas, user_api="blas"):
                assert [index.top(query, 20).tolist() for index in indexes] == [expected] * 3


def test_equal_scores_go_to_the_lower_row_on_either_path() -> None:
    rng = np.random.default_rng(4)
    vectors = unit_rows(rng, 2_000, 16)
    vectors[[1500, 3, 900, 41, 1999]] = vectors[700]  # six rows with one vector
    query = (vectors[700] + 0.2 * unit_rows(rng, 1, 16)[0]).astype(np.float32)

    for index in (DenseIndex(vectors), DenseIndex(vectors, quantize_from=1)):
        assert index.top(query, 6).tolist() == [3, 41, 700, 900, 1500, 1999]
        assert index.top(query, 4).tolist() == [3, 41, 700, 900]


def test_rows_without_a_vector_are_never_returned_and_have_no_cosine() -> None:
    vectors = np.zeros((4, 3), dtype=np.float32)
    vectors[1] = (1.0, 0.0, 0.0)
    index = DenseIndex(vectors, quantize_from=1)
    query = np.array([1.0, 0.0, 0.0], dtype=np.float32)

    assert index.top(query, 4).tolist() == [1]
    assert index.cosines(query, np.array([0, 1])).tolist() == [-1.0, 1.0]
    assert not DenseIndex(np.zeros((5, 3), dtype=np.float32), quantize_from=1).quantized
    assert DenseIndex(np.zeros((5, 3), dtype=np.float32), quantize_from=1).top(query, 3).tolist() == []


@settings(max_examples=300, deadline=None)
@given(
    scores=st.lists(st.floats(-5, 5, width=32) | st.sampled_from([0.0, 1.0]), min_size=0, max_size=3_000),
    n=st.integers(0, 80),
    floor=st.sampled_from([-np.inf, -1.0, 0.0]),
)
def test_top_rows_is_a_full_sort_with_ties_to_the_lower_row(scores: list[float], n: int, floor: float) -> None:
    array = np.asarray(scores, dtype=np.float32)

    got = top_rows(array, n, floor)

    above = np.flatnonzero(array > floor)
    expected = above[np.lexsort((above, -array[above]))][:n]
    assert got.tolist() == expected.tolist()


def test_top_rows_on_a_large_sparse_array_takes_the_sampled_path_and_stays_exact() -> None:
    rng = np.random.default_rng(5)
    sparse = np.where(rng.random(200_000) < 0.002, rng.random(200_000), 0.0).astype(np.float32)
    dense_scores = rng.standard_normal(200_000).astype(np.float32)
    ties = np.repeat(np.array([3.0, 2.0, 1.0], dtype=np.float32), [5, 40, 199_955])

    for array, floor in ((sparse, 0.0), (dense_scores, -np.inf), (ties, 0.0)):
        for n in (1, 10, 50):
            above = np.flatnonzero(array > floor)
            assert top_rows(array, n, floor).tolist() == above[np.lexsort((above, -array[above]))][:n].tolist()
