"""What a management command needs before it starts, checked so that a wrong setting or a service
that does not answer is one line saying which, never a traceback.

``manage.py`` calls :func:`prepare` before Django runs the command and prints a
:class:`StartupError` as ``error: …``. A command that uses the service's tables first gets the
schema up to date: pending migrations are applied, as ``serve`` always did, so ``seed_demo`` or
``create_api_key`` on a fresh installation just work. ``call_command`` (the tests, ``demo``
calling ``seed_demo``) skips all of this: its caller has the database ready.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit, urlunsplit

__all__ = [
    "StartupError",
    "database_check",
    "database_settings",
    "prepare",
    "report_startup_errors",
    "safe_url",
    "schema_ensure",
    "static_ensure",
]


class StartupError(Exception):
    """A command cannot start: a setting is malformed or a service does not answer. The message
    is one line, safe to print: URLs in it carry no password."""


#: URL schemes of the databases the service runs on (mysqlclient, the standard sqlite3)
DATABASE_SCHEMES = frozenset({"sqlite", "mysql", "mysql2"})
_EXAMPLES = "e.g. mysql://user:password@host:3306/name or sqlite:///path/to/file.sqlite3"

#: commands that need no database (Django's own, which work without one)
NO_DATABASE = frozenset(
    {
        "help",
        "version",
        "check",
        "diffsettings",
        "makemigrations",
        "squashmigrations",
        "optimizemigration",
        "makemessages",
        "compilemessages",
        "startapp",
        "startproject",
        "sendtestemail",
        "collectstatic",
        "findstatic",
        "shell",
        "test",
        "testserver",
    }
)
#: commands that start the web server: the static files it serves are collected first
SERVES = frozenset({"serve", "demo"})
#: commands that look at the migrations or the schema themselves: never migrated for
OWN_SCHEMA = frozenset({"migrate", "showmigrations", "sqlmigrate", "inspectdb", "dbshell"})


def safe_url(url: str) -> str:
    """``url`` as messages show it: without its password and query string."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return f"{url.split(':', 1)[0] or '?'}://…"
    if "@" not in parts.netloc:
        return urlunsplit((parts.scheme, parts.netloc, parts.path, "", "")) if parts.netloc else url.split("?", 1)[0]
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    netloc = (f"{parts.username}@" if parts.username else "") + host + (f":{port}" if port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def database_settings(url: str, **options: Any) -> dict[str, Any]:
    """Django's ``DATABASES`` entry for ``DATABASE_URL``, or a :class:`StartupError` saying what
    is wrong with it (never repeating the URL's password)."""
    import dj_database_url

    def malformed(reason: str) -> StartupError:
        return StartupError(f"DATABASE_URL is malformed: {reason}")

    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if not scheme:
        raise malformed(f"expected scheme://…, {_EXAMPLES}")
    if scheme not in DATABASE_SCHEMES:
        raise malformed(f"unsupported scheme {scheme!r}: this service runs on MySQL/MariaDB or SQLite, {_EXAMPLES}")
    parts = urlsplit(url)
    try:
        parts.port  # noqa: B018 - parsing it is the check
    except ValueError:
        raise malformed("the port is not a number (quote special characters of a password as %XX)") from None
    if scheme != "sqlite" and not parts.path.strip("/"):
        raise malformed(f"no database name after the host, {_EXAMPLES}")
    try:
        return dict(dj_database_url.parse(url, **options))
    except ValueError:
        raise malformed(f"not a valid URL (quote special characters of a password as %XX), {_EXAMPLES}") from None


def _reason(exc: BaseException) -> str:
    """A driver's error in one line: ``(2003) Can't connect…`` for MySQL, the message otherwise."""
    args: tuple[object, ...] = tuple(getattr(exc, "args", ()))
    code, message = (args[0], args[1]) if len(args) == 2 else (None, None)
    text = f"({code}) {message}" if isinstance(code, int) else str(exc) or type(exc).__name__
    return " ".join(text.split())


def database_check() -> None:
    """Connect to the default database, or raise :class:`StartupError` saying where and why not."""
    from django.conf import settings
    from django.db import connection

    try:
        connection.ensure_connection()
    except Exception as exc:  # noqa: BLE001 - any driver error means the same to the user
        raise StartupError(
            f"cannot connect to the database at {safe_url(str(settings.DATABASE_URL))}: {_reason(exc)}"
        ) from None


def schema_ensure() -> int:
    """Apply the migrations the database lacks; returns how many there were."""
    from django.core.management import call_command
    from django.db import DatabaseError, connection
    from django.db.migrations.executor import MigrationExecutor

    try:
        executor = MigrationExecutor(connection)
        pending = len(executor.migration_plan(executor.loader.graph.leaf_nodes()))
        if pending:
            call_command("migrate", interactive=False, verbosity=0)
    except DatabaseError as exc:
        raise StartupError(f"applying the database migrations failed: {_reason(exc)}") from None
    return pending


def static_ensure() -> None:
    """Collect the static files (the admin's, the API docs') into ``STATIC_ROOT``, where the web
    server's WhiteNoise finds them; only files that changed are copied again."""
    from django.conf import settings
    from django.core.management import call_command

    try:
        call_command("collectstatic", interactive=False, verbosity=0)
    except OSError as exc:
        raise StartupError(
            f"cannot collect the static files into {settings.STATIC_ROOT}: {exc.strerror or exc}"
        ) from None


def report_startup_errors() -> None:
    """In a process that ``manage.py`` does not start (uvicorn, a Celery worker): a
    :class:`StartupError` that ends it is printed as its one line, ``error: …``, not as a
    traceback. Other exceptions reach the previous hook unchanged."""
    previous = sys.excepthook
    if getattr(previous, "reports_startup_errors", False):
        return

    def hook(kind: type[BaseException], exc: BaseException, traceback: TracebackType | None) -> None:
        if isinstance(exc, StartupError):
            sys.stderr.write(f"error: {exc}\n")
        else:
            previous(kind, exc, traceback)

    hook.reports_startup_errors = True  # type: ignore[attr-defined]
    sys.excepthook = hook


def prepare(args: Sequence[str]) -> None:
    """Before ``manage.py`` runs a command (``args`` without the program): the settings load,
    the database answers and, for a command that uses the tables, its schema is up to date."""
    import django

    django.setup()
    command = args[0] if args else "help"
    if command in NO_DATABASE or command.startswith("-") or {"-h", "--help", "--version"} & set(args):
        return
    database_check()
    if command not in OWN_SCHEMA and (applied := schema_ensure()):
        sys.stderr.write(f"applied {applied} pending database migration{'s' * (applied != 1)}\n")
    if command in SERVES:
        static_ensure()
