"""``make help`` shows each target's description as a reader needs it: ``$PORT``, not the
``$$PORT`` the Makefile has to write."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest

from tests.config.test_startup import ROOT

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def _help() -> list[str]:
    result = subprocess.run(
        ["make", "--no-print-directory", "help"], cwd=ROOT, capture_output=True, text=True, timeout=30, check=False
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def test_make_help_prints_dollar_variables_as_the_shell_sees_them() -> None:
    serve = next(line for line in _help() if line.split()[:2] == ["make", "serve"])
    assert "$PORT" in serve
    assert "$$" not in serve


def test_make_help_lists_every_described_target() -> None:
    described = re.findall(r"^([a-z-]+):.*## ", (ROOT / "Makefile").read_text(), flags=re.MULTILINE)
    listed = [line.split()[1] for line in _help()]
    assert listed == described
    assert {"setup", "demo", "serve", "test", "check", "bench"} <= set(listed)
    assert all("$$" not in line for line in _help())
