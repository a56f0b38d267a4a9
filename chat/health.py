"""Readiness checks: each answers ok or not, with a short safe detail."""

from __future__ import annotations

import time
from typing import Any

from django.conf import settings
from django.db import connection

from chat.redis_store import client
from chat.wiring import providers


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


def readiness() -> dict[str, dict[str, Any]]:
    return {
        "database": _timed(_database),
        "redis": _timed(_redis),
        "broker": _timed(_broker),
        "model_provider": _timed(_models),
        "evidence": _timed(_evidence),
    }
