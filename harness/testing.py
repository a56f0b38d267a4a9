"""Helpers that only tests use.

Production code never imports this module (``tests/harness/test_architecture.py`` checks it):
the in-memory adapters that the example incident, the scenario evaluator and the benchmark run
on are :mod:`harness.inmemory`, and the scripted model is :mod:`harness.llm.scripted`.
"""

from __future__ import annotations

from harness.context import CancelReason

__all__ = ["ManualCancelSignal"]


class ManualCancelSignal:
    """A :class:`~harness.ports.CancelSignal` that a test sets by hand (``signal.reason = …``)."""

    def __init__(self) -> None:
        self.reason: CancelReason | None = None

    def requested(self) -> CancelReason | None:
        return self.reason
