"""Metrics end to end: runs executed by two worker processes and webhooks sent by a third are
counted in each one's own files, and one scrape of the web process adds them all up; readyz
sees the idle runs workers answer."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import multiprocess
from prometheus_client.parser import text_string_to_metric_families

from chat.metrics import PREFIX
from chat.stack import Stack
from tests.django_fixtures import Caller
from tests.e2e.conftest import api_client, reaching, running_stack
from tests.e2e.test_streams import wait_terminal
from tests.webhook_receiver import Receiver

pytestmark = pytest.mark.timeout(180)
DIAGNOSIS = "Payments are timing out since 10:00, please investigate"
CHAT = "hello, what can you do?"


@pytest.fixture(scope="module")
def metered_stack(
    receiver: Receiver, django_db_setup: Any, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    env = reaching(receiver)
    with running_stack(django_db_blocker, tmp_path_factory, env=env, worker_concurrency=2) as stack:
        yield stack


@pytest.fixture
def api(metered_stack: Stack, alice: Caller) -> Iterator[httpx.Client]:
    with api_client(metered_stack, alice, read_s=60) as client:
        yield client


def samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    return [
        (dict(s.labels), s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    ]


def total(text: str, name: str, **labels: str) -> float:
    return sum(value for got, value in samples(text, name) if labels.items() <= got.items())


def counted_in(files: list[Path], name: str, **labels: str) -> float:
    """What the given processes' own files hold for ``name``."""
    found = multiprocess.MultiProcessCollector.merge([str(f) for f in files])  # type: ignore[no-untyped-call]
    return float(
        sum(
            s.value for metric in found for s in metric.samples if s.name == name and labels.items() <= s.labels.items()
        )
    )


def test_one_scrape_adds_up_what_every_process_counted(
    api: httpx.Client, metered_stack: Stack, receiver: Receiver
) -> None:
    questions = [DIAGNOSIS, DIAGNOSIS, CHAT, CHAT]
    run_ids = [
        api.post("/api/chat", json={"question": q, "webhook_url": receiver.url("/ok")}).json()["run_id"]
        for q in questions
    ]
    runs = [wait_terminal(api, run_id) for run_id in run_ids]
    assert [r["outcome"] for r in runs] == ["success"] * 4
    receiver.wait_for(4, timeout_s=30)

    deadline = time.monotonic() + 10
    while True:  # the webhook worker counts an attempt as it records it, just after sending it
        response = httpx.get(f"{metered_stack.base_url}/metrics", timeout=10)
        assert response.status_code == 200
        text = response.text
        if total(text, f"{PREFIX}_webhook_attempts_total", result="succeeded") >= 4 or time.monotonic() > deadline:
            break
        time.sleep(0.1)

    finished = f"{PREFIX}_runs_finished_total"
    assert total(text, finished) == 4
    assert total(text, finished, intent="DIAGNOSIS", status="completed", outcome="success", cause="harness") == 2
    assert total(text, finished, intent="SYSTEM_CHAT", status="completed", outcome="success", cause="harness") == 2
    assert total(text, f"{PREFIX}_run_duration_seconds_count") == 4
    assert total(text, f"{PREFIX}_tool_call_duration_seconds_count", status="ready") >= 2
    assert total(text, f"{PREFIX}_model_call_duration_seconds_count", provider="offline", status="ok") >= 4
    assert total(text, f"{PREFIX}_webhook_attempts_total", result="succeeded") == 4
    assert total(text, f"{PREFIX}_run_tasks_in_progress") == 0
    assert {labels["queue"] for labels, _ in samples(text, f"{PREFIX}_queue_depth")} == {
        "runs",
        "webhooks",
        "knowledge",
    }
    assert total(text, f"{PREFIX}_queue_depth", queue="runs") == 0

    # The web process executed none of it: the counts are the workers' own files, added up.
    directory = Path(metered_stack._env()["PROMETHEUS_MULTIPROC_DIR"])
    pids = {name: process.pid for name, process in metered_stack.processes.items()}
    workers = [f for name in ("worker-0", "worker-1") for f in directory.glob(f"*_{pids[name]}.db")]
    web = list(directory.glob(f"*_{pids['web']}.db"))
    webhooks = list(directory.glob(f"*_{pids['webhooks']}.db"))
    assert counted_in(workers, finished) == 4
    assert counted_in(web, finished) == 0
    assert counted_in(webhooks, f"{PREFIX}_webhook_attempts_total", result="succeeded") == 4


def test_a_scrape_through_a_proxy_on_this_machine_is_refused(metered_stack: Stack) -> None:
    proxied = httpx.get(f"{metered_stack.base_url}/metrics", headers={"X-Forwarded-For": "203.0.113.9"}, timeout=10)
    assert proxied.status_code == 403


def test_readyz_sees_the_idle_runs_workers_answer(api: httpx.Client) -> None:
    ready = api.get("/api/readyz").json()
    assert ready["status"] == "ready"
    assert ready["checks"]["workers"]["ok"] is True
    assert ready["checks"]["workers"]["detail"] == {"answering": 2, "queue": "runs"}  # not the webhook worker
    assert ready["checks"]["queue"] == {
        **ready["checks"]["queue"],
        "ok": True,
        "detail": {"runs": 0, "webhooks": 0, "knowledge": 0},
    }
