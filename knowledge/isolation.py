"""Extracting and chunking a document in a child process, under limits the kernel enforces.

Parsing an upload is the one place where a stranger's bytes decide how long we compute and how
much memory we take: a PDF whose streams inflate to gigabytes, markup nested thousands deep, a
pathological line. The parsers are not ours, so no limit inside them can be trusted to hold.
:func:`prepare` therefore runs ``extract`` and ``chunk_text`` in a fresh Python process
(``python -m knowledge.isolation``) that

- is killed at a wall-clock deadline (``KNOWLEDGE_EXTRACT_TIMEOUT_S``), whatever it is doing;
- cannot map more than ``KNOWLEDGE_EXTRACT_MAX_MEMORY_MB`` (``RLIMIT_AS``: an allocation past it
  fails, and the child reports it), nor use more CPU time than the deadline (``RLIMIT_CPU``:
  a backstop should the parent itself be gone);
- ends with the process that started it (``PR_SET_PDEATHSIG``, Linux).

Whatever goes wrong comes back as an :class:`ExtractionError` with a stable code. The child's
stderr is discarded: a parser's warnings and tracebacks carry the document's content.

No Django here: the child imports this module, and it must start fast.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from knowledge.chunking import ChunkLimits, TextChunk, chunk_text
from knowledge.extract import ExtractionError, extract
from knowledge.failures import DocumentFailure

ROOT = Path(__file__).resolve().parent.parent
#: the child's exit status when an allocation failed (nothing can be written by then)
EXIT_OUT_OF_MEMORY = 3
#: what the child is allowed besides the deadline before RLIMIT_CPU stops it
CPU_GRACE_S = 5
MIN_MEMORY_BYTES = 128 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class ExtractLimits:
    """How long and how much memory extracting and chunking one document may take."""

    timeout_s: float = 60.0
    memory_bytes: int = 1024 * 1024 * 1024

    def __post_init__(self) -> None:
        if not self.timeout_s > 0 or self.memory_bytes < MIN_MEMORY_BYTES:
            raise ValueError(f"the extraction limits need a timeout > 0 and at least {MIN_MEMORY_BYTES >> 20} MiB")


@dataclass(frozen=True, slots=True)
class Prepared:
    """A document's title and text (empty title for stored text) and its chunks."""

    title: str
    text: str
    chunks: list[TextChunk]


def prepare(
    *, filename: str, data: bytes | None, text: str | None, chunk_limits: ChunkLimits, limits: ExtractLimits
) -> Prepared:
    """Extract ``data`` (named ``filename``), or take ``text`` as it is, and chunk it, in a
    child process under ``limits``. Raises :class:`ExtractionError`."""
    header = {
        "filename": filename,
        "mode": "file" if data is not None else "text",
        "chunk": [chunk_limits.max_chars, chunk_limits.max_tokens, chunk_limits.overlap_chars],
        "memory_bytes": limits.memory_bytes,
        "cpu_s": int(limits.timeout_s) + CPU_GRACE_S,
        "parent": os.getpid(),
    }
    payload = data if data is not None else (text or "").encode("utf-8")
    request = json.dumps(header).encode() + b"\n" + payload
    try:
        done = subprocess.run(
            [sys.executable, "-E", "-s", "-m", "knowledge.isolation"],
            input=request,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=ROOT,
            timeout=limits.timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:  # run() has killed and reaped the child
        raise ExtractionError(
            DocumentFailure.EXTRACTION_TIMEOUT, f"reading the file took longer than {limits.timeout_s:g} s"
        ) from None
    return _result(done.returncode, done.stdout, limits)


def _result(returncode: int, stdout: bytes, limits: ExtractLimits) -> Prepared:
    if returncode == -signal.SIGXCPU:  # RLIMIT_CPU
        raise ExtractionError(
            DocumentFailure.EXTRACTION_TIMEOUT, f"reading the file took longer than {limits.timeout_s:g} s"
        )
    if returncode == EXIT_OUT_OF_MEMORY:
        raise ExtractionError(
            DocumentFailure.EXTRACTION_MEMORY, f"reading the file needs more than {limits.memory_bytes >> 20} MiB"
        )
    try:
        answer = json.loads(stdout) if returncode == 0 else None
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        raise ExtractionError(DocumentFailure.EXTRACTION_FAILED, "the file could not be read")
    if "error" in answer:
        error = answer["error"]
        raise ExtractionError(DocumentFailure(error["code"]), str(error["reason"]))
    ok = answer["ok"]
    chunks = [TextChunk(i, str(path), str(body)) for i, (path, body) in enumerate(ok["chunks"])]
    return Prepared(title=str(ok["title"]), text=str(ok["text"]), chunks=chunks)


# --- the child ------------------------------------------------------------------------------


def _confine(memory_bytes: int, cpu_s: int, parent: int) -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
    if sys.platform == "linux":
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)
    if os.getppid() != parent:  # the parent died before the line above
        os._exit(1)


def _work(header: dict[str, Any], payload: bytes) -> dict[str, Any]:
    limits = ChunkLimits(*header["chunk"])
    if header["mode"] == "file":
        extracted = extract(header["filename"], payload)
        title, text = extracted.title, extracted.text
    else:
        title, text = "", payload.decode("utf-8")
    if not text:
        raise ExtractionError(DocumentFailure.NO_TEXT, "the document has no text to index")
    chunks = [[c.heading_path, c.text] for c in chunk_text(text, limits)]
    return {"ok": {"title": title, "text": text, "chunks": chunks}}


def main() -> None:
    request = sys.stdin.buffer.read()
    line, _, payload = request.partition(b"\n")
    header = json.loads(line)
    _confine(int(header["memory_bytes"]), int(header["cpu_s"]), int(header["parent"]))
    try:
        try:
            answer = _work(header, payload)
        except ExtractionError as exc:
            answer = {"error": {"code": str(exc.code), "reason": exc.reason}}
        except RecursionError:
            answer = {"error": {"code": str(DocumentFailure.EXTRACTION_FAILED), "reason": "the file nests too deep"}}
        del payload, request
        out = json.dumps(answer, ensure_ascii=False).encode()
        sys.stdout.buffer.write(out)
        sys.stdout.buffer.flush()
    except MemoryError:
        os._exit(EXIT_OUT_OF_MEMORY)


if __name__ == "__main__":
    main()
