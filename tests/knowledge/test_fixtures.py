"""Business tables described in YAML (``knowledge.fixtures``): parsing with errors that say where,
merging incidents' tables, and writing them to a real SQLite file and a real MariaDB/MySQL database.

The MySQL tests create and drop their own database (``sba_fixtures_test_<pid>``) on
``TEST_MYSQL_URL`` (default ``mysql://root@127.0.0.1:3306``), as tests/knowledge/test_sqlsource.py
does, and are skipped when no server answers.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from knowledge.fixtures import FixtureError, Table, merge, parse_tables, read_tables, write_tables
from knowledge.sqlsource import DatabaseSqlSource
from tests.knowledge.mysql import mysql_connect, scratch_mysql_database

SCENARIO_TABLES = Path(__file__).resolve().parent / "scenario_fixtures" / "tables.yaml"
DATETIME_TEXT = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}")

CHANGES = """
config_changes:
  description: Configuration changes, newest last
  columns: {id: integer, service: text, ratio: real, config_key: text, changed_at: datetime}
  rows:
    - [1, payment-service, 0.5, db.pool.max_size, "2026-11-18 09:58:00"]
    - [2, checkout-service, 1, feature.flag, 2026-11-18 10:01:00]
    - [3, null, null, null, null]
"""


def tables_of(text: str, source: str = "t.yaml") -> list[Table]:
    return parse_tables(yaml.safe_load(text), source=source)


# --- parsing ---------------------------------------------------------------------------------


def test_a_table_parses_with_typed_columns_rows_and_description() -> None:
    (table,) = tables_of(CHANGES)
    assert table.name == "config_changes"
    assert table.description == "Configuration changes, newest last"
    assert table.columns == (
        ("id", "integer"),
        ("service", "text"),
        ("ratio", "real"),
        ("config_key", "text"),
        ("changed_at", "datetime"),
    )
    assert table.rows == (
        (1, "payment-service", 0.5, "db.pool.max_size", "2026-11-18 09:58:00"),
        # an unquoted YAML timestamp becomes the same text a quoted one is
        (2, "checkout-service", 1, "feature.flag", "2026-11-18 10:01:00"),
        (3, None, None, None, None),
    )


def test_an_unquoted_date_becomes_iso_text_and_rows_may_be_empty() -> None:
    (table,) = tables_of("days:\n  columns: {day: datetime}\n  rows:\n    - [2026-11-18]\n")
    assert table.rows == (("2026-11-18",),)
    (empty,) = tables_of("empty:\n  columns: {id: integer}\n")
    assert empty.rows == () and empty.description == ""


def test_the_scenario_fixture_tables_parse() -> None:
    tables = {t.name: t for t in read_tables(SCENARIO_TABLES)}
    assert set(tables) == {"config_changes", "stock_levels"}
    assert len(tables["config_changes"].rows) == 2


@pytest.mark.parametrize(
    ("text", "where", "why"),
    [
        ("- a\n- b\n", "t.yaml", "expected a mapping of table name to table"),
        ("'1orders':\n  columns: {id: integer}\n", "t.yaml", "'1orders' is not a valid table or column name"),
        (
            "'orders; DROP TABLE x':\n  columns: {id: integer}\n",
            "t.yaml",
            "'orders; DROP TABLE x' is not a valid table or column name",
        ),
        (f"{'t' * 65}:\n  columns: {{id: integer}}\n", "t.yaml", "is not a valid table or column name"),
        (
            "orders:\n  columns: {'order id': integer}\n",
            "table orders",
            "'order id' is not a valid table or column name",
        ),
        ('orders:\n  columns: {"id`": integer}\n', "table orders", "is not a valid table or column name"),
        ("orders:\n  rows: [[1]]\n", "table orders", "needs 'columns' (name: type) and 'rows'"),
        ("orders:\n  columns: {}\n", "table orders", "needs 'columns'"),
        ("orders: [id, amount]\n", "table orders", "needs 'columns'"),
        ("orders:\n  columns: {id: uuid}\n", "table orders", "column id has type 'uuid'; use one of"),
        ("orders:\n  columns: {id: INTEGER}\n", "table orders", "column id has type 'INTEGER'"),
        ("orders:\n  columns: {id: integer}\n  rows: '1, 2'\n", "table orders", "'rows' must be a list of lists"),
        (
            "orders:\n  columns: {id: integer, amount: real}\n  rows:\n    - [1, 2.5]\n    - [2]\n",
            "table orders",
            "row 2 must list 2 values",
        ),
        (
            "orders:\n  columns: {id: integer, amount: real}\n  rows:\n    - [1, 2.5, x]\n",
            "table orders",
            "row 1 must list 2 values",
        ),
        (
            "orders:\n  columns: {id: integer, note: text}\n  rows:\n    - ab\n",
            "table orders",
            "row 1 must list 2 values",
        ),
        ("orders:\n  columns: {id: integer}\n  rows:\n    - {id: 1}\n", "table orders", "row 1 must list 1 values"),
    ],
)
def test_a_bad_table_is_a_fixture_error_saying_where_and_why(text: str, where: str, why: str) -> None:
    with pytest.raises(FixtureError) as raised:
        tables_of(text)
    message = str(raised.value)
    assert message.startswith("t.yaml")
    assert where in message
    assert why in message


def test_the_types_listed_in_the_error_are_the_supported_ones() -> None:
    with pytest.raises(FixtureError, match="use one of integer, real, text, datetime"):
        tables_of("orders:\n  columns: {id: bigint}\n")


def test_a_cell_that_is_not_a_scalar_says_which_table_and_row() -> None:
    with pytest.raises(FixtureError) as raised:
        tables_of("orders:\n  columns: {id: integer, tags: text}\n  rows:\n    - [1, ok]\n    - [2, [a, b]]\n")
    assert "not a number, text or null" in str(raised.value)
    assert "t.yaml" in str(raised.value) and "table orders" in str(raised.value) and "row 2" in str(raised.value)


def test_a_file_that_is_not_yaml_or_is_missing_is_a_fixture_error(tmp_path: Path) -> None:
    broken = tmp_path / "tables.yaml"
    broken.write_text("orders:\n  columns: {id: integer\n", encoding="utf-8")
    with pytest.raises(FixtureError, match=re.escape(f"{broken}: cannot be read as YAML")):
        read_tables(broken)
    with pytest.raises(FixtureError, match="cannot be read as YAML"):
        read_tables(tmp_path / "missing.yaml")
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text("orders:\n  columns: {id: money}\n", encoding="utf-8")
    with pytest.raises(FixtureError, match=re.escape(f"{wrong}: table orders: column id has type 'money'")):
        read_tables(wrong)


# --- merging ---------------------------------------------------------------------------------


def table(name: str, rows: list[tuple[Any, ...]], columns: tuple[tuple[str, str], ...] | None = None) -> Table:
    return Table(name, columns or (("id", "integer"), ("note", "text")), tuple(rows), description=f"{name} rows")


def test_same_named_tables_with_the_same_columns_merge_rows_in_order() -> None:
    merged = merge(
        [
            table("changes", [(1, "a"), (2, "b")]),
            table("deployments", [(10, "x")]),
            table("changes", [(3, "c")]),
        ]
    )
    assert [t.name for t in merged] == ["changes", "deployments"]
    changes = merged[0]
    assert changes.rows == ((1, "a"), (2, "b"), (3, "c"))
    assert changes.columns == (("id", "integer"), ("note", "text"))
    assert changes.description == "changes rows"
    assert merged[1].rows == ((10, "x"),)


def test_same_named_tables_with_different_columns_do_not_merge() -> None:
    other_names = table("changes", [(1, 2)], columns=(("id", "integer"), ("count", "integer")))
    with pytest.raises(FixtureError, match="table changes is defined twice with different columns"):
        merge([table("changes", [(1, "a")]), other_names])
    other_types = table("changes", [(1, 2.0)], columns=(("id", "integer"), ("note", "real")))
    with pytest.raises(FixtureError, match="table changes is defined twice"):
        merge([table("changes", [(1, "a")]), other_types])
    reordered = table("changes", [("a", 1)], columns=(("note", "text"), ("id", "integer")))
    with pytest.raises(FixtureError, match="table changes is defined twice"):
        merge([table("changes", [(1, "a")]), reordered])


def test_merging_nothing_or_distinct_tables_changes_nothing() -> None:
    assert merge([]) == []
    tables = [table("a", [(1, "x")]), table("b", [])]
    assert merge(tables) == tables


# --- writing: SQLite -------------------------------------------------------------------------


def sqlite_rows(path: Path, sql: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(path) as conn:
        rows = conn.execute(sql).fetchall()
    conn.close()
    return rows


def test_write_tables_creates_sqlite_tables_that_the_datasource_reads(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "business.sqlite3"
    write_tables(f"sqlite:///{path}", tables_of(CHANGES))
    assert path.is_file()  # the folder was created
    assert sqlite_rows(path, "SELECT * FROM config_changes ORDER BY id") == [
        (1, "payment-service", 0.5, "db.pool.max_size", "2026-11-18 09:58:00"),
        (2, "checkout-service", 1.0, "feature.flag", "2026-11-18 10:01:00"),
        (3, None, None, None, None),
    ]
    columns = sqlite_rows(path, "SELECT name, type FROM pragma_table_info('config_changes')")
    assert columns == [
        ("id", "INTEGER"),
        ("service", "TEXT"),
        ("ratio", "REAL"),
        ("config_key", "TEXT"),
        ("changed_at", "TEXT"),
    ]
    # The agent's read-only datasource sees exactly this.
    result = DatabaseSqlSource(f"sqlite:///{path}").execute(
        "SELECT config_key FROM config_changes WHERE service = 'payment-service'", timeout_s=5
    )
    assert result.rows == (("db.pool.max_size",),)


def test_writing_again_recreates_the_tables_instead_of_adding_rows(tmp_path: Path) -> None:
    path = tmp_path / "business.sqlite3"
    url = f"sqlite:///{path}"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE unrelated (id INTEGER)")
        conn.execute("INSERT INTO unrelated VALUES (7)")
    conn.close()
    write_tables(url, tables_of(CHANGES))
    write_tables(url, tables_of(CHANGES))
    assert sqlite_rows(path, "SELECT COUNT(*) FROM config_changes") == [(3,)]
    smaller = tables_of("config_changes:\n  columns: {id: integer}\n  rows: [[9]]\n")
    write_tables(url, smaller)
    assert sqlite_rows(path, "SELECT * FROM config_changes") == [(9,)]
    assert sqlite_rows(path, "SELECT * FROM unrelated") == [(7,)]  # tables it does not own are left alone


def test_a_plain_path_is_a_sqlite_file_too(tmp_path: Path) -> None:
    path = tmp_path / "plain.sqlite3"
    write_tables(str(path), [table("notes", [(1, "x")])])
    assert sqlite_rows(path, "SELECT * FROM notes") == [(1, "x")]


def test_an_unquoted_timestamp_with_a_zone_is_written_as_utc() -> None:
    text = "changes:\n  columns: {at: datetime}\n  rows:\n    - [2026-11-18T09:58:00Z]\n    - [2026-11-18T11:58:00+02:00]\n"
    (parsed,) = tables_of(text)
    assert [row[0] for row in parsed.rows] == ["2026-11-18 09:58:00", "2026-11-18 09:58:00"]


# --- writing: MySQL / MariaDB ----------------------------------------------------------------


@pytest.fixture
def mysql_url() -> Iterator[str]:
    """A scratch database of its own on the test server, dropped afterwards."""
    with scratch_mysql_database("sba_fixtures_test") as (_, server, database):
        yield f"{server}/{database}"


def mysql_rows(url: str, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    server, database = url.rsplit("/", 1)
    conn = mysql_connect(server, database)
    try:
        cursor = conn.cursor()
        cursor.execute(sql, args or None)
        return list(cursor.fetchall())
    finally:
        conn.close()


def test_write_tables_creates_mysql_tables_with_types_and_comments(mysql_url: str) -> None:
    tables = tables_of(CHANGES)
    write_tables(mysql_url, tables)
    rows = mysql_rows(mysql_url, "SELECT * FROM config_changes ORDER BY id")
    assert rows == [
        (1, "payment-service", 0.5, "db.pool.max_size", datetime(2026, 11, 18, 9, 58)),
        (2, "checkout-service", 1.0, "feature.flag", datetime(2026, 11, 18, 10, 1)),
        (3, None, None, None, None),
    ]
    database = mysql_url.rsplit("/", 1)[1]
    columns = mysql_rows(
        mysql_url,
        "SELECT column_name, data_type FROM information_schema.columns "
        "WHERE table_schema = %s AND table_name = 'config_changes' ORDER BY ordinal_position",
        database,
    )
    assert [(str(n), str(t).lower()) for n, t in columns] == [
        ("id", "bigint"),
        ("service", "text"),
        ("ratio", "double"),
        ("config_key", "text"),
        ("changed_at", "datetime"),
    ]
    # The description is the table comment, which the agent's datasource shows it.
    described = {t.name: t.description for t in DatabaseSqlSource(mysql_url).tables()}
    assert described["config_changes"] == "Configuration changes, newest last"


def test_writing_mysql_again_recreates_the_tables(mysql_url: str) -> None:
    write_tables(mysql_url, tables_of(CHANGES))
    write_tables(mysql_url, tables_of(CHANGES))
    assert mysql_rows(mysql_url, "SELECT COUNT(*) FROM config_changes") == [(3,)]
    write_tables(mysql_url, tables_of("config_changes:\n  columns: {id: integer}\n  rows: [[9]]\n"))
    assert mysql_rows(mysql_url, "SELECT * FROM config_changes") == [(9,)]


def test_a_description_with_quotes_is_written_safely_to_mysql(mysql_url: str) -> None:
    tricky = "Changes to the team's config; it's 'quoted', has a \\ backslash and ends with \\"
    write_tables(mysql_url, [Table("changes", (("id", "integer"),), ((1,),), description=tricky)])
    database = mysql_url.rsplit("/", 1)[1]
    comment = mysql_rows(
        mysql_url,
        "SELECT table_comment FROM information_schema.tables WHERE table_schema = %s AND table_name = 'changes'",
        database,
    )
    assert comment == [(tricky,)]
    assert mysql_rows(mysql_url, "SELECT * FROM changes") == [(1,)]


def test_the_scenario_fixture_tables_write_to_both_databases(mysql_url: str, tmp_path: Path) -> None:
    tables = read_tables(SCENARIO_TABLES)
    write_tables(mysql_url, tables)
    write_tables(f"sqlite:///{tmp_path / 'b.sqlite3'}", tables)
    query = "SELECT config_key, new_value, changed_at FROM config_changes WHERE service = 'inventory-service'"
    (mysql_row,) = mysql_rows(mysql_url, query)
    (sqlite_row,) = sqlite_rows(tmp_path / "b.sqlite3", query)
    assert mysql_row[:2] == sqlite_row[:2] == ("redis.pool.max_connections", "16")
    assert mysql_row[2] == datetime(2026, 5, 10, 9, 58) and DATETIME_TEXT.fullmatch(sqlite_row[2])


def test_a_zoned_timestamp_reaches_mysql_as_utc(mysql_url: str) -> None:
    text = "changes:\n  columns: {at: datetime}\n  rows:\n    - [2026-11-18T11:58:00+02:00]\n"
    write_tables(mysql_url, tables_of(text))
    assert mysql_rows(mysql_url, "SELECT at FROM changes") == [(datetime(2026, 11, 18, 9, 58),)]
