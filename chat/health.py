"""Readiness checks: each answers ok or not, with a short safe detail.

The service is ready when its own dependencies are (``REQUIRED``). Two more checks are reported
without deciding it (``ADVISORY``): whether a runs worker answers, and how many messages wait.
A single-process worker cannot answer while it executes a run, so all workers busy reads like
none; and every web instance shares the workers, so one instance taken out of rotation for them
would only take the read API with it. Alert on them (or on the metrics) instead.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from django.conf import settings
from django.db import connection

from chat import selectors
from chat.redis_store import client
from chat.wiring import providers

REQUIRED = ("database", "redis", "broker", "model_provider", "evidence")
ADVISORY = ("workers", "queue")
#: how long to wait for the workers' answers (from the last one that came in)
WORKERS_TIMEOUT_S = 0.25
#: how long one answer about the workers is reused (per process), so readyz stays cheap
WORKERS_CACHE_S = 5.0


def _timed(check: Any) -> dict[str, Any]:
    started = time.perf_counter()
    try:
        detail = check()
        ok = True
    except Exception as exc:  # noqa: BLE001 - a failing dependency is the answer, not an error
        detail, ok = type(exc).__name__, False
    return {"ok": ok, "detail": detail, "ms": round((time.perf_counter() - started) * 1000, 2)}


def _database() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()
    return connection.vendor


def _redis() -> str:
    client().ping()
    return "ping"


def _broker() -> str:
    from celery import current_app as app

    with app.connection_for_write() as conn:
        conn.ensure_connection(max_retries=0, timeout=2)
    return "connected"


def _models() -> dict[str, str]:
    return providers()


def _evidence() -> dict[str, Any]:
    """Where the evidence tools look; for the knowledge base, whether retrieval is hybrid."""
    source = str(settings.EVIDENCE_SOURCE)
    if source != "database":
        return {"source": source}
    from knowledge.backends import knowledge_search

    return {"source": source, "knowledge": knowledge_search().status()}


class _Workers:
    """How many workers consuming the runs queue answered a broadcast, asked at most once per
    ``WORKERS_CACHE_S`` in this process (one caller asks; the others wait for its answer)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._answer: tuple[float, dict[str, Any]] | None = None

    def check(self) -> dict[str, Any]:
        with self._lock:
            if self._answer is not None and time.monotonic() - self._answer[0] < WORKERS_CACHE_S:
                return self._answer[1]
            answer = _timed(_runs_workers)
            answer["ok"] = answer["ok"] and answer["detail"]["answering"] > 0
            self._answer = (time.monotonic(), answer)
            return answer

    def forget(self) -> None:
        with self._lock:
            self._answer = None


def _runs_workers() -> dict[str, Any]:
    """Workers that answered, by count only (their names say where they run)."""
    from celery import current_app as app

    queue = settings.CELERY_TASK_DEFAULT_QUEUE
    with app.connection_for_write() as conn:
        conn.ensure_connection(max_retries=0, timeout=2)
        replies = app.control.inspect(timeout=WORKERS_TIMEOUT_S, connection=conn).active_queues() or {}
    answering = sum(1 for queues in replies.values() if any(q.get("name") == queue for q in queues or ()))
    return {"answering": answering, "queue": queue}


workers = _Workers()


def _queue() -> dict[str, Any]:
    """Messages waiting per queue; not ok once the runs queue is full (new questions get 503)."""
    answer = _timed(selectors.queue_depths)
    if answer["ok"]:
        answer["ok"] = answer["detail"].get(settings.CELERY_TASK_DEFAULT_QUEUE, 0) < settings.MAX_QUEUED_RUNS
    return answer


def readiness() -> dict[str, dict[str, Any]]:
    checks = {
        "database": _timed(_database),
        "redis": _timed(_redis),
        "broker": _timed(_broker),
        "model_provider": _timed(_models),
        "evidence": _timed(_evidence),
    }
    # Without a broker no worker can be asked: say so rather than wait on it a second time.
    checks["workers"] = workers.check() if checks["broker"]["ok"] else {"ok": False, "detail": "no_broker", "ms": 0.0}
    checks["queue"] = _queue()
    return checks


def is_ready(checks: dict[str, dict[str, Any]]) -> bool:
    """Ready when every required check is ok; the advisory ones only inform."""
    return all(checks[name]["ok"] for name in REQUIRED if name in checks)
