"""Evaluation scenarios: a question, the evidence to load, and what a good diagnosis contains.

A scenario file is YAML (paths are relative to the file)::

    name: payment-timeouts-pool                # optional; defaults to the file name
    question: Payments are timing out since about 10:00 — what is going on?
    evidence:
      documents: [docs/payment-service.md, docs/]      # files or folders (md, txt, html, pdf)
      logs: [logs/payment.jsonl]                       # anything ingest_logs reads
      tables: tables.yaml                              # business tables (see knowledge.fixtures); a list is merged
      runbooks: default                                # default (shipped), none, or a folder
    expect:
      outcome: diagnosed                 # or: fallback (the evidence does not show a cause)
      root_cause: [connection pool]      # every phrase must appear in the root cause
      tools: [query_logs, query_mysql]   # every tool must have been called

Each scenario runs alone (:func:`run_scenario`): the knowledge base, log store and runbooks of
the (scratch) database are emptied and loaded with its evidence through the same code paths as
document uploads and ``ingest_logs``; its tables go to a scratch SQLite file the agent reads
read-only. Then the question runs through the real chain (router, agent, tools, guards,
release), as the composition root builds it (``chat.wiring.scenario_executor``), and the result
is scored.

In a shared database (:func:`run_shared`) the evidence of every scenario is loaded once, into
one knowledge base, log store and business database, as a service that has seen all these
incidents holds it; then each question is asked over all of it. Each incident is the others'
noise, so evidence from another incident winning shows up here, and never alone.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from django.db import transaction

from harness.guards.quotes import EvidenceText
from harness.release import RunResult
from knowledge import services
from knowledge.embeddings import Embedder
from knowledge.extract import TYPES
from knowledge.fixtures import FixtureError, Table, merge, read_tables, write_tables
from knowledge.logs.ingest import ingest, log_files
from knowledge.models import Chunk, Document, LogEntry, LogFile, Runbook
from knowledge.runbooks import RUNBOOK_DIR, load_runbooks

SHIPPED_RUNBOOKS = Path(RUNBOOK_DIR)
#: the scenarios of the demo incident set
SHIPPED_SCENARIOS = Path(__file__).resolve().parent / "demo" / "scenarios"
OUTCOMES = ("diagnosed", "fallback")


class ScenarioError(ValueError):
    """A scenario file that cannot be used; the message says which and why."""


@dataclass(frozen=True)
class Expectation:
    outcome: str
    root_cause: tuple[str, ...] = ()
    tools: tuple[str, ...] = ()


@dataclass(frozen=True)
class Scenario:
    name: str
    path: Path
    question: str
    documents: tuple[Path, ...]
    logs: tuple[Path, ...]
    tables: tuple[Path, ...]
    runbooks: Path | None
    expect: Expectation


@dataclass
class ScenarioResult:
    scenario: Scenario
    outcome: str
    root_cause: str
    #: a diagnosis was expected, and the report's root cause holds every expected phrase
    root_cause_hit: bool
    citations: int
    citations_valid: int
    tools_called: list[str]
    tool_calls: int
    tools_missing: list[str]
    tokens: int
    seconds: float
    fallback_reason: str | None = None
    problems: list[str] = field(default_factory=list)
    #: a fallback was expected (the evidence shows no cause), and the run fell back
    fallback_correct: bool = False

    @property
    def passed(self) -> bool:
        return not self.problems


def _paths(base: Path, value: Any, what: str) -> tuple[Path, ...]:
    items = [value] if isinstance(value, str) else (value or [])
    if not isinstance(items, list) or not all(isinstance(i, str) for i in items):
        raise ScenarioError(f"evidence.{what} must be a path or a list of paths")
    out = []
    for item in items:
        path = (base / item).resolve()
        if not path.exists():
            raise ScenarioError(f"evidence.{what}: {item} does not exist")
        out.append(path)
    return tuple(out)


def load_scenario(path: Path) -> Scenario:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ScenarioError(f"{path}: cannot be read as YAML ({type(exc).__name__})") from None
    if not isinstance(data, dict) or not isinstance(data.get("question"), str) or not data["question"].strip():
        raise ScenarioError(f"{path}: needs a 'question'")
    base = path.parent
    evidence = data.get("evidence") or {}
    expect = data.get("expect") or {}
    if not isinstance(evidence, dict) or not isinstance(expect, dict):
        raise ScenarioError(f"{path}: 'evidence' and 'expect' must be mappings")
    outcome = expect.get("outcome", "diagnosed")
    if outcome not in OUTCOMES:
        raise ScenarioError(f"{path}: expect.outcome must be one of {', '.join(OUTCOMES)}")
    try:
        runbooks_value = evidence.get("runbooks", "default")
        if runbooks_value == "default":
            runbooks: Path | None = SHIPPED_RUNBOOKS
        elif runbooks_value in (None, "none"):
            runbooks = None
        else:
            runbooks = _paths(base, runbooks_value, "runbooks")[0]
        tables = _paths(base, evidence.get("tables"), "tables")
        return Scenario(
            name=str(data.get("name") or path.stem),
            path=path,
            question=data["question"].strip(),
            documents=_paths(base, evidence.get("documents"), "documents"),
            logs=_paths(base, evidence.get("logs"), "logs"),
            tables=tables,
            runbooks=runbooks,
            expect=Expectation(
                outcome=outcome,
                root_cause=tuple(str(k) for k in expect.get("root_cause") or ()),
                tools=tuple(str(t) for t in expect.get("tools") or ()),
            ),
        )
    except ScenarioError as exc:
        raise ScenarioError(f"{path}: {exc}") from None


def find_scenarios(paths: Sequence[Path]) -> list[Scenario]:
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            files.extend(sorted(p for p in path.rglob("*.y*ml") if p.suffix in (".yaml", ".yml") and _is_scenario(p)))
        elif path.is_file():
            files.append(path)
        else:
            raise ScenarioError(f"{path}: no such file or folder")
    return [load_scenario(p) for p in files]


def _is_scenario(path: Path) -> bool:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return True  # reported properly by load_scenario
    return isinstance(data, dict) and "question" in data


def document_files(paths: Sequence[Path]) -> list[Path]:
    out: list[Path] = []
    for path in paths:
        if path.is_dir():
            out.extend(sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in TYPES))
        else:
            out.append(path)
    return out


# --- loading ------------------------------------------------------------------------------


def clear_evidence() -> None:
    """Empty the knowledge base, log store and runbooks (of the scratch database)."""
    with transaction.atomic():
        Chunk.objects.all().delete()
        Document.objects.all().delete()
        LogEntry.objects.all().delete()
        LogFile.objects.all().delete()
        Runbook.objects.all().delete()
        services.index_bump()


def load_documents(paths: Sequence[Path], *, embedder: Embedder | None) -> list[str]:
    """Add documents through the upload path and index them here; returns failure reasons."""
    problems = []
    for path in document_files(paths):
        uploaded = services.document_upload(
            owner=None, filename=path.name, data=path.read_bytes(), source=str(path.resolve()), enqueue=False
        )
        if services.document_index(document_id=str(uploaded.document.id), embedder=embedder) == "failed":
            reason = Document.objects.values_list("failure_reason", flat=True).get(pk=uploaded.document.pk)
            problems.append(f"{path.name}: {reason}")
    return problems


def load_evidence(scenario: Scenario, *, embedder: Embedder | None, sql_path: Path) -> list[str]:
    clear_evidence()
    problems = load_documents(scenario.documents, embedder=embedder)
    if scenario.logs:
        report = ingest(log_files(scenario.logs), progress=False)
        if report.read and not report.entries:
            problems.append("no log line could be parsed")
        problems.extend(f"{Path(r.path).name}: refused ({r.code}): {r.reason}" for r in report.refused)
    if scenario.runbooks is not None:
        load_runbooks(scenario.runbooks)
    if scenario.tables:
        try:
            write_tables(f"sqlite:///{sql_path}", merge([t for path in scenario.tables for t in read_tables(path)]))
        except FixtureError as exc:
            problems.append(str(exc))
    return problems


def load_shared_evidence(scenarios: Sequence[Scenario], *, embedder: Embedder | None, sql_path: Path) -> list[str]:
    """Load the evidence of every scenario into one knowledge base, log store and business
    database (a file several scenarios name is loaded once); returns what could not be loaded."""
    clear_evidence()
    documents = list(dict.fromkeys(p for s in scenarios for p in document_files(s.documents)))
    problems = load_documents(documents, embedder=embedder)
    logs = list(dict.fromkeys(p for s in scenarios for p in log_files(s.logs)))
    if logs:
        report = ingest(logs, progress=False)
        if report.read and not report.entries:
            problems.append("no log line could be parsed")
    for folder in dict.fromkeys(s.runbooks for s in scenarios if s.runbooks is not None):
        load_runbooks(folder)
    tables = list(dict.fromkeys(p for s in scenarios for p in s.tables))
    if tables:
        try:
            write_tables(f"sqlite:///{sql_path}", merge_columns([t for path in tables for t in read_tables(path)]))
        except FixtureError as exc:
            problems.append(str(exc))
    return problems


def merge_columns(tables: Sequence[Table]) -> list[Table]:
    """Tables of the same name become one with the columns of all (in order of appearance), a
    row leaving empty the columns its own table lacks: incidents written apart describe, say,
    their deployments with different columns, and one business database holds them all. A
    column two tables type differently becomes text."""
    groups: dict[str, list[Table]] = {}
    for table in tables:
        groups.setdefault(table.name, []).append(table)
    out = []
    for name, group in groups.items():
        kinds: dict[str, str] = {}
        for table in group:
            for column, kind in table.columns:
                kinds[column] = kind if kinds.get(column, kind) == kind else "text"
        names = list(kinds)
        rows = tuple(
            tuple(dict(zip((c for c, _ in table.columns), row, strict=True)).get(c) for c in names)
            for table in group
            for row in table.rows
        )
        description = next((t.description for t in group if t.description), "")
        out.append(Table(name, tuple(kinds.items()), rows, description))
    return out


# --- running and scoring ------------------------------------------------------------------


@dataclass(frozen=True)
class ScenarioEvidence:
    """What the chain may read for one scenario, besides the knowledge base and the log store
    that ``load_evidence`` filled: the scratch business database, and whether runbooks count."""

    sql_url: str | None
    runbooks: bool
    embedder: Embedder | None


@dataclass(frozen=True)
class Executed:
    """One question run through the chain, as the scoring needs it."""

    result: RunResult
    #: every tool call of the run, in order: its tool and its raw result (None unless ready)
    calls: tuple[tuple[str, Mapping[str, Any] | None], ...]
    seconds: float


#: runs a question over a scenario's evidence; the composition root builds it
ScenarioExecutor = Callable[[str, ScenarioEvidence], Executed]


def _quote_found(quote: str, executed: Executed) -> bool:
    """Checked again here, independently of the guard: the quote is in one of the run's results."""
    return any(raw is not None and EvidenceText(raw).find(quote) is not None for _, raw in executed.calls)


def run_scenario(scenario: Scenario, *, execute: ScenarioExecutor, embedder: Embedder | None) -> ScenarioResult:
    """Load the scenario's evidence (indexed with ``embedder``), ask its question, score the answer."""
    with tempfile.TemporaryDirectory(prefix="sba-eval-") as scratch:
        sql_path = Path(scratch) / "business.sqlite3"
        problems = load_evidence(scenario, embedder=embedder, sql_path=sql_path)
        evidence = ScenarioEvidence(
            sql_url=f"sqlite:///{sql_path}" if scenario.tables else None,
            runbooks=scenario.runbooks is not None,
            embedder=embedder,
        )
        executed = execute(scenario.question, evidence)
    return score(scenario, executed, problems)


def run_shared(
    scenarios: Sequence[Scenario],
    *,
    execute: ScenarioExecutor,
    embedder: Embedder | None,
    on_result: Callable[[ScenarioResult], None] | None = None,
) -> list[ScenarioResult]:
    """Load the evidence of all ``scenarios`` into one database, then ask each question over all
    of it and score the answer; ``on_result`` sees each result as it comes."""
    results = []
    with tempfile.TemporaryDirectory(prefix="sba-eval-") as scratch:
        sql_path = Path(scratch) / "business.sqlite3"
        problems = load_shared_evidence(scenarios, embedder=embedder, sql_path=sql_path)
        evidence = ScenarioEvidence(
            sql_url=f"sqlite:///{sql_path}" if any(s.tables for s in scenarios) else None,
            runbooks=any(s.runbooks is not None for s in scenarios),
            embedder=embedder,
        )
        for scenario in scenarios:
            result = score(scenario, execute(scenario.question, evidence), list(problems))
            results.append(result)
            if on_result is not None:
                on_result(result)
    return results


def score(scenario: Scenario, executed: Executed, problems: list[str]) -> ScenarioResult:
    """How the run answered the scenario: ``problems`` (of loading its evidence) and every way
    the answer misses what the scenario expects."""
    result = executed.result
    payload = dict(result.content.payload) if result.content is not None else {}
    outcome = "diagnosed" if result.outcome.value == "success" and payload.get("root_cause") else "fallback"
    root_cause = str(payload.get("root_cause") or "")
    quotes = [e["quote"] for f in payload.get("findings") or [] for e in f.get("evidence") or []]
    valid = sum(1 for q in quotes if _quote_found(q, executed))
    called = list(dict.fromkeys(tool for tool, _ in executed.calls))
    expect = scenario.expect
    phrases_missing = [k for k in expect.root_cause if k.lower() not in root_cause.lower()]
    missing = [t for t in expect.tools if t not in called]
    if outcome != expect.outcome:
        problems.append(f"expected {expect.outcome}, got {outcome}")
    if outcome == "diagnosed" and expect.outcome == "diagnosed" and phrases_missing:
        problems.append("root cause misses: " + ", ".join(phrases_missing))
    if missing:
        problems.append("tools not called: " + ", ".join(missing))
    if valid != len(quotes):
        problems.append(f"{len(quotes) - valid} citation(s) not found in the evidence")
    return ScenarioResult(
        scenario=scenario,
        outcome=outcome,
        root_cause=root_cause,
        root_cause_hit=expect.outcome == outcome == "diagnosed" and not phrases_missing,
        fallback_correct=expect.outcome == outcome == "fallback",
        citations=len(quotes),
        citations_valid=valid,
        tools_called=called,
        tool_calls=len(executed.calls),
        tools_missing=missing,
        tokens=result.usage.tokens,
        seconds=executed.seconds,
        fallback_reason=result.fallback_reason,
        problems=problems,
    )
