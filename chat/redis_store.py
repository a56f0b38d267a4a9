"""Redis adapters: the canonical invocation store and the cross-process cancel signal."""

from __future__ import annotations

import functools
import logging
import time
from datetime import datetime
from typing import Any

import orjson
import redis
from django.conf import settings

from chat.upkeep import stop_requested
from harness.context import CancelReason
from harness.ports import CanonicalInvocation, InvocationStatus

logger = logging.getLogger(__name__)


@functools.cache
def client() -> redis.Redis:
    """One connection pool per process, with short timeouts: Redis is local and fast or down."""
    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=2.0, socket_connect_timeout=2.0)


def _invocation_key(run_id: str, tool_call_id: str) -> str:
    return f"sba:inv:{run_id}:{tool_call_id}"


def _cancel_key(run_id: str) -> str:
    return f"sba:cancel:{run_id}"


class RedisInvocationStore:
    """Full request and raw result of each tool call, for the guards, kept for a TTL longer
    than any run. Errors propagate: the boundary treats an unstored result as no evidence."""

    def __init__(self, *, ttl_s: int) -> None:
        self._ttl_s = ttl_s

    def put(self, invocation: CanonicalInvocation) -> None:
        payload = {
            "run_id": invocation.run_id,
            "tool_call_id": invocation.tool_call_id,
            "tool": invocation.tool,
            "request": invocation.request,
            "raw_result": invocation.raw_result,
            "status": invocation.status.value,
            "evidence_status": invocation.evidence_status,
            "error_code": invocation.error_code,
            "created_at": invocation.created_at.isoformat(),
            "duration_ms": invocation.duration_ms,
        }
        data = orjson.dumps(payload, default=str, option=orjson.OPT_NON_STR_KEYS)
        client().set(_invocation_key(invocation.run_id, invocation.tool_call_id), data, ex=self._ttl_s)

    def get(self, run_id: str, tool_call_id: str) -> CanonicalInvocation | None:
        data = client().get(_invocation_key(run_id, tool_call_id))
        if data is None:
            return None
        item: dict[str, Any] = orjson.loads(data)
        return CanonicalInvocation(
            run_id=item["run_id"],
            tool_call_id=item["tool_call_id"],
            tool=item["tool"],
            request=item["request"],
            raw_result=item["raw_result"],
            status=InvocationStatus(item["status"]),
            evidence_status=item["evidence_status"],
            error_code=item["error_code"],
            created_at=datetime.fromisoformat(item["created_at"]),
            duration_ms=item["duration_ms"],
        )


def request_cancel(run_id: str, reason: CancelReason) -> None:
    """Ask the worker running ``run_id`` to stop at its next boundary."""
    ttl = int(settings.RUN_DEADLINE_S * 3) + 60
    client().set(_cancel_key(run_id), reason.value, ex=ttl, nx=True)


class RedisCancelSignal:
    """Polled by the RunContext at every boundary, at most every ``MIN_INTERVAL_S`` (a cancel
    takes effect within that much more time; boundaries packed closer share one read).
    An unreachable Redis cancels nothing."""

    MIN_INTERVAL_S = 0.02

    def __init__(self, run_id: str) -> None:
        self._run_id = run_id
        self._key = _cancel_key(run_id)
        self._warned = False
        self._next_read = 0.0
        self._seen: CancelReason | None = None

    def requested(self) -> CancelReason | None:
        if self._seen is not None:
            return self._seen
        if (here := stop_requested(self._run_id)) is not None:  # this worker is shutting down
            self._seen = here
            return here
        now = time.monotonic()
        if now < self._next_read:
            return None
        self._next_read = now + self.MIN_INTERVAL_S
        self._seen = self._read()
        return self._seen

    def _read(self) -> CancelReason | None:
        try:
            value = client().get(self._key)
        except redis.RedisError as exc:
            if not self._warned:
                logger.warning("cancel signal unreadable: %s", type(exc).__name__)
                self._warned = True
            return None
        if value is None:
            return None
        try:
            return CancelReason(value.decode() if isinstance(value, bytes) else str(value))
        except ValueError:
            return CancelReason.USER
