"""Test-wide guards.

No test may reach a real model provider (or anything else off this machine): every socket
connection to a non-loopback address fails the test. LLM settings are removed from the
environment so nothing configures a real provider by accident.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterator
from typing import Any

import pytest

pytest_plugins = ["tests.django_fixtures", "tests.openai_stub"]

_LLM_ENV = ("LLM_BASE_URL", "LLM_API_KEY", "OPENAI_API_KEY", "OPENAI_BASE_URL", "LLM_MODEL")


class RealNetworkBlocked(AssertionError):
    """A test tried to reach a host off this machine (a real LLM provider, for instance)."""


def _is_local(address: Any) -> bool:
    if isinstance(address, str):  # AF_UNIX path
        return True
    host = address[0] if isinstance(address, tuple) and address else address
    if host in ("localhost", ""):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@pytest.fixture(autouse=True)
def _no_real_network(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in _LLM_ENV:
        monkeypatch.delenv(name, raising=False)
    original_connect = socket.socket.connect
    original_connect_ex = socket.socket.connect_ex
    attempts: list[str] = []

    def refuse(address: Any) -> None:
        # Remembered as well as raised: a client may wrap the error and the harness may turn it
        # into a fallback, but the test still fails at teardown.
        attempts.append(repr(address))
        raise RealNetworkBlocked(f"test tried to connect to {address!r}")

    def guarded_connect(self: socket.socket, address: Any) -> Any:
        if not _is_local(address):
            refuse(address)
        return original_connect(self, address)

    def guarded_connect_ex(self: socket.socket, address: Any) -> Any:
        if not _is_local(address):
            refuse(address)
        return original_connect_ex(self, address)

    monkeypatch.setattr(socket.socket, "connect", guarded_connect)
    monkeypatch.setattr(socket.socket, "connect_ex", guarded_connect_ex)
    yield
    if attempts and not getattr(_no_real_network, "expected", False):
        pytest.fail(f"a test tried to reach the network off this machine: {', '.join(attempts)}")


@pytest.fixture
def expect_blocked_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """For the guard's own tests: blocked attempts are the point, not a failure."""
    monkeypatch.setattr(_no_real_network, "expected", True, raising=False)


@pytest.hookimpl(trylast=True)  # after -k and -m have deselected what will not run
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Start the long evaluations the selected tests read, in the background, and run those
    tests last (tests/knowledge/eval_runs.py)."""
    from tests.knowledge.eval_runs import EVALUATIONS

    if config.option.collectonly:
        return

    def reads(item: pytest.Item) -> set[str]:
        return set(getattr(item, "fixturenames", ())) & set(EVALUATIONS)

    wanted = {name for item in items for name in reads(item)}
    items[:] = [i for i in items if not reads(i)] + [i for i in items if reads(i)]
    for name in sorted(wanted):
        EVALUATIONS[name].start()


def pytest_unconfigure(config: pytest.Config) -> None:
    from tests.knowledge.eval_runs import EVALUATIONS

    for evaluation in EVALUATIONS.values():
        evaluation.stop()
