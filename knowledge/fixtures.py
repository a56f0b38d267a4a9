"""Business tables described in YAML, written to a SQLite file or a MySQL/MariaDB database.

Used by ``seed_demo`` (the demo's business database) and ``eval_scenarios`` (one scratch
SQLite file per scenario). The format::

    config_changes:
      description: Configuration changes, newest last     # optional; shown to the agent
      columns: {id: integer, service: text, config_key: text, new_value: text, changed_at: datetime}
      rows:
        - [1, payment-service, db.pool.max_size, "10", "2026-11-18 09:58:00"]

Column types are ``integer``, ``real``, ``text`` and ``datetime`` (``YYYY-MM-DD HH:MM:SS``, UTC).
This writes with its own connection: the agent's datasource stays read-only.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import yaml

TYPES = {
    "integer": ("INTEGER", "BIGINT"),
    "real": ("REAL", "DOUBLE"),
    "text": ("TEXT", "TEXT"),
    "datetime": ("TEXT", "DATETIME"),
}
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")


class FixtureError(ValueError):
    """A table fixture that cannot be used; the message says where and why."""


@dataclass(frozen=True, slots=True)
class Table:
    name: str
    columns: tuple[tuple[str, str], ...]
    rows: tuple[tuple[Any, ...], ...]
    description: str = ""


def _identifier(value: Any, where: str) -> str:
    if not isinstance(value, str) or not _IDENTIFIER.fullmatch(value):
        raise FixtureError(f"{where}: {value!r} is not a valid table or column name")
    return value


def parse_tables(data: Any, *, source: str = "tables") -> list[Table]:
    if not isinstance(data, Mapping):
        raise FixtureError(f"{source}: expected a mapping of table name to table")
    tables = []
    for name, spec in data.items():
        where = f"{source}: table {name}"
        _identifier(name, source)
        if not isinstance(spec, Mapping) or not isinstance(spec.get("columns"), Mapping) or not spec["columns"]:
            raise FixtureError(f"{where}: needs 'columns' (name: type) and 'rows'")
        columns = []
        for column, kind in spec["columns"].items():
            _identifier(column, where)
            if kind not in TYPES:
                raise FixtureError(f"{where}: column {column} has type {kind!r}; use one of {', '.join(TYPES)}")
            columns.append((column, str(kind)))
        rows = spec.get("rows") or []
        if not isinstance(rows, Sequence) or isinstance(rows, str):
            raise FixtureError(f"{where}: 'rows' must be a list of lists")
        for i, row in enumerate(rows, 1):
            if not isinstance(row, Sequence) or isinstance(row, str) or len(row) != len(columns):
                raise FixtureError(f"{where}: row {i} must list {len(columns)} values")
        tables.append(
            Table(
                name=str(name),
                columns=tuple(columns),
                rows=tuple(tuple(_cell(v, f"{where}, row {i}") for v in row) for i, row in enumerate(rows, 1)),
                description=str(spec.get("description") or ""),
            )
        )
    return tables


def _cell(value: Any, where: str) -> Any:
    if value is None or isinstance(value, (int, float, str)):
        return value
    if isinstance(value, datetime):  # YAML reads unquoted timestamps as datetimes
        if value.tzinfo is not None:
            value = value.astimezone(UTC).replace(tzinfo=None)
        return value.isoformat(sep=" ", timespec="seconds")
    if isinstance(value, date):
        return value.isoformat()
    raise FixtureError(f"{where}: cell value {value!r} is not a number, text or null")


def read_tables(path: Path) -> list[Table]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise FixtureError(f"{path}: cannot be read as YAML ({type(exc).__name__})") from None
    return parse_tables(data, source=str(path))


def merge(tables: Sequence[Table]) -> list[Table]:
    """Tables of the same name (from several incidents) become one, rows in order."""
    merged: dict[str, Table] = {}
    for table in tables:
        known = merged.get(table.name)
        if known is None:
            merged[table.name] = table
        elif known.columns != table.columns:
            raise FixtureError(f"table {table.name} is defined twice with different columns")
        else:
            merged[table.name] = Table(table.name, known.columns, known.rows + table.rows, known.description)
    return list(merged.values())


def _sqlite_path(url: str) -> Path:
    return Path(unquote(url.removeprefix("sqlite:///"))) if url.startswith("sqlite:///") else Path(url)


def write_tables(url: str, tables: Sequence[Table]) -> None:
    """(Re)create ``tables`` in the database at ``url`` (``sqlite:///file`` or ``mysql://``)."""
    if url.startswith("mysql://"):
        _write_mysql(url, tables)
        return
    path = _sqlite_path(url)
    path.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(path) as conn:
        for table in tables:
            columns = ", ".join(f'"{name}" {TYPES[kind][0]}' for name, kind in table.columns)
            conn.execute(f'DROP TABLE IF EXISTS "{table.name}"')
            conn.execute(f'CREATE TABLE "{table.name}" ({columns})')
            marks = ", ".join("?" for _ in table.columns)
            conn.executemany(f'INSERT INTO "{table.name}" VALUES ({marks})', table.rows)  # noqa: S608
    conn.close()


def _write_mysql(url: str, tables: Sequence[Table]) -> None:
    import MySQLdb

    parts = urlparse(url)
    conn = MySQLdb.connect(
        host=parts.hostname or "127.0.0.1",
        port=parts.port or 3306,
        user=unquote(parts.username or "root"),
        password=unquote(parts.password or ""),
        database=parts.path.lstrip("/"),
        charset="utf8mb4",
    )
    try:
        cursor = conn.cursor()
        for table in tables:
            columns = ", ".join(f"`{name}` {TYPES[kind][1]}" for name, kind in table.columns)
            comment = conn.escape_string(table.description[:1000].encode()).decode()
            cursor.execute(f"DROP TABLE IF EXISTS `{table.name}`")
            cursor.execute(f"CREATE TABLE `{table.name}` ({columns}) COMMENT='{comment}'")
            marks = ", ".join("%s" for _ in table.columns)
            cursor.executemany(f"INSERT INTO `{table.name}` VALUES ({marks})", table.rows)  # noqa: S608
        conn.commit()
    finally:
        conn.close()
