"""The Redis adapters against the real test Redis: invocation store and cancel signal."""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from types import SimpleNamespace
from typing import Any

import pytest
import redis

from chat import redis_store
from chat.redis_store import RedisCancelSignal, RedisInvocationStore, request_cancel
from harness.context import CancelReason
from harness.ports import CanonicalInvocation, InvocationStatus

TTL_S = 600


def invocation(run_id: str, tool_call_id: str = "call_1", **changes: Any) -> CanonicalInvocation:
    base = CanonicalInvocation(
        run_id=run_id,
        tool_call_id=tool_call_id,
        tool="query_logs",
        request={"service": "payment-service", "level": "ERROR", "limit": 50, "window": {"from": "09:50", "to": None}},
        raw_result={
            "lines": [
                ["2026-11-30T10:02:00Z", "payment-service", "ERROR", "HikariPool-1 — Connection is not available"],
                ["2026-11-30T10:03:00Z", "api-gateway", "ERROR", "上游超时 (504) ✓ naïve café"],
            ],
            "nested": [[1, 2.5, [True, None, "ü"]], []],
            "truncated": False,
            "emoji": "🔥",
        },
        status=InvocationStatus.READY,
        evidence_status="ok",
        error_code=None,
        created_at=datetime(2026, 11, 30, 10, 4, 5, 123456, tzinfo=UTC),
        duration_ms=12.75,
    )
    return replace(base, **changes)


@pytest.fixture
def store(service: Any) -> RedisInvocationStore:
    return RedisInvocationStore(ttl_s=TTL_S)


def new_run() -> str:
    return str(uuid.uuid4())


# --- RedisInvocationStore --------------------------------------------------------------------


def test_an_invocation_round_trips_with_every_field(store: RedisInvocationStore, service: Any) -> None:
    run_id = new_run()
    original = invocation(run_id)
    store.put(original)
    loaded = store.get(run_id, "call_1")
    assert loaded == original
    assert loaded is not None
    assert isinstance(loaded.status, InvocationStatus) and loaded.status is InvocationStatus.READY
    assert loaded.created_at.tzinfo is not None and loaded.created_at.utcoffset() == timedelta(0)
    assert loaded.raw_result["lines"][1][3] == "上游超时 (504) ✓ naïve café"
    assert 0 < service.ttl(f"sba:inv:{run_id}:call_1") <= TTL_S


def test_a_failed_invocation_round_trips_too(store: RedisInvocationStore) -> None:
    run_id = new_run()
    failed = invocation(
        run_id,
        "call_err",
        raw_result=None,
        status=InvocationStatus.TIMEOUT,
        evidence_status=None,
        error_code="tool_timeout",
        created_at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone(timedelta(hours=8))),
        duration_ms=15000.0,
    )
    store.put(failed)
    assert store.get(run_id, "call_err") == failed


def test_a_missing_invocation_is_none(store: RedisInvocationStore) -> None:
    run_id = new_run()
    assert store.get(run_id, "call_1") is None
    store.put(invocation(run_id, "call_1"))
    assert store.get(run_id, "call_2") is None
    assert store.get(new_run(), "call_1") is None


def test_invocations_are_kept_per_run(store: RedisInvocationStore) -> None:
    first, second = new_run(), new_run()
    store.put(invocation(first, "call_1", tool="lookup_knowledge"))
    store.put(invocation(second, "call_1", tool="query_mysql", raw_result={"rows": [[3, "db.pool.max_size"]]}))
    one, two = store.get(first, "call_1"), store.get(second, "call_1")
    assert one is not None and two is not None
    assert (one.run_id, one.tool) == (first, "lookup_knowledge")
    assert (two.run_id, two.tool, two.raw_result) == (second, "query_mysql", {"rows": [[3, "db.pool.max_size"]]})


def test_putting_again_replaces_the_invocation(store: RedisInvocationStore) -> None:
    run_id = new_run()
    store.put(invocation(run_id, status=InvocationStatus.FAILED, raw_result=None, error_code="tool_failed"))
    store.put(invocation(run_id))
    loaded = store.get(run_id, "call_1")
    assert loaded is not None and loaded.status is InvocationStatus.READY and loaded.error_code is None


# --- RedisCancelSignal -----------------------------------------------------------------------


def wait_past_throttle() -> None:
    time.sleep(RedisCancelSignal.MIN_INTERVAL_S * 2)


def test_no_cancel_until_one_is_requested_then_its_reason(service: Any) -> None:
    run_id = new_run()
    signal = RedisCancelSignal(run_id)
    assert signal.requested() is None
    wait_past_throttle()
    assert signal.requested() is None
    request_cancel(run_id, CancelReason.DEADLINE)
    wait_past_throttle()
    assert signal.requested() is CancelReason.DEADLINE
    assert service.ttl(f"sba:cancel:{run_id}") > 0


def test_a_seen_cancel_stays_even_when_the_flag_is_gone(service: Any) -> None:
    run_id = new_run()
    signal = RedisCancelSignal(run_id)
    request_cancel(run_id, CancelReason.USER)
    assert signal.requested() is CancelReason.USER
    service.delete(f"sba:cancel:{run_id}")
    wait_past_throttle()
    assert signal.requested() is CancelReason.USER


def test_the_first_reason_wins_and_other_runs_are_not_cancelled(service: Any) -> None:
    run_id, other = new_run(), new_run()
    request_cancel(run_id, CancelReason.USER)
    request_cancel(run_id, CancelReason.SHUTDOWN)
    assert RedisCancelSignal(run_id).requested() is CancelReason.USER
    assert RedisCancelSignal(other).requested() is None


def test_reads_are_throttled(service: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    # The module's clock only: time.monotonic stays real for everything else.
    monkeypatch.setattr("chat.redis_store.time", SimpleNamespace(monotonic=lambda: now[0]))
    run_id = new_run()
    signal = RedisCancelSignal(run_id)
    assert signal.requested() is None
    request_cancel(run_id, CancelReason.USER)
    now[0] += RedisCancelSignal.MIN_INTERVAL_S / 2
    assert signal.requested() is None  # within the interval: no read
    now[0] += RedisCancelSignal.MIN_INTERVAL_S
    assert signal.requested() is CancelReason.USER


def test_an_unknown_value_cancels_as_the_user(service: Any) -> None:
    run_id = new_run()
    service.set(f"sba:cancel:{run_id}", "something-else")
    assert RedisCancelSignal(run_id).requested() is CancelReason.USER


def test_an_unreadable_redis_cancels_nothing_and_warns_once_without_key_names(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Built as chat.redis_store.client builds its own, on a port where nothing listens.
    unreachable = redis.Redis.from_url("redis://127.0.0.1:1/0", socket_timeout=0.5, socket_connect_timeout=0.5)
    monkeypatch.setattr(redis_store, "client", lambda: unreachable)
    caplog.set_level(logging.DEBUG, logger="chat.redis_store")
    run_id = new_run()
    signal = RedisCancelSignal(run_id)
    for _ in range(3):
        assert signal.requested() is None
        wait_past_throttle()

    warnings = [r for r in caplog.records if r.name == "chat.redis_store"]
    assert [r.levelno for r in warnings] == [logging.WARNING]
    message = warnings[0].getMessage()
    assert message == "cancel signal unreadable: ConnectionError"
    assert run_id not in message and "sba:" not in message and "cancel:" not in message
