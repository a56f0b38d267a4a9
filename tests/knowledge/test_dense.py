"""The dense index: its top-k is exactly a float32 scan's, whether it scans in float32 or prunes
with int8 scores first, on random, clustered and nearly tied vectors, with rows that have no
vector; and the partial top-k it relies on agrees with a full sort."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from knowledge.dense import DenseIndex, top_rows

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


def float32_top(vectors: Vectors, query: Vectors, n: int) -> list[int]:
    scores = vectors @ query
    scores[np.abs(vectors).sum(axis=1) == 0] = -np.inf
    order = np.argsort(-scores, kind="stable")
    return [int(row) for row in order[:n] if np.isfinite(scores[row])]


@pytest.mark.parametrize(
    ("kind", "rows", "dimension"),
    [("random", 20_000, 384), ("clustered", 20_000, 384), ("tight", 20_000, 64), ("random", 3_000, 4)],
)
def test_the_int8_pruned_top_k_is_the_float32_top_k(kind: str, rows: int, dimension: int) -> None:
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
            assert index.top(query, n).tolist() == float32_top(vectors, query, n)


def test_a_small_index_is_scanned_in_float32_with_the_same_answer() -> None:
    rng = np.random.default_rng(3)
    vectors = unit_rows(rng, 500, 32)
    query = unit_rows(rng, 1, 32)[0]

    small = DenseIndex(vectors)

    assert not small.quantized
    assert small.top(query, 20).tolist() == float32_top(vectors, query, 20)
    assert small.top(query, 20).tolist() == DenseIndex(vectors, quantize_from=1).top(query, 20).tolist()


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
def test_top_rows_agrees_with_a_full_sort(scores: list[float], n: int, floor: float) -> None:
    array = np.asarray(scores, dtype=np.float32)

    got = top_rows(array, n, floor)

    expected = np.sort(array[array > floor])[::-1][:n]
    assert array[got].tolist() == expected.tolist()
    assert len(set(got.tolist())) == len(got)


def test_top_rows_on_a_large_sparse_array_takes_the_sampled_path_and_stays_exact() -> None:
    rng = np.random.default_rng(5)
    sparse = np.where(rng.random(200_000) < 0.002, rng.random(200_000), 0.0).astype(np.float32)
    dense = rng.standard_normal(200_000).astype(np.float32)

    for array, floor in ((sparse, 0.0), (dense, -np.inf)):
        for n in (1, 10, 50):
            got = top_rows(array, n, floor)
            assert array[got].tolist() == np.sort(array[array > floor])[::-1][:n].tolist()
