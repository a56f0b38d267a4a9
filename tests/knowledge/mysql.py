"""A MySQL/MariaDB connection for tests that set up their own scratch databases."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit


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
