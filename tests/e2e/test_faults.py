"""Faults injected into the real stack (uvicorn, a solo Celery worker, the webhooks worker, on
the test database and Redis), with the stack supervised as ``manage.py serve`` supervises it:
every accepted run ends exactly once, without an operator, and the service keeps taking runs.

The upkeep runs fast here (beats every 0.3 s, silent for 3 s is lost, sweeps every 0.5 s); the
defaults are ten times slower and the README says so.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from httpx_sse import connect_sse

from chat.stack import Stack
from tests.django_fixtures import Caller
from tests.e2e.conftest import api_client, running_stack, supervising
from traces.models import Run

DIAGNOSIS = "Payments are timing out since 10:00, please investigate"
CHAT = "hello, what can you do?"
UPKEEP = {
    "RUN_HEARTBEAT_S": "0.3",
    "RUN_HEARTBEAT_TIMEOUT_S": "3",
    "RUN_SWEEP_S": "0.5",
    "QUEUE_REPUBLISH_S": "2",
    "WORKER_SHUTDOWN_GRACE_S": "1",
    # slow evidence: a diagnosis takes a few seconds, so a fault lands mid-run
    "EVIDENCE_LATENCY_S": "0.4",
}
pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def supervised(
    django_db_setup: Any, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    with (
        running_stack(django_db_blocker, tmp_path_factory, env=UPKEEP, worker_concurrency=1) as stack,
        supervising(stack),
    ):
        yield stack


@pytest.fixture
def api(supervised: Stack, alice: Caller) -> Iterator[httpx.Client]:
    with api_client(supervised, alice) as client:
        yield client


def ask(client: httpx.Client, question: str = DIAGNOSIS) -> str:
    response = client.post("/api/chat", json={"question": question})
    assert response.status_code == 202, response.text
    run_id: str = response.json()["run_id"]
    return run_id


def follow(client: httpx.Client, run_id: str, *, on_tool_call: Any = None) -> list[tuple[str, dict[str, Any]]]:
    """The run's whole stream; ``on_tool_call`` runs once, at its first tool call."""
    events: list[tuple[str, dict[str, Any]]] = []
    with connect_sse(client, "GET", f"/api/runs/{run_id}/events") as source:
        assert source.response.status_code == 200
        for event in source.iter_sse():
            data = json.loads(event.data)
            events.append((event.event, data))
            if on_tool_call is not None and event.event == "status" and data.get("stage") == "tool_call":
                on_tool_call()
                on_tool_call = None
            if event.event == "done":
                break
    return events


def the_end(events: list[tuple[str, dict[str, Any]]]) -> tuple[str, dict[str, Any]]:
    """The stream's terminal pair (``content`` or ``failure``, then ``done``), checked to be the only one."""
    kinds = [kind for kind, _ in events]
    assert kinds.count("done") == 1 and kinds[-1] == "done"
    assert kinds.count("content") + kinds.count("failure") == 1
    return events[-2]


def row(run_id: str) -> Run:
    return Run.objects.get(id=run_id)


def worker(stack: Stack) -> int:
    return stack.processes["worker-0"].pid


def worker_name(stack: Stack) -> str:
    return f"runs-{stack.port}-0@{socket.gethostname()}"


def wait_for(check: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"{what} did not happen within {timeout_s:.0f}s")


def archived_done(run_id: str) -> int:
    from chat.models import RunEvent

    return RunEvent.objects.filter(run_id=run_id, event_type="done").count()


def signalled_mid_run(
    api: httpx.Client, pid: int, sig: signal.Signals
) -> tuple[str, list[tuple[str, dict[str, Any]]], float]:
    """Ask a diagnosis, send ``sig`` to ``pid`` at its first tool call, follow it to its end:
    the run, its events, and how long after the signal it ended."""
    run_id = ask(api)
    sent: list[float] = []

    def send() -> None:
        sent.append(time.monotonic())
        os.kill(pid, sig)

    events = follow(api, run_id, on_tool_call=send)
    return run_id, events, time.monotonic() - sent[0]


@contextlib.contextmanager
def consumer_paused(stack: Stack) -> Iterator[None]:
    """The worker takes no task from the queue inside the block (its upkeep goes on)."""
    from celery import current_app

    current_app.control.cancel_consumer("runs", destination=[worker_name(stack)], reply=True, timeout=5)
    try:
        yield
    finally:
        current_app.control.add_consumer("runs", destination=[worker_name(stack)], reply=True, timeout=5)


def test_a_worker_killed_mid_run_ends_the_run_worker_lost_and_is_replaced(api: httpx.Client, supervised: Stack) -> None:
    killed = worker(supervised)
    run_id, events, ended_after_s = signalled_mid_run(api, killed, signal.SIGKILL)

    kind, failure = the_end(events)
    assert (kind, failure["code"]) == ("failure", "worker_lost")
    assert ended_after_s < 60  # the bound; here heartbeats make it a few seconds
    run = row(run_id)
    assert (run.status, run.failure_code) == ("failed", "worker_lost")
    assert api.get(f"/api/runs/{run_id}").json()["status"] == "failed"
    # the supervisor started a new worker, which takes the next run
    assert worker(supervised) != killed
    after = ask(api, CHAT)
    assert the_end(follow(api, after))[0] == "content"
    assert archived_done(run_id) == 1


def test_a_duplicated_or_redelivered_task_never_runs_a_run_twice(api: httpx.Client, supervised: Stack) -> None:
    from chat.tasks import run_chat

    with consumer_paused(supervised):
        run_id = ask(api, CHAT)
        run_chat.apply_async(args=[run_id])  # the same task twice in the queue
    assert the_end(follow(api, run_id))[0] == "content"
    finished = row(run_id)
    run_chat.apply_async(args=[run_id])  # and once more, after it finished (a late redelivery)
    time.sleep(1.5)

    again = row(run_id)
    assert (again.status, again.finished_at, again.model_calls) == (
        "completed",
        finished.finished_at,
        finished.model_calls,
    )
    assert archived_done(run_id) == 1


def test_a_queued_run_whose_task_the_broker_lost_is_published_again_and_completes(
    api: httpx.Client, supervised: Stack, service: Any
) -> None:
    from django.conf import settings

    with consumer_paused(supervised):
        run_id = ask(api, CHAT)
        wait_for(lambda: service.llen(settings.CELERY_TASK_DEFAULT_QUEUE) >= 1, 5, "the task reaching the queue")
        service.delete(settings.CELERY_TASK_DEFAULT_QUEUE)  # the broker lost it (flushed, restarted, stolen)

    assert the_end(follow(api, run_id))[0] == "content"
    run = row(run_id)
    assert run.status == "completed" and run.publishes >= 2


def test_a_warm_shutdown_ends_the_current_run_cleanly_and_the_worker_is_replaced(
    api: httpx.Client, supervised: Stack
) -> None:
    stopped = worker(supervised)
    run_id, events, ended_after_s = signalled_mid_run(api, stopped, signal.SIGTERM)

    kind, data = the_end(events)
    # finished within the grace, or ended at its next boundary once the grace was over
    assert kind == "content" or data["code"] == "worker_shutdown"
    assert ended_after_s < 10
    assert row(run_id).status in ("completed", "failed")
    wait_for(lambda: worker(supervised) != stopped, 20, "the worker being replaced")
    assert the_end(follow(api, ask(api, CHAT)))[0] == "content"


@pytest.mark.skipif(
    os.environ.get("DATABASE_URL", "").split(":", 1)[0] not in ("mysql", "mariadb"),
    reason="kills the worker's connection on the database server",
)
def test_the_database_connection_dropped_mid_run_still_ends_the_run_once(api: httpx.Client, supervised: Stack) -> None:
    from django.db import connection

    run_id = ask(api)

    def drop_connections() -> None:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT id FROM information_schema.processlist WHERE db = DATABASE() AND id <> CONNECTION_ID()"
            )
            for (other,) in cursor.fetchall():
                cursor.execute(f"KILL CONNECTION {int(other)}")

    events = follow(api, run_id, on_tool_call=drop_connections)

    kind, _ = the_end(events)
    run = row(run_id)
    assert run.status in ("completed", "failed") and (kind == "content") == (run.status == "completed")
    assert the_end(follow(api, ask(api, CHAT)))[0] == "content"
