"""The load test, small: the real ASGI server, run workers and webhook worker, 120 runs from 12
clients with 40 SSE listeners following them, each run with a webhook to a local receiver — and
not one run, terminal event, stream event or webhook lost or doubled."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from bench.load_test import Target, load_test
from chat.stack import Stack
from tests.django_fixtures import Caller
from tests.e2e.conftest import reaching, running_stack
from tests.webhook_receiver import Receiver

RUNS, CLIENTS, LISTENERS = 120, 12, 40
pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def load_stack(
    receiver: Receiver, django_db_setup: Any, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    env = reaching(receiver)
    with running_stack(django_db_blocker, tmp_path_factory, env=env, worker_concurrency=2) as stack:
        yield stack


def test_a_small_load_loses_and_doubles_nothing(load_stack: Stack, alice: Caller, receiver: Receiver) -> None:
    target = Target(
        base_url=load_stack.base_url,
        api_key=alice.key,
        webhook_secret=alice.webhook_secret,
        webhook_url=receiver.url("/ok"),
        received=lambda: list(receiver.received),
        processes=load_stack.processes,
    )

    report = load_test(
        target,
        runs=RUNS,
        clients=CLIENTS,
        listeners=LISTENERS,
        baseline_tasks=50,
        max_seconds=60,
        stream_timeout_s=30,
        settle_s=20,
    )

    (fresh,) = report.phases
    checks = fresh.checks
    assert checks.examples == []
    assert report.ok and checks.runs == fresh.runs == RUNS
    # every run followed by its client and by its share of the listeners, most of them live
    assert checks.streams == RUNS + RUNS * LISTENERS // CLIENTS
    assert checks.listener_streams_live > checks.listener_streams // 2
    assert fresh.peak_listener_streams > CLIENTS
    assert sum(checks.outcomes.values()) == RUNS and set(checks.outcomes) <= {"success", "fallback"}
    assert fresh.runs_per_s > 0 and fresh.ratio is not None and fresh.latency_ms["p50"] <= fresh.latency_ms["p99"]
    assert fresh.cpu_ms_per_run is not None and fresh.cpu_ms_per_run > 0
