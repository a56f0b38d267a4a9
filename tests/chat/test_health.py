"""Liveness and readiness: each dependency reported on its own; a lost broker is a 503."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection
from rest_framework.test import APIClient

from tests.django_fixtures import broker_pointed_at_nothing

REQUIRED = {"database", "redis", "broker", "model_provider", "evidence"}
ADVISORY = {"workers", "queue"}
CHECKS = REQUIRED | ADVISORY


def get(path: str) -> Any:
    return APIClient().get(path)


def assert_check_shape(check: dict[str, Any]) -> None:
    assert set(check) == {"ok", "detail", "ms"}
    assert isinstance(check["ok"], bool)
    assert isinstance(check["ms"], int | float) and check["ms"] >= 0


@pytest.fixture(autouse=True)
def _fresh_worker_answer() -> Iterator[None]:
    """The answer about the workers is cached per process: each test asks anew."""
    from chat import health

    health.workers.forget()
    yield
    health.workers.forget()


@pytest.fixture
def broker_down() -> Iterator[None]:
    with broker_pointed_at_nothing():
        yield


def test_readyz_reports_every_dependency(service: Any) -> None:
    response = get("/api/readyz")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ready"
    assert set(body["checks"]) == CHECKS
    for name, check in body["checks"].items():
        assert_check_shape(check)
        assert check["ok"] is (name != "workers")  # no worker runs beside these tests
    checks = body["checks"]
    assert checks["database"]["detail"] == connection.vendor
    assert checks["redis"]["detail"] == "ping"
    assert checks["broker"]["detail"] == "connected"
    assert checks["model_provider"]["detail"] == {"router": "offline", "agent": "offline", "guard": "offline"}
    assert checks["evidence"]["detail"] == {"source": "example"}
    assert checks["workers"]["detail"] == {"answering": 0, "queue": "runs"}
    assert checks["queue"]["detail"] == {"runs": 0, "webhooks": 0, "knowledge": 0}


def test_healthz_is_ok_and_needs_no_key(service: Any) -> None:
    response = get("/api/healthz")
    assert response.status_code == 200 and response.json() == {"status": "ok"}


def test_an_unreachable_broker_makes_readyz_503_and_only_the_broker_fails(service: Any, broker_down: None) -> None:
    started = time.monotonic()
    response = get("/api/readyz")
    elapsed = time.monotonic() - started
    assert response.status_code == 503
    body = response.json()
    assert body["status"] == "unavailable"
    checks = body["checks"]
    assert set(checks) == CHECKS
    for check in checks.values():
        assert_check_shape(check)
    assert checks["broker"]["ok"] is False
    detail = checks["broker"]["detail"]
    assert isinstance(detail, str) and detail and " " not in detail  # an exception type, not its message
    assert "127.0.0.1" not in response.content.decode() and "redis://" not in response.content.decode()
    assert {name for name, check in checks.items() if check["ok"]} == CHECKS - {"broker", "workers"}
    assert checks["workers"]["detail"] == "no_broker"  # not asked: there is no broker to ask through
    assert elapsed < 10, f"readiness took {elapsed:.1f}s with the broker down"

    # Liveness does not depend on the broker.
    live = get("/api/healthz")
    assert live.status_code == 200 and live.json() == {"status": "ok"}


def test_the_broker_is_ready_again_once_it_is_back(service: Any) -> None:
    with broker_pointed_at_nothing():
        assert get("/api/readyz").status_code == 503
    response = get("/api/readyz")
    assert response.status_code == 200 and response.json()["checks"]["broker"]["ok"] is True


def test_a_failing_check_is_reported_by_type_not_message(service: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from chat import health

    def broken() -> str:
        raise RuntimeError("redis://:hunter2@cache.internal:6379 refused")

    monkeypatch.setattr(health, "_redis", broken)
    response = get("/api/readyz")
    assert response.status_code == 503
    checks = response.json()["checks"]
    assert checks["redis"]["ok"] is False and checks["redis"]["detail"] == "RuntimeError"
    assert "hunter2" not in response.content.decode()
    assert {name for name, check in checks.items() if not check["ok"]} == {"redis", "workers"}


# --- the workers and the queue: reported, not required -----------------------------------------


class _Inspector:
    """What ``app.control.inspect`` answers: the queues of each worker that replied."""

    def __init__(self, replies: dict[str, list[dict[str, str]]] | None) -> None:
        self.replies = replies
        self.asked = 0

    def __call__(self, **kwargs: Any) -> _Inspector:
        assert kwargs["timeout"] <= 0.5  # a short wait: readyz must stay cheap
        return self

    def active_queues(self) -> dict[str, list[dict[str, str]]] | None:
        self.asked += 1
        return self.replies


def _inspecting(monkeypatch: pytest.MonkeyPatch, replies: dict[str, list[dict[str, str]]] | None) -> _Inspector:
    from celery import current_app

    inspector = _Inspector(replies)
    monkeypatch.setattr(current_app.control, "inspect", inspector)
    return inspector


def test_a_runs_worker_that_answers_is_counted_by_number_only(service: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    inspector = _inspecting(
        monkeypatch,
        {
            "runs-1@db-host-7.internal": [{"name": "runs"}],
            "runs-2@db-host-7.internal": [{"name": "runs"}, {"name": "other"}],
            "webhooks-1@db-host-7.internal": [{"name": "webhooks"}],
        },
    )
    response = get("/api/readyz")
    assert response.status_code == 200
    workers = response.json()["checks"]["workers"]
    assert workers["ok"] is True and workers["detail"] == {"answering": 2, "queue": "runs"}
    assert "db-host-7" not in response.content.decode()

    for _ in range(3):  # within the cache's life: nobody is asked again
        assert get("/api/readyz").json()["checks"]["workers"] == workers
    assert inspector.asked == 1


def test_the_answer_about_the_workers_is_asked_again_once_it_is_old(
    service: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chat import health

    inspector = _inspecting(monkeypatch, None)  # nobody answered
    assert get("/api/readyz").json()["checks"]["workers"]["ok"] is False
    monkeypatch.setattr(health, "WORKERS_CACHE_S", 0.0)
    inspector.replies = {"runs-1@h": [{"name": "runs"}]}
    assert get("/api/readyz").json()["checks"]["workers"]["detail"] == {"answering": 1, "queue": "runs"}
    assert inspector.asked == 2


def test_no_runs_worker_and_a_full_queue_are_reported_but_the_service_stays_ready(
    service: Any, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    _inspecting(monkeypatch, {"webhooks-1@h": [{"name": "webhooks"}]})  # only a webhook worker answers
    settings.MAX_QUEUED_RUNS = 2
    service.rpush("runs", "m1", "m2")

    response = get("/api/readyz")

    assert response.status_code == 200 and response.json()["status"] == "ready"
    checks = response.json()["checks"]
    assert checks["workers"]["ok"] is False and checks["workers"]["detail"]["answering"] == 0
    assert checks["queue"]["ok"] is False and checks["queue"]["detail"] == {"runs": 2, "webhooks": 0, "knowledge": 0}
    assert all(checks[name]["ok"] for name in REQUIRED)
