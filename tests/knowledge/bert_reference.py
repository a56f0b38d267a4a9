"""A plain numpy evaluation of a BERT checkpoint with mean pooling: the reference the ONNX
graph of ``knowledge.embeddings`` is checked against. Slow and obvious on purpose."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import numpy.typing as npt
from safetensors.numpy import load_file

Array = npt.NDArray[np.float64]

_erf = np.frompyfunc(math.erf, 1, 1)


def _gelu(x: Array) -> Array:
    erf = np.asarray(_erf(x / math.sqrt(2.0)), dtype=np.float64)
    return 0.5 * x * (1.0 + erf)


def _layer_norm(x: Array, weight: Array, bias: Array, eps: float) -> Array:
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    out: Array = (x - mean) / np.sqrt(var + eps) * weight + bias
    return out


def pooled(model_dir: Path, ids: list[int]) -> Array:
    """The mean of the last hidden states of one unpadded token sequence, in float64."""
    config = json.loads((model_dir / "config.json").read_text())
    heads, eps = int(config["num_attention_heads"]), float(config.get("layer_norm_eps", 1e-12))
    raw = load_file(str(model_dir / "model.safetensors"))
    prefix = "bert." if "bert.embeddings.word_embeddings.weight" in raw else ""
    w = {name[len(prefix) :]: value.astype(np.float64) for name, value in raw.items() if name.startswith(prefix)}
    tokens = np.asarray(ids)
    x = (
        w["embeddings.word_embeddings.weight"][tokens]
        + w["embeddings.position_embeddings.weight"][: len(tokens)]
        + w["embeddings.token_type_embeddings.weight"][0]
    )
    x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], eps)
    head_dim = x.shape[1] // heads
    for i in range(int(config["num_hidden_layers"])):
        p = f"encoder.layer.{i}.attention."

        def dense(v: Array, name: str) -> Array:
            return v @ w[name + ".weight"].T + w[name + ".bias"]

        q, k, v = (dense(x, p + "self." + n).reshape(len(tokens), heads, head_dim) for n in ("query", "key", "value"))
        scores = np.einsum("qhd,khd->hqk", q, k) / math.sqrt(head_dim)
        scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
        scores /= scores.sum(axis=-1, keepdims=True)
        context = np.einsum("hqk,khd->qhd", scores, v).reshape(len(tokens), -1)
        x = _layer_norm(
            dense(context, p + "output.dense") + x,
            w[p + "output.LayerNorm.weight"],
            w[p + "output.LayerNorm.bias"],
            eps,
        )
        layer = f"encoder.layer.{i}."
        out = dense(_gelu(dense(x, layer + "intermediate.dense")), layer + "output.dense")
        x = _layer_norm(out + x, w[layer + "output.LayerNorm.weight"], w[layer + "output.LayerNorm.bias"], eps)
    result: Array = x.mean(axis=0)
    return result
