"""Redis restarted mid-run, on a redis-server of the stack's own (no persistence, as the
default Debian setup and the stack's own start it): the broker's queue, the run's live events,
its canonical tool results and its cancel key are gone. The run still ends exactly once, the
same in its row, its stream, the polling API and its archive, and the service keeps taking
runs once Redis is back."""

from __future__ import annotations

import contextlib
import json
import signal
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from httpx_sse import connect_sse

from chat.stack import Stack, free_port
from tests.django_fixtures import Caller
from tests.e2e.conftest import api_client, running_stack, supervising
from tests.e2e.test_faults import CHAT, UPKEEP, archived_done, ask, follow, row, the_end, wait_for

pytestmark = pytest.mark.timeout(240)


@contextlib.contextmanager
def celery_control_on(url: str) -> Iterator[None]:
    """This process's Celery app (which pings the stack's workers) on the stack's broker."""
    from celery import current_app as app

    def reconnect(broker: str) -> None:
        # every cached way to the broker: the connection pool, the producers made from it, and
        # the remote control whose mailbox holds them (earlier tests may have made all three)
        # (dropped, not closed: kombu keeps producer pools per broker URL process-wide, and the
        # default one must still work when it is picked up again afterwards)
        app._pool = None
        app.amqp._producer_pool = None
        app.__dict__.pop("control", None)
        app.conf.broker_url = broker

    saved = app.conf.broker_url
    reconnect(url)
    try:
        yield
    finally:
        reconnect(saved)


@pytest.fixture(scope="module")
def own_redis_stack(
    django_db_setup: Any, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    url = f"redis://127.0.0.1:{free_port()}/0"
    env = {**UPKEEP, "REDIS_URL": url, "TEST_REDIS_URL": url}
    with (
        celery_control_on(url),
        running_stack(django_db_blocker, tmp_path_factory, env=env, worker_concurrency=1, with_redis=True) as stack,
        supervising(stack),
    ):
        yield stack


@pytest.fixture
def api(own_redis_stack: Stack, alice: Caller) -> Iterator[httpx.Client]:
    with api_client(own_redis_stack, alice) as client:
        yield client


def restart_redis(stack: Stack) -> None:
    """SIGKILL the stack's redis-server; its supervisor starts a fresh, empty one."""
    killed = stack.processes["redis"]
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    wait_for(lambda: stack.processes["redis"] is not killed, 10, "redis being restarted")


def test_redis_restarted_mid_run_still_ends_the_run_once_everywhere(api: httpx.Client, own_redis_stack: Stack) -> None:
    run_id = ask(api)
    started = time.monotonic()
    events = follow(api, run_id, on_tool_call=lambda: restart_redis(own_redis_stack))

    kind, data = the_end(events)
    assert time.monotonic() - started < 60
    run = row(run_id)
    assert run.is_terminal
    assert events[-1][1]["outcome"] == run.outcome
    assert (kind == "failure") == bool(run.failure_code)
    if kind == "failure":
        assert data["code"] == run.failure_code
    polled = api.get(f"/api/runs/{run_id}").json()
    assert (polled["status"], polled["outcome"]) == (run.status, run.outcome)
    wait_for(lambda: archived_done(run_id) == 1, 10, "the run's stream being archived")

    # a reconnecting client is told the run is over, and a new client gets the whole end
    with connect_sse(api, "GET", f"/api/runs/{run_id}/events") as source:
        replay = [(e.event, json.loads(e.data)) for e in source.iter_sse()]
    assert the_end(replay)[0] == kind and replay[-1] == events[-1]

    # the service takes runs again: the worker is back on the broker
    assert the_end(follow(api, ask(api, CHAT)))[0] == "content"
