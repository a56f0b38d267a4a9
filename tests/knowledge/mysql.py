"""A MySQL/MariaDB connection for tests that set up their own scratch databases."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest


def mysql_connect(url: str, database: str | None = None) -> Any:
    """An autocommit connection to the server of ``url`` (as root in CI), optionally to ``database``."""
    import MySQLdb

    parts = urlsplit(url)
    params: dict[str, Any] = {
        "host": parts.hostname or "127.0.0.1",
        "port": parts.port or 3306,
        "user": parts.username or "root",
        "password": parts.password or "",
        "charset": "utf8mb4",
        "autocommit": True,
    }
    if database:
        params["database"] = database
    return MySQLdb.connect(**params)


@contextlib.contextmanager
def scratch_mysql_database(prefix: str) -> Iterator[tuple[Any, str, str]]:
    """A database of its own on the test server (``TEST_MYSQL_URL``), dropped afterwards: yields
    an autocommit cursor already using it, the server URL and the database name. Skips the test
    when no server answers."""
    server = os.environ.get("TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306").rstrip("/")
    try:
        admin = mysql_connect(server)
    except Exception as exc:
        pytest.skip(f"no MySQL/MariaDB server for these tests ({type(exc).__name__})")
    database = f"{prefix}_{os.getpid()}"
    cursor = admin.cursor()
    cursor.execute(f"DROP DATABASE IF EXISTS `{database}`")
    cursor.execute(f"CREATE DATABASE `{database}` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci")
    cursor.execute(f"USE `{database}`")
    try:
        yield cursor, server, database
    finally:
        cursor.execute(f"DROP DATABASE IF EXISTS `{database}`")
        admin.close()
