"""Progress bars: tqdm's on a terminal; plain lines in a log file or a pipe."""

from __future__ import annotations

import io
from pathlib import Path

from core.progress import ProgressBar
from tests.config.test_startup import manage


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_off_a_terminal_the_bar_is_plain_lines_at_start_and_end() -> None:
    out = io.StringIO()
    with ProgressBar(total=3_000_000, unit="B", unit_scale=True, desc="app.log", file=out, leave=False) as bar:
        for _ in range(3_000):
            bar.update(1_000)
    text = out.getvalue()
    assert "\r" not in text and "\x1b" not in text
    lines = text.splitlines()
    assert len(lines) == 2, lines  # updates within the interval print nothing more
    assert lines[0].startswith("app.log:   0%") and lines[1].startswith("app.log: 100%")


def test_off_a_terminal_an_iteration_without_a_total_ends_with_its_count() -> None:
    out = io.StringIO()
    for _ in ProgressBar(iter(range(7)), desc="documents", unit="file", file=out):
        pass
    assert out.getvalue().splitlines()[-1].startswith("documents: 7file")


def test_on_a_terminal_it_is_tqdm_s_bar() -> None:
    out = _Terminal()
    for _ in ProgressBar(range(3), desc="documents", file=out, leave=False):
        pass
    assert "\r" in out.getvalue()


def test_a_disabled_bar_prints_nothing() -> None:
    out = io.StringIO()
    for _ in ProgressBar(range(3), disable=True, file=out):
        pass
    assert out.getvalue() == ""


def test_ingest_docs_into_a_pipe_prints_plain_lines(tmp_path: Path) -> None:
    document = tmp_path / "runbook.md"
    document.write_text("# Payments\n\nRestart the pool when connections are exhausted.\n")
    result = manage("ingest_docs", str(document), var_dir=tmp_path / "var")
    assert result.returncode == 0, result.stderr
    # (read as text, a carriage return would show as a line break: an empty or blank line)
    lines = [line for line in result.stderr.splitlines() if not line.startswith("applied ")]
    assert [line.split("|")[0] for line in lines] == ["documents:   0%", "documents: 100%"], result.stderr
    assert "\x1b" not in result.stderr
