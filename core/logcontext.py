"""Which run the current code works for, so that every log line can say so.

A worker binds the run it executes (``run_bound``); the logging filter (``config.logging``) reads
it for each record. A context variable follows the code into whatever it calls, also across
``await``; a thread pool does not inherit it, so work handed to one must be submitted in a copy
of the caller's context (``contextvars.copy_context().run``), as the harness's tool boundary does.
"""

from __future__ import annotations

import contextvars
import functools
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")

_RUN_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar("run_id", default=None)


def current_run_id() -> str | None:
    """The run bound in this context, if any."""
    return _RUN_ID.get()


@contextmanager
def run_bound(run_id: str | uuid.UUID | None) -> Iterator[None]:
    """Bind ``run_id`` for the code inside the block (None: no run), then restore what was bound."""
    token = _RUN_ID.set(str(run_id) if run_id is not None else None)
    try:
        yield
    finally:
        _RUN_ID.reset(token)


def bind_run(run_id: str | uuid.UUID) -> None:
    """Bind ``run_id`` until the enclosing ``run_bound`` block ends (a request, a task)."""
    _RUN_ID.set(str(run_id))


def binds_run(function: Callable[P, R]) -> Callable[P, R]:
    """Run ``function`` with its ``run_id`` keyword argument bound (a task's body)."""

    @functools.wraps(function)
    def bound(*args: P.args, **kwargs: P.kwargs) -> R:
        run_id: Any = kwargs.get("run_id")
        with run_bound(run_id):
            return function(*args, **kwargs)

    return bound
