"""Embeddings: the local all-MiniLM-L6-v2 model (the ONNX graph against a plain float64
evaluation of the checkpoint, shape, unit length, determinism, batch and padding independence,
meaning, truncation), the OpenAI-compatible embedder against the local protocol stub with the real
``openai`` client, configuration, and the byte form of a vector."""

from __future__ import annotations

import socket

import numpy as np
import numpy.typing as npt
import pytest

from knowledge.embeddings import (
    EmbeddingUnavailable,
    MiniLMEmbedder,
    OpenAIEmbedder,
    bundled_model_dir,
    embedder_from_config,
    from_bytes,
    to_bytes,
)
from tests.knowledge.bert_reference import pooled
from tests.openai_stub import OpenAIStub, StubReply, embeddings

API_KEY = "sk-test-4f9c2e-very-secret"


@pytest.fixture(scope="module")
def minilm() -> MiniLMEmbedder:
    return MiniLMEmbedder()


def cos(a: npt.NDArray[np.float32], b: npt.NDArray[np.float32]) -> float:
    return float(np.dot(a, b) / (np.linalg.norm(a) * np.linalg.norm(b)))


# --- the local model ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "The disk is full.",
        "数据库连接池耗尽，支付请求超时",
        "HikariPool-1 - Connection is not available, request timed out after 30000ms (pool=payments)",
        "",
    ],
)
def test_the_onnx_graph_computes_what_the_checkpoint_defines(minilm: MiniLMEmbedder, text: str) -> None:
    ids = minilm._tokenizer.encode(text).ids
    reference = pooled(bundled_model_dir(), ids)

    got = minilm.embed([text])[0]

    assert cos(got, reference.astype(np.float32)) > 0.99999


def test_minilm_gives_384_dimensional_float32_unit_vectors(minilm: MiniLMEmbedder) -> None:
    vectors = minilm.embed(["The disk is full.", "数据库连接池耗尽", ""])

    assert vectors.shape == (3, 384)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert minilm.dimension == 384
    assert minilm.name.startswith("local:")


def test_minilm_is_deterministic_on_one_machine_and_thread_count(minilm: MiniLMEmbedder) -> None:
    texts = ["Connection pool exhausted.", "Requests time out after 30 seconds."]

    np.testing.assert_array_equal(minilm.embed(texts), minilm.embed(texts))


def test_the_thread_count_changes_the_vectors_by_float32_rounding_at_most(minilm: MiniLMEmbedder) -> None:
    """What is guaranteed across thread counts and CPUs: not the same bits (onnxruntime's kernels
    sum in an order of their own), but the same vectors within 1e-5 per component. A cosine that
    close to ``KNOWLEDGE_MIN_COSINE`` may grade either way on another machine."""
    texts = ["Connection pool exhausted.", "数据库连接池耗尽", "Disk full on node 7 after the log rotation failed."]

    one = MiniLMEmbedder(threads=1).embed(texts)

    np.testing.assert_allclose(one, minilm.embed(texts), atol=1e-5)
    assert min(cos(a, b) for a, b in zip(one, minilm.embed(texts), strict=True)) > 0.99999


def test_the_order_of_a_batch_does_not_change_the_vectors(minilm: MiniLMEmbedder) -> None:
    a, b = "Disk full on node 7.", "The worker was killed by the OOM killer after its memory grew for hours."

    forward = minilm.embed([a, b])
    backward = minilm.embed([b, a])

    np.testing.assert_allclose(forward, backward[::-1], atol=1e-5)


def test_padding_next_to_a_long_text_does_not_change_a_short_one(minilm: MiniLMEmbedder) -> None:
    short = "Disk full."
    long = " ".join(f"line {i}: the storage controller reported a latency spike on volume {i}." for i in range(14))

    alone = minilm.embed([short])[0]
    batched = minilm.embed([long, short, "medium length sentence about caches"])

    assert cos(alone, batched[1]) > 0.99999
    assert cos(minilm.embed([long])[0], batched[0]) > 0.99999


def test_close_meanings_are_closer_than_unrelated_ones(minilm: MiniLMEmbedder) -> None:
    disk, no_space, cat = minilm.embed(
        ["The disk is full.", "There is no space left on the storage device.", "A cat sleeps on the sofa."]
    )

    assert cos(disk, no_space) > cos(disk, cat) + 0.2


def test_no_texts_give_no_rows(minilm: MiniLMEmbedder) -> None:
    vectors = minilm.embed([])

    assert vectors.shape == (0, 384)
    assert vectors.dtype == np.float32


def test_a_very_long_text_is_truncated_to_the_model_window(minilm: MiniLMEmbedder) -> None:
    head = "alpha beta gamma delta " * 200  # far beyond 256 tokens
    long, longer = minilm.embed([head, head + "a completely different ending about payroll " * 50])

    assert minilm.max_tokens == 256
    np.testing.assert_allclose(long, longer, atol=1e-5)  # only the first 256 tokens count
    assert np.linalg.norm(long) == pytest.approx(1.0, abs=1e-5)


# --- an OpenAI-compatible endpoint --------------------------------------------------------


def remote(stub: OpenAIStub, *, dimension: int = 3, batch_size: int = 64) -> OpenAIEmbedder:
    return OpenAIEmbedder(
        base_url=stub.base_url,
        api_key=API_KEY,
        model="text-embed-test",
        dimension=dimension,
        timeout_s=5.0,
        max_retries=0,
        batch_size=batch_size,
    )


def test_remote_vectors_are_normalised_and_the_key_is_a_bearer_header(stub: OpenAIStub) -> None:
    stub.queue(embeddings([[3.0, 4.0, 0.0], [0.0, 0.0, 2.0]]))

    vectors = remote(stub).embed(["disk full", "pool exhausted"])

    assert vectors.dtype == np.float32
    np.testing.assert_allclose(vectors, [[0.6, 0.8, 0.0], [0.0, 0.0, 1.0]], atol=1e-6)
    assert stub.requests[0]["path"] == "/v1/embeddings"
    assert stub.requests[0]["json"] == {
        "model": "text-embed-test",
        "input": ["disk full", "pool exhausted"],
        "encoding_format": "float",
    }
    assert stub.headers[0]["authorization"] == f"Bearer {API_KEY}"


def test_remote_batches_are_split_and_reassembled_in_order(stub: OpenAIStub) -> None:
    texts = [f"text {i}" for i in range(5)]
    basis = np.eye(5, dtype=np.float32).tolist()
    # every reply lists its items in reverse; only their index says which input they belong to
    stub.queue(
        embeddings([basis[0], basis[1]], order=[1, 0]),
        embeddings([basis[2], basis[3]], order=[1, 0]),
        embeddings([basis[4]]),
    )

    vectors = remote(stub, dimension=5, batch_size=2).embed(texts)

    assert [r["json"]["input"] for r in stub.requests] == [texts[0:2], texts[2:4], texts[4:]]
    np.testing.assert_array_equal(vectors, np.eye(5, dtype=np.float32))


def test_no_texts_make_no_request(stub: OpenAIStub) -> None:
    vectors = remote(stub).embed([])

    assert vectors.shape == (0, 3)
    assert stub.requests == []


@pytest.mark.parametrize(
    "reply",
    [
        embeddings([[1.0, 0.0], [0.0, 1.0]]),  # two dimensions, three expected
        embeddings([[1.0, 0.0, 0.0]]),  # one vector for two texts
    ],
    ids=["wrong-dimension", "missing-vector"],
)
def test_a_reply_of_the_wrong_shape_makes_the_embedder_unavailable(stub: OpenAIStub, reply: StubReply) -> None:
    stub.queue(reply)

    with pytest.raises(EmbeddingUnavailable, match="unexpected shape"):
        remote(stub).embed(["a", "b"])


def test_a_server_error_makes_the_embedder_unavailable_without_leaking_the_key(stub: OpenAIStub) -> None:
    stub.queue(StubReply(500, {"error": {"message": f"internal error for key {API_KEY}"}}))

    with pytest.raises(EmbeddingUnavailable) as caught:
        remote(stub).embed(["a"])

    assert "InternalServerError" in str(caught.value)
    assert API_KEY not in str(caught.value) and API_KEY not in repr(caught.value)
    assert len(stub.requests) == 1  # max_retries=0: asked once


def test_a_refused_key_makes_the_embedder_unavailable_without_leaking_it(stub: OpenAIStub) -> None:
    stub.queue(StubReply(401, {"error": {"message": f"Incorrect API key provided: {API_KEY}"}}))

    with pytest.raises(EmbeddingUnavailable) as caught:
        remote(stub).embed(["a"])

    assert "AuthenticationError" in str(caught.value)
    assert API_KEY not in str(caught.value)


def test_an_unreachable_endpoint_makes_the_embedder_unavailable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again before the request: nothing listens there
    embedder = OpenAIEmbedder(
        base_url=f"http://127.0.0.1:{port}/v1", api_key=API_KEY, model="m", dimension=3, timeout_s=2.0, max_retries=0
    )

    with pytest.raises(EmbeddingUnavailable, match="APIConnectionError"):
        embedder.embed(["a"])


# --- from settings ------------------------------------------------------------------------

OPENAI_CONFIG = {
    "PROVIDER": "openai",
    "MODEL_DIR": "",
    "BASE_URL": "http://127.0.0.1:9/v1",
    "API_KEY": API_KEY,
    "MODEL": "text-embed-test",
    "DIMENSION": 8,
    "TIMEOUT_S": 3.0,
}


def test_provider_none_means_no_embedder() -> None:
    assert embedder_from_config({"PROVIDER": "none"}) is None


def test_provider_local_loads_the_bundled_model_once() -> None:
    first = embedder_from_config({"PROVIDER": "local", "MODEL_DIR": ""})
    second = embedder_from_config({"PROVIDER": "local", "MODEL_DIR": ""})

    assert isinstance(first, MiniLMEmbedder)
    assert first is second
    assert first.dimension == 384


def test_provider_openai_builds_an_openai_embedder() -> None:
    embedder = embedder_from_config(OPENAI_CONFIG)

    assert isinstance(embedder, OpenAIEmbedder)
    assert embedder.dimension == 8
    assert embedder.name == "openai-compatible:text-embed-test"


@pytest.mark.parametrize(
    ("setting", "empty"),
    [("BASE_URL", ""), ("API_KEY", ""), ("MODEL", ""), ("DIMENSION", 0)],
)
def test_provider_openai_names_the_missing_settings(setting: str, empty: object) -> None:
    with pytest.raises(EmbeddingUnavailable) as caught:
        embedder_from_config({**OPENAI_CONFIG, setting: empty})

    assert f"EMBEDDINGS_{setting}" in str(caught.value)
    assert API_KEY not in str(caught.value)


def test_an_unknown_provider_is_refused_by_name() -> None:
    with pytest.raises(EmbeddingUnavailable, match=r"unknown EMBEDDINGS_PROVIDER 'cohere'"):
        embedder_from_config({"PROVIDER": "cohere"})


# --- bytes --------------------------------------------------------------------------------


def test_a_vector_survives_the_round_trip_through_bytes() -> None:
    vector = np.asarray([0.25, -1.5, 3.0e-8, 7.0], dtype=np.float32)

    blob = to_bytes(vector)
    back = from_bytes(blob, 4)

    assert len(blob) == 16
    assert blob[:4] == np.float32(0.25).astype("<f4").tobytes()  # little-endian whatever the machine
    assert back is not None and back.dtype == np.float32
    np.testing.assert_array_equal(back, vector)
    back_from_view = from_bytes(memoryview(blob), 4)
    assert back_from_view is not None
    np.testing.assert_array_equal(back_from_view, vector)


def test_a_float64_vector_is_stored_as_float32() -> None:
    assert len(to_bytes(np.asarray([1.0, 2.0], dtype=np.float64))) == 8


@pytest.mark.parametrize("dimension", [3, 5, 384])
def test_bytes_of_another_dimension_read_as_none(dimension: int) -> None:
    assert from_bytes(to_bytes(np.zeros(4, dtype=np.float32)), dimension) is None
    assert from_bytes(b"", dimension) is None
