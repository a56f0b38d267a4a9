"""The long evaluations (`manage.py eval_scenarios` over whole incident sets), each a
subprocess started in the background as soon as the session knows it will need it.

An evaluation takes minutes and uses one core; the rest of the suite mostly waits on sockets
and child processes. So ``tests/conftest.py`` starts every evaluation a collected test asks
for when collection ends, at the lowest CPU priority, and moves the tests that read them to
the end of the session, by which time the reports are written. A test run alone (or a
fixture asked for outside that hook) starts its evaluation on first use.

Each evaluation has its own VAR_DIR and scratch SQLite database; none touches the test
database or Redis. Each ends with the session: its environment names this process as the
stack to watch (``config.lifeline``), which every Django process it starts inherits, and the
kernel sends it SIGKILL if this process dies first.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chat.stack import lifeline_env, signalled_when_parent_exits

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
SHIPPED = ROOT / "knowledge" / "demo" / "scenarios"
REGRESSION = HERE / "regression_incidents" / "scenarios"
PUBLIC = HERE / "public_incidents"
#: the development set, then the held-out sets, each built after the run of the one before
PUBLIC_SETS = [
    PUBLIC / name / "scenarios"
    for name in ("dev", "heldout", "heldout2", "heldout3", "heldout4", "heldout5", "heldout6", "heldout7", "heldout8")
]

#: the longest any one evaluation may take, from its start
TIMEOUT_S = 1500


def _lowly_and_mortal() -> None:
    """In the child, before exec: the lowest CPU priority, and SIGKILL when the parent dies."""
    os.nice(19)
    signalled_when_parent_exits(signal.SIGKILL)


def scratch_env(var: Path, **overrides: str) -> dict[str, str]:
    """The command's environment, as an engineer runs it: offline models, lexical retrieval
    unless told otherwise, its own VAR_DIR and a SQLite database it never uses (the command
    evaluates on a scratch database of its own)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("LLM_", "OPENAI_", "EMBEDDINGS_", "EVIDENCE_", "SBA_EVAL"))
    }
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "config.test_settings",
            "DATABASE_URL": f"sqlite:///{var / 'unused.sqlite3'}",
            "VAR_DIR": str(var / "var"),
            "EMBEDDINGS_PROVIDER": "none",
            "LOG_LEVEL": "WARNING",
            **lifeline_env(),
            **overrides,
        }
    )
    return env


@dataclass
class Evaluation:
    """One ``eval_scenarios --json`` run, read by the tests that ask for ``fixture``."""

    fixture: str
    args: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)
    _process: subprocess.Popen[bytes] | None = None
    _folder: Path | None = None

    def start(self) -> None:
        if self._process is not None:
            return
        self._folder = Path(tempfile.mkdtemp(prefix=f"sba-{self.fixture}-"))
        with (self._folder / "stdout").open("wb") as out, (self._folder / "stderr").open("wb") as err:
            self._process = subprocess.Popen(
                [sys.executable, str(ROOT / "manage.py"), "eval_scenarios", "--json", *self.args],
                cwd=ROOT,
                env=scratch_env(self._folder, **self.env),
                stdout=out,
                stderr=err,
                preexec_fn=_lowly_and_mortal,
            )

    def report(self) -> tuple[int, dict[str, Any], str]:
        """The exit status, the JSON report and the end of stderr, once the run is over."""
        self.start()
        assert self._process is not None and self._folder is not None
        self._process.wait(timeout=TIMEOUT_S)
        stdout = (self._folder / "stdout").read_text(encoding="utf-8")
        stderr = (self._folder / "stderr").read_text(encoding="utf-8", errors="replace")[-2000:]
        assert stdout.strip(), stderr
        return self._process.returncode, json.loads(stdout), stderr

    def stop(self) -> None:
        """End the run if it is still going, and remove what it wrote."""
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait()
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)


EVALUATIONS = {
    e.fixture: e
    for e in (
        Evaluation("demo_report_local", (), {"EMBEDDINGS_PROVIDER": "local"}),
        Evaluation("demo_report_lexical", ()),
        Evaluation("regression_report", (str(REGRESSION),)),
        Evaluation("public_report", tuple(map(str, PUBLIC_SETS))),
        Evaluation("shared_report", ("--shared", *map(str, [SHIPPED, REGRESSION, *PUBLIC_SETS]))),
    )
}
