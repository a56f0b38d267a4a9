"""Retrieval over a LocalIndex: BM25 with IDF-weighted coverage grading (English stems, Chinese
bigrams), duplicates, top_k, and the hybrid path with hand-made unit vectors (cosine threshold,
rows without a vector, reciprocal rank fusion)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pytest

from knowledge.lexical import terms
from knowledge.retrieval import Hit, LocalIndex, RetrievalConfig, duplicate_key

CORPUS = {
    10: "Disk full: writes fail with No space left on device. Delete old logs under /var/log.",
    11: "Connection pool exhausted: requests hit a timeout while waiting for a free connection.",
    12: "Memory leak in the worker process causes OOM kills and container restarts.",
    13: "数据库连接池耗尽时，请求会超时，需要扩大连接池。",
    14: "磁盘空间不足导致写入失败，请清理旧日志。",
    15: "Raise db.pool.max_size to 50 after checking the database limits.",
}


@pytest.fixture(scope="module")
def lexical() -> LocalIndex:
    return LocalIndex(list(CORPUS), list(CORPUS.values()))


def keys(hits: list[Hit]) -> list[int]:
    return [h.key for h in hits]


def unit(*components: float) -> npt.NDArray[np.float32]:
    v = np.asarray(components, dtype=np.float32)
    return (v / np.linalg.norm(v)).astype(np.float32)


# --- terms --------------------------------------------------------------------------------


def test_terms_are_stemmed_without_stopwords_and_split_identifiers() -> None:
    assert terms("The timeouts of the connections") == ["timeout", "connect"]
    assert {"db", "pool", "max", "size"} <= set(terms("db.pool.max_size"))
    assert terms("连接池") == ["连接", "接池"]
    assert terms("") == []


@pytest.mark.parametrize(
    "text", [*CORPUS.values(), "HikariPool-1 连接池pool耗尽了怎么办 db.pool.max_size=8", "  \n\t "]
)
def test_terms_per_cached_word_are_the_terms_of_the_whole_text(text: str) -> None:
    from collections import Counter

    from harness.text import STOPWORDS, tokens
    from knowledge.lexical import _CJK_FUNCTION_WORDS, _stemmer

    whole = [
        _stemmer().stemWord(t) if t.isascii() and t.isalpha() else t
        for t in tokens(_CJK_FUNCTION_WORDS.sub(" ", text))
        if t not in STOPWORDS
    ]
    assert Counter(terms(text)) == Counter(whole)


# --- lexical ------------------------------------------------------------------------------


def test_a_query_finds_the_chunk_that_answers_it(lexical: LocalIndex) -> None:
    hits = lexical.search("connection pool exhausted", top_k=3)

    assert keys(hits)[0] == 11
    assert hits[0].coverage == pytest.approx(1.0)
    assert hits[0].cosine is None
    assert hits[0].relevance == hits[0].coverage


def test_stemming_lets_a_plural_find_the_singular(lexical: LocalIndex) -> None:
    assert keys(lexical.search("timeouts", top_k=3)) == [11]
    assert keys(lexical.search("deleting logs", top_k=3)) == [10]


def test_an_identifier_part_finds_the_identifier(lexical: LocalIndex) -> None:
    assert 15 in keys(lexical.search("max size", top_k=3))


def test_a_chinese_query_finds_the_chinese_chunk_through_bigrams(lexical: LocalIndex) -> None:
    assert keys(lexical.search("数据库连接池耗尽", top_k=3)) == [13]
    assert keys(lexical.search("磁盘空间不足", top_k=3)) == [14]


def test_a_natural_chinese_question_finds_the_chinese_chunk(lexical: LocalIndex) -> None:
    assert keys(lexical.search("连接池耗尽了怎么办", top_k=3)) == [13]


def test_an_unrelated_query_finds_no_evidence(lexical: LocalIndex) -> None:
    assert lexical.search("kubernetes ingress certificate renewal", top_k=5) == []
    assert lexical.search("the of and", top_k=5) == []  # only stopwords: nothing to match


def test_a_chunk_holding_too_little_of_the_query_is_not_evidence(lexical: LocalIndex) -> None:
    # "connection" matches chunk 11, but the rarer terms of the query are nowhere
    assert lexical.search("connection certificate renewal expired", top_k=5) == []
    lenient = LocalIndex(list(CORPUS), list(CORPUS.values()), config=RetrievalConfig(min_coverage=0.1))
    assert keys(lenient.search("connection certificate renewal expired", top_k=5)) == [11]


def test_duplicate_texts_are_returned_once() -> None:
    index = LocalIndex(
        [1, 2, 3, 4],
        [
            "Restart the worker pool.",
            "  restart THE\n worker   pool. ",
            "Restart the worker pool after resizing.",
            "RESTART the worker pool.",
        ],
    )

    hits = index.search("restart worker pool", top_k=10)

    assert len(hits) == 2
    assert keys(hits)[0] in {1, 2, 4}
    assert keys(hits)[1] == 3


def test_duplicate_key_ignores_case_and_spacing_only() -> None:
    assert duplicate_key("Restart the  pool.\n") == duplicate_key("restart THE pool.")
    assert duplicate_key("Restart the pool.") != duplicate_key("Restart the pools.")
    assert isinstance(duplicate_key("x"), int)


def test_top_k_limits_the_hits_best_first() -> None:
    texts = [f"disk full on node {i}" + " disk" * i for i in range(6)]
    index = LocalIndex(list(range(6)), texts)

    hits = index.search("disk full", top_k=3)

    assert len(hits) == 3
    assert [h.fused for h in hits] == sorted((h.fused for h in hits), reverse=True)
    assert index.search("disk full", top_k=0) == []
    assert len(index.search("disk full", top_k=100)) == 6


def test_an_empty_index_finds_nothing() -> None:
    index = LocalIndex([], [])

    assert index.search("disk full", top_k=5) == []
    assert index.mode == "lexical"
    assert (
        LocalIndex([], [], np.zeros((0, 4), dtype=np.float32)).search("x", top_k=5, query_vector=unit(1, 0, 0, 0)) == []
    )


def test_a_vector_per_chunk_or_none() -> None:
    with pytest.raises(ValueError, match="one vector per chunk"):
        LocalIndex([1, 2], ["a", "b"], np.zeros((1, 4), dtype=np.float32))


# --- hybrid -------------------------------------------------------------------------------

HYBRID_TEXTS = ["Disk full alert on the storage node.", "Memory pressure on the cache.", "Quarterly budget review."]
HYBRID_VECTORS = np.stack([unit(1, 0, 0, 0), unit(0, 1, 0, 0), unit(0, 0, 1, 0)])


def test_mode_is_lexical_without_vectors_and_hybrid_with_them() -> None:
    assert LocalIndex([1, 2, 3], HYBRID_TEXTS).mode == "lexical"
    assert LocalIndex([1, 2, 3], HYBRID_TEXTS, HYBRID_VECTORS).mode == "hybrid"
    # vectors of another model only (all zero rows): nothing usable
    assert LocalIndex([1, 2, 3], HYBRID_TEXTS, np.zeros((3, 4), dtype=np.float32)).mode == "lexical"


def test_a_close_meaning_with_no_shared_word_is_found_above_min_cosine() -> None:
    index = LocalIndex([1, 2, 3], HYBRID_TEXTS, HYBRID_VECTORS)
    query = "volume ran out of capacity"  # no term in common with any chunk
    assert index.search(query, top_k=3) == []  # lexically there is nothing

    hits = index.search(query, top_k=3, query_vector=unit(0.6, 0, 0, 0.8))

    assert keys(hits) == [1]
    assert hits[0].cosine == pytest.approx(0.6, abs=1e-6)
    assert hits[0].coverage == 0.0
    assert hits[0].relevance == pytest.approx(0.6, abs=1e-6)


def test_a_meaning_below_min_cosine_is_not_evidence() -> None:
    index = LocalIndex([1, 2, 3], HYBRID_TEXTS, HYBRID_VECTORS)

    assert index.search("volume ran out of capacity", top_k=3, query_vector=unit(0.3, 0, 0, 0.954)) == []
    strict = LocalIndex([1, 2, 3], HYBRID_TEXTS, HYBRID_VECTORS, config=RetrievalConfig(min_cosine=0.7))
    assert strict.search("volume ran out of capacity", top_k=3, query_vector=unit(0.6, 0, 0, 0.8)) == []


def test_the_cosine_threshold_is_inclusive() -> None:
    index = LocalIndex([1], ["Disk full alert."], np.stack([unit(1, 0)]), config=RetrievalConfig(min_cosine=0.5))

    assert keys(index.search("unrelated words", top_k=1, query_vector=np.asarray([0.5, 0.75], dtype=np.float32))) == [1]


def test_a_row_without_a_vector_is_never_a_dense_hit() -> None:
    vectors = np.stack([unit(1, 0, 0, 0), np.zeros(4, dtype=np.float32), unit(0, 0, 1, 0)])
    # every usable row passes this grade, so only being left out of the dense ranking keeps row 2 out
    index = LocalIndex([1, 2, 3], HYBRID_TEXTS, vectors, config=RetrievalConfig(min_cosine=-0.5))

    hits = index.search("nothing in common", top_k=3, query_vector=unit(0, 1, 0, 0))

    assert sorted(keys(hits)) == [1, 3]


def test_a_row_without_a_vector_is_still_found_by_its_words() -> None:
    vectors = np.stack([np.zeros(4, dtype=np.float32), unit(0, 1, 0, 0), unit(0, 0, 1, 0)])
    index = LocalIndex([1, 2, 3], HYBRID_TEXTS, vectors)

    hits = index.search("disk full alert", top_k=3, query_vector=unit(0, 0, 0, 1))

    assert keys(hits) == [1]
    assert hits[0].relevance == pytest.approx(1.0)


def test_ranked_well_in_both_lists_beats_ranked_first_in_one() -> None:
    texts = [
        "disk full disk full alert alert",  # 1: best by words, and it has no vector
        "disk full alert raised by the storage node monitor at night",  # 2: second by words and by meaning
        "volumes ran out of capacity",  # 3: best by meaning, no shared word
        "quarterly budget review",  # 4: neither
    ]
    vectors = np.stack([np.zeros(4, dtype=np.float32), unit(0.9, 0.1, 0, 0.1), unit(1, 0, 0, 0), unit(0, 0, 1, 0)])
    index = LocalIndex([1, 2, 3, 4], texts, vectors)
    query, query_vector = "disk full alert", unit(1, 0, 0, 0)

    lexical_only = LocalIndex([1, 2, 3, 4], texts).search(query, top_k=4)
    assert keys(lexical_only)[:2] == [1, 2]  # the construction: 1 beats 2 on words alone

    hits = index.search(query, top_k=4, query_vector=query_vector)

    assert keys(hits)[0] == 2
    assert set(keys(hits)[1:]) == {1, 3}
    config = index.config
    assert hits[0].fused == pytest.approx(2 / (config.rrf_k + 2))
    assert {h.key: h.fused for h in hits}[1] == pytest.approx(1 / (config.rrf_k + 1))


def test_a_query_vector_on_a_lexical_index_is_ignored() -> None:
    index = LocalIndex([1, 2, 3], HYBRID_TEXTS)

    hits = index.search("disk full alert", top_k=3, query_vector=unit(0, 1, 0, 0))

    assert keys(hits) == [1]
    assert hits[0].cosine is None


# --- excluded chunks (those the searcher may not see) ---------------------------------------


def test_excluded_chunks_are_no_candidates_however_many_match_better() -> None:
    """Sixty look-alikes that match better than the one allowed chunk would fill both rankings'
    candidates (50 each); excluded, they leave it its place."""
    crowd = [f"stock lookups timing out redis pool exhausted inventory {i}" for i in range(60)]
    texts = [*crowd, "stock lookups timing out: redis pool exhausted after a config change"]
    vectors = np.stack([unit(1, 0.01 * i, 0, 0) for i in range(60)] + [unit(0.7, 0, 0.7, 0)])
    index = LocalIndex(list(range(100, 161)), texts, vectors)
    query = "stock lookups timing out redis pool exhausted"

    assert 160 not in keys(index.search(query, top_k=5, query_vector=unit(1, 0, 0, 0)))
    hits = index.search(query, top_k=5, query_vector=unit(1, 0, 0, 0), exclude=set(range(100, 160)))

    assert keys(hits) == [160]


def test_an_excluded_duplicate_does_not_hide_an_allowed_copy() -> None:
    """The older copy wins the tie between duplicates; when it is excluded, the newer one answers."""
    index = LocalIndex([1, 2, 3], ["Restart the worker pool.", "restart the worker pool.", "Disk full."])

    assert keys(index.search("restart worker pool", top_k=5)) == [1]
    assert keys(index.search("restart worker pool", top_k=5, exclude={1})) == [2]
    assert index.search("restart worker pool", top_k=5, exclude={1, 2}) == []


def test_exclude_works_on_keys_in_any_order_and_ignores_unknown_ones() -> None:
    texts = ["disk full on node a", "disk full on node b", "disk full on node c"]
    for order in ([30, 10, 20], [10, 20, 30]):
        index = LocalIndex(order, texts)
        allowed = set(order) - {20}
        assert set(keys(index.search("disk full", top_k=5, exclude={20, 99}))) == allowed
