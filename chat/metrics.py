"""The service's Prometheus metrics, and the hooks that record them.

Every process records into its own memory-mapped files under ``PROMETHEUS_MULTIPROC_DIR``
(``settings.METRICS_DIR``, exported by the settings before this module imports the client);
``/metrics`` (``chat.scrape``) adds them up. Where the numbers come from:

- a run's end: ``run_finished``, one of the run lifecycle's post-terminal hooks, so each run
  is counted once, in whichever process ended it (worker, web, sweeper);
- model and tool calls: ``MeteredAuditSinks``, in front of the audit sinks the harness writes
  its step and tool records to;
- webhook attempts: ``webhook_attempted``, where each attempt is recorded.

Labels are bounded and carry nothing private: enums, configured tool and model names, codes.
Never a run id, a question, a tool argument or a name a model made up.
"""

from __future__ import annotations

import atexit
import functools
import logging
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from django.core.exceptions import ImproperlyConfigured

from harness.ports import StepAuditSink, StepRecord, ToolAuditRecord, ToolAuditSink
from harness.routing import Intent
from traces.lifecycle import EndCause, RunEnded

if "PROMETHEUS_MULTIPROC_DIR" not in os.environ:  # the settings export it; without it each process counts alone
    raise ImproperlyConfigured("PROMETHEUS_MULTIPROC_DIR must be set before chat.metrics is imported")

from prometheus_client import Counter, Gauge, Histogram, multiprocess

logger = logging.getLogger(__name__)

PREFIX = "superbizagent"
#: a label value that is not a plain code (``[a-z0-9_-]``) is reported as this
OTHER = "other"
#: the intent label of a run that ended before it was routed
NO_INTENT = "none"
_INTENTS = frozenset(i.value for i in Intent)

# Offline runs take milliseconds, runs on a provider seconds, up to the 120 s deadline.
_RUN_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, float("inf"))
_MODEL_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, float("inf"))
_TOOL_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 15, 30, float("inf"))

# registry=None: these are read from the files, never from this process's default registry.
RUNS_FINISHED = Counter(
    f"{PREFIX}_runs_finished",
    "Runs that reached a terminal state, by intent, status, outcome and what ended them.",
    ["intent", "status", "outcome", "cause"],
    registry=None,
)
RUN_DURATION = Histogram(
    f"{PREFIX}_run_duration_seconds",
    "Time the harness took for a run it ended (routing, tools, models, guards, release).",
    ["intent", "outcome"],
    buckets=_RUN_BUCKETS,
    registry=None,
)
RUNS_SWEPT = Counter(
    f"{PREFIX}_runs_swept",
    "Runs the stale-run sweep ended because their worker was lost, by the state they were in.",
    ["stage", "code"],
    registry=None,
)
RUNS_EXECUTING = Gauge(
    f"{PREFIX}_run_tasks_in_progress",
    "Run tasks the workers are executing right now.",
    registry=None,
    multiprocess_mode="livesum",
)
MODEL_CALL_DURATION = Histogram(
    f"{PREFIX}_model_call_duration_seconds",
    "Model calls, by role, purpose, provider, model and status (ok or the harness's error code).",
    ["role", "purpose", "provider", "model", "status"],
    buckets=_MODEL_BUCKETS,
    registry=None,
)
TOOL_CALL_DURATION = Histogram(
    f"{PREFIX}_tool_call_duration_seconds",
    "Tool calls, by tool and invocation status.",
    ["tool", "status"],
    buckets=_TOOL_BUCKETS,
    registry=None,
)
WEBHOOK_ATTEMPTS = Counter(
    f"{PREFIX}_webhook_attempts",
    "Webhook delivery attempts, by result (succeeded, retry, gone, failed).",
    ["result"],
    registry=None,
)

_CODE = re.compile(r"[a-z0-9_-]{1,64}")


class _Children:
    """A metric's labelled children, looked up in a plain dict: ``labels()`` checks and converts
    its arguments on every call, which costs more than the observation itself. The label values
    are bounded, so the dict is too."""

    def __init__(self, metric: Any) -> None:
        self._labels = metric.labels
        self._children: dict[tuple[str, ...], Any] = {}

    def __call__(self, *values: str) -> Any:
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = self._labels(*values)
        return child


_runs_finished = _Children(RUNS_FINISHED)
_run_duration = _Children(RUN_DURATION)
_runs_swept = _Children(RUNS_SWEPT)
_model_call = _Children(MODEL_CALL_DURATION)
_tool_call = _Children(TOOL_CALL_DURATION)
_webhook_attempts = _Children(WEBHOOK_ATTEMPTS)


@functools.lru_cache(maxsize=1024)  # the same few codes, over and over
def code(value: str | None, default: str = "") -> str:
    """``value`` as a label value if it is a plain code, else ``other``."""
    if not value:
        return default or OTHER
    return value if _CODE.fullmatch(value) else OTHER


# --- a run's end -----------------------------------------------------------------------------


def run_finished(ended: RunEnded) -> None:
    """The lifecycle hook: count the run by how it ended, and how long the harness took."""
    intent = ended.intent if ended.intent in _INTENTS else (NO_INTENT if not ended.intent else OTHER)
    _runs_finished(intent, ended.status.value, ended.outcome.value, ended.cause.value).inc()
    if ended.duration_ms is not None:
        _run_duration(intent, ended.outcome.value).observe(ended.duration_ms / 1000.0)
    if ended.cause in (EndCause.WORKER_LOST, EndCause.QUEUE_LOST):
        _runs_swept(ended.previous.value, code(ended.failure_code)).inc()


# --- model and tool calls ----------------------------------------------------------------------


class StoredAuditSink(StepAuditSink, ToolAuditSink, Protocol):
    """Where the step and tool records are kept (the trace database's sinks)."""


class MeteredAuditSinks:
    """The step and tool audit sinks, each record also observed as a latency.

    ``providers`` names the provider answering each role (``chat.wiring.providers``: ``offline``
    or ``openai-compatible:<model>``); ``tools`` the configured tools: a call of any other name
    (a model may ask for a tool that does not exist) is labelled ``unknown``.
    """

    def __init__(self, stored: StoredAuditSink, *, providers: Mapping[str, str], tools: Iterable[str]) -> None:
        self._stored = stored
        self._tools = frozenset(tools)
        self._providers: dict[str, tuple[str, str]] = {}
        for role, named in providers.items():
            provider, _, model = named.partition(":")
            self._providers[role] = (code(provider), _model_label(model or provider))

    def record_step(self, record: StepRecord) -> None:
        self._stored.record_step(record)
        try:
            provider, model = self._providers.get(record.role, (OTHER, OTHER))
            _model_call(
                code(record.role), code(record.purpose), provider, model, code(record.error_code, "ok")
            ).observe(record.duration_ms / 1000.0)
        except Exception as exc:  # noqa: BLE001 - a metric never costs a record
            logger.debug("model call metric failed: %s", type(exc).__name__)

    def record_tool(self, record: ToolAuditRecord) -> None:
        self._stored.record_tool(record)
        try:
            tool = record.tool if record.tool in self._tools else "unknown"
            _tool_call(tool, record.status.value).observe(record.duration_ms / 1000.0)
        except Exception as exc:  # noqa: BLE001 - a metric never costs a record
            logger.debug("tool call metric failed: %s", type(exc).__name__)


def _model_label(model: str) -> str:
    """A configured model name (``gpt-4o-mini``, ``deepseek-chat``): kept if it is plain."""
    return model if re.fullmatch(r"[A-Za-z0-9._:/-]{1,80}", model) else OTHER


# --- webhooks ----------------------------------------------------------------------------------


def webhook_attempted(result: str) -> None:
    try:
        _webhook_attempts(code(result)).inc()
    except Exception as exc:  # noqa: BLE001 - a metric never costs a delivery
        logger.debug("webhook metric failed: %s", type(exc).__name__)


# --- processes ---------------------------------------------------------------------------------


def process_exited(pid: int | None = None) -> None:
    """Drop a finished process's live gauges (its counters stay: they only ever add up)."""
    try:
        multiprocess.mark_process_dead(pid if pid is not None else os.getpid())  # type: ignore[no-untyped-call]
    except OSError as exc:  # the directory went away first (a test's, a wiped one)
        logger.debug("metrics: mark_process_dead failed: %s", type(exc).__name__)


# Every process that can record anything imports this module: it marks itself dead on a normal
# exit (web workers, solo Celery workers, commands). Pool children are marked by config.celery.
atexit.register(process_exited)
