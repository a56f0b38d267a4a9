"""End-to-end: the real ASGI server and a real Celery worker as subprocesses, on the test
database and the test Redis database, driven over HTTP by a real SSE client."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from chat.stack import Stack, free_port
from tests.django_fixtures import Caller
from tests.webhook_receiver import Receiver, receiving


def database_url_for_children() -> str:
    """The URL of the database pytest-django created, for the server and worker processes."""
    from django.db import connection

    s = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{Path(s['NAME']).resolve()}"
    auth = s["USER"] + (f":{s['PASSWORD']}" if s["PASSWORD"] else "")
    scheme = "mysql" if connection.vendor == "mysql" else connection.vendor
    return f"{scheme}://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 3306}/{s['NAME']}"


@contextlib.contextmanager
def running_stack(
    django_db_blocker: Any,
    tmp_path_factory: pytest.TempPathFactory,
    *,
    env: dict[str, str],
    worker_concurrency: int,
    with_redis: bool = False,
) -> Iterator[Stack]:
    """The ASGI server and a Celery worker on the test database and Redis, stopped afterwards
    (per module: no worker outlives its tests to consume other tests' queued tasks). With
    ``with_redis``, the stack runs its own redis-server for the ``REDIS_URL`` in ``env``."""
    from django.conf import settings

    with django_db_blocker.unblock():
        base = {
            "DJANGO_SETTINGS_MODULE": "config.test_settings",
            "DATABASE_URL": database_url_for_children(),
            "TEST_REDIS_URL": settings.REDIS_URL,
            "VAR_DIR": os.environ.get("VAR_DIR", str(settings.VAR_DIR)),
            # the stack's processes add up their metrics here, apart from this process's
            "PROMETHEUS_MULTIPROC_DIR": str(tmp_path_factory.mktemp("metrics")),
        }
        stack = Stack(
            port=free_port(),
            env={**base, **env},
            worker_concurrency=worker_concurrency,
            log_dir=tmp_path_factory.mktemp("stack-logs"),
        )
        stack.start(with_redis=with_redis)
    try:
        yield stack
    finally:
        stack.stop()


@contextlib.contextmanager
def supervising(stack: Stack) -> Iterator[Stack]:
    """``stack`` supervised as ``manage.py serve`` supervises it: a child that dies is restarted."""
    stop = threading.Event()
    supervisor = threading.Thread(target=stack.supervise, args=(stop,), daemon=True)
    supervisor.start()
    try:
        yield stack
    finally:
        stop.set()
        supervisor.join()


@contextlib.contextmanager
def api_client(stack: Stack, caller: Caller, *, read_s: float = 90) -> Iterator[httpx.Client]:
    """An HTTP client of ``stack`` signed with ``caller``'s key, patient enough for a whole run."""
    with httpx.Client(
        base_url=stack.base_url,
        headers={"Authorization": f"Bearer {caller.key}"},
        timeout=httpx.Timeout(10, read=read_s),
    ) as client:
        yield client


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    """A local webhook receiver for a module's stack (see ``reaching``)."""
    with receiving() as running:
        yield running


def reaching(receiver: Receiver) -> dict[str, str]:
    """The stack's environment that lets webhooks reach the local receiver."""
    return {"WEBHOOK_ALLOWED_CIDRS": "127.0.0.1/32", "WEBHOOK_ALLOWED_PORTS": str(receiver.port)}


@pytest.fixture(scope="module")
def live_stack(
    django_db_setup: Any, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    # Slow enough evidence that a test can watch (and cancel) a run mid-flight.
    env = {"EVIDENCE_LATENCY_S": "0.15"}
    with running_stack(django_db_blocker, tmp_path_factory, env=env, worker_concurrency=2) as stack:
        yield stack
