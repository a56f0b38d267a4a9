"""What the Prometheus metrics cost a run, and what a scrape costs.

A run's metrics are written by ``chat.metrics`` into memory-mapped files (multiprocess mode):
one ``run_finished`` at its end, one observation per model step and per tool call, the
in-progress gauge up and down. This replays exactly the step and tool records of real offline
runs (a DIAGNOSIS and a SYSTEM_CHAT, recorded once with in-memory adapters) through
``MeteredAuditSinks`` in front of a sink that keeps nothing, and subtracts the same replay
without the meter: what is left is the metrics' own work per run. Then it times one scrape of
the files ``processes`` processes would leave (the broker's queue depth excluded).

    python -m bench.metrics_bench [--runs 20000] [--processes 8]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from typing import Any


def _setup(directory: str) -> None:
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = directory
    os.environ.setdefault("VAR_DIR", tempfile.mkdtemp(prefix="sba-metrics-bench-var-"))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    import django

    django.setup()


class _Discard:
    def record_step(self, record: Any) -> None:
        pass

    def record_tool(self, record: Any) -> None:
        pass


def _recorded(question: str) -> tuple[list[Any], list[Any], Any]:
    """The step and tool records of one offline run of ``question``, and its result."""
    from harness.application import ChatApplication, ChatRequest
    from harness.examples import payment_incident
    from harness.inmemory import InMemoryAudit, InMemoryInvocationStore, InMemoryRunStore, RecordingObserver
    from harness.llm.base import Models
    from harness.llm.offline import OfflineAnalyst

    incident = payment_incident()
    audit = InMemoryAudit()
    app = ChatApplication(
        models=Models.single(OfflineAnalyst()),
        run_store=InMemoryRunStore(),
        invocations=InMemoryInvocationStore(),
        audit=audit.sinks(),
        tools=incident.tools(),
        runbooks=incident.runbooks,
    )
    result = app.execute(ChatRequest(question, "bench"), RecordingObserver())
    return list(audit.steps), list(audit.tools), result


def _per_run_us(replay: Callable[[], None], runs: int) -> float:
    """Median of 7 rounds of ``runs`` replays, per replay, in microseconds of this process's CPU
    time (on shared cores, wall time would measure the neighbours too)."""
    rounds = []
    for _ in range(7):
        started = time.process_time()
        for _ in range(runs):
            replay()
        rounds.append((time.process_time() - started) / runs * 1e6)
    return statistics.median(rounds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20_000)
    parser.add_argument("--processes", type=int, default=8)
    args = parser.parse_args()
    directory = tempfile.mkdtemp(prefix="sba-metrics-bench-")
    _setup(directory)

    from chat import metrics
    from traces.lifecycle import EndCause, RunEnded
    from traces.models import Outcome, RunStatus

    providers = {"router": "offline", "agent": "offline", "guard": "offline"}
    tools = ["lookup_knowledge", "query_logs", "query_mysql"]
    metered = metrics.MeteredAuditSinks(_Discard(), providers=providers, tools=tools)
    bare = _Discard()
    print(f"metrics per run, multiprocess files in a temporary directory ({args.runs} runs x 7 rounds, CPU, median)")
    for label, question in (
        ("DIAGNOSIS", "Payments are timing out since 10:00, please investigate"),
        ("SYSTEM_CHAT", "hello, what can you do?"),
    ):
        steps, calls, result = _recorded(question)
        ended = RunEnded(
            uuid.uuid4(), RunStatus.COMPLETED, Outcome.SUCCESS, None, "", "", EndCause.HARNESS,
            intent=result.intent or "", duration_ms=result.duration_ms,
        )  # fmt: skip

        def with_metrics(steps: list[Any] = steps, calls: list[Any] = calls, ended: RunEnded = ended) -> None:
            with metrics.RUNS_EXECUTING.track_inprogress():
                for step in steps:
                    metered.record_step(step)
                for call in calls:
                    metered.record_tool(call)
                metrics.run_finished(ended)

        def without(steps: list[Any] = steps, calls: list[Any] = calls) -> None:
            for step in steps:
                bare.record_step(step)
            for call in calls:
                bare.record_tool(call)

        with_us, without_us = _per_run_us(with_metrics, args.runs), _per_run_us(without, args.runs)
        writes = 2 + 2 * (len(steps) + len(calls)) + 1 + (2 if ended.duration_ms is not None else 0)
        print(
            f"  {label:<12} {len(steps)} model steps, {len(calls)} tool calls, {writes} mmap writes: "
            f"{with_us - without_us:.1f} µs per run"
        )

    from prometheus_client import CollectorRegistry, generate_latest, multiprocess

    # What ``processes`` processes leave: copies of this one's files under other pids.
    for name in os.listdir(directory):
        kind = name.rpartition("_")[0]
        for fake in range(1, args.processes):
            shutil.copy(os.path.join(directory, name), os.path.join(directory, f"{kind}_{10_000_000 + fake}.db"))
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=directory)  # type: ignore[no-untyped-call]
    timings = []
    for _ in range(50):
        started = time.process_time()
        text = generate_latest(registry)
        timings.append((time.process_time() - started) * 1000)
    print(
        f"scrape of {len(os.listdir(directory))} files from {args.processes} processes: "
        f"{statistics.median(timings):.2f} ms CPU median, {len(text)} bytes"
    )
    shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
