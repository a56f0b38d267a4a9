"""The business datasource behind the agent's ``query_mysql`` tool: read-only SQL, bounded.

:class:`DatabaseSqlSource` implements :class:`harness.ports.SqlSource` for a URL:

- ``sqlite:///relative/path`` or ``sqlite:////absolute/path``: the file is opened read-only
  (``mode=ro`` URI and ``PRAGMA query_only``), ``ATTACH`` is impossible (limit 0), an authorizer
  allows nothing but reading, and a progress handler aborts the statement at its deadline;
- ``mysql://user:password@host:port/database`` (MySQL or MariaDB, through mysqlclient): a new
  connection per statement, single statements only, a ``READ ONLY`` session and transaction,
  the server's statement timeout (``MAX_EXECUTION_TIME`` on MySQL, ``max_statement_time`` on
  MariaDB), and a rollback before it closes. Give it a database user that can only ``SELECT``.

Every statement first passes :func:`knowledge.sql_guard.check_statement`, against the tables
the datasource really has (narrowed by the allow-list); the database runs the regenerated
statement the guard returns. Results are capped in rows and in bytes of cell text, cells are
JSON-friendly scalars, and every failure is a :class:`SqlRefused` with a generic reason: the
database's own messages never reach the agent.
"""

from __future__ import annotations

import contextlib
import logging
import math
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from datetime import time as time_of_day
from decimal import Decimal
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import unquote, urlsplit

from harness.ports import Scalar, SqlRefused, SqlResult, TableInfo
from knowledge.sql_guard import (
    RECURSION_STEPS,
    SYSTEM_SCHEMAS,
    VALUE_UNIT_BYTES,
    check_statement,
    fold_name,
    too_many_columns,
)

__all__ = ["DatabaseSqlSource", "sql_source_from_settings"]

log = logging.getLogger(__name__)

FAILED = "the statement failed"
UNAVAILABLE = "the datasource is unavailable"
REFUSED_BY_DATABASE = "the database refused the statement (the connection is read-only)"
ONE_STATEMENT = "only one statement is allowed"

_INTROSPECTION_TIMEOUT_S = 10.0
_MIN_TIMEOUT_S = 0.01  # never 0: to MariaDB a max_statement_time of 0 means no limit at all
# No string or blob a SQLite statement reads or computes may be bigger (SQLITE_LIMIT_LENGTH):
# with at most max_columns of them a row stays far below the 16 MB SQLite would allow.
_SQLITE_MAX_LENGTH = 1024 * 1024
_SQLITE_PROGRESS_STEPS = 1_000  # VM instructions between deadline checks
# MySQL/MariaDB: how long a KILL QUERY may take to end the statement before the connection
# itself is killed, and how often the process list is looked at meanwhile.
_KILL_GRACE_S = 0.5
_KILL_POLL_S = 0.02
_MAX_DESCRIPTION = 200
_BYTES_SHOWN = 32

# Returns the next row, or None when there are no more.
FetchOne = Callable[[], Sequence[Any] | None]
Collect = Callable[[Sequence[Sequence[Any]] | None, FetchOne], SqlResult]
TRUNCATED_MARK = "…"  # ends every value that was cut to fit a budget


def timeout_reason(timeout_s: float) -> str:
    """The refusal reason for a statement stopped at its deadline."""
    return f"the statement took longer than {timeout_s:g} s"


class _Backend(Protocol):
    dialect: str

    def introspect(self) -> list[TableInfo]:
        """Every user table and view with its columns (raises SqlRefused when unreachable)."""
        ...

    def run(self, sql: str, *, timeout_s: float, row_limit: int, collect: Collect) -> SqlResult:
        """Run one statement on a read-only connection; ``collect`` reads its rows."""
        ...


@dataclass(frozen=True, slots=True)
class _Catalogue:
    visible: tuple[TableInfo, ...]
    allowed: frozenset[str]
    loaded_at: float


class DatabaseSqlSource:
    """A read-only :class:`~harness.ports.SqlSource` over SQLite or MySQL/MariaDB.

    ``allowed_tables`` (case-insensitive) limits what :meth:`tables` lists and what
    :meth:`execute` may read; empty allows every table of the datasource (never a system one).
    ``timeout_s`` is an upper bound on every statement, whatever the caller asks for: at the
    deadline the statement is stopped inside the database (SQLite: interrupted; MySQL/MariaDB:
    ``KILL QUERY`` from a second connection, then ``KILL`` if it is still running). Results are
    read row by row within a byte budget: a value longer than ``max_value_bytes`` is cut and
    marked with ``…``; reading stops (and the statement is stopped) once ``max_rows`` rows or
    ``max_bytes`` bytes are read, and the result says ``truncated``. A result with more than
    ``max_columns`` columns is refused.
    """

    def __init__(
        self,
        url: str,
        *,
        allowed_tables: Iterable[str] = (),
        timeout_s: float = 5.0,
        max_rows: int = 200,
        max_bytes: int = 65_536,
        max_chars: int = 4_000,
        max_columns: int = 64,
        max_value_bytes: int = 8_192,
        tables_ttl_s: float = 60.0,
    ) -> None:
        if min(timeout_s, max_rows, max_bytes, max_chars, max_columns, max_value_bytes) <= 0:
            raise ValueError("timeout_s and every max_* limit must be positive")
        self._backend = _backend_for(url)
        self._exact_allow_list = frozenset(name.strip() for name in allowed_tables if name.strip())
        self._allow_list = frozenset(fold_name(name) for name in self._exact_allow_list)
        self._timeout_s = float(timeout_s)
        self._max_rows = max_rows
        self._max_bytes = max_bytes
        self._max_chars = max_chars
        self._max_columns = max_columns
        self._max_value_bytes = min(max_value_bytes, max_bytes)
        self._tables_ttl_s = tables_ttl_s
        self._lock = threading.Lock()
        self._catalogue: _Catalogue | None = None

    @property
    def dialect(self) -> str:
        """The sqlglot dialect statements are checked and regenerated in."""
        return self._backend.dialect

    def tables(self) -> Sequence[TableInfo]:
        """The tables the agent may query; empty (and logged) when the datasource is unreachable."""
        try:
            return list(self._load_catalogue().visible)
        except SqlRefused:
            log.warning("sql datasource unavailable: no tables listed")
            return []

    def execute(self, sql: str, *, timeout_s: float) -> SqlResult:
        """Check ``sql`` with the guard, then run it read-only within ``timeout_s`` (capped)."""
        limit = max(_MIN_TIMEOUT_S, min(timeout_s, self._timeout_s) if timeout_s > 0 else self._timeout_s)
        catalogue = self._load_catalogue()
        statement = check_statement(
            sql,
            dialect=self.dialect,
            allowed_tables=catalogue.allowed,
            max_chars=self._max_chars,
            max_columns=self._max_columns,
        )
        return self._execute_unchecked(statement, timeout_s=limit)

    def _execute_unchecked(self, sql: str, *, timeout_s: float) -> SqlResult:
        """Run a statement WITHOUT the guard: only the connection's own read-only protections.

        For the tests that prove the connection cannot write; everything else calls
        :meth:`execute`.
        """
        timeout_s = max(_MIN_TIMEOUT_S, timeout_s)
        try:
            return self._backend.run(sql, timeout_s=timeout_s, row_limit=self._max_rows + 1, collect=self._collect)
        except SqlRefused:
            raise
        except Exception as exc:  # noqa: BLE001 - nothing but a generic refusal leaves the datasource
            log.warning("sql statement failed unexpectedly: %s", type(exc).__name__)
            raise SqlRefused(FAILED) from None

    # --- tables ----------------------------------------------------------------------------

    def _load_catalogue(self) -> _Catalogue:
        with self._lock:
            cached = self._catalogue
            if cached is not None and time.monotonic() - cached.loaded_at < self._tables_ttl_s:
                return cached
            found = [t for t in self._backend.introspect() if not _is_system_name(t.name)]
            groups: dict[str, list[str]] = {}
            for table in found:
                groups.setdefault(fold_name(table.name), []).append(table.name)
            visible = []
            for table in found:
                folded = fold_name(table.name)
                if self._allow_list and folded not in self._allow_list:
                    continue
                # The guard matches names case-insensitively: on a case-sensitive server, tables
                # that differ only in case are offered only when the allow-list names them all.
                group = groups[folded]
                if self._allow_list and len(group) > 1 and not all(n in self._exact_allow_list for n in group):
                    log.warning("sql datasource: tables differing only in case are left out")
                    continue
                visible.append(table)
            allowed = frozenset(t.name for t in visible)
            self._catalogue = _Catalogue(tuple(visible), allowed, time.monotonic())
            return self._catalogue

    # --- rows ------------------------------------------------------------------------------

    def _collect(self, description: Sequence[Sequence[Any]] | None, fetchone: FetchOne) -> SqlResult:
        """Read rows one at a time until the rows or the bytes run out; never all at once.

        The caller stops the statement when this returns before the last row.
        """
        if description is not None and len(description) > self._max_columns:
            raise SqlRefused(too_many_columns(self._max_columns))
        columns = tuple(_cut(str(d[0]), 256) for d in description or ())
        rows: list[tuple[Scalar, ...]] = []
        used = 0
        truncated = False
        while True:
            raw = fetchone()
            if raw is None:
                break
            if len(rows) >= self._max_rows:
                truncated = True
                break
            row = tuple(to_scalar(value) for value in raw)
            cut = tuple(_cut(v, self._max_value_bytes) if isinstance(v, str) else v for v in row)
            truncated = truncated or cut != row
            size = sum(_cell_bytes(value) for value in cut)
            if used + size > self._max_bytes:
                truncated = True
                if not rows:  # one huge row: show it cut down rather than nothing
                    rows.append(_shrink(cut, max(1, self._max_bytes - used)))
                break
            rows.append(cut)
            used += size
        return SqlResult(columns, tuple(rows), truncated)


def sql_source_from_settings() -> DatabaseSqlSource | None:
    """The business datasource configured by ``EVIDENCE_SQL_*``, or ``None`` for ``"none"``."""
    from django.conf import settings

    url = str(settings.EVIDENCE_SQL_URL).strip()
    if not url or url.lower() == "none":
        return None
    return DatabaseSqlSource(
        url,
        allowed_tables=settings.EVIDENCE_SQL_TABLES,
        timeout_s=settings.EVIDENCE_SQL_TIMEOUT_S,
        max_rows=settings.EVIDENCE_SQL_MAX_ROWS,
        max_bytes=settings.EVIDENCE_SQL_MAX_BYTES,
        max_chars=settings.EVIDENCE_SQL_MAX_CHARS,
        max_columns=settings.EVIDENCE_SQL_MAX_COLUMNS,
        max_value_bytes=settings.EVIDENCE_SQL_MAX_VALUE_BYTES,
    )


# --- values ----------------------------------------------------------------------------------


def to_scalar(value: Any) -> Scalar:
    """A database value as a JSON-friendly scalar (text for anything JSON has no type for)."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, datetime | date | time_of_day):
        return value.isoformat()
    if isinstance(value, timedelta):
        return _duration(value)
    if isinstance(value, bytes | bytearray | memoryview):
        data = bytes(value)
        return "0x" + data[:_BYTES_SHOWN].hex() + ("…" if len(data) > _BYTES_SHOWN else "")
    if isinstance(value, set | frozenset):
        return ",".join(sorted(str(v) for v in value))
    return str(value)


def _duration(value: timedelta) -> str:
    """A MySQL ``TIME`` value: ``[-]H:MM:SS[.ffffff]``, hours unbounded."""
    sign = "-" if value < timedelta(0) else ""
    micros = abs(value) // timedelta(microseconds=1)
    seconds, micros = divmod(micros, 1_000_000)
    minutes, seconds = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    return f"{sign}{hours}:{minutes:02d}:{seconds:02d}" + (f".{micros:06d}" if micros else "")


def _cell_bytes(value: Scalar) -> int:
    if value is None:
        return 4
    return len(value.encode("utf-8")) if isinstance(value, str) else len(str(value))


def _shrink(row: tuple[Scalar, ...], budget: int) -> tuple[Scalar, ...]:
    share = max(16, budget // max(1, len(row)))
    return tuple(_cut(v, share) if isinstance(v, str) else v for v in row)


def _cut(text: str, limit: int) -> str:
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    return data[: max(0, limit - 3)].decode("utf-8", errors="ignore") + TRUNCATED_MARK


def _is_system_name(name: str) -> bool:
    folded = name.casefold()
    return folded in SYSTEM_SCHEMAS or folded.startswith(("sqlite_", "pragma_"))


# --- URLs ------------------------------------------------------------------------------------


def _backend_for(url: str) -> _Backend:
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme == "sqlite":
        rest = url.split("://", 1)[1].split("?", 1)[0]
        path = unquote(rest[1:] if rest.startswith("/") else rest)
        if not path or path == ":memory:":
            raise ValueError("EVIDENCE_SQL_URL must name a SQLite file")
        return _SqliteBackend(Path(path))
    if scheme in ("mysql", "mariadb", "mysql+mysqldb"):
        parts = urlsplit(url)
        database = unquote(parts.path.lstrip("/"))
        if not database:
            raise ValueError("EVIDENCE_SQL_URL must name a MySQL database")
        if database.casefold() in SYSTEM_SCHEMAS:
            raise ValueError("EVIDENCE_SQL_URL must not name a system schema")
        return _MysqlBackend(
            host=parts.hostname or "127.0.0.1",
            port=parts.port or 3306,
            user=unquote(parts.username or ""),
            password=unquote(parts.password or ""),
            database=database,
        )
    raise ValueError("EVIDENCE_SQL_URL must start with sqlite:// or mysql://")  # never echo it: secrets


# --- SQLite ----------------------------------------------------------------------------------

_SQLITE_DENIED_FUNCTIONS = frozenset(
    {"load_extension", "readfile", "writefile", "edit", "fts3_tokenizer", "zeroblob", "randomblob"}
)


def _sqlite_authorize(action: int, arg1: str | None, arg2: str | None, _db: str | None, _src: str | None) -> int:
    """Allow reading and nothing else: no writes, pragmas, attaches, system or virtual tables."""
    if action in (sqlite3.SQLITE_SELECT, sqlite3.SQLITE_RECURSIVE):
        return sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_READ:
        return sqlite3.SQLITE_DENY if _is_system_name(arg1 or "") else sqlite3.SQLITE_OK
    if action == sqlite3.SQLITE_FUNCTION:
        return sqlite3.SQLITE_DENY if (arg2 or "").lower() in _SQLITE_DENIED_FUNCTIONS else sqlite3.SQLITE_OK
    return sqlite3.SQLITE_DENY


class _SqliteBackend:
    dialect = "sqlite"

    def __init__(self, path: Path) -> None:
        self._path = path

    def _connect(self, *, busy_timeout_s: float, guarded: bool) -> sqlite3.Connection:
        uri = self._path.resolve().as_uri() + "?mode=ro"
        try:
            conn = sqlite3.connect(
                uri, uri=True, timeout=min(busy_timeout_s, 5.0), isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error:
            raise SqlRefused(UNAVAILABLE) from None
        try:
            conn.execute("PRAGMA query_only = ON")
            conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
            conn.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, _SQLITE_MAX_LENGTH)
            if guarded:
                conn.set_authorizer(_sqlite_authorize)
        except sqlite3.Error:
            conn.close()
            raise SqlRefused(UNAVAILABLE) from None
        return conn

    def introspect(self) -> list[TableInfo]:
        conn = self._connect(busy_timeout_s=_INTROSPECTION_TIMEOUT_S, guarded=False)
        try:
            names = conn.execute(
                "SELECT name FROM sqlite_master WHERE type IN ('table', 'view') ORDER BY name"
            ).fetchall()
            tables = []
            for (name,) in names:
                columns = conn.execute("SELECT name FROM pragma_table_info(?) ORDER BY cid", (name,)).fetchall()
                tables.append(TableInfo(str(name), tuple(str(c) for (c,) in columns)))
            return tables
        except sqlite3.Error:
            raise SqlRefused(UNAVAILABLE) from None
        finally:
            conn.close()

    def run(self, sql: str, *, timeout_s: float, row_limit: int, collect: Collect) -> SqlResult:
        conn = self._connect(busy_timeout_s=timeout_s, guarded=True)
        deadline = time.monotonic() + timeout_s
        expired = False

        def past_deadline() -> int:
            nonlocal expired
            expired = expired or time.monotonic() > deadline
            return 1 if expired else 0

        conn.set_progress_handler(past_deadline, _SQLITE_PROGRESS_STEPS)
        # The progress handler runs between VM instructions; interrupt() also reaches the loops
        # inside one (a sort), from a timer thread.
        closing = threading.Lock()

        def interrupt() -> None:
            nonlocal expired
            with closing:
                expired = True
                with contextlib.suppress(sqlite3.Error):
                    conn.interrupt()

        timer = threading.Timer(timeout_s, interrupt)
        timer.daemon = True
        timer.start()
        try:
            cursor = conn.execute(sql)
            return collect(cursor.description, cursor.fetchone)
        except (sqlite3.Error, sqlite3.Warning) as exc:
            raise SqlRefused(timeout_reason(timeout_s) if expired else _sqlite_reason(exc)) from None
        finally:
            timer.cancel()
            with closing:
                conn.close()


def _sqlite_reason(exc: Exception) -> str:
    text = str(exc).lower()  # classified here, never shown
    if "one statement" in text:
        return ONE_STATEMENT
    if any(k in text for k in ("not authorized", "readonly", "read-only", "query_only", "prohibited", "attach")):
        return REFUSED_BY_DATABASE
    return FAILED


# --- MySQL / MariaDB -------------------------------------------------------------------------

_MYSQL_TIMEOUT_CODES = frozenset({1317, 1969, 3024, 2013})  # interrupted, statement time, lost mid-query
_MYSQL_REFUSED_CODES = frozenset({1044, 1142, 1143, 1227, 1290, 1792})  # denied, read-only
_MYSQL_COLUMNS = (
    "SELECT c.TABLE_NAME, c.COLUMN_NAME, t.TABLE_COMMENT, t.TABLE_TYPE "
    "FROM information_schema.COLUMNS AS c JOIN information_schema.TABLES AS t "
    "ON t.TABLE_SCHEMA = c.TABLE_SCHEMA AND t.TABLE_NAME = c.TABLE_NAME "
    "WHERE c.TABLE_SCHEMA = DATABASE() ORDER BY c.TABLE_NAME, c.ORDINAL_POSITION"
)
_MYSQL_PRIVILEGES = (
    "SELECT PRIVILEGE_TYPE FROM information_schema.USER_PRIVILEGES WHERE GRANTEE = %s "
    "UNION SELECT PRIVILEGE_TYPE FROM information_schema.SCHEMA_PRIVILEGES "
    "WHERE GRANTEE = %s AND TABLE_SCHEMA = DATABASE()"
)
_PRIVILEGES_CHECKED: set[tuple[str, int, str]] = set()  # warned about once per process
# What a datasource user should not have: the guard is then the only thing stopping a write.
_MYSQL_RISKY_PRIVILEGES = frozenset({"ALTER", "CREATE", "DELETE", "DROP", "FILE", "INSERT", "SUPER", "UPDATE"})


class _MysqlBackend:
    dialect = "mysql"

    def __init__(self, *, host: str, port: int, user: str, password: str, database: str) -> None:
        self._params: dict[str, Any] = {
            "host": host,
            "port": port,
            "user": user,
            "password": password,
            "database": database,
        }

    def _connect(self, timeout_s: float) -> Any:
        import MySQLdb

        wait = max(1, math.ceil(timeout_s))
        try:
            return MySQLdb.connect(
                **self._params,
                charset="utf8mb4",
                use_unicode=True,
                autocommit=False,
                multi_statements=False,
                local_infile=False,
                connect_timeout=min(wait, 10),
                # A backstop only: the server's statement timeout and the watchdog's KILL fire first.
                read_timeout=wait + 2,
                write_timeout=wait + 2,
            )
        except MySQLdb.Error:
            raise SqlRefused(UNAVAILABLE) from None

    @staticmethod
    def _prepare(conn: Any, *, timeout_s: float, row_limit: int | None) -> None:
        """Make the session read-only and bounded before anything else runs; fail closed."""
        mariadb = "mariadb" in str(conn.get_server_info()).lower()
        wait = max(1, math.ceil(timeout_s))
        statements = [
            "SET SESSION TRANSACTION READ ONLY",
            # A known parsing mode: the one sqlglot's MySQL dialect generates for.
            "SET SESSION sql_mode = 'NO_ENGINE_SUBSTITUTION'",
            f"SET SESSION max_statement_time = {max(_MIN_TIMEOUT_S, timeout_s):.3f}"
            if mariadb
            else f"SET SESSION MAX_EXECUTION_TIME = {max(1, round(timeout_s * 1000))}",
            f"SET SESSION lock_wait_timeout = {wait}",
            f"SET SESSION innodb_lock_wait_timeout = {wait}",
        ]
        # Every GROUP_CONCAT result is cut at one size unit of the guard's model, and recursion
        # stops where the guard assumed it would.
        statements.append(f"SET SESSION group_concat_max_len = {VALUE_UNIT_BYTES}")
        statements.append(
            f"SET SESSION max_recursive_iterations = {RECURSION_STEPS}"
            if mariadb
            else f"SET SESSION cte_max_recursion_depth = {RECURSION_STEPS}"
        )
        if row_limit is not None:
            statements.append(f"SET SESSION sql_select_limit = {int(row_limit)}")
        statements.append("START TRANSACTION READ ONLY")
        cursor = conn.cursor()
        try:
            for statement in statements:
                cursor.execute(statement)
        finally:
            cursor.close()

    def introspect(self) -> list[TableInfo]:
        import MySQLdb

        conn = self._connect(_INTROSPECTION_TIMEOUT_S)
        try:
            self._prepare(conn, timeout_s=_INTROSPECTION_TIMEOUT_S, row_limit=None)
            cursor = conn.cursor()
            cursor.execute(_MYSQL_COLUMNS)
            rows = cursor.fetchall()
            key = (self._params["host"], self._params["port"], self._params["user"])
            if key not in _PRIVILEGES_CHECKED:
                _PRIVILEGES_CHECKED.add(key)
                self._warn_about_privileges(cursor)
        except MySQLdb.Error:
            raise SqlRefused(UNAVAILABLE) from None
        finally:
            _close(conn)
        columns: dict[str, list[str]] = {}
        descriptions: dict[str, str] = {}
        for table, column, comment, kind in rows:
            columns.setdefault(str(table), []).append(str(column))
            text = str(comment or "").strip()
            descriptions[str(table)] = "" if str(kind).upper() == "VIEW" and text == "VIEW" else text
        return [TableInfo(name, tuple(cols), descriptions[name][:_MAX_DESCRIPTION]) for name, cols in columns.items()]

    @staticmethod
    def _warn_about_privileges(cursor: Any) -> None:
        """Log when the datasource user could write or touch files.

        The session is read-only, but ``SELECT ... INTO OUTFILE`` needs only the FILE privilege:
        the guard would be all that stops it. Give the datasource a SELECT-only user.
        """
        import MySQLdb

        try:
            cursor.execute("SELECT CURRENT_USER()")
            user, _, host = str(cursor.fetchone()[0]).rpartition("@")
            grantee = f"'{user}'@'{host}'"
            cursor.execute(_MYSQL_PRIVILEGES, (grantee, grantee))
            risky = sorted({str(p).upper() for (p,) in cursor.fetchall()} & _MYSQL_RISKY_PRIVILEGES)
        except MySQLdb.Error:
            return  # a check for the operator's benefit, never a reason to refuse
        if risky:
            log.warning("sql datasource user holds %s privileges: give it a SELECT-only user", ", ".join(risky))

    def run(self, sql: str, *, timeout_s: float, row_limit: int, collect: Collect) -> SqlResult:
        import MySQLdb  # its cursors module comes with it

        conn = self._connect(timeout_s)
        try:
            try:
                self._prepare(conn, timeout_s=timeout_s, row_limit=row_limit)
            except MySQLdb.Error:
                raise SqlRefused(UNAVAILABLE) from None
            # Unbuffered: rows are read one by one, up to the caps, never all at once.
            cursor = conn.cursor(MySQLdb.cursors.SSCursor)
            watchdog = _Watchdog(self, int(conn.thread_id()), timeout_s)
            reader = _Reader(cursor.fetchone)
            try:
                cursor.execute(sql)  # no arguments: the text is sent as is, never %-formatted
                reader.started = True
                return collect(cursor.description, reader.fetchone)
            except MySQLdb.Error as exc:
                reader.started = False  # the statement ended with the error
                raise SqlRefused(
                    timeout_reason(timeout_s) if watchdog.fired else _mysql_reason(exc, timeout_s)
                ) from None
            finally:
                # Rows left unread: the server would go on computing them after we hang up.
                watchdog.finish(kill=reader.started and not reader.exhausted)
        finally:
            _close(conn)

    def kill(self, thread_id: int) -> None:
        """Stop statement ``thread_id`` from a second connection and wait until it is gone.

        ``KILL QUERY`` first; if the process list still shows it running after a short grace,
        ``KILL`` the connection, which also wakes a client waiting for its next row.
        """
        import MySQLdb

        try:
            conn = MySQLdb.connect(
                **{k: v for k, v in self._params.items() if k != "database"},
                connect_timeout=2,
                read_timeout=2,
                write_timeout=2,
                autocommit=True,
            )
        except MySQLdb.Error:
            log.warning("sql watchdog could not connect to stop a statement")
            return
        try:
            cursor = conn.cursor()
            for statement in (f"KILL QUERY {thread_id}", f"KILL {thread_id}"):
                try:
                    cursor.execute(statement)
                except MySQLdb.OperationalError as exc:
                    if exc.args and exc.args[0] == 1094:  # no such thread: it ended meanwhile
                        return
                    # A KILL the server refused or answered late: the process list still decides.
                    code = exc.args[0] if exc.args else "?"
                    log.warning("sql watchdog: %s answered error %s", statement.rsplit(" ", 1)[0], code)
                if _wait_until_idle(cursor, thread_id, _KILL_GRACE_S):
                    return
            log.warning("sql statement still running after KILL")
        except MySQLdb.Error as exc:
            log.warning("sql watchdog failed: %s %s", type(exc).__name__, exc.args[0] if exc.args else "")
        finally:
            _close(conn)


def _wait_until_idle(cursor: Any, thread_id: int, grace_s: float) -> bool:
    """Whether thread ``thread_id`` is gone or idle within ``grace_s`` seconds."""
    deadline = time.monotonic() + grace_s
    while True:
        cursor.execute("SELECT COMMAND FROM information_schema.PROCESSLIST WHERE ID = %s", (thread_id,))
        row = cursor.fetchone()
        if row is None or str(row[0]) in ("Sleep", "Killed"):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(_KILL_POLL_S)


class _Reader:
    """``fetchone`` that remembers whether the last row was read."""

    def __init__(self, fetchone: FetchOne) -> None:
        self._fetchone = fetchone
        self.started = False
        self.exhausted = False

    def fetchone(self) -> Sequence[Any] | None:
        row = self._fetchone()
        self.exhausted = row is None
        return row


class _Watchdog:
    """Kills a MySQL/MariaDB statement from a second connection at its deadline.

    The server's own statement timeout is not enough: it is checked between rows, and a
    client blocked on a read would otherwise wait for the network timeout.
    """

    def __init__(self, backend: _MysqlBackend, thread_id: int, timeout_s: float) -> None:
        self._backend = backend
        self._thread_id = thread_id
        self._lock = threading.Lock()
        self._done = False
        self.fired = False
        self._timer = threading.Timer(timeout_s, self._fire)
        self._timer.daemon = True
        self._timer.start()

    def _fire(self) -> None:
        with self._lock:
            if self._done:
                return
            self.fired = True
            self._backend.kill(self._thread_id)

    def finish(self, *, kill: bool) -> None:
        """Stop the timer (waiting for a kill in progress); kill now if asked and not yet done."""
        self._timer.cancel()
        with self._lock:
            if kill and not self.fired:
                self._backend.kill(self._thread_id)
            self._done = True


def _mysql_reason(exc: Exception, timeout_s: float) -> str:
    code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
    if code in _MYSQL_TIMEOUT_CODES:
        return timeout_reason(timeout_s)
    if code in _MYSQL_REFUSED_CODES:
        return REFUSED_BY_DATABASE
    return FAILED


def _close(conn: Any) -> None:
    """Roll back and close; with rows left unread the rollback fails and closing ends it."""
    for step in (conn.rollback, conn.close):
        try:
            step()
        except Exception:  # noqa: BLE001, S112 - best effort: the connection is discarded either way
            continue
