"""Cancel racing completion, and the deadline and a sweeper racing both, 200 times over the
real chain, store, stream and webhook hook: one terminal state, one ``done``, one delivery."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection

from chat import services, wiring
from chat.models import WebhookDelivery
from tests.chat.test_apis import events_of
from tests.django_fixtures import Caller
from traces.lifecycle import EndCause
from traces.models import Run, RunStatus

ROUNDS = 200
DIAGNOSIS = "Payments are timing out since 10:00, please investigate"


@pytest.fixture
def racing(settings: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    settings.WEBHOOK = {**settings.WEBHOOK, "ALLOWED_CIDRS": ["127.0.0.1/32"], "ALLOWED_PORTS": ["9"]}
    # a deadline short enough to land while the chain runs, in some rounds before the end
    settings.HARNESS = {**settings.HARNESS, "DEADLINE_S": 0.05}
    monkeypatch.setattr("chat.webhooks.services._nudge", lambda *a, **k: None)  # no worker here
    wiring.application.cache_clear()
    yield
    wiring.application.cache_clear()


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.skipif(connection.vendor == "sqlite", reason="SQLite serialises writers; the race needs a server")
def test_cancel_the_deadline_and_a_sweeper_race_completion_and_one_of_them_ends_each_run(
    alice: Caller, racing: None
) -> None:
    rng = random.Random(20261202)
    ends: dict[str, int] = {}
    for _ in range(ROUNDS):
        response = alice.post("/api/chat", {"question": DIAGNOSIS, "webhook_url": "http://127.0.0.1:9/hook"})
        assert response.status_code == 202, response.content
        run_id = response.json()["run_id"]
        delays = [rng.uniform(0, 0.04), rng.uniform(0, 0.06)]

        def execute(run_id: str = run_id) -> None:
            try:
                services.run_execute(run_id=run_id)
            finally:
                connection.close()

        def cancel(run_id: str = run_id, delay: float = delays[0]) -> None:
            time.sleep(delay)
            try:
                services.run_cancel(run=Run.objects.get(id=run_id))
            finally:
                connection.close()

        def sweep(run_id: str = run_id, delay: float = delays[1]) -> None:
            time.sleep(delay)
            try:
                wiring.lifecycle().fail(
                    run_id=Run.objects.get(id=run_id).id,
                    from_status=RunStatus.RUNNING,
                    code="worker_lost",
                    message="x",
                    cause=EndCause.WORKER_LOST,
                )
            finally:
                connection.close()

        threads = [threading.Thread(target=t) for t in (execute, cancel, sweep)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        run = Run.objects.get(id=run_id)
        events = events_of(run_id)
        kinds = [kind for kind, _ in events]
        assert run.status in ("completed", "failed", "cancelled"), run.status
        assert kinds.count("done") == 1 and kinds[-1] == "done", kinds
        assert events[-1][1]["outcome"] == run.outcome
        assert WebhookDelivery.objects.filter(run_id=run_id).count() == 1
        ending = run.failure_code or run.outcome
        ends[ending] = ends.get(ending, 0) + 1
    # the schedule really raced: more than one kind of end won
    assert len(ends) >= 3, ends
