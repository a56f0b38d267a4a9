"""How much time the harness itself adds to a diagnosis run and to a tool call.

Runs the full DIAGNOSIS chain (router → agent with tools → evidence guard → semantic guard →
release) with the offline analyst and in-memory adapters, many times, and reports median and
p95 of:

- per run: wall time minus the time spent inside the model (the offline analyst's own thinking
  is the model's time, not the harness's). The evidence backends answer from a cache, so their
  near-zero cost stays inside the figure: nothing that is harness work can be subtracted away.
- per tool call: ToolBoundary.invoke (id, budget, validation, timeout wrapper, canonical store,
  projection, audit) minus the backend's own time, replaying the tool calls of a real run with
  their real results.

    python -m bench.harness_bench [--runs 300] [--rounds 500]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from harness.application import ChatApplication, ChatRequest
from harness.audit import Audit
from harness.context import SYSTEM_CLOCK, RunContext
from harness.examples import payment_incident
from harness.inmemory import InMemoryAudit, InMemoryInvocationStore, InMemoryRunStore, RecordingObserver
from harness.llm.base import Models, ToolCall
from harness.llm.offline import OfflineAnalyst
from harness.ports import KnowledgeResult, LogQuery, LogResult, SqlResult
from harness.tools.boundary import ToolBoundary
from harness.tools.evidence import lookup_knowledge_tool, query_logs_tool, query_mysql_tool
from harness.tools.projection import dumps_json
from harness.tools.spec import ToolOutput

TARGET_RUN_MS = 5.0
TARGET_CALL_MS = 0.2


class _Cached:
    """Answers a backend's repeated queries from memory, so backend time is ~0."""

    def __init__(self, inner: Any, method: str) -> None:
        self._call: Callable[..., Any] = getattr(inner, method)
        self._cache: dict[str, Any] = {}
        self._inner = inner

    def _get(self, *args: Any, **kwargs: Any) -> Any:
        key = repr((args, sorted(kwargs.items())))
        if key not in self._cache:
            self._cache[key] = self._call(*args, **kwargs)
        return self._cache[key]


class CachedKnowledge(_Cached):
    def search(self, query: str, top_k: int) -> KnowledgeResult:
        result: KnowledgeResult = self._get(query, top_k)
        return result


class CachedLogs(_Cached):
    def query(self, query: LogQuery) -> LogResult:
        result: LogResult = self._get(query)
        return result


class CachedSql(_Cached):
    def tables(self) -> Any:
        return self._inner.tables()

    def execute(self, sql: str, *, timeout_s: float) -> SqlResult:
        result: SqlResult = self._get(sql, timeout_s=60.0)
        return result


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def bench_runs(runs: int) -> dict[str, Any]:
    incident = payment_incident()
    analyst = OfflineAnalyst()
    app = ChatApplication(
        models=Models.single(analyst),
        run_store=InMemoryRunStore(),
        invocations=InMemoryInvocationStore(),
        audit=InMemoryAudit().sinks(),
        tools=[
            lookup_knowledge_tool(CachedKnowledge(incident.knowledge, "search")),
            query_logs_tool(CachedLogs(incident.logs, "query")),
            query_mysql_tool(CachedSql(incident.sql, "execute")),
        ],
        runbooks=incident.runbooks,
    )
    harness_ms, wall_ms, model_ms, calls = [], [], [], []
    for i in range(runs + 20):
        started = time.perf_counter()
        result = app.execute(ChatRequest(incident.question, "bench"), RecordingObserver())
        wall = (time.perf_counter() - started) * 1000.0
        if result.outcome.value != "success":
            raise SystemExit(f"benchmark run ended {result.outcome.value}: {result.fallback_reason or result.failure}")
        if i >= 20:  # warm-up excluded
            wall_ms.append(wall)
            model_ms.append(result.model_ms)
            harness_ms.append(wall - result.model_ms)
            calls.append(result.usage.tool_calls)
    return {
        "runs": runs,
        "tool_calls_per_run": statistics.median(calls),
        "harness_ms_median": statistics.median(harness_ms),
        "harness_ms_p95": percentile(harness_ms, 0.95),
        "wall_ms_median": statistics.median(wall_ms),
        "model_ms_median": statistics.median(model_ms),
    }


def _instant(output: ToolOutput) -> Callable[[Any, float], ToolOutput]:
    def handler(_args: Any, _timeout_s: float) -> ToolOutput:
        return output

    return handler


def bench_tool_calls(rounds: int) -> dict[str, Any]:
    """Replay every tool call of a real diagnosis run through a fresh boundary, many times.

    The backends answer instantly with the very raw results the run got, so what is measured
    is the boundary's own work on realistic payloads (the knowledge lookups, the broad WARN log
    query with its templates, the change-table SELECT).
    """
    incident = payment_incident()
    recorder = InMemoryInvocationStore()
    app = ChatApplication(
        models=Models.single(OfflineAnalyst()),
        run_store=InMemoryRunStore(),
        invocations=recorder,
        audit=InMemoryAudit().sinks(),
        tools=incident.tools(),
        runbooks=incident.runbooks,
    )
    app.execute(ChatRequest(incident.question, "bench"), RecordingObserver())
    recorded = [inv for inv in recorder.items.values() if inv.status.value == "ready"]
    specs = {s.name: s for s in incident.tools()}
    replays = []
    for inv in recorded:
        spec = replace(specs[inv.tool], handler=_instant(ToolOutput(inv.raw_result, inv.evidence_status or "ok")))
        replays.append((spec, json.dumps(inv.request["arguments"]), len(dumps_json(inv.raw_result))))

    per_tool: dict[str, list[float]] = {}
    overhead: list[float] = []
    for round_ in range(rounds + 20):
        for spec, arguments, _size in replays:
            ctx = RunContext("bench", deadline_s=3_600)
            audit = Audit(InMemoryAudit().sinks(), run_id="bench", clock=SYSTEM_CLOCK)
            boundary = ToolBoundary(ctx=ctx, specs=[spec], store=InMemoryInvocationStore(), audit=audit)
            (call,) = boundary.issue([ToolCall("", spec.name, arguments)])
            started = time.perf_counter()
            observation = boundary.invoke(call)
            elapsed = time.perf_counter() - started
            if observation.status.value != "ready":
                raise SystemExit(f"benchmark tool call {spec.name} failed")
            if round_ >= 20:
                ms = (elapsed - ctx.backend_time_s) * 1000.0
                overhead.append(ms)
                per_tool.setdefault(spec.name, []).append(ms)
    return {
        "calls": len(overhead),
        "mix": [(spec.name, size) for spec, _, size in replays],
        "overhead_ms_median": statistics.median(overhead),
        "overhead_ms_p95": percentile(overhead, 0.95),
        "per_tool": {name: (statistics.median(v), percentile(v, 0.95)) for name, v in per_tool.items()},
    }


def _in_fresh_process(part: str, count: int) -> dict[str, Any]:
    """Each part runs in its own interpreter, so one's garbage never taxes the other's timing."""
    out = subprocess.run(
        [sys.executable, "-m", "bench.harness_bench", "--part", part, "--count", str(count)],
        check=True,
        capture_output=True,
        text=True,
    )
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=500, help="replays of the run's tool calls")
    parser.add_argument("--part", choices=("runs", "tools"), help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.part:
        part = bench_runs(args.count) if args.part == "runs" else bench_tool_calls(args.count)
        print(json.dumps(part))
        return 0
    run = _in_fresh_process("runs", args.runs)
    tool = _in_fresh_process("tools", args.rounds)
    ok_run = run["harness_ms_median"] <= TARGET_RUN_MS
    ok_call = tool["overhead_ms_median"] <= TARGET_CALL_MS
    print("harness benchmark — DIAGNOSIS chain, offline analyst, in-memory adapters")
    print(f"  per run ({run['runs']} runs, {run['tool_calls_per_run']:.0f} tool calls each; model time excluded)")
    print(
        f"    harness   median {run['harness_ms_median']:7.3f} ms   p95 {run['harness_ms_p95']:7.3f} ms"
        f"   target ≤ {TARGET_RUN_MS} ms  {'OK' if ok_run else 'MISSED'}"
    )
    print(f"    analyst   median {run['model_ms_median']:7.3f} ms   the offline analyst's own time per diagnosis")
    print(f"    (wall     median {run['wall_ms_median']:7.3f} ms: harness and analyst)")
    sizes = ", ".join(f"{name} {size / 1000:.1f} kB" for name, size in tool["mix"])
    print(
        f"  per tool call ({tool['calls']} calls replaying the run's {len(tool['mix'])}: {sizes}; backend time excluded)"
    )
    print(
        f"    boundary  median {tool['overhead_ms_median']:7.3f} ms   p95 {tool['overhead_ms_p95']:7.3f} ms"
        f"   target ≤ {TARGET_CALL_MS} ms  {'OK' if ok_call else 'MISSED'}"
    )
    for name, (median, p95) in sorted(tool["per_tool"].items()):
        print(f"      {name:17s} median {median:7.3f} ms   p95 {p95:7.3f} ms")
    return 0 if ok_run and ok_call else 1


if __name__ == "__main__":
    raise SystemExit(main())
