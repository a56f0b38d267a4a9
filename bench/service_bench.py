"""End-to-end benchmark: question posted → ``done`` received over SSE, against MariaDB + Redis.

Starts the real stack (ASGI server, Celery worker) on its own database, measures the round
trip of a no-op Celery task on the same broker as the baseline, then for a SYSTEM_CHAT and a
DIAGNOSIS question: sequential latency (median, p95) and throughput with concurrent clients.

    python -m bench.service_bench [--runs 60] [--clients 16] [--concurrent-runs 320]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlparse

DEFAULT_DB = "mysql://root@127.0.0.1:3306/sba_bench"
QUESTIONS = {
    "SYSTEM_CHAT": "hello, what can you do?",
    "DIAGNOSIS": "Payments are timing out since 10:00 UTC, please investigate",
}
#: the benchmarks measure the service, not its per-key limits (the rate check itself still runs)
UNLIMITED = {"API_RATE_PER_KEY": "100000000/min", "MAX_ACTIVE_RUNS_PER_KEY": "1000000"}
TARGET_RATIO = {"SYSTEM_CHAT": 10.0, "DIAGNOSIS": 25.0}
TARGET_RATE = {"SYSTEM_CHAT": 110.0, "DIAGNOSIS": 25.0}


def _prepare_database(url: str) -> None:
    parsed = urlparse(url)
    if parsed.scheme.startswith("mysql"):
        import MySQLdb

        conn = MySQLdb.connect(
            host=parsed.hostname or "127.0.0.1",
            port=parsed.port or 3306,
            user=parsed.username or "root",
            passwd=parsed.password or "",
        )
        name = parsed.path.lstrip("/")
        cursor = conn.cursor()
        # A fresh database every time, so runs of the benchmark compare.
        cursor.execute(f"DROP DATABASE IF EXISTS `{name}`")
        cursor.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
        conn.close()


def prepared_service(database_url: str, redis_url: str | None = None) -> str:
    """A fresh benchmark database, migrated, and an empty benchmark Redis database, with Django
    set up on them in this process; returns the Redis URL."""
    redis_url = redis_url or os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/14")
    os.environ.update(
        {"DATABASE_URL": database_url, "REDIS_URL": redis_url, "DJANGO_SETTINGS_MODULE": "config.settings"}
    )
    _prepare_database(database_url)

    import django

    django.setup()
    from django.core.management import call_command

    from chat.redis_store import client as redis_client

    call_command("migrate", interactive=False, verbosity=0)
    redis_client().flushdb()
    return redis_url


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def one_run(client: Any, question: str) -> float:
    from httpx_sse import connect_sse

    started = time.perf_counter()
    created = client.post("/api/chat", json={"question": question})
    created.raise_for_status()
    run_id = created.json()["run_id"]
    with connect_sse(client, "GET", f"/api/runs/{run_id}/events") as source:
        for event in source.iter_sse():
            if event.event == "done":
                outcome = json.loads(event.data)["outcome"]
                if outcome not in ("success", "fallback"):
                    raise RuntimeError(f"benchmark run ended {outcome}")
                break
    return (time.perf_counter() - started) * 1000.0


def noop_round_trips(count: int) -> list[float]:
    from chat.tasks import noop

    times = []
    for _ in range(count + 10):
        started = time.perf_counter()
        noop.apply_async().get(timeout=10)
        times.append((time.perf_counter() - started) * 1000.0)
    return times[10:]


def concurrent(base_url: str, key: str, question: str, clients: int, total: int, trials: int = 3) -> list[float]:
    """Runs/s of ``trials`` separate rounds (after a warm-up round). On a shared 2-core machine
    one round can land 15 % off the next; the median of three is what is reported."""
    from bench.loadgen import runs_per_second

    parsed = urlparse(base_url)
    host, port = parsed.hostname or "127.0.0.1", parsed.port or 80
    runs_per_second(host, port, key, question, clients=clients, total=clients * 4)
    return [runs_per_second(host, port, key, question, clients=clients, total=total) for _ in range(trials)]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=60, help="sequential runs per question")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--concurrent-runs", type=int, default=600, help="runs per question in the concurrent phase")
    parser.add_argument("--web-workers", type=int, default=int(os.environ.get("BENCH_WEB_WORKERS", "2")))
    parser.add_argument("--worker-concurrency", type=int, default=int(os.environ.get("BENCH_WORKER_CONCURRENCY", "3")))
    args = parser.parse_args(argv)

    database_url = os.environ.get("BENCH_DATABASE_URL", DEFAULT_DB)
    redis_url = prepared_service(database_url)
    import httpx

    from chat.services import api_key_create
    from chat.stack import Stack, free_port

    # The bundled in-memory incident: the figures measure the service, not the evidence stores.
    env = {
        "DATABASE_URL": database_url,
        "REDIS_URL": redis_url,
        "LOG_LEVEL": "WARNING",
        "EVIDENCE_SOURCE": "example",
        **UNLIMITED,
    }
    stack = Stack(port=free_port(), env=env, web_workers=args.web_workers, worker_concurrency=args.worker_concurrency)
    results: dict[str, Any] = {}
    with stack:
        _, key, _secret = api_key_create(username="bench")
        headers = {"Authorization": f"Bearer {key}"}
        baseline = noop_round_trips(200)
        noop_ms = statistics.median(baseline)
        with httpx.Client(base_url=stack.base_url, headers=headers, timeout=httpx.Timeout(30, read=120)) as client:
            for intent, question in QUESTIONS.items():
                for _ in range(5):
                    one_run(client, question)  # warm-up
                times = [one_run(client, question) for _ in range(args.runs)]
                results[intent] = {"median": statistics.median(times), "p95": percentile(times, 0.95)}
        for intent, question in QUESTIONS.items():
            rounds = concurrent(stack.base_url, key, question, args.clients, args.concurrent_runs)
            results[intent]["rate"] = statistics.median(rounds)
            results[intent]["rounds"] = rounds

    ok = True
    print(
        f"service benchmark — MariaDB + Redis, offline analyst, web workers {args.web_workers}, worker concurrency {args.worker_concurrency}"
    )
    print(
        f"  baseline: no-op Celery task round trip   median {noop_ms:6.2f} ms   p95 {percentile(baseline, 0.95):6.2f} ms"
    )
    for intent, r in results.items():
        ratio = r["median"] / noop_ms
        ratio_ok = ratio <= TARGET_RATIO[intent]
        rate_ok = r["rate"] >= TARGET_RATE[intent]
        ok = ok and ratio_ok and rate_ok
        print(
            f"  {intent:<11} sequential median {r['median']:7.2f} ms  p95 {r['p95']:7.2f} ms  = {ratio:5.1f}× no-op "
            f"(target ≤ {TARGET_RATIO[intent]:.0f}×) {'OK' if ratio_ok else 'MISSED'}"
        )
        shown = ", ".join(f"{x:.0f}" for x in r["rounds"])
        print(
            f"  {'':<11} {args.clients} clients   {r['rate']:7.1f} runs/s median of rounds [{shown}] "
            f"(target ≥ {TARGET_RATE[intent]:.0f}) {'OK' if rate_ok else 'MISSED'}"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.path.insert(0, os.getcwd())
    raise SystemExit(main())
