"""Whose eyes the current code reads the knowledge base with.

Documents uploaded by a non-staff key are visible only to their uploader until staff approve
them, so what a search returns depends on who asks. The agent's ``lookup_knowledge`` tool is
built once per process and called deep inside the harness, which knows nothing of users; the
viewer therefore travels in a context variable, bound where the asker is known: around a run's
execution (its owner) and around a search request (the caller). As with the run id
(``core.logcontext``), the harness's tool boundary submits backends to its pool in a copy of the
caller's context, so the binding reaches the backend's thread.

With nothing bound (a management command, the scenario evaluator), a search sees approved
documents only: fail closed.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Viewer:
    """Who reads: a user id (None: nobody in particular) and whether they read as staff."""

    user_id: int | None
    is_staff: bool = False

    @classmethod
    def of(cls, user: Any) -> Viewer:
        """The viewer a request's authenticated user reads as (anonymous: nobody)."""
        if not getattr(user, "is_authenticated", False):
            return cls(None)
        return cls(int(user.pk), is_staff=bool(user.is_staff))


_VIEWER: contextvars.ContextVar[Viewer | None] = contextvars.ContextVar("viewer", default=None)


def current_viewer() -> Viewer | None:
    """The viewer bound in this context, if any."""
    return _VIEWER.get()


@contextmanager
def viewer_bound(viewer: Viewer | None) -> Iterator[None]:
    """Bind ``viewer`` for the code inside the block (None: nobody), then restore what was bound."""
    token = _VIEWER.set(viewer)
    try:
        yield
    finally:
        _VIEWER.reset(token)
