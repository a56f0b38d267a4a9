"""The business datasource against a real SQLite file and a real MariaDB/MySQL database.

The key property: no write ever reaches the database. Every bypass attempt (and generated
variants) runs through ``execute`` on both backends, with a canary table whose rows, checksum
and neighbours are compared before and after; and the connection itself is shown to refuse
writes when the guard is bypassed.

The MySQL tests create and drop their own database (``sba_sqlsource_test_<pid>``) on
``TEST_MYSQL_URL`` (default ``mysql://root@127.0.0.1:3306``) and are skipped when no server answers.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlglot import exp

from harness.ports import SqlRefused
from harness.tools.evidence import QueryMysqlArgs, query_mysql_tool
from harness.tools.spec import ToolRefused
from knowledge.sqlsource import (
    FAILED,
    REFUSED_BY_DATABASE,
    UNAVAILABLE,
    DatabaseSqlSource,
    sql_source_from_settings,
    to_scalar,
)
from tests.knowledge.mysql import mysql_connect, scratch_mysql_database
from tests.knowledge.test_sql_guard import BYPASS_CORPUS, BYPASS_MYSQL_ONLY, stacked_writes, write_statements

ALLOWED = ("orders", "customers", "big", "wide", "canary")
CANARY_ROWS = [(i, f"canary row {i}") for i in range(1, 6)]
ORDERS = [
    (1, 1, "12.50", "2024-03-01 10:15:00", "first"),
    (2, 1, "3.25", "2024-03-02 11:00:00", None),
    (3, 2, "99.99", "2024-03-03 12:30:45", "x; DROP TABLE canary"),
]
OUTPUT_FILES = [
    Path("/tmp/sba_sqlsource_outfile.txt"),
    Path("/tmp/sba_sqlsource_dumpfile.txt"),
    Path("/tmp/sba_sqlsource_writefile.txt"),
    Path("/tmp/sba_sqlsource_attach.db"),
    Path("/tmp/sba_sqlsource_vacuum.db"),
]
SLOW = {
    "sqlite": "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < 1000000000) "
    "SELECT COUNT(*) FROM c",
    "mysql": "SELECT COUNT(*) FROM big AS a, big AS b, big AS c, big AS d WHERE a.n + b.n + c.n + d.n < 0",
}


@dataclass
class Backend:
    """One real database: its URL and a fingerprint of everything a write could change."""

    name: str
    url: str
    fingerprint: Callable[[], Any]

    def source(self, **options: Any) -> DatabaseSqlSource:
        options.setdefault("allowed_tables", ALLOWED)
        return DatabaseSqlSource(self.url, **options)


# --- SQLite --------------------------------------------------------------------------------


def _build_sqlite(path: Path) -> None:
    db = sqlite3.connect(path)
    db.executescript(
        """
        CREATE TABLE customers (id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL);
        CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER, amount REAL,
                             created_at TEXT, note TEXT);
        CREATE TABLE big (n INTEGER);
        CREATE TABLE wide (id INTEGER, body TEXT);
        CREATE TABLE canary (id INTEGER PRIMARY KEY, note TEXT);
        CREATE TABLE secret (id INTEGER, token TEXT);
        CREATE VIEW order_totals AS SELECT customer_id, SUM(amount) AS total FROM orders GROUP BY customer_id;
        """
    )
    db.executemany("INSERT INTO customers (name) VALUES (?)", [("Ada",), ("Grace",)])
    db.executemany(
        "INSERT INTO orders VALUES (?, ?, ?, ?, ?)",
        [(i, c, float(a), ts.replace(" ", "T"), n) for i, c, a, ts, n in ORDERS],
    )
    db.executemany("INSERT INTO big VALUES (?)", [(n,) for n in range(1, 501)])
    db.executemany("INSERT INTO wide VALUES (?, ?)", [(i, "w" * 1000) for i in range(100)])
    db.executemany("INSERT INTO canary VALUES (?, ?)", CANARY_ROWS)
    db.execute("INSERT INTO secret VALUES (1, 'top secret')")
    db.commit()
    db.close()


@pytest.fixture(scope="module")
def sqlite_backend(tmp_path_factory: pytest.TempPathFactory) -> Backend:
    path = tmp_path_factory.mktemp("sqlsource") / "business.sqlite3"
    _build_sqlite(path)

    def fingerprint() -> Any:
        files = sorted(p.name for p in path.parent.iterdir())
        db = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
        try:
            schema = db.execute("SELECT type, name, sql FROM sqlite_master ORDER BY name").fetchall()
            canary = db.execute("SELECT * FROM canary ORDER BY id").fetchall()
        finally:
            db.close()
        return hashlib.sha256(path.read_bytes()).hexdigest(), files, schema, canary

    return Backend("sqlite", f"sqlite:///{path}", fingerprint)


# --- MySQL / MariaDB -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mysql_backend() -> Iterator[Backend]:
    with scratch_mysql_database("sba_sqlsource_test") as (cursor, server, database):
        yield from _mysql_backend(cursor, server, database)


def _mysql_backend(cursor: Any, server: str, database: str) -> Iterator[Backend]:
    for ddl in (
        "CREATE TABLE customers (id INT PRIMARY KEY AUTO_INCREMENT, name VARCHAR(50) NOT NULL) COMMENT 'who buys'",
        "CREATE TABLE orders (id INT PRIMARY KEY, customer_id INT, amount DECIMAL(10, 2), "
        "created_at DATETIME, note VARCHAR(100))",
        "CREATE TABLE big (n INT)",
        "CREATE TABLE wide (id INT, body TEXT)",
        "CREATE TABLE canary (id INT PRIMARY KEY, note VARCHAR(50))",
        "CREATE TABLE secret (id INT, token VARCHAR(50))",
        "CREATE TABLE kinds (d DATE, t TIME(1), b VARBINARY(100), f DOUBLE, big_decimal DECIMAL(30, 10), flag BIT(1))",
        "CREATE VIEW order_totals AS SELECT customer_id, SUM(amount) AS total FROM orders GROUP BY customer_id",
    ):
        cursor.execute(ddl)
    cursor.executemany("INSERT INTO customers (name) VALUES (%s)", [("Ada",), ("Grace",)])
    cursor.executemany("INSERT INTO orders VALUES (%s, %s, %s, %s, %s)", ORDERS)
    cursor.executemany("INSERT INTO big VALUES (%s)", [(n,) for n in range(1, 501)])
    cursor.executemany("INSERT INTO wide VALUES (%s, %s)", [(i, "w" * 1000) for i in range(100)])
    cursor.executemany("INSERT INTO canary VALUES (%s, %s)", CANARY_ROWS)
    cursor.execute("INSERT INTO secret VALUES (1, 'top secret')")
    cursor.execute(
        "INSERT INTO kinds VALUES ('2024-03-01', '-27:00:01.5', x'00ff10', 1.5, 12345678901234567890.0123456789, b'1')"
    )

    def fingerprint() -> Any:
        conn = mysql_connect(server, database)
        try:
            c = conn.cursor()
            c.execute("SHOW FULL TABLES")
            tables = sorted(c.fetchall())
            c.execute("SELECT * FROM canary ORDER BY id")
            canary = c.fetchall()
            c.execute("CHECKSUM TABLE canary, orders, secret EXTENDED")
            checksums = c.fetchall()
            c.execute("SELECT COUNT(*) FROM information_schema.ROUTINES WHERE ROUTINE_SCHEMA = DATABASE()")
            routines = c.fetchall()
            return tables, canary, checksums, routines
        finally:
            conn.close()

    yield Backend("mysql", f"{server}/{database}", fingerprint)


@pytest.fixture(params=["sqlite", "mysql"])
def backend(request: pytest.FixtureRequest) -> Backend:
    fixture: Backend = request.getfixturevalue(f"{request.param}_backend")
    return fixture


# --- reading -------------------------------------------------------------------------------


def test_reads_return_columns_rows_and_iso_datetimes(backend: Backend) -> None:
    result = backend.source().execute(
        "SELECT id, customer_id, amount, created_at, note FROM orders ORDER BY id", timeout_s=5
    )
    assert result.columns == ("id", "customer_id", "amount", "created_at", "note")
    assert not result.truncated
    assert [row[0] for row in result.rows] == [1, 2, 3]
    assert result.rows[0][3] == "2024-03-01T10:15:00"
    assert result.rows[2][4] == "x; DROP TABLE canary"
    assert result.rows[1][4] is None
    expected_amount: Any = "12.50" if backend.name == "mysql" else 12.5
    assert result.rows[0][2] == expected_amount
    json.dumps([list(r) for r in result.rows])


def test_joins_aggregates_ctes_and_views_work(backend: Backend) -> None:
    source = backend.source(allowed_tables=(*ALLOWED, "order_totals"))
    joined = source.execute(
        "WITH spend AS (SELECT customer_id, COUNT(*) AS n FROM orders GROUP BY customer_id) "
        "SELECT c.name, s.n FROM customers AS c JOIN spend AS s ON s.customer_id = c.id ORDER BY c.name",
        timeout_s=5,
    )
    assert joined.rows == (("Ada", 2), ("Grace", 1))
    ranked = source.execute(
        "SELECT id, ROW_NUMBER() OVER (PARTITION BY customer_id ORDER BY amount DESC) AS rn FROM orders ORDER BY id",
        timeout_s=5,
    )
    assert ranked.rows == ((1, 1), (2, 2), (3, 1))
    view = source.execute("SELECT customer_id FROM order_totals ORDER BY customer_id", timeout_s=5)
    assert view.rows == ((1,), (2,))


def test_row_cap_sets_truncated(backend: Backend) -> None:
    source = backend.source()
    capped = source.execute("SELECT n FROM big ORDER BY n", timeout_s=5)
    assert len(capped.rows) == 200 and capped.truncated
    assert capped.rows[-1] == (200,)
    explicit = source.execute("SELECT n FROM big ORDER BY n LIMIT 1000", timeout_s=5)
    assert len(explicit.rows) == 200 and explicit.truncated
    exact = backend.source(max_rows=10).execute("SELECT n FROM big ORDER BY n LIMIT 10", timeout_s=5)
    assert len(exact.rows) == 10 and not exact.truncated
    small = backend.source(max_rows=7).execute("SELECT n FROM big", timeout_s=5)
    assert len(small.rows) == 7 and small.truncated


def test_byte_cap_sets_truncated(backend: Backend) -> None:
    result = backend.source(max_bytes=5_000).execute("SELECT body FROM wide", timeout_s=5)
    assert result.truncated
    assert len(result.rows) == 5
    assert sum(len(str(r[0])) for r in result.rows) <= 5_000
    # one row bigger than the whole budget comes back cut, not dropped
    huge = backend.source(max_bytes=100).execute("SELECT body FROM wide LIMIT 1", timeout_s=5)
    assert huge.truncated and len(huge.rows) == 1
    cell = huge.rows[0][0]
    assert isinstance(cell, str) and cell.endswith("…") and len(cell.encode()) <= 100


def test_values_are_json_friendly_scalars(mysql_backend: Backend) -> None:
    source = mysql_backend.source(allowed_tables=("kinds",))
    result = source.execute("SELECT d, t, b, f, big_decimal, flag FROM kinds", timeout_s=5)
    assert result.rows == (
        ("2024-03-01", "-27:00:01.500000", "0x00ff10", 1.5, "12345678901234567890.0123456789", "0x01"),
    )
    json.dumps(result.rows)


def test_to_scalar_converts_every_database_type() -> None:
    assert to_scalar(Decimal("1.10")) == "1.10"
    assert to_scalar(datetime(2024, 3, 1, 10, 15)) == "2024-03-01T10:15:00"
    assert to_scalar(date(2024, 3, 1)) == "2024-03-01"
    assert to_scalar(timedelta(hours=30, seconds=5)) == "30:00:05"
    assert to_scalar(timedelta(seconds=-1)) == "-0:00:01"
    assert to_scalar(b"\x00" * 40) == "0x" + "00" * 32 + "…"
    assert to_scalar(float("nan")) == "nan"
    assert to_scalar({"b", "a"}) == "a,b"
    assert to_scalar(True) is True and to_scalar(None) is None and to_scalar(7) == 7


# --- tables and the allow-list -------------------------------------------------------------


def test_tables_lists_only_allowed_tables_with_columns(backend: Backend) -> None:
    tables = {t.name: t for t in backend.source().tables()}
    assert set(tables) == set(ALLOWED)
    assert tables["orders"].columns == ("id", "customer_id", "amount", "created_at", "note")
    assert tables["canary"].columns == ("id", "note")


def test_tables_without_an_allow_list_never_lists_system_tables(backend: Backend) -> None:
    names = {t.name for t in backend.source(allowed_tables=()).tables()}
    assert {"secret", "order_totals", *ALLOWED} <= names
    assert not any(n.lower().startswith(("sqlite_", "pragma_")) for n in names)  # sqlite_sequence exists
    assert not names & {"tables", "columns", "user", "db"}


def test_table_comments_become_descriptions(mysql_backend: Backend) -> None:
    tables = {t.name: t for t in mysql_backend.source().tables()}
    assert tables["customers"].description == "who buys"


def test_execute_refuses_tables_outside_the_allow_list(backend: Backend) -> None:
    source = backend.source()
    for sql in (
        "SELECT * FROM secret",
        "SELECT * FROM orders JOIN secret ON 1 = 1",
        "SELECT * FROM orders WHERE id IN (SELECT id FROM secret)",
        "WITH s AS (SELECT * FROM secret) SELECT * FROM s",
        "SELECT * FROM order_totals",
    ):
        with pytest.raises(SqlRefused, match="is not available"):
            source.execute(sql, timeout_s=5)
    assert backend.source(allowed_tables=()).execute("SELECT token FROM secret", timeout_s=5).rows == (("top secret",),)


def test_a_name_that_could_mean_a_hidden_table_is_not_allowed(mysql_backend: Backend) -> None:
    database = urlsplit(mysql_backend.url).path.lstrip("/")
    server = mysql_backend.url.rsplit("/", 1)[0]
    conn = mysql_connect(server, database)
    try:
        c = conn.cursor()
        c.execute("SELECT @@lower_case_table_names")
        if c.fetchone()[0] != 0:
            pytest.skip("the server folds table-name case")
        c.execute("CREATE TABLE audit (id INT)")
        c.execute("CREATE TABLE AUDIT (secret_id INT)")
        # "audit" could mean either table to the case-insensitive guard: neither is offered
        source = mysql_backend.source(allowed_tables=("audit", "canary"))
        assert [t.name for t in source.tables()] == ["canary"]
        for sql in ("SELECT * FROM AUDIT", "SELECT * FROM audit"):
            with pytest.raises(SqlRefused, match="is not available"):
                source.execute(sql, timeout_s=5)
        one = mysql_backend.source(allowed_tables=("CANARY",))  # case-insensitive when unambiguous
        assert [t.name for t in one.tables()] == ["canary"]
        both = mysql_backend.source(allowed_tables=("audit", "AUDIT"))
        assert sorted(t.name for t in both.tables()) == ["AUDIT", "audit"]
    finally:
        c.execute("DROP TABLE IF EXISTS audit, AUDIT")
        conn.close()


# --- timeouts and errors -------------------------------------------------------------------


def test_a_slow_query_is_stopped_by_the_timeout(backend: Backend) -> None:
    source = backend.source()
    started = time.monotonic()
    with pytest.raises(SqlRefused) as refused:
        source.execute(SLOW[backend.name], timeout_s=1.0)
    assert refused.value.reason == "the statement took longer than 1 s"
    assert time.monotonic() - started < 5


def test_the_source_timeout_caps_what_the_caller_asks_for(backend: Backend) -> None:
    source = backend.source(timeout_s=1.0)
    started = time.monotonic()
    with pytest.raises(SqlRefused, match="longer than 1 s"):
        source.execute(SLOW[backend.name], timeout_s=60)
    assert time.monotonic() - started < 5


@pytest.mark.parametrize("asked", [0.0, -1.0, 1e-9])
def test_a_tiny_or_missing_timeout_never_means_no_limit(backend: Backend, asked: float) -> None:
    # MariaDB reads max_statement_time = 0 as "no limit": the source never sends it
    started = time.monotonic()
    with pytest.raises(SqlRefused, match="longer than"):
        backend.source(timeout_s=1.0).execute(SLOW[backend.name], timeout_s=asked)
    assert time.monotonic() - started < 5


def test_database_errors_become_generic_reasons(backend: Backend) -> None:
    with pytest.raises(SqlRefused) as refused:
        backend.source().execute("SELECT no_such_column FROM orders", timeout_s=5)
    assert refused.value.reason == FAILED
    assert "no_such_column" not in str(refused.value)


def test_an_unreachable_datasource_lists_nothing_and_refuses(tmp_path: Path) -> None:
    for url in (f"sqlite:///{tmp_path / 'missing.sqlite3'}", "mysql://root@127.0.0.1:1/nothing"):
        source = DatabaseSqlSource(url)
        assert source.tables() == []
        with pytest.raises(SqlRefused) as refused:
            source.execute("SELECT 1", timeout_s=2)
        assert refused.value.reason == UNAVAILABLE
    assert not (tmp_path / "missing.sqlite3").exists()


def test_concurrent_statements_each_get_their_own_connection(backend: Backend) -> None:
    source = backend.source()
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda i: source.execute(f"SELECT {i}, COUNT(*) FROM big", timeout_s=5), range(32)))
    assert [r.rows for r in results] == [((i, 500),) for i in range(32)]


# --- no write ever reaches the database ----------------------------------------------------


def _corpus(name: str) -> list[str]:
    return [*BYPASS_CORPUS, *BYPASS_MYSQL_ONLY] if name == "mysql" else list(BYPASS_CORPUS)


def test_the_bypass_corpus_never_writes(backend: Backend) -> None:
    source = backend.source()
    before = backend.fingerprint()
    accepted = []
    for sql in _corpus(backend.name):
        try:
            source.execute(sql, timeout_s=2)
            accepted.append(sql)
        except SqlRefused:
            pass
    assert accepted == []
    assert backend.fingerprint() == before
    assert not any(p.exists() for p in OUTPUT_FILES)


# Statements that a read-only connection must refuse on its own, without the guard.
RAW_WRITES = (
    "INSERT INTO canary VALUES (99, 'written')",
    "UPDATE canary SET note = 'written'",
    "DELETE FROM canary",
    "DROP TABLE canary",
    "CREATE TABLE evil (a INT)",
    "ALTER TABLE canary ADD COLUMN evil INT",
    "CREATE TEMPORARY TABLE evil (a INT)",
)


def test_the_connection_itself_is_read_only(backend: Backend) -> None:
    source = backend.source()
    before = backend.fingerprint()
    for sql in RAW_WRITES:
        with pytest.raises(SqlRefused) as refused:
            source._execute_unchecked(sql, timeout_s=5)
        assert refused.value.reason == REFUSED_BY_DATABASE, sql
    # several statements in one call are refused by the driver too
    with pytest.raises(SqlRefused):
        source._execute_unchecked("SELECT 1; DELETE FROM canary", timeout_s=5)
    assert backend.fingerprint() == before


def test_sqlite_file_is_read_only_even_without_authorizer_or_query_only(sqlite_backend: Backend) -> None:
    """Each SQLite layer holds on its own: ``query_only``, then the ``mode=ro`` open."""
    source = sqlite_backend.source()
    before = sqlite_backend.fingerprint()
    conn = source._backend._connect(busy_timeout_s=1, guarded=False)  # type: ignore[attr-defined]
    try:
        with pytest.raises(sqlite3.OperationalError):
            conn.execute("INSERT INTO canary VALUES (99, 'written')")
        conn.execute("PRAGMA query_only = OFF")
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            conn.execute("INSERT INTO canary VALUES (99, 'written')")
        with pytest.raises(sqlite3.OperationalError):
            conn.execute("ATTACH DATABASE '/tmp/sba_sqlsource_attach.db' AS evil")
    finally:
        conn.close()
    assert sqlite_backend.fingerprint() == before
    assert not Path("/tmp/sba_sqlsource_attach.db").exists()


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(sql=st.one_of(stacked_writes(), write_statements()))
def test_generated_writes_never_reach_the_database(backend: Backend, sql: str) -> None:
    before = backend.fingerprint()
    with pytest.raises(SqlRefused):
        backend.source().execute(sql, timeout_s=2)
    assert backend.fingerprint() == before


# Without the guard these would reach the shared server itself (users, globals): not sent raw.
_SERVER_WIDE = ("GRANT", "SET GLOBAL")


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(sql=write_statements().filter(lambda s: not s.upper().startswith(_SERVER_WIDE)))
def test_generated_writes_fail_on_the_connection_alone(backend: Backend, sql: str) -> None:
    before = backend.fingerprint()
    with contextlib.suppress(SqlRefused):
        backend.source()._execute_unchecked(sql, timeout_s=2)
    assert backend.fingerprint() == before
    assert not any(p.exists() for p in OUTPUT_FILES)


# --- what runs is what was checked --------------------------------------------------------

_TEXT = st.text(st.characters(blacklist_categories=("Cc", "Cf", "Cs", "Co", "Cn")), max_size=24)


def _quoted(text: str, dialect: str, *, backslashes: bool) -> str:
    if backslashes:  # how a MySQL user may write it: \' and \\ escapes
        return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return "'" + text.replace("'", "''") + "'" if dialect == "sqlite" else exp.Literal.string(text).sql("mysql")


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(text=_TEXT, backslashes=st.booleans())
def test_string_literals_survive_regeneration(backend: Backend, text: str, backslashes: bool) -> None:
    """The regenerated statement reads every literal exactly as the database reads the original."""
    literal = _quoted(text, backend.name, backslashes=backslashes and backend.name == "mysql")
    result = backend.source().execute(f"SELECT {literal} AS v, COUNT(*) AS n FROM canary", timeout_s=5)
    assert result.columns == ("v", "n")
    assert result.rows == ((text, 5),)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(
    # MySQL identifiers are limited to the Basic Multilingual Plane
    name=st.text(
        st.characters(blacklist_categories=("Cc", "Cf", "Cs", "Co", "Cn"), max_codepoint=0xFFFF), max_size=24
    ).filter(lambda t: t.strip() == t and t != "")
)
def test_quoted_identifiers_survive_regeneration(backend: Backend, name: str) -> None:
    identifier = exp.to_identifier(name, quoted=True).sql("mysql" if backend.name == "mysql" else "sqlite")
    result = backend.source().execute(f"SELECT id AS {identifier} FROM canary WHERE id = 1", timeout_s=5)
    assert result.columns == (name,)
    assert result.rows == ((1,),)


# --- the tool and the settings -------------------------------------------------------------


def test_query_mysql_tool_over_the_datasource(sqlite_backend: Backend) -> None:
    spec = query_mysql_tool(sqlite_backend.source())
    assert "orders(id, customer_id, amount, created_at, note)" in spec.description
    assert "secret" not in spec.description
    output = spec.handler(QueryMysqlArgs(sql="SELECT COUNT(*) AS n FROM canary"), 5.0)
    assert output.raw == {"columns": ["n"], "rows": [[5]], "row_count": 1, "truncated": False}
    with pytest.raises(ToolRefused) as refused:
        spec.handler(QueryMysqlArgs(sql="DELETE FROM canary"), 5.0)
    assert refused.value.reason == "DELETE is not allowed"


def test_settings_defaults() -> None:
    from django.conf import settings as django_settings

    if any(name.startswith("EVIDENCE_SQL_") for name in os.environ):
        pytest.skip("EVIDENCE_SQL_* is set in the environment")
    assert django_settings.EVIDENCE_SQL_URL.startswith("sqlite:///")
    assert django_settings.EVIDENCE_SQL_URL.endswith("business.sqlite3")
    assert django_settings.EVIDENCE_SQL_TABLES == []
    assert django_settings.EVIDENCE_SQL_TIMEOUT_S == 5.0
    assert django_settings.EVIDENCE_SQL_MAX_ROWS == 200
    assert django_settings.EVIDENCE_SQL_MAX_BYTES == 65536
    assert django_settings.EVIDENCE_SQL_MAX_VALUE_BYTES == 8192
    assert django_settings.EVIDENCE_SQL_MAX_COLUMNS == 64
    assert django_settings.EVIDENCE_SQL_MAX_CHARS == 4000


def test_sql_source_from_settings(settings: Any, sqlite_backend: Backend) -> None:
    settings.EVIDENCE_SQL_URL = "none"
    assert sql_source_from_settings() is None
    settings.EVIDENCE_SQL_URL = "NONE"
    assert sql_source_from_settings() is None
    settings.EVIDENCE_SQL_URL = sqlite_backend.url
    settings.EVIDENCE_SQL_TABLES = ["canary"]
    settings.EVIDENCE_SQL_MAX_ROWS = 2
    source = sql_source_from_settings()
    assert source is not None
    assert [t.name for t in source.tables()] == ["canary"]
    assert source.execute("SELECT id FROM canary", timeout_s=5).rows == ((1,), (2,))


@pytest.mark.parametrize(
    "url",
    [
        "postgres://user:hunter2@host/db",
        "mysql://user:hunter2@host/",
        "mysql://root:hunter2@host/mysql",
        "mysql://root@host/information_schema",
        "sqlite:///:memory:",
        "sqlite://",
        "not a url",
    ],
)
def test_bad_urls_are_rejected_without_echoing_them(url: str) -> None:
    with pytest.raises(ValueError, match="EVIDENCE_SQL_URL") as error:
        DatabaseSqlSource(url)
    assert "hunter2" not in str(error.value)


def test_sqlite_urls_follow_the_django_convention(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "rel.sqlite3"
    _build_sqlite(path)
    absolute = DatabaseSqlSource(f"sqlite:///{path}")  # sqlite:////abs/path
    assert {t.name for t in absolute.tables()} >= {"canary"}
    monkeypatch.chdir(tmp_path)
    relative = DatabaseSqlSource("sqlite:///rel.sqlite3", allowed_tables=("canary",))
    assert [t.name for t in relative.tables()] == ["canary"]
