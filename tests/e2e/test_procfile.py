"""The production layout, as the Procfile starts it: web, a runs worker, the webhooks worker and
the sweeper as separate processes sharing the database and Redis, nobody supervising them.
A worker killed mid-run is found by the sweeper alone; a worker added later, with nothing but
the same environment, takes the next runs."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from chat.stack import ROOT, Stack, free_port
from tests.django_fixtures import Caller
from tests.e2e.conftest import database_url_for_children
from tests.e2e.test_faults import CHAT, DIAGNOSIS, UPKEEP, ask, follow, the_end

pytestmark = pytest.mark.timeout(240)


def procfile() -> dict[str, str]:
    entries = {}
    for line in (ROOT / "Procfile").read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            name, command = line.split(":", 1)
            entries[name.strip()] = command.strip()
    return entries


def test_the_procfile_names_every_process_of_the_layout() -> None:
    assert set(procfile()) == {"web", "worker", "knowledge", "webhooks", "sweeper"}


@pytest.fixture(scope="module")
def layout(django_db_setup: Any, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    from django.conf import settings

    with django_db_blocker.unblock():
        env = {
            **UPKEEP,
            "DJANGO_SETTINGS_MODULE": "config.test_settings",
            "DATABASE_URL": database_url_for_children(),
            "TEST_REDIS_URL": settings.REDIS_URL,
            "VAR_DIR": os.environ.get("VAR_DIR", str(settings.VAR_DIR)),
            "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
            "WEB_WORKERS": "1",
        }
    port = free_port()
    stack = Stack(port=port, env={**env, "PORT": str(port)}, log_dir=tmp_path_factory.mktemp("procfile-logs"))
    try:
        for name, command in procfile().items():
            stack._spawn(name, ["bash", "-c", f"exec {command}"])
        stack._wait(stack._web_ready, "web", 60)
        stack._wait(lambda: stack._worker_ready(worker_node(0)), "worker", 60)
        yield stack
    finally:
        stack.stop()


def worker_node(worker_id: int) -> str:
    return f"runs-{worker_id}"


def test_a_lost_worker_is_swept_by_the_sweeper_and_an_added_worker_takes_the_next_runs(
    layout: Stack, alice: Caller
) -> None:
    with httpx.Client(
        base_url=layout.base_url, headers={"Authorization": f"Bearer {alice.key}"}, timeout=httpx.Timeout(10, read=90)
    ) as api:
        run_id = ask(api, DIAGNOSIS)
        worker = layout.processes["worker"]
        events = follow(api, run_id, on_tool_call=lambda: os.kill(worker.pid, signal.SIGKILL))
        kind, failure = the_end(events)
        assert (kind, failure["code"]) == ("failure", "worker_lost")

        command = procfile()["worker"]
        layout.env = {**layout.env, "WORKER_ID": "1"}
        layout._spawn("worker-added", ["bash", "-c", f"exec {command}"])
        layout._wait(lambda: layout._worker_ready(worker_node(1)), "worker-added", 60)
        started = time.monotonic()
        assert the_end(follow(api, ask(api, CHAT)))[0] == "content"
        assert time.monotonic() - started < 30
