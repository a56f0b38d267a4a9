"""onnxruntime sessions as the knowledge app runs them: CPU only, a bounded thread count, and
threads that sleep between calls instead of spinning, so the service's other processes keep the
cores while no embedding or scan is running."""

from __future__ import annotations

from typing import Any

#: the ONNX operator set and IR version of the graphs built here (onnxruntime 1.16 and newer)
OPSET, IR_VERSION = 18, 9


def inference_session(model: bytes, *, threads: int = 0) -> Any:
    """A session for a serialised ONNX model; ``threads`` 0 means one per core."""
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = max(threads, 0)
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.log_severity_level = 3  # errors only
    return onnxruntime.InferenceSession(model, options, providers=["CPUExecutionProvider"])
