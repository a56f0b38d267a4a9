"""``manage.py`` before a command: a malformed or unreachable database is one line and a non-zero
exit, never a traceback; a database without its tables gets them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings

from core.startup import StartupError, database_settings, safe_url

ROOT = Path(__file__).resolve().parents[2]
#: what the service's own environment would hold; each test sets the rest
_DROPPED = ("DATABASE_URL", "DJANGO_SETTINGS_MODULE", "REDIS_URL", "TEST_REDIS_URL", "SBA_STACK_PID", "VAR_DIR")


def manage(*args: str, var_dir: Path, timeout: float = 120, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k not in _DROPPED}
    environ.update(
        {
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "VAR_DIR": str(var_dir),
            "REDIS_URL": str(settings.REDIS_URL),  # the tests' Redis database, never the default
            "EMBEDDINGS_PROVIDER": "none",
            "DB_CONNECT_TIMEOUT_S": "3",
            **env,
        }
    )
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=environ,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def only_line(result: subprocess.CompletedProcess[str]) -> str:
    output = result.stdout + result.stderr
    assert "Traceback" not in output
    assert result.returncode != 0
    lines = output.splitlines()
    assert len(lines) == 1, output
    return lines[0]


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("notaurl://", "unsupported scheme 'notaurl'"),
        ("postgres://app:hunter2@db.internal/shop", "unsupported scheme 'postgres'"),
        ("mysql://root:hunter2@127.0.0.1:abc/x", "the port is not a number"),
        ("mysql://root:hunter#2@127.0.0.1/x", "the port is not a number"),  # an unquoted '#'
        ("mysql://root:hunter2@127.0.0.1:3306", "no database name after the host"),
        ("127.0.0.1:3306/shop", "expected scheme://…"),
    ],
)
def test_a_malformed_database_url_is_one_line(tmp_path: Path, url: str, reason: str) -> None:
    line = only_line(manage("migrate", var_dir=tmp_path, DATABASE_URL=url))

    assert line.startswith(f"error: DATABASE_URL is malformed: {reason}")
    assert "hunter" not in line


@pytest.mark.parametrize("command", ["migrate", "seed_demo", "serve", "create_api_key"])
def test_an_unreachable_database_is_one_line_for_every_command(tmp_path: Path, command: str) -> None:
    args = [command, "--user", "alice"] if command == "create_api_key" else [command]
    line = only_line(manage(*args, var_dir=tmp_path, DATABASE_URL="mysql://root:hunter2@127.0.0.1:1/x"))

    assert line.startswith("error: cannot connect to the database at mysql://root@127.0.0.1:1/x: (2002) ")
    assert "hunter2" not in line


def test_a_sqlite_file_that_cannot_be_opened_is_one_line(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/missing/folder/db.sqlite3"

    line = only_line(manage("migrate", var_dir=tmp_path, DATABASE_URL=url))

    assert line == f"error: cannot connect to the database at {url}: unable to open database file"


def test_commands_that_need_no_database_run_without_one(tmp_path: Path) -> None:
    for args in (["help"], ["check"], ["migrate", "--help"]):
        result = manage(*args, var_dir=tmp_path, DATABASE_URL="mysql://root@127.0.0.1:1/x")
        assert result.returncode == 0, (args, result.stderr)


def test_a_fresh_installation_gets_its_tables_before_the_first_command(tmp_path: Path) -> None:
    first = manage("seed_demo", "--quiet", var_dir=tmp_path / "fresh")

    assert first.returncode == 0, first.stderr
    assert "Traceback" not in first.stderr
    assert first.stderr.startswith("applied ") and first.stderr.endswith(" pending database migrations\n")
    assert first.stdout.startswith("demo data: ")

    again = manage("create_api_key", "--user", "alice", var_dir=tmp_path / "fresh")
    assert again.returncode == 0
    assert "applied" not in again.stderr  # nothing left to apply
    assert len(again.stdout.splitlines()) == 2  # the key and its webhook secret, as before


def test_the_url_in_messages_has_no_password() -> None:
    assert safe_url("mysql://root:hunter2@db.internal:3306/shop?ssl=1") == "mysql://root@db.internal:3306/shop"
    assert safe_url("redis://:hunter2@[::1]:6380/2") == "redis://[::1]:6380/2"
    assert safe_url("sqlite:////var/lib/app/db.sqlite3") == "sqlite:////var/lib/app/db.sqlite3"
    assert "hunter2" not in safe_url("mysql://root:hunter2@db:port/shop")


def test_the_settings_of_a_good_url_are_django_s() -> None:
    config = database_settings("mysql://app:p%40ss@db.internal:3307/shop", conn_max_age=5)
    assert (config["ENGINE"], config["NAME"], config["HOST"], config["PORT"]) == (
        "django.db.backends.mysql",
        "shop",
        "db.internal",
        3307,
    )
    assert config["PASSWORD"] == "p@ss" and config["CONN_MAX_AGE"] == 5
    with pytest.raises(StartupError, match="malformed"):
        database_settings("mysql:/db.internal/shop")


@pytest.mark.parametrize(
    ("name", "value", "kind"), [("LOG_MAX_LINES", "abc", "a whole number"), ("RUN_SWEEP_S", "5s", "a number")]
)
def test_a_setting_that_is_not_a_number_is_one_line(tmp_path: Path, name: str, value: str, kind: str) -> None:
    setting: dict[str, Any] = {name: value}
    line = only_line(manage("migrate", var_dir=tmp_path, **setting))

    assert line == f"error: {name} must be {kind}, not {value!r}"
