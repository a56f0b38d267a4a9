"""One secret key per installation: set by DJANGO_SECRET_KEY (required on a deployment), or
generated once into VAR_DIR/secret_key and shared by every process that starts, even at once."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from django.conf import settings

from config.env import local_secret, secret_key
from core.startup import StartupError
from tests.config.test_startup import ROOT, manage, only_line

_PRINT_KEY = "import django; django.setup(); from django.conf import settings; print(settings.SECRET_KEY)"
_MISSING = "error: DJANGO_SECRET_KEY is not set"


def _environ(var_dir: Path, **env: str) -> dict[str, str]:
    environ = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SECRET_KEY", "SBA_STACK_PID", "VAR_DIR")}
    environ.update(
        {
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "VAR_DIR": str(var_dir),
            "REDIS_URL": str(settings.REDIS_URL),
            "EMBEDDINGS_PROVIDER": "none",
            **env,
        }
    )
    return environ


def test_processes_starting_at_once_share_one_generated_key(tmp_path: Path) -> None:
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", _PRINT_KEY],
            cwd=ROOT,
            env=_environ(tmp_path),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    keys = {process.communicate(timeout=120)[0].strip() for process in processes}
    assert all(process.returncode == 0 for process in processes)
    stored = tmp_path / "secret_key"
    assert keys == {stored.read_text().strip()}
    assert len(keys.pop()) >= 50
    assert stat.S_IMODE(stored.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".secret_key")) == []
    # and a later start (a restart, a manage.py command) reads the same key
    again = subprocess.run(
        [sys.executable, "-c", _PRINT_KEY], cwd=ROOT, env=_environ(tmp_path), capture_output=True, text=True, check=True
    )
    assert again.stdout.strip() == stored.read_text().strip()


def test_threads_racing_for_a_fresh_file_agree_and_leave_nothing_behind(tmp_path: Path) -> None:
    for attempt in range(20):
        path = tmp_path / f"secret-{attempt}"
        barrier = threading.Barrier(8)
        seen: list[str] = []

        def start(path: Path = path, barrier: threading.Barrier = barrier, seen: list[str] = seen) -> None:
            barrier.wait()
            seen.append(local_secret(path))

        threads = [threading.Thread(target=start) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(seen) == 8 and set(seen) == {path.read_text().strip()}
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"secret-{i}" for i in range(20))


def test_a_configured_key_is_used_and_no_file_is_written(tmp_path: Path) -> None:
    path = tmp_path / "secret_key"
    key = secret_key(configured="k" * 60, debug=False, allowed_hosts=["api.example.com"], path=path)
    assert key == "k" * 60
    assert not path.exists()


@pytest.mark.parametrize(
    ("debug", "hosts"),
    [(False, ["localhost", "127.0.0.1", "[::1]", "testserver"]), (False, [".localhost"]), (True, ["api.example.com"])],
)
def test_local_use_gets_the_generated_key(tmp_path: Path, debug: bool, hosts: list[str]) -> None:
    path = tmp_path / "secret_key"
    assert secret_key(configured="", debug=debug, allowed_hosts=hosts, path=path) == path.read_text().strip()


def test_a_deployment_without_a_key_is_refused(tmp_path: Path) -> None:
    with pytest.raises(StartupError, match=r"DJANGO_SECRET_KEY is not set.*\(\*, api\.example\.com\)"):
        secret_key(configured="", debug=False, allowed_hosts=["localhost", "api.example.com", "*"], path=tmp_path / "k")
    assert not (tmp_path / "k").exists()


def test_an_empty_key_file_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "secret_key").write_text("\n")
    with pytest.raises(StartupError, match="is empty: delete it"):
        local_secret(tmp_path / "secret_key")


def test_manage_py_without_a_key_on_a_deployment_is_one_line(tmp_path: Path) -> None:
    result = manage("check", var_dir=tmp_path, DJANGO_DEBUG="false", DJANGO_ALLOWED_HOSTS="api.example.com")
    assert only_line(result).startswith(_MISSING)
    assert not (tmp_path / "secret_key").exists()


@pytest.mark.parametrize(
    "command",
    [
        ["-m", "uvicorn", "config.asgi:application", "--port", "0"],
        ["-m", "uvicorn", "config.asgi:application", "--port", "0", "--workers", "2"],
        ["-m", "celery", "-A", "config", "worker", "--pool", "solo", "--without-gossip", "--without-mingle"],
        ["-c", "from config.wsgi import application"],
    ],
    ids=["uvicorn", "uvicorn-workers", "celery", "wsgi"],
)
def test_a_server_process_without_a_key_on_a_deployment_says_so_in_one_line(tmp_path: Path, command: list[str]) -> None:
    process = subprocess.Popen(
        [sys.executable, *command],
        cwd=ROOT,
        env=_environ(tmp_path, DJANGO_DEBUG="false", DJANGO_ALLOWED_HOSTS="api.example.com"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        # a supervisor (uvicorn --workers) starts its failing workers again: the first lines tell
        output = process.communicate(timeout=10)[0]
    except subprocess.TimeoutExpired:
        process.terminate()
        output = process.communicate(timeout=20)[0]
    else:
        assert process.returncode != 0
    assert "Traceback" not in output, output
    errors = [line for line in output.splitlines() if line.startswith("error:")]
    assert errors and errors[0].startswith(_MISSING), output
    assert all(line.startswith(("error:", "INFO:")) for line in output.splitlines()), output
