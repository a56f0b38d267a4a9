"""Every process the stack starts ends with it, even when the stack is killed with SIGKILL:
children that load the project (web and Celery workers) through their lifeline, the others
(the web server's supervisor, redis-server) through the kernel's parent-death signal."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="pidfd and PR_SET_PDEATHSIG are Linux's")

# A stand-in for `serve`: a Stack whose children are a supervisor that starts a worker loading
# the project (as uvicorn's does) and a plain program; it prints every pid, then waits.
SUPERVISOR = (
    "import subprocess, sys, time\n"
    "worker = subprocess.Popen([sys.executable, '-c', 'import config, time; time.sleep(120)'])\n"
    "print(worker.pid, flush=True)\n"
    "time.sleep(120)\n"
)
PARENT = textwrap.dedent(
    f"""
    import subprocess, sys, time
    from chat.stack import Stack
    stack = Stack(quiet=False)
    stack._spawn("supervisor", [sys.executable, "-c", {SUPERVISOR!r}])
    stack._spawn("plain", ["sleep", "120"])
    print(" ".join(str(p.pid) for p in stack.processes.values()), flush=True)
    time.sleep(120)
    """
)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie has ended; it only waits to be reaped
        return stat.read().split(") ")[-1][0] != "Z"


def test_children_of_a_stack_killed_with_sigkill_end_too() -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        lines = [parent.stdout.readline(), parent.stdout.readline()]
        children = sorted({int(pid) for line in lines for pid in line.split()})
        assert len(children) == 3  # the supervisor, the plain program, the worker
        time.sleep(2)  # the worker has imported config and holds its lifeline
        assert all(alive(pid) for pid in children)

        parent.send_signal(signal.SIGKILL)
        parent.wait()

        deadline = time.monotonic() + 15
        while any(alive(pid) for pid in children) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert [pid for pid in children if alive(pid)] == []
    finally:
        parent.kill()
        for pid in children if "children" in locals() else []:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
