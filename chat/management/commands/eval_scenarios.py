"""``manage.py eval_scenarios [PATH...] [--json]``: how well do diagnoses come out?

Runs scenario files (see ``knowledge/scenarios.py`` and the README) through the real chain, as
the composition root builds it,
and prints, per scenario and overall: root cause hit, outcome, citation validity, tool calls,
tokens and time. Exits non-zero when a scenario misses.

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

from knowledge.scenarios import SHIPPED_SCENARIOS, ScenarioError, ScenarioResult, find_scenarios, run_scenario

SCRATCH_FLAG = "SBA_EVAL_SCRATCH"


def _row(r: ScenarioResult) -> str:
    mark = "PASS" if r.passed else "FAIL"
    hit = "yes" if r.root_cause_hit else "no"
    return (
        f"{mark}  {r.scenario.name:<34} root cause hit: {hit:<3}  outcome: {r.outcome:<9} "
        f"citations: {r.citations_valid}/{r.citations}  tool calls: {r.tool_calls} "
        f"({', '.join(r.tools_called) or '-'})  tokens: {r.tokens}  time: {r.seconds * 1000:.0f} ms"
    )


class Command(BaseCommand):
    help = "Evaluate diagnoses on scenario files (default: the shipped demo scenarios)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("paths", nargs="*", metavar="PATH", help="scenario files or folders")
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
        results = []
        for scenario in scenarios:
            result = run_scenario(scenario, execute=execute, embedder=embedder())
            results.append(result)
            if not options["json"]:
                self.stdout.write(_row(result))
                for problem in result.problems:
                    self.stdout.write(f"      - {problem}")
                if result.root_cause:
                    self.stdout.write(f"      root cause: {result.root_cause}")
        self._summary(results, as_json=options["json"])
        if not all(r.passed for r in results):
            raise CommandError(f"{sum(not r.passed for r in results)} of {len(results)} scenarios missed")

    def _summary(self, results: list[ScenarioResult], *, as_json: bool) -> None:
        passed = sum(r.passed for r in results)
        hits = sum(r.root_cause_hit for r in results)
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
                    },
                    ensure_ascii=False,
                    indent=2,
                )
            )
            return
        self.stdout.write(
            f"\n{passed}/{len(results)} scenarios passed; root cause hit {hits}/{len(results)}; "
            f"citations valid {valid}/{citations}; tokens {sum(r.tokens for r in results)}; "
            f"median time {statistics.median(seconds) * 1000:.0f} ms"
        )

    def _in_scratch_database(self, paths: list[Path], options: dict[str, Any]) -> None:
        scratch = Path(settings.VAR_DIR) / "eval" / f"eval-{uuid.uuid4().hex[:8]}.sqlite3"
        scratch.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, SCRATCH_FLAG: "1", "DATABASE_URL": f"sqlite:///{scratch}"}
        if options["verbosity"] < 2:
            env["LOG_LEVEL"] = "WARNING"  # the results, not the index builds
        manage = [sys.executable, str(Path(settings.BASE_DIR) / "manage.py")]
        try:
            subprocess.run([*manage, "migrate", "--verbosity", "0"], env=env, check=True)  # noqa: S603
            command = [*manage, "eval_scenarios", *map(str, paths)] + (["--json"] if options["json"] else [])
            status = subprocess.run(command, env=env, check=False).returncode  # noqa: S603
        finally:
            for suffix in ("", "-wal", "-shm", "-journal"):
                Path(f"{scratch}{suffix}").unlink(missing_ok=True)
        if status:
            raise SystemExit(status)
