"""A run's waterfall: where its time went, as bars on one time axis from the run's creation.

Built from what the run stored — its row (created, started, finished), its steps and tool
calls (each with the offset at which it began, in ms since the harness started the run), its
timeline (the checks and the release, as instants) and its webhook attempts. Rows written
before steps and tool calls recorded their offsets are laid out one after another instead.
Nothing here reads a prompt, a model's text or a tool's payload.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

#: The kinds a bar can be, each with its own colour in the console.
QUEUE, ROUTING, MODEL, TOOL, CHECK, RELEASE, WEBHOOK = (
    "queue",
    "routing",
    "model",
    "tool",
    "check",
    "release",
    "webhook",
)

#: Timeline events drawn as the phases between two model steps: the name, what it is called in
#: the console, and its kind.
PHASES = {
    "routing.routed": ("routing", ROUTING),
    "evidence.checked": ("evidence check", CHECK),
    "evidence.rechecked": ("evidence re-check", CHECK),
    "semantic.reviewed": ("semantic review", CHECK),
    "knowledge.answer_verified": ("answer check", CHECK),
    "knowledge.answer_rejected": ("answer check", CHECK),
    "run.finished": ("release", RELEASE),
}
FAILED_STATUSES = {"failed", "timeout", "refused", "cancelled", "error", "rejected"}


@dataclass(frozen=True, slots=True)
class Bar:
    label: str
    kind: str
    start_ms: float
    duration_ms: float
    depth: int = 0
    failed: bool = False
    detail: str = ""
    #: the bar's place on the axis, in percent of the whole (set by ``lay_out``)
    left_pct: float = 0.0
    width_pct: float = 0.0

    @property
    def end_ms(self) -> float:
        return self.start_ms + self.duration_ms


@dataclass(frozen=True, slots=True)
class Waterfall:
    bars: tuple[Bar, ...]
    total_ms: float
    ticks: tuple[tuple[float, float], ...] = field(default=())  # (ms, percent)


def _ms(later: datetime.datetime | None, earlier: datetime.datetime | None) -> float | None:
    if later is None or earlier is None:
        return None
    return (later - earlier).total_seconds() * 1000.0


def _attr(row: Any, name: str) -> Any:
    return row[name] if isinstance(row, dict) else getattr(row, name)


def build(
    run: Any,
    steps: Sequence[Any],
    tools: Sequence[Any],
    timeline: Sequence[Any],
    attempts: Iterable[Any] = (),
) -> Waterfall:
    """The waterfall of ``run`` (a Run row) from its steps, tool calls, timeline events and
    webhook attempts (rows or dicts with the models' field names)."""
    bars: list[Bar] = []
    origin = run.created_at
    started = _ms(run.started_at, origin)
    if started is not None:
        bars.append(Bar("queue wait", QUEUE, 0.0, max(started, 0.0)))
    harness_at = started or 0.0
    by_step: dict[int | None, list[Any]] = {}
    for tool in tools:
        by_step.setdefault(_attr(tool, "step_index"), []).append(tool)
    cursor = harness_at
    for step in sorted(steps, key=lambda s: _attr(s, "index")):
        offset = _attr(step, "started_ms")
        start = harness_at + offset if offset is not None else cursor
        duration = float(_attr(step, "duration_ms"))
        tokens = _attr(step, "input_tokens") + _attr(step, "output_tokens")
        purpose = str(_attr(step, "purpose"))
        bars.append(
            Bar(
                f"step {_attr(step, 'index')} · {purpose.replace('_', ' ')}",
                ROUTING if purpose == "routing" else MODEL,
                start,
                duration,
                failed=bool(_attr(step, "error_code")),
                detail=f"{tokens} tokens" + (f" · {_attr(step, 'error_code')}" if _attr(step, "error_code") else ""),
            )
        )
        cursor = start + duration
        for tool in by_step.pop(_attr(step, "index"), []):
            cursor = _tool_bar(bars, tool, harness_at, cursor)
    for leftover in by_step.values():  # calls from rows that did not record their step
        for tool in leftover:
            cursor = _tool_bar(bars, tool, harness_at, cursor, depth=0)
    for event in timeline:
        phase = PHASES.get(str(_attr(event, "name")))
        at = _ms(_attr(event, "at"), run.started_at)
        if phase is None or at is None:
            continue
        label, kind = phase
        details = _attr(event, "details") or {}
        failed = (
            details.get("passed") is False
            or details.get("verdict") not in (None, "PASS")
            or details.get("outcome") in ("fallback", "failed", "cancelled")
        )
        bars.append(Bar(label, kind, harness_at + at, 0.0, failed=failed, detail=_phase_detail(details)))
    finished = _ms(run.finished_at, origin)
    for attempt in attempts:
        at = _ms(_attr(attempt, "started_at"), origin)
        if at is None:
            continue
        code = _attr(attempt, "status_code")
        error = _attr(attempt, "error")
        bars.append(
            Bar(
                f"webhook attempt {_attr(attempt, 'number')}",
                WEBHOOK,
                at,
                float(_attr(attempt, "duration_ms")),
                failed=bool(error) or not (code and 200 <= code < 300),
                detail=str(code or error or ""),
            )
        )
    ends = [b.end_ms for b in bars] + ([finished] if finished is not None else [])
    return lay_out(bars, max(ends, default=0.0))


def _tool_bar(bars: list[Bar], tool: Any, harness_at: float, cursor: float, depth: int = 1) -> float:
    offset = _attr(tool, "started_ms")
    start = harness_at + offset if offset is not None else cursor
    duration = float(_attr(tool, "duration_ms"))
    status = str(_attr(tool, "status"))
    error = _attr(tool, "error_code")
    bars.append(
        Bar(
            str(_attr(tool, "tool")),
            TOOL,
            start,
            duration,
            depth=depth,
            failed=status in FAILED_STATUSES or bool(error),
            detail=status + (f" · {error}" if error else ""),
        )
    )
    return max(cursor, start + duration) if offset is None else cursor


def _phase_detail(details: dict[str, Any]) -> str:
    if "verdict" in details:
        return str(details["verdict"])
    if "passed" in details:
        return "passed" if details["passed"] else f"failed: {details.get('codes') or ''}".rstrip(": ")
    if "intent" in details:
        return str(details["intent"])
    return str(details.get("outcome", ""))


def lay_out(bars: Sequence[Bar], total_ms: float) -> Waterfall:
    """Place each bar on the axis (percent of ``total_ms``), in start order; instants get a
    visible sliver."""
    total = max(total_ms, 1.0)
    placed = []
    for bar in sorted(bars, key=lambda b: (b.start_ms, b.depth)):
        left = min(max(bar.start_ms / total * 100.0, 0.0), 100.0)
        width = min(max(bar.duration_ms / total * 100.0, 0.4), 100.0 - left if left < 100.0 else 0.4)
        placed.append(
            Bar(bar.label, bar.kind, bar.start_ms, bar.duration_ms, bar.depth, bar.failed, bar.detail, left, width)
        )
    return Waterfall(tuple(placed), total, _ticks(total))


def _ticks(total_ms: float) -> tuple[tuple[float, float], ...]:
    """Four or five round times along the axis."""
    step = 1.0
    while total_ms / step > 5:
        for factor in (2, 2.5, 2):
            step *= factor
            if total_ms / step <= 5:
                break
    return tuple((t, t / total_ms * 100.0) for t in _range(step, total_ms))


def _range(step: float, end: float) -> list[float]:
    values, value = [], 0.0
    while value <= end:
        values.append(value)
        value += step
    return values


def format_ms(value: float | None) -> str:
    """``1467.11`` → ``1.47 s``; ``12.3`` → ``12 ms``; ``0.42`` → ``0.42 ms``."""
    if value is None:
        return "—"
    if value >= 1000.0:
        return f"{value / 1000.0:.2f} s"
    if value >= 10.0:
        return f"{value:.0f} ms"
    return f"{value:.2f} ms"
