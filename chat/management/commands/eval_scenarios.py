"""``manage.py eval_scenarios [PATH...] [--shared] [--json]``: how well do diagnoses come out?

Runs scenario files (see ``knowledge/scenarios.py`` and the README) through the real chain, as
the composition root builds it, and prints, per scenario and overall: root cause hit (or, where
the evidence shows no cause, a correct fallback), outcome, citation validity, tool calls, tokens
and time. Exits non-zero when a scenario misses. Each scenario runs on its own evidence, or with
``--shared`` on the evidence of all of them loaded together.

It never touches the service's data: it re-runs itself against a scratch SQLite database that
is created for the evaluation and deleted after it.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from chat.stack import lifeline_env
from knowledge.scenarios import (
    SHIPPED_SCENARIOS,
    ScenarioError,
    ScenarioResult,
    find_scenarios,
    run_scenario,
    run_shared,
)

SCRATCH_FLAG = "SBA_EVAL_SCRATCH"


def _row(r: ScenarioResult) -> str:
    mark = "PASS" if r.passed else "FAIL"
    if r.scenario.expect.outcome == "fallback":
        scored = f"correct fallback: {'yes' if r.fallback_correct else 'no'}"
    else:
        scored = f"root cause hit: {'yes' if r.root_cause_hit else 'no'}"
    return (
        f"{mark}  {r.scenario.name:<34} {scored:<21}  outcome: {r.outcome:<9} "
        f"citations: {r.citations_valid}/{r.citations}  tool calls: {r.tool_calls} "
        f"({', '.join(r.tools_called) or '-'})  tokens: {r.tokens}  time: {r.seconds * 1000:.0f} ms"
    )


class Command(BaseCommand):
    help = "Evaluate diagnoses on scenario files (default: the shipped demo scenarios)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("paths", nargs="*", metavar="PATH", help="scenario files or folders")
        parser.add_argument(
            "--shared",
            action="store_true",
            help="load every scenario's evidence into one database, then ask each question over all of it",
        )
        parser.add_argument("--json", action="store_true", help="print the results as JSON")

    def handle(self, *args: Any, **options: Any) -> None:
        paths = [Path(p).resolve() for p in options["paths"]] or [SHIPPED_SCENARIOS]
        try:  # checked before anything is set up, so a bad file fails fast
            scenarios = find_scenarios(paths)
        except ScenarioError as exc:
            raise CommandError(str(exc)) from None
        if not scenarios:
            raise CommandError("no scenario files found")
        if os.environ.get(SCRATCH_FLAG) != "1":
            self._in_scratch_database(paths, options)
            return
        from chat.wiring import scenario_executor
        from knowledge.backends import embedder

        execute = scenario_executor()

        def show(result: ScenarioResult) -> None:
            if options["json"]:
                return
            self.stdout.write(_row(result))
            for problem in result.problems:
                self.stdout.write(f"      - {problem}")
            if result.root_cause:
                self.stdout.write(f"      root cause: {result.root_cause}")

        if options["shared"]:
            if not options["json"]:
                self.stdout.write(f"one database holds the evidence of all {len(scenarios)} scenarios")
            results = run_shared(scenarios, execute=execute, embedder=embedder(), on_result=show)
        else:
            results = []
            for scenario in scenarios:
                results.append(run_scenario(scenario, execute=execute, embedder=embedder()))
                show(results[-1])
        self._summary(results, as_json=options["json"], shared=options["shared"])
        if not all(r.passed for r in results):
            raise CommandError(f"{sum(not r.passed for r in results)} of {len(results)} scenarios missed")

    def _summary(self, results: list[ScenarioResult], *, as_json: bool, shared: bool) -> None:
        passed = sum(r.passed for r in results)
        diagnosable = sum(r.scenario.expect.outcome == "diagnosed" for r in results)
        hits = sum(r.root_cause_hit for r in results)
        fallbacks = len(results) - diagnosable
        correct_fallbacks = sum(r.fallback_correct for r in results)
        citations = sum(r.citations for r in results)
        valid = sum(r.citations_valid for r in results)
        seconds = [r.seconds for r in results]
        if as_json:
            self.stdout.write(
                json.dumps(
                    {
                        "scenarios": [
                            {
                                "name": r.scenario.name,
                                "passed": r.passed,
                                "root_cause_hit": r.root_cause_hit,
                                "fallback_correct": r.fallback_correct,
                                "outcome": r.outcome,
                                "expected_outcome": r.scenario.expect.outcome,
                                "root_cause": r.root_cause,
                                "fallback_reason": r.fallback_reason,
                                "citations": r.citations,
                                "citations_valid": r.citations_valid,
                                "tools_called": r.tools_called,
                                "tool_calls": r.tool_calls,
                                "tokens": r.tokens,
                                "ms": round(r.seconds * 1000, 1),
                                "problems": r.problems,
                            }
                            for r in results
                        ],
                        "passed": passed,
                        "total": len(results),
                        "shared": shared,
                        "root_cause_hits": hits,
                        "diagnosable": diagnosable,
                        "correct_fallbacks": correct_fallbacks,
                        "fallbacks_expected": fallbacks,
                    },
                    ensure_ascii=False,
                    indent=2,
                )
            )
            return
        self.stdout.write(
            f"\n{passed}/{len(results)} scenarios passed; root cause hit {hits}/{diagnosable}; "
            f"correct fallback {correct_fallbacks}/{fallbacks}; "
            f"citations valid {valid}/{citations}; tokens {sum(r.tokens for r in results)}; "
            f"median time {statistics.median(seconds) * 1000:.0f} ms"
        )

    def _in_scratch_database(self, paths: list[Path], options: dict[str, Any]) -> None:
        scratch = Path(settings.VAR_DIR) / "eval" / f"eval-{uuid.uuid4().hex[:8]}.sqlite3"
        scratch.parent.mkdir(parents=True, exist_ok=True)
        # the child watches this process (config.lifeline): it ends with it, even on SIGKILL
        env = {**os.environ, SCRATCH_FLAG: "1", "DATABASE_URL": f"sqlite:///{scratch}", **lifeline_env()}
        if options["verbosity"] < 2:
            env["LOG_LEVEL"] = "WARNING"  # the results, not the index builds
        manage = [sys.executable, str(Path(settings.BASE_DIR) / "manage.py")]
        try:
            subprocess.run([*manage, "migrate", "--verbosity", "0"], env=env, check=True)  # noqa: S603
            flags = [f"--{name}" for name in ("shared", "json") if options[name]]
            command = [*manage, "eval_scenarios", *map(str, paths), *flags]
            status = subprocess.run(command, env=env, check=False).returncode  # noqa: S603
        finally:
            for suffix in ("", "-wal", "-shm", "-journal"):
                Path(f"{scratch}{suffix}").unlink(missing_ok=True)
        if status:
            raise SystemExit(status)
