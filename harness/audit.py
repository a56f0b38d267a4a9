"""Fail-open audit: step, tool and reasoning records and the run timeline.

Audit is a record of what happened, not the evidence itself (that is the canonical invocation
store, which fails closed). A broken audit sink is logged and otherwise ignored, so a full disk
on the trace database never changes what a run publishes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from harness.ports import (
    Clock,
    ReasoningAuditSink,
    ReasoningRecord,
    Scalar,
    StepAuditSink,
    StepRecord,
    TimelineCategory,
    TimelineEvent,
    TimelineSink,
    ToolAuditRecord,
    ToolAuditSink,
)

logger = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class AuditSinks:
    steps: StepAuditSink
    tools: ToolAuditSink
    timeline: TimelineSink
    reasoning: ReasoningAuditSink


class Audit:
    """The audit sinks of one run, each call isolated from failures."""

    def __init__(self, sinks: AuditSinks, *, run_id: str, clock: Clock) -> None:
        self._sinks = sinks
        self._run_id = run_id
        self._clock = clock

    def step(self, record: StepRecord) -> None:
        self._guard("steps", self._sinks.steps.record_step, record)

    def tool(self, record: ToolAuditRecord) -> None:
        self._guard("tools", self._sinks.tools.record_tool, record)

    def reasoning(self, record: ReasoningRecord) -> None:
        self._guard("reasoning", self._sinks.reasoning.record_reasoning, record)

    def event(self, category: TimelineCategory, name: str, **details: Scalar) -> None:
        event = TimelineEvent(self._run_id, category, name, self._clock.now(), details)
        self._guard("timeline", self._sinks.timeline.append, event)

    def _guard(self, sink: str, write: Callable[[T], None], record: T) -> None:
        try:
            write(record)
        except Exception as exc:  # noqa: BLE001 - fail-open by design
            logger.warning("audit sink %s failed for run %s: %s", sink, self._run_id, type(exc).__name__)
