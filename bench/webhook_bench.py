"""Webhook benchmark: runs that end, their ``run.completed`` received by a local receiver.

Starts the real stack (ASGI server, run workers, the webhook worker) on MariaDB and Redis and a
receiver on loopback, then ``--clients`` clients each ask a SYSTEM_CHAT question with a
``webhook_url`` and wait for its webhook before asking the next, until ``--runs`` webhooks have
arrived. Reported: deliveries per second, and the delay from the run's end (its ``finished_at``,
in the event itself) to the receiver reading the request — median and p95. Every signature is
checked with the ``standardwebhooks`` library. Target: median delay ≤ 100 ms.

    python -m bench.webhook_bench [--runs 1000] [--clients 16]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from collections.abc import Sequence
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from bench.service_bench import UNLIMITED, percentile, prepared_service

DEFAULT_DB = "mysql://root@127.0.0.1:3306/sba_bench_webhooks"
TARGET_DELAY_MS = 100.0


class Inbox:
    """What the receiver got: per run id, the receipt time and the request."""

    def __init__(self) -> None:
        self.lock = threading.Condition()
        self.got: dict[str, tuple[float, bytes, dict[str, str]]] = {}

    def put(self, run_id: str, at: float, body: bytes, headers: dict[str, str]) -> None:
        with self.lock:
            self.got[run_id] = (at, body, headers)
            self.lock.notify_all()

    def wait(self, run_id: str, timeout_s: float) -> tuple[float, bytes, dict[str, str]]:
        deadline = time.monotonic() + timeout_s
        with self.lock:
            while run_id not in self.got:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"no webhook for run {run_id}")
                self.lock.wait(left)
            return self.got[run_id]


def receiver(inbox: Inbox) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            at = time.time()
            self.send_response(204)
            self.send_header("content-length", "0")
            self.end_headers()
            run_id = json.loads(body)["data"]["id"]
            inbox.put(run_id, at, body, {k.lower(): v for k, v in self.headers.items()})

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=16)
    args = parser.parse_args(argv)

    database_url = os.environ.get("BENCH_WEBHOOK_DATABASE_URL", DEFAULT_DB)
    redis_url = prepared_service(database_url)
    import httpx
    from standardwebhooks.webhooks import Webhook

    from chat.services import api_key_create
    from chat.stack import Stack, free_port

    inbox = Inbox()
    server = receiver(inbox)
    port = server.server_address[1]
    env = {
        "DATABASE_URL": database_url,
        "REDIS_URL": redis_url,
        "LOG_LEVEL": "WARNING",
        "EVIDENCE_SOURCE": "example",
        "WEBHOOK_ALLOWED_CIDRS": "127.0.0.1/32",
        "WEBHOOK_ALLOWED_PORTS": str(port),
        **UNLIMITED,
    }
    hook = f"http://127.0.0.1:{port}/hook"
    delays: list[float] = []
    failures: list[str] = []
    counter = iter(range(args.runs))
    counter_lock = threading.Lock()
    with Stack(port=free_port(), env=env, web_workers=2, worker_concurrency=3) as stack:
        _, key, secret = api_key_create(username="bench")
        verifier = Webhook(secret)

        def client() -> None:
            with httpx.Client(base_url=stack.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=30) as http:
                while True:
                    with counter_lock:
                        if next(counter, None) is None:
                            return
                    response = http.post("/api/chat", json={"question": "hello, what can you do?", "webhook_url": hook})
                    if response.status_code != 202:
                        failures.append(f"POST {response.status_code}")
                        continue
                    at, body, headers = inbox.wait(response.json()["run_id"], 60)
                    event = verifier.verify(body, headers)
                    finished = datetime.fromisoformat(event["data"]["finished_at"].replace("Z", "+00:00"))
                    delays.append((at - finished.timestamp()) * 1000.0)

        for warm in range(20):
            http_warm = httpx.post(
                f"{stack.base_url}/api/chat",
                json={"question": f"hello {warm}", "webhook_url": hook},
                headers={"Authorization": f"Bearer {key}"},
            )
            inbox.wait(http_warm.json()["run_id"], 60)
        started = time.perf_counter()
        threads = [threading.Thread(target=client) for _ in range(args.clients)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        seconds = time.perf_counter() - started
    server.shutdown()

    median = statistics.median(delays) if delays else float("inf")
    ok = not failures and len(delays) == args.runs and median <= TARGET_DELAY_MS
    print(f"webhook benchmark — {args.runs} runs ended by {args.clients} clients, each delivered to a local receiver")
    print(
        f"  deliveries        {len(delays) / seconds:7.1f} per second ({len(delays)} in {seconds:.1f} s, all signatures verified)"
    )
    print(
        f"  run end → receipt median {median:6.1f} ms   p95 {percentile(delays, 0.95) if delays else float('nan'):6.1f} ms"
        f"   target ≤ {TARGET_DELAY_MS:.0f} ms  {'OK' if median <= TARGET_DELAY_MS else 'MISSED'}"
    )
    if failures:
        print(f"  {len(failures)} requests failed: {sorted(set(failures))}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.path.insert(0, os.getcwd())
    raise SystemExit(main())
