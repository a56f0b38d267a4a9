"""The stack's supervision: a child that dies is started again, one that keeps dying is not."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from chat.stack import Stack


def test_a_dead_child_is_restarted_and_one_that_keeps_dying_stops_the_supervisor(tmp_path: Path) -> None:
    stack = Stack(log_dir=tmp_path, max_restarts=2)
    stack._spawn("sleeper", ["sleep", "60"])
    stack._spawn("crasher", ["false"])
    try:
        first = stack.processes["sleeper"].pid
        os.kill(first, signal.SIGKILL)
        stack.processes["sleeper"].wait()
        stack.processes["crasher"].wait()

        restarted = dict(stack.restart_dead())

        assert restarted == {"sleeper": -signal.SIGKILL, "crasher": 1}
        assert stack.processes["sleeper"].pid != first and stack.processes["sleeper"].poll() is None
        stack.processes["crasher"].wait()
        assert dict(stack.restart_dead()) == {"crasher": 1}
        stack.processes["crasher"].wait()
        with pytest.raises(RuntimeError, match="crasher exited 3 times"):
            stack.restart_dead()
    finally:
        stack.stop(timeout_s=2)


def test_nothing_is_restarted_once_the_stack_is_stopping(tmp_path: Path) -> None:
    stack = Stack(log_dir=tmp_path)
    stack._spawn("sleeper", ["sleep", "60"])
    stack.stop(timeout_s=2)
    assert stack.restart_dead() == [] and stack.processes == {}
