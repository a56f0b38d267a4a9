"""RunScope: the per-run collaborators handed to executors and the agent."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from harness.audit import Audit
from harness.context import RunContext
from harness.llm.call import ModelCaller
from harness.ports import InvocationStore, RunObserver, Scalar, Stage
from harness.tools.boundary import ToolBoundary

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RunScope:
    run_id: str
    ctx: RunContext
    caller: ModelCaller
    boundary: ToolBoundary
    invocations: InvocationStore
    audit: Audit
    observer: RunObserver

    def status(self, stage: Stage, detail: Mapping[str, Scalar] | None = None) -> None:
        report_status(self.observer, self.run_id, stage, detail)


def report_status(observer: RunObserver, run_id: str, stage: Stage, detail: Mapping[str, Scalar] | None = None) -> None:
    """Report progress. A broken observer never stops the run: the run row stays the truth."""
    try:
        observer.status(stage, detail)
    except Exception as exc:  # noqa: BLE001 - progress is best effort
        logger.warning("observer status failed for run %s: %s", run_id, type(exc).__name__)
