"""Redis for the stack: started here only at a local address, otherwise one line saying that the
configured one does not answer — never an attempt to start a server for another host's port."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from chat.stack import ROOT, Stack, free_port, local_redis_address, redis_reachable
from core.startup import StartupError


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A local port something that is not Redis listens on."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield server.getsockname()[1]


@pytest.mark.parametrize(
    "url",
    [
        "redis://10.255.255.1:6379/0",
        "redis://cache.internal:6379/0",
        "redis://127.0.0.2:6379/0",  # loopback, but not the address a local redis-server binds
        "rediss://127.0.0.1:6379/0",  # TLS: not a server started here
        "unix:///run/redis.sock",
    ],
)
def test_redis_elsewhere_is_never_started_here(url: str) -> None:
    with pytest.raises(StartupError) as caught:
        local_redis_address(url)
    assert str(caught.value) == f"Redis at {url} does not answer"


def test_the_local_default_hosts_may_have_one_started() -> None:
    port = free_port()
    assert local_redis_address(f"redis://127.0.0.1:{port}/0") == ("127.0.0.1", port)
    assert local_redis_address(f"redis://localhost:{port}/3") == ("127.0.0.1", port)
    assert local_redis_address(f"redis://[::1]:{port}/0") == ("::1", port)


def test_a_local_port_taken_by_another_program_is_said_so(taken_port: int) -> None:
    with pytest.raises(StartupError, match=f"does not answer, and another program listens on port {taken_port}$"):
        local_redis_address(f"redis://127.0.0.1:{taken_port}/0")


def test_messages_never_show_the_password() -> None:
    with pytest.raises(StartupError) as caught:
        local_redis_address("redis://:hunter2@cache.internal:6379/0")
    assert str(caught.value) == "Redis at redis://cache.internal:6379/0 does not answer"
    with pytest.raises(StartupError, match="REDIS_URL is malformed"):
        local_redis_address("redis://127.0.0.1:abc/0")


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server")
def test_a_local_redis_is_started_when_none_answers() -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    stack = Stack(env={"REDIS_URL": url})
    try:
        stack.ensure_redis()
        assert redis_reachable(url)
    finally:
        stack.stop()
    assert not redis_reachable(url)


def _run(command: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    dropped = ("DATABASE_URL", "DJANGO_SETTINGS_MODULE", "REDIS_URL", "TEST_REDIS_URL", "SBA_STACK_PID")
    environ = {k: v for k, v in os.environ.items() if k not in dropped}
    environ.update({"DJANGO_SETTINGS_MODULE": "config.settings", "VAR_DIR": str(tmp_path), **env})
    return subprocess.run(
        [sys.executable, *command], cwd=ROOT, env=environ, capture_output=True, text=True, timeout=120, check=False
    )


def test_serve_with_redis_elsewhere_not_answering_is_one_line(tmp_path: Path) -> None:
    port = free_port()
    url = f"redis://127.0.0.2:{port}/0"

    result = _run(["manage.py", "serve", "--port", str(free_port())], tmp_path, REDIS_URL=url)

    assert result.returncode == 1
    assert "Traceback" not in result.stdout + result.stderr
    assert "Address already in use" not in result.stdout + result.stderr
    errors = [line for line in result.stderr.splitlines() if not line.startswith("applied ")]
    assert errors == [f"error: Redis at {url} does not answer"]
    assert result.stdout == ""  # nothing was started, so nothing is stopped


def test_make_test_s_redis_step_is_one_line_too(tmp_path: Path, taken_port: int) -> None:
    elsewhere = f"redis://127.0.0.2:{free_port()}/13"
    result = _run(["-m", "chat.stack", "ensure-redis"], tmp_path, TEST_REDIS_URL=elsewhere)
    assert (result.returncode, result.stderr) == (1, f"error: Redis at {elsewhere} does not answer\n")

    taken = f"redis://127.0.0.1:{taken_port}/13"
    result = _run(["-m", "chat.stack", "ensure-redis"], tmp_path, TEST_REDIS_URL=taken)
    assert (result.returncode, result.stderr) == (
        1,
        f"error: Redis at {taken} does not answer, and another program listens on port {taken_port}\n",
    )
