"""harness.logs: the one definition of log levels, templates and which templates a result keeps,
and the rule that no other module defines the levels again."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import harness
from harness.logs import (
    LEVEL_ALIASES,
    LEVELS,
    TemplateTally,
    canonical_level,
    group_templates,
    keep_templates,
    level_name,
    level_rank,
    log_template,
)
from harness.ports import LogLine, LogTemplate
from harness.tools.evidence import QueryLogsArgs

ROOT = Path(harness.__file__).parent.parent


# --- levels --------------------------------------------------------------------------------


def test_the_levels_are_ranked_least_severe_first() -> None:
    assert LEVELS == ("DEBUG", "INFO", "WARN", "ERROR", "FATAL")
    assert [level_rank(name) for name in LEVELS] == [0, 1, 2, 3, 4]
    assert [level_name(rank) for rank in range(5)] == list(LEVELS)
    assert level_name(7) == level_name(-1) == "INFO", "a rank no level has reads as INFO"


@pytest.mark.parametrize(("word", "level"), [*((name.lower(), name) for name in LEVELS), *LEVEL_ALIASES.items()])
def test_names_and_aliases_in_any_case_stand_for_their_level(word: str, level: str) -> None:
    assert canonical_level(word) == canonical_level(word.upper()) == canonical_level(word.title()) == level
    assert level_rank(word) == LEVELS.index(level)


def test_other_words_are_no_level_and_rank_lowest() -> None:
    assert canonical_level("verbose") is None and canonical_level("") is None
    assert level_rank(None) == level_rank("verbose") == 0


def test_the_tool_accepts_exactly_the_level_names_and_their_aliases() -> None:
    schema = QueryLogsArgs.model_json_schema()["properties"]["level"]
    assert next(option["enum"] for option in schema["anyOf"] if "enum" in option) == list(LEVELS)
    for alias, level in LEVEL_ALIASES.items():
        assert QueryLogsArgs.model_validate({"level": alias.lower()}).level == level


def _level_tables(path: Path) -> list[int]:
    """Lines of ``path`` with a literal collection of exactly the five level names (a tuple,
    list, set, ``Literal[...]`` or the keys of a dict)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        items: list[ast.expr | None]
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            items = list(node.elts)
        elif isinstance(node, ast.Dict):
            items = list(node.keys)
        else:
            continue
        names = [item.value for item in items if isinstance(item, ast.Constant) and isinstance(item.value, str)]
        if len(items) == len(LEVELS) and sorted(names) == sorted(LEVELS):
            found.append(node.lineno)
    return found


def test_no_other_module_defines_the_levels() -> None:
    tables = {
        str(path.relative_to(ROOT)): lines
        for package in ("harness", "knowledge", "chat", "traces", "bench")
        for path in sorted((ROOT / package).rglob("*.py"))
        if (lines := _level_tables(path))
    }
    assert list(tables) == ["harness/logs.py"], tables


def test_the_level_scan_finds_a_table_in_any_form(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        'A = ("DEBUG", "INFO", "WARN", "ERROR", "FATAL")\n'
        'B = {"DEBUG": 0, "INFO": 1, "WARN": 2, "ERROR": 3, "FATAL": 4}\n'
        'C = ("FATAL", "FATAL", "ERROR", "WARN", "INFO", "DEBUG")\n'  # a mapping onto levels: allowed
    )
    assert _level_tables(sample) == [1, 2]


# --- templates -----------------------------------------------------------------------------


def test_variable_parts_are_masked() -> None:
    assert log_template("GET /v1/accounts/acc_77568041/balance 503") == "GET /v1/accounts/<*>/balance <*>"
    assert log_template("pool exhausted after 30000ms, 40 waiting") == "pool exhausted after <*> waiting"
    assert log_template("request 3f2a9c1e-0b7d-4e6a-9f10-2c3d4e5f6a7b from 10.0.0.7:5432") == "request <*> from <*>"
    assert log_template("max_connections reached") == "max_connections reached"


def line(ts: str, level: str, message: str, service: str = "payment-service") -> LogLine:
    return LogLine(f"2026-11-30T10:{ts}Z", service, level, message)


def test_lines_of_one_template_are_tallied_together() -> None:
    lines = [  # newest first, as a source returns them
        line("05:00", "ERROR", "pool exhausted after 30000ms"),
        line("04:00", "WARN", "pool exhausted after 20000ms", service="order-service"),
        line("03:00", "INFO", "GET /orders 200"),
        line("02:00", "WARN", "pool exhausted after 10000ms"),
    ]

    pool, get = group_templates(lines)

    assert pool == LogTemplate(
        template="pool exhausted after <*>",
        count=3,
        level="ERROR",
        services=("order-service", "payment-service"),
        first_ts="2026-11-30T10:02:00Z",
        last_ts="2026-11-30T10:05:00Z",
        example="pool exhausted after 10000ms",
    )
    assert (get.template, get.count, get.level) == ("GET /orders <*>", 1, "INFO")


def test_equally_frequent_templates_come_in_the_order_they_began() -> None:
    lines = [line("05:00", "WARN", "disk at 91%"), line("01:00", "ERROR", "cache miss for key 12")]
    assert [t.template for t in group_templates(lines)] == ["cache miss for key <*>", "disk at <*>"]


def test_a_tally_takes_the_last_read_of_the_earliest_lines_as_example() -> None:
    tally: TemplateTally[str] = TemplateTally(template="x <*>")
    for message in ("x 3", "x 2", "x 1"):
        tally.add("2026-11-30T10:00:00Z", "svc", 1, message)
    assert tally.example == "x 1"
    assert tally.summary(str).first_ts == tally.summary(str).last_ts == "2026-11-30T10:00:00Z"
    assert TemplateTally[str]().summary(str).first_ts == "", "no line, no time"


# --- ranking -------------------------------------------------------------------------------


def template(name: str, count: int, level: str) -> LogTemplate:
    return LogTemplate(name, count, level, ("svc",), f"2026-11-30T10:{count:02d}:00Z", "", name)


def test_the_most_frequent_templates_are_kept_and_rare_severe_ones_take_some_milder_slots() -> None:
    ranked = [template(f"info {n}", 50 - n, "INFO") for n in range(9)] + [
        template("worker crashed", 1, "FATAL"),
        template("queue error", 2, "ERROR"),
    ]

    kept = keep_templates(ranked, 6)

    assert len(kept) == 6
    assert [t.template for t in kept[:4]] == ["info 0", "info 1", "info 2", "info 3"]
    assert {t.template for t in kept[4:]} == {"worker crashed", "queue error"}, "two of six slots, a third"
    assert keep_templates(ranked[:9], 6) == tuple(ranked[:6]), "nothing severe beyond: the top six"
