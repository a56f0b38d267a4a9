"""Extraction in a child process: the same result as in-process, and limits that hold whatever
the file does — stopped at the deadline, refused past the memory limit, every failure a code,
and no child left behind (not even when its parent is killed)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from knowledge.chunking import ChunkLimits, chunk_text
from knowledge.extract import ExtractionError, extract
from knowledge.failures import DocumentFailure
from knowledge.isolation import EXIT_OUT_OF_MEMORY, ROOT, ExtractLimits, _result, prepare

LIMITS = ChunkLimits(max_chars=400, max_tokens=80, overlap_chars=60)
RUNBOOK = (
    b"# Disk full runbook\n\n## Symptoms\n\nWrites fail with ENOSPC on the ledger volume. "
    + b"The ledger stops accepting postings. " * 20
    + b"\n\n## Remedy\n\nDelete rotated logs and grow the volume by 20 GiB.\n"
)
#: unclosed headings: linear now, but still seconds of parsing per megabyte
HOSTILE_HTML = b"<h1>x" * 400_000


def failure(**kwargs: object) -> ExtractionError:
    with pytest.raises(ExtractionError) as caught:
        prepare(**kwargs)  # type: ignore[arg-type]
    return caught.value


def test_a_file_comes_back_extracted_and_chunked_as_in_process() -> None:
    got = prepare(filename="disk.md", data=RUNBOOK, text=None, chunk_limits=LIMITS, limits=ExtractLimits())

    extracted = extract("disk.md", RUNBOOK)
    assert (got.title, got.text) == (extracted.title, extracted.text)
    assert got.chunks == chunk_text(extracted.text, LIMITS)
    assert len(got.chunks) > 2


def test_stored_text_is_chunked_as_it_is() -> None:
    text = "## Remedy\n\nGrow the volume — 扩容磁盘。"
    got = prepare(filename="disk.md", data=None, text=text, chunk_limits=LIMITS, limits=ExtractLimits())

    assert (got.title, got.text, got.chunks) == ("", text, chunk_text(text, LIMITS))


def test_a_refusal_keeps_its_code_and_reason() -> None:
    error = failure(filename="notes.txt", data=b"a\x00b", text=None, chunk_limits=LIMITS, limits=ExtractLimits())

    assert (error.code, error.reason) == (DocumentFailure.BINARY_CONTENT, "the file holds binary data, not text")


def test_a_file_that_takes_longer_than_the_deadline_is_stopped_at_it() -> None:
    limits = ExtractLimits(timeout_s=1.0)
    started = time.monotonic()
    error = failure(filename="nested.html", data=HOSTILE_HTML, text=None, chunk_limits=LIMITS, limits=limits)
    took = time.monotonic() - started

    assert error.code == DocumentFailure.EXTRACTION_TIMEOUT
    assert error.reason == "reading the file took longer than 1 s"
    assert took < 1.0 + 2.0  # the deadline, plus killing and reaping the child


def test_a_file_that_needs_more_memory_than_allowed_fails_with_the_code() -> None:
    limits = ExtractLimits(timeout_s=60, memory_bytes=192 * 1024 * 1024)
    data = b"<p>x</p>" * 600_000  # about 1 GB of parse tree

    error = failure(filename="flat.html", data=data, text=None, chunk_limits=LIMITS, limits=limits)

    assert error.code == DocumentFailure.EXTRACTION_MEMORY
    assert error.reason == "reading the file needs more than 192 MiB"


@pytest.mark.parametrize(
    ("returncode", "stdout", "code"),
    [
        (-signal.SIGXCPU, b"", DocumentFailure.EXTRACTION_TIMEOUT),
        (EXIT_OUT_OF_MEMORY, b"", DocumentFailure.EXTRACTION_MEMORY),
        (-signal.SIGSEGV, b"", DocumentFailure.EXTRACTION_FAILED),
        (1, b"Traceback (most recent call last): ...", DocumentFailure.EXTRACTION_FAILED),
        (0, b'{"ok": {"title"', DocumentFailure.EXTRACTION_FAILED),
        (0, b"[]", DocumentFailure.EXTRACTION_FAILED),
    ],
    ids=["cpu-limit", "out-of-memory", "crash", "exception", "cut-short", "not-an-answer"],
)
def test_a_child_that_does_not_answer_properly_is_a_failure_with_a_code(
    returncode: int, stdout: bytes, code: DocumentFailure
) -> None:
    with pytest.raises(ExtractionError) as caught:
        _result(returncode, stdout, ExtractLimits())
    assert caught.value.code == code
    assert "Traceback" not in caught.value.reason


@pytest.mark.parametrize("kwargs", [{"timeout_s": 0}, {"memory_bytes": 64 * 1024 * 1024}])
def test_limits_that_cannot_work_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="extraction limits"):
        ExtractLimits(**kwargs)  # type: ignore[arg-type]


def _children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except FileNotFoundError:
        return []


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


@pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG and /proc are Linux")
def test_the_child_ends_when_the_process_that_started_it_is_killed(tmp_path: Path) -> None:
    (tmp_path / "hostile.html").write_bytes(HOSTILE_HTML * 3)
    script = textwrap.dedent(
        f"""
        from pathlib import Path
        from knowledge.chunking import ChunkLimits
        from knowledge.isolation import ExtractLimits, prepare
        data = Path({str(tmp_path / "hostile.html")!r}).read_bytes()
        prepare(filename="h.html", data=data, text=None, chunk_limits=ChunkLimits(), limits=ExtractLimits(timeout_s=120))
        """
    )
    parent = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT)
    try:
        deadline = time.monotonic() + 30
        while not (children := _children(parent.pid)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert children, "the extraction child never started"
        child = children[0]
        time.sleep(0.3)  # past its start-up, into the parsing
        assert _alive(child)
    finally:
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
    deadline = time.monotonic() + 10
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child)
