"""The SQL tool's resource bounds: cost, size and time of one statement stay bounded.

Statements whose cost or output grows with an argument are refused by the guard before any
database sees them (so the hostile list never runs on the shared server); the statements that
are allowed are stopped at their deadline inside the database (MariaDB: ``KILL`` from a second
connection, checked in the process list) and read row by row within a byte budget.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
import tracemalloc
from collections.abc import Iterator
from typing import Any

import pytest

from harness.ports import SqlRefused
from knowledge import sqlsource
from knowledge.sql_guard import (
    COSTLY_FUNCTION,
    GROWING_RECURSION,
    REGEXP_ON_COLUMNS,
    VALUES_TOO_LARGE,
    check_statement,
    too_many_columns,
)
from knowledge.sqlsource import DatabaseSqlSource, timeout_reason
from tests.knowledge.mysql import mysql_connect, scratch_mysql_database

TIMEOUT_S = 1.0
SLACK_S = 2.0  # a busy machine: the statement must end within its timeout plus this
_X400 = ", ".join(["x"] * 400)
_HEX23 = "HEX(" * 23 + "note" + ")" * 23
_DOUBLING = ", ".join(f"c{i + 1} AS (SELECT CONCAT(x, x) AS x FROM c{i})" for i in range(8))

# (dialects, statement, reason): the attacker's statements and their relatives.
HOSTILE: tuple[tuple[str, str, str], ...] = (
    ("mysql sqlite", "SELECT REGEXP_REPLACE(REPEAT('a', 16000000), 'a', 'b')", COSTLY_FUNCTION),
    ("mysql sqlite", "SELECT REGEXP_INSTR(REPEAT('a', 16000000), 'b')", COSTLY_FUNCTION),
    ("mysql sqlite", "SELECT REGEXP_SUBSTR(note, 'a+') FROM orders", COSTLY_FUNCTION),
    ("mysql sqlite", "SELECT REGEXP_REPLACE(note, 'a', 'b') FROM orders", COSTLY_FUNCTION),
    ("sqlite", "SELECT regexp('a', note) FROM orders", COSTLY_FUNCTION),
    ("mysql sqlite", "SELECT note FROM orders WHERE CONCAT(note, note) REGEXP 'a'", REGEXP_ON_COLUMNS),
    ("mysql", "SELECT note FROM orders WHERE note RLIKE note", REGEXP_ON_COLUMNS),
    ("mysql sqlite", "SELECT SHA2(REPEAT('a', 16000000), 256)", COSTLY_FUNCTION),
    ("mysql sqlite", "SELECT MD5(REPEAT(note, 1000)) FROM orders", COSTLY_FUNCTION),
    ("mysql sqlite", "SELECT REPEAT('a', id) FROM orders", COSTLY_FUNCTION),
    ("mysql sqlite", f"WITH t(x) AS (SELECT REPEAT('x', 16000000)) SELECT {_X400} FROM t", too_many_columns(64)),
    ("mysql sqlite", "WITH t(x) AS (SELECT REPEAT('x', 16000000)) SELECT x, x FROM t", COSTLY_FUNCTION),
    ("sqlite", "WITH t(x) AS (SELECT printf('%.*c', 16000000, 'x')) SELECT x, x FROM t", COSTLY_FUNCTION),
    ("sqlite", "SELECT printf('%16000000c', 'x')", COSTLY_FUNCTION),
    ("sqlite", "SELECT format('%.*c', 10, 'x')", COSTLY_FUNCTION),
    ("sqlite", "SELECT printf(note, 1) FROM orders", COSTLY_FUNCTION),
    ("mysql sqlite", "SELECT LPAD('a', 16000000, 'b')", COSTLY_FUNCTION),
    ("mysql sqlite", "SELECT RPAD(note, id, 'b') FROM orders", COSTLY_FUNCTION),
    ("mysql", "SELECT SPACE(16000000)", COSTLY_FUNCTION),
    ("sqlite", "SELECT zeroblob(16000000)", COSTLY_FUNCTION),
    ("sqlite", "SELECT randomblob(16000000)", COSTLY_FUNCTION),
    ("sqlite", "SELECT length(zeroblob(1000000000))", COSTLY_FUNCTION),
    ("mysql sqlite", "SELECT REPLACE(note, 'a', note) FROM orders", COSTLY_FUNCTION),
    (
        "mysql sqlite",
        "SELECT REPLACE(REPLACE(note, 'a', 'bbbbbbbbbb'), 'b', 'cccccccccc') FROM orders",
        VALUES_TOO_LARGE,
    ),
    ("mysql", f"SELECT {_HEX23} FROM orders", VALUES_TOO_LARGE),
    ("mysql sqlite", f"WITH c0 AS (SELECT note AS x FROM orders), {_DOUBLING} SELECT x FROM c8", VALUES_TOO_LARGE),
    ("mysql", "SELECT CAST(note AS BINARY(16000000)) FROM orders", VALUES_TOO_LARGE),
    ("mysql", "SELECT FORMAT(amount, 100000) FROM orders", COSTLY_FUNCTION),
    ("mysql", "SELECT EXPORT_SET(5, 'Y', 'N', ',', 64)", COSTLY_FUNCTION),
    ("mysql", "SELECT JSON_ARRAYAGG(note) FROM orders", COSTLY_FUNCTION),
    ("mysql", "SELECT UNCOMPRESS(note) FROM orders", COSTLY_FUNCTION),
    ("mysql", "SELECT JSON_PRETTY(note) FROM orders", COSTLY_FUNCTION),
    (
        "sqlite",
        "WITH RECURSIVE c(s) AS (SELECT 'a' UNION ALL SELECT s || s FROM c) SELECT length(s) FROM c",
        GROWING_RECURSION,
    ),
    (
        "mysql",
        "WITH RECURSIVE c(s) AS (SELECT 'a' UNION ALL SELECT CONCAT(s, s) FROM c WHERE LENGTH(s) < 1e9) SELECT 1 FROM c",
        GROWING_RECURSION,
    ),
    ("mysql sqlite", "SELECT " + ", ".join(f"c{i}" for i in range(65)) + " FROM orders", too_many_columns(64)),
    ("mysql", "SELECT BENCHMARK(100000000, MD5('a'))", "functions that sleep or lock are not allowed"),
    ("mysql sqlite", "SELECT SLEEP(100)", "functions that sleep or lock are not allowed"),
)
# Bounded uses of the same functions stay allowed.
BOUNDED = (
    ("mysql sqlite", "SELECT LPAD(id, 6, '0'), RPAD(note, 20, '.') FROM orders"),
    ("mysql sqlite", "SELECT REPEAT('-', 10), REPLACE(note, 'a', 'b'), REPLACE(note, 'ab', '') FROM orders"),
    ("mysql sqlite", "SELECT MD5(note), SHA2(note, 256), HEX(note), LENGTH(CONCAT(note, '!')) FROM orders"),
    ("mysql sqlite", "SELECT note FROM orders WHERE note REGEXP '^first'"),
    ("mysql sqlite", "SELECT GROUP_CONCAT(note) FROM orders"),
    ("mysql", "SELECT FORMAT(amount, 2), SPACE(4), CAST(note AS CHAR(20)) FROM orders"),
    ("sqlite", "SELECT printf('%5d|%-10s|%.2f', id, note, amount), json_group_array(id) FROM orders"),
    ("mysql sqlite", "SELECT CONCAT(a.note, ' ', b.note) FROM orders AS a JOIN orders AS b ON a.id = b.id"),
    (
        "mysql sqlite",
        "WITH RECURSIVE c(n, s) AS (SELECT 1, 'a' UNION ALL SELECT n + 1, s || 'a' FROM c WHERE n < 5) SELECT * FROM c",
    ),
    ("mysql sqlite", "SELECT " + ", ".join(f"c{i}" for i in range(64)) + " FROM orders"),
)


def _cases(table: tuple[tuple[Any, ...], ...]) -> list[tuple[Any, ...]]:
    return [(d, *rest) for dialects, *rest in table for d in dialects.split()]


@pytest.mark.parametrize(("dialect", "sql", "reason"), _cases(HOSTILE))
def test_hostile_statements_are_refused_with_a_stable_reason(dialect: str, sql: str, reason: str) -> None:
    with pytest.raises(SqlRefused) as refused:
        check_statement(sql, dialect=dialect)
    assert refused.value.reason == reason


@pytest.mark.parametrize(("dialect", "sql"), _cases(BOUNDED))
def test_bounded_uses_of_the_same_functions_are_allowed(dialect: str, sql: str) -> None:
    normalised = check_statement(sql, dialect=dialect)
    assert check_statement(normalised, dialect=dialect) == normalised


def test_the_column_limit_is_configurable() -> None:
    with pytest.raises(SqlRefused) as refused:
        check_statement("SELECT 1, 2, 3", dialect="mysql", max_columns=2)
    assert refused.value.reason == "the statement selects more than 2 columns"


# --- real databases --------------------------------------------------------------------------

WIDE_COLUMNS = 70


@pytest.fixture(scope="module")
def sqlite_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("sqlbounds") / "business.sqlite3"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE orders (id INTEGER, note TEXT, amount REAL)")
    db.execute("INSERT INTO orders VALUES (1, 'first', 1.5)")
    db.execute("CREATE TABLE big (n INTEGER)")
    db.execute("CREATE TABLE wide (id INTEGER, body TEXT)")
    db.execute(f"CREATE TABLE many ({', '.join(f'c{i} INTEGER' for i in range(WIDE_COLUMNS))})")
    db.executemany("INSERT INTO big VALUES (?)", [(n,) for n in range(1, 501)])
    db.executemany("INSERT INTO wide VALUES (?, ?)", [(i, "w" * 1000) for i in range(100)])
    db.execute("INSERT INTO wide VALUES (1000, ?)", ("l" * 20_000,))
    db.execute(f"INSERT INTO many VALUES ({', '.join('1' * WIDE_COLUMNS)})")
    db.commit()
    db.close()
    return f"sqlite:///{path}"


@pytest.fixture(scope="module")
def mysql_db() -> Iterator[tuple[str, str, str]]:
    with scratch_mysql_database("sba_sqlbounds_test") as (cursor, server, database):
        cursor.execute("CREATE TABLE orders (id INT, note VARCHAR(100), amount DECIMAL(10, 2))")
        cursor.execute("INSERT INTO orders VALUES (1, 'first', 1.5)")
        cursor.execute("CREATE TABLE big (n INT)")
        cursor.execute("CREATE TABLE wide (id INT, body TEXT)")
        cursor.execute(f"CREATE TABLE many ({', '.join(f'c{i} INT' for i in range(WIDE_COLUMNS))})")
        cursor.executemany("INSERT INTO big VALUES (%s)", [(n,) for n in range(1, 501)])
        cursor.executemany("INSERT INTO wide VALUES (%s, %s)", [(i, "w" * 1000) for i in range(100)])
        cursor.execute("INSERT INTO wide VALUES (1000, %s)", ("l" * 20_000,))
        cursor.execute(f"INSERT INTO many VALUES ({', '.join('1' * WIDE_COLUMNS)})")
        yield server, database, f"{server}/{database}"


@pytest.fixture(params=["sqlite", "mysql"])
def url(request: pytest.FixtureRequest) -> str:
    if request.param == "sqlite":
        return str(request.getfixturevalue("sqlite_url"))
    _server, _database, full = request.getfixturevalue("mysql_db")
    return str(full)


SLOW = {
    "sqlite": "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < 1000000000) "
    "SELECT COUNT(*) FROM c",
    "mysql": "SELECT COUNT(*) FROM big AS a, big AS b, big AS c, big AS d WHERE a.n + b.n + c.n + d.n < 0",
}


def _kind(url: str) -> str:
    return "sqlite" if url.startswith("sqlite") else "mysql"


def _our_threads(url: str) -> list[tuple[Any, ...]]:
    """Connections of the test database other than this check's own: none may be left busy."""
    if _kind(url) == "sqlite":
        return []
    server, database = url.rsplit("/", 1)
    conn = mysql_connect(server)
    try:
        cursor = conn.cursor()
        cursor.execute(
            "SELECT ID, COMMAND, TIME FROM information_schema.PROCESSLIST WHERE DB = %s AND ID <> CONNECTION_ID()",
            (database,),
        )
        return [row for row in cursor.fetchall() if row[1] != "Sleep"]
    finally:
        conn.close()


def _wait_no_threads(url: str, within_s: float = 2.0) -> list[tuple[Any, ...]]:
    deadline = time.monotonic() + within_s
    while (left := _our_threads(url)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def test_a_slow_statement_ends_within_its_timeout_and_leaves_no_thread(url: str) -> None:
    source = DatabaseSqlSource(url, timeout_s=TIMEOUT_S)
    started = time.monotonic()
    with pytest.raises(SqlRefused) as refused:
        source.execute(SLOW[_kind(url)], timeout_s=30)
    assert time.monotonic() - started < TIMEOUT_S + SLACK_S
    assert refused.value.reason == timeout_reason(TIMEOUT_S)
    assert _our_threads(url) == []  # at once: the watchdog waited until the thread was idle


def test_a_statement_the_server_timeout_misses_is_killed_from_a_second_connection(
    mysql_db: tuple[str, str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without max_statement_time (what MariaDB cannot enforce inside one function call), the
    watchdog's KILL still ends the statement at the deadline. SLEEP is killable, and only
    reaches the server because this test bypasses the guard."""
    _server, _database, url = mysql_db
    real_prepare = sqlsource._MysqlBackend._prepare

    def without_server_timeout(conn: Any, *, timeout_s: float, row_limit: int | None) -> None:
        real_prepare(conn, timeout_s=timeout_s, row_limit=row_limit)
        cursor = conn.cursor()
        cursor.execute("SET SESSION max_statement_time = 0")
        cursor.close()

    monkeypatch.setattr(sqlsource._MysqlBackend, "_prepare", staticmethod(without_server_timeout))
    source = DatabaseSqlSource(url, timeout_s=TIMEOUT_S)
    started = time.monotonic()
    with pytest.raises(SqlRefused) as refused:
        source._execute_unchecked("SELECT SLEEP(20)", timeout_s=TIMEOUT_S)
    assert time.monotonic() - started < TIMEOUT_S + SLACK_S
    assert refused.value.reason == timeout_reason(TIMEOUT_S)
    assert _our_threads(url) == []


def test_kill_escalates_to_the_connection_when_kill_query_is_not_enough(
    mysql_db: tuple[str, str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The process list decides: a thread it still shows busy after KILL QUERY loses its connection.

    (A statement that ignores KILL QUERY is what the guard keeps away from the server, so the
    first look at the process list is made to say "still running".)"""
    server, database, url = mysql_db
    backend = DatabaseSqlSource(url)._backend
    looks: list[bool] = []
    real_wait = sqlsource._wait_until_idle

    def first_look_says_busy(cursor: Any, thread_id: int, grace_s: float) -> bool:
        looks.append(bool(looks) and real_wait(cursor, thread_id, grace_s))
        return looks[-1]

    monkeypatch.setattr(sqlsource, "_wait_until_idle", first_look_says_busy)
    victim = mysql_connect(server, database)
    thread_id = victim.thread_id()
    errors: list[int] = []

    def sleep() -> None:
        try:
            victim.cursor().execute("SELECT SLEEP(20)")
        except Exception as exc:  # any error: the code is what the test reads
            errors.append(exc.args[0] if exc.args else -1)

    worker = threading.Thread(target=sleep)
    worker.start()
    time.sleep(0.3)
    started = time.monotonic()
    backend.kill(thread_id)  # type: ignore[attr-defined]
    worker.join(5)
    assert not worker.is_alive()
    assert time.monotonic() - started < 3
    assert looks == [False, True]  # KILL QUERY "failed", then KILL ended it
    # the statement ended in an error (1317 when it saw KILL QUERY first, a lost connection
    # when it saw KILL first: both orders happen), and the connection is gone either way
    assert errors
    with pytest.raises(Exception):  # noqa: B017, PT011 - the connection itself is gone
        victim.cursor().execute("SELECT 1")
    assert _wait_no_threads(url) == []
    with contextlib.suppress(Exception):
        victim.close()


def test_a_large_result_is_read_within_the_byte_budget_in_bounded_memory(url: str) -> None:
    source = DatabaseSqlSource(url, timeout_s=5, max_rows=100_000, max_bytes=65_536)
    # 10,000 rows of 1 kB: about 10 MB if it were all read
    sql = "SELECT a.body FROM wide AS a, wide AS b WHERE a.id < 100 AND b.id < 100"
    tracemalloc.start()
    try:
        started = time.monotonic()
        result = source.execute(sql, timeout_s=5)
        elapsed = time.monotonic() - started
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.truncated
    assert sum(len(str(r[0])) for r in result.rows) <= 65_536
    assert peak < 2 * 1024 * 1024, peak  # the 64 kB kept, not the 10 MB produced
    assert elapsed < 5
    assert _wait_no_threads(url) == []


def test_a_long_value_is_cut_and_marked(url: str) -> None:
    result = DatabaseSqlSource(url, max_value_bytes=1_000).execute(
        "SELECT id, body FROM wide WHERE id = 1000", timeout_s=5
    )
    assert result.truncated
    ((row_id, body),) = result.rows
    assert row_id == 1000
    assert isinstance(body, str) and body.endswith("…") and len(body.encode()) <= 1_000


def test_a_result_wider_than_the_column_limit_is_refused(url: str) -> None:
    source = DatabaseSqlSource(url, max_columns=64)
    with pytest.raises(SqlRefused) as refused:
        source.execute("SELECT * FROM many", timeout_s=5)  # a star the guard cannot count
    assert refused.value.reason == too_many_columns(64)
    assert DatabaseSqlSource(url, max_columns=WIDE_COLUMNS).execute("SELECT * FROM many", timeout_s=5).rows
    assert _wait_no_threads(url) == []


def test_the_attackers_statements_end_at_once_and_touch_nothing(url: str) -> None:
    source = DatabaseSqlSource(url, timeout_s=TIMEOUT_S)
    dialect = _kind(url)
    for sql, reason in ((s, r) for d, s, r in _cases(HOSTILE) if d == dialect):
        started = time.monotonic()
        with pytest.raises(SqlRefused) as refused:
            source.execute(sql, timeout_s=TIMEOUT_S)
        assert refused.value.reason == reason
        assert time.monotonic() - started < 1.0
    assert _our_threads(url) == []


def test_sqlite_values_are_capped_by_the_length_limit(sqlite_url: str) -> None:
    """Even a value the guard lets through (a GROUP_CONCAT of many rows) stays within 1 MiB."""
    source = DatabaseSqlSource(sqlite_url, timeout_s=5)
    with pytest.raises(SqlRefused):
        source.execute("SELECT LENGTH(GROUP_CONCAT(a.body)) FROM wide AS a, wide AS b", timeout_s=5)


def test_group_concat_is_capped_on_mysql(mysql_db: tuple[str, str, str]) -> None:
    _server, _database, url = mysql_db
    result = DatabaseSqlSource(url).execute(
        "SELECT LENGTH(GROUP_CONCAT(a.body)) FROM wide AS a, wide AS b", timeout_s=5
    )
    assert result.rows == ((65_536,),)


def test_a_column_regexp_runs_on_the_server(mysql_db: tuple[str, str, str]) -> None:
    """``a REGEXP 'p'`` is written back as the operator: MariaDB has no REGEXP_LIKE."""
    _server, _database, full = mysql_db
    result = DatabaseSqlSource(full).execute(
        "SELECT id FROM orders WHERE note REGEXP '^fir' OR note RLIKE 'x$'", timeout_s=5
    )
    assert [tuple(r) for r in result.rows] == [(1,)]
