"""Progress bars for commands that take a while (``ingest_docs``, ``ingest_logs``, ``seed_demo``).

On a terminal, :class:`ProgressBar` is tqdm's bar. Written anywhere else (a log file, a pipe, a
CI job) a bar redrawn with carriage returns is one unreadable line, so there it prints a plain
line when it starts, at most one every :data:`PLAIN_INTERVAL_S` while it runs, and one when it
ends: tqdm's own text, with no carriage return or escape sequence.
"""

from __future__ import annotations

import sys
from typing import IO, Any

from tqdm import tqdm  # type: ignore[import-untyped]

__all__ = ["PLAIN_INTERVAL_S", "ProgressBar"]

#: seconds between two plain lines when the output is not a terminal
PLAIN_INTERVAL_S = 10.0


def _is_terminal(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or closed
        return False


class ProgressBar(tqdm):  # type: ignore[misc]
    """``tqdm(...)`` with the same arguments; plain lines when the output is not a terminal."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._plain = not _is_terminal(kwargs.get("file") or sys.stderr)
        if self._plain:
            kwargs.setdefault("mininterval", PLAIN_INTERVAL_S)
            kwargs.update(ascii=True, dynamic_ncols=False, ncols=kwargs.get("ncols") or 100, leave=False)
        super().__init__(*args, **kwargs)

    def display(self, msg: str | None = None, pos: int | None = None) -> bool:
        if not self._plain:
            return bool(super().display(msg, pos))
        # tqdm clears a finished bar with an empty message: a plain stream gets the final state
        self.fp.write(f"{msg or self}\n")
        self.fp.flush()
        # False: nothing to clear, so tqdm writes no carriage return after it
        return msg != ""
