"""A process started by the service's stack ends when the stack does, however the stack ended.

``chat.stack.Stack`` names itself in ``SBA_STACK_PID`` for its children. Each child that loads
this project (web workers, Celery workers) waits, in a daemon thread, on a pidfd of that process
(Linux 5.3+; the kernel says when it exits, even by SIGKILL) and then stops itself the way its
operator would: SIGTERM, so a worker finishes or hands back its run, and after a grace period
an unconditional exit. A leftover worker would otherwise keep consuming the queue — running
another deployment's tasks against the wrong database.
"""

from __future__ import annotations

import os
import select
import signal
import threading

ENV = "SBA_STACK_PID"
#: how long a process may take to stop on SIGTERM before it is ended outright
GRACE_S = 20.0

_started = False


def hold() -> None:
    """Watch the stack that started this process, if one did (once per process)."""
    global _started
    pid = os.environ.get(ENV)
    if _started or not pid or not pid.isdigit():
        return
    _started = True
    try:
        fd = os.pidfd_open(int(pid))
    except ProcessLookupError:  # the stack is already gone
        _stop()
        return
    except OSError:  # no pidfd here (old kernel, not Linux): the stack's own stop() must do
        return
    threading.Thread(target=_wait, args=(fd,), name="lifeline", daemon=True).start()


def _wait(fd: int) -> None:
    select.select([fd], [], [])  # readable once the process has exited
    _stop()


def _stop() -> None:
    timer = threading.Timer(GRACE_S, os._exit, args=(1,))
    timer.daemon = True
    timer.start()
    os.kill(os.getpid(), signal.SIGTERM)
