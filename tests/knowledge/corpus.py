"""Small documents and a settings helper shared by the knowledge tests."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

DISK = (
    b"# Disk full runbook\n\n"
    b"## Symptoms\n\nWrites fail with ENOSPC: no space left on device on the ledger volume.\n\n"
    b"## Remedy\n\nDelete rotated logs under /var/log/ledger and grow the volume by 20 GiB.\n"
)
POOL = b"# Connection pool\n\n## Exhaustion\n\nRaise db.pool.max_size to 50 after checking max_connections.\n"
CERT = b"# TLS certificates\n\n## Expiry\n\nThe certificate of api.example is renewed by cert-manager.\n"
CHINESE = "# 数据库连接池\n\n## 耗尽\n\n数据库连接池耗尽时，请求会超时，需要扩大连接池。\n".encode()


@contextlib.contextmanager
def lexical_wiring(settings: Any, **overrides: Any) -> Iterator[None]:
    """No embedder (lexical retrieval) plus ``overrides`` of settings, with the composition
    root's cached embedder and search index dropped before and after (a test may monkeypatch
    them meanwhile)."""
    from knowledge import backends

    settings.EMBEDDINGS = {**settings.EMBEDDINGS, "PROVIDER": "none"}
    for name, value in overrides.items():
        setattr(settings, name, value)
    cached = (backends.embedder, backends.knowledge_search)
    for function in cached:
        function.cache_clear()
    yield
    for function in cached:
        function.cache_clear()
