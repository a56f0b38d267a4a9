"""Liveness and readiness: each dependency reported on its own; a lost broker is a 503."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection
from rest_framework.test import APIClient

from tests.django_fixtures import broker_pointed_at_nothing

CHECKS = {"database", "redis", "broker", "model_provider", "evidence"}


def get(path: str) -> Any:
    return APIClient().get(path)


def assert_check_shape(check: dict[str, Any]) -> None:
    assert set(check) == {"ok", "detail", "ms"}
    assert isinstance(check["ok"], bool)
    assert isinstance(check["ms"], int | float) and check["ms"] >= 0


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
    for check in body["checks"].values():
        assert_check_shape(check)
        assert check["ok"] is True
    checks = body["checks"]
    assert checks["database"]["detail"] == connection.vendor
    assert checks["redis"]["detail"] == "ping"
    assert checks["broker"]["detail"] == "connected"
    assert checks["model_provider"]["detail"] == {"router": "offline", "agent": "offline", "guard": "offline"}
    assert checks["evidence"]["detail"] == {"source": "example"}


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
    assert {name for name, check in checks.items() if check["ok"]} == CHECKS - {"broker"}
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
    assert {name for name, check in checks.items() if not check["ok"]} == {"redis"}
