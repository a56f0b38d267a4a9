"""Trace console benchmark: the admin's run list and a run's page with 10,000 runs on MariaDB.

A few real runs (diagnoses and small talk, offline analyst, executed in this process) are copied
into ``--runs`` finished runs with everything a run leaves behind (steps, tool calls, timeline,
events, webhook deliveries); then a superuser's browser requests are timed through Django's
test client: the run list (first page, and filtered by status and by feedback) and the page of a
diagnosis run. Reported: median and p95 per page, and the queries each page made. Target:
median ≤ 150 ms for each page (a hardware-dependent figure: the machine's own speed is shown
beside it, as the median time of a trivial view — the login page — in the same run).

    python -m bench.console_bench [--runs 10000] [--requests 30]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Sequence

from bench.load_test import accumulate
from bench.service_bench import percentile, prepared_service

DEFAULT_DB = "mysql://root@127.0.0.1:3306/sba_bench_console"
TARGET_MS = 150.0
DIAGNOSIS = "Payments are timing out since 10:00, please investigate"
CHAT = "hello, what can you do?"


def timed(client: object, path: str, requests: int) -> tuple[list[float], int]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    get = client.get  # type: ignore[attr-defined]
    assert get(path).status_code == 200, path  # warm
    times = []
    for _ in range(requests):
        started = time.perf_counter()
        response = get(path)
        times.append((time.perf_counter() - started) * 1000.0)
        assert response.status_code == 200, path
    with CaptureQueriesContext(connection) as captured:
        get(path)
    return times, len(captured)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=30)
    parser.add_argument("--database-url", default=DEFAULT_DB)
    args = parser.parse_args(argv)

    prepared_service(args.database_url)
    from django.contrib.auth import get_user_model
    from django.test import Client

    from chat import services, wiring
    from chat.services import api_key_create
    from traces.models import Feedback, Run

    key, _raw, _secret = api_key_create(username="bench-console")
    templates = []
    for question in (DIAGNOSIS, CHAT, CHAT, DIAGNOSIS):
        run_id = str(wiring.lifecycle().open(owner=key.user, question=question).run.id)
        services.run_execute(run_id=run_id)
        templates.append(run_id)
    seconds = accumulate(args.runs - len(templates), templates)
    sample = list(Run.objects.order_by("?").values_list("id", flat=True)[:200])
    Feedback.objects.bulk_create([Feedback(run_id=r, owner=key.user, rating="down") for r in sample])
    diagnosis = Run.objects.filter(question=DIAGNOSIS, tool_calls__gt=0).order_by("-created_at").first()
    assert diagnosis is not None
    admin = get_user_model().objects.create_superuser("bench-admin", "b@example.com", "bench-pw-1")
    client = Client()
    client.force_login(admin)
    anonymous = Client()

    pages = {
        "run list": "/admin/traces/run/",
        "run list, failed": "/admin/traces/run/?status__exact=failed",
        "run list, thumbs down": "/admin/traces/run/?feedback=down",
        "run page": f"/admin/traces/run/{diagnosis.id}/change/",
    }
    baseline, _ = timed(anonymous, "/admin/login/", args.requests)
    print(f"trace console, {Run.objects.count()} runs ({seconds:.1f} s to copy them in)")
    print(f"  baseline (login page): median {statistics.median(baseline):.1f} ms")
    ok = True
    for name, path in pages.items():
        times, queries = timed(client, path, args.requests)
        median = statistics.median(times)
        met = median <= TARGET_MS
        ok &= met
        print(
            f"  {name:<22} median {median:6.1f} ms  p95 {percentile(times, 0.95):6.1f} ms  "
            f"{queries:2d} queries  ×{median / statistics.median(baseline):.1f} baseline  "
            f"{'ok' if met else 'MISSED'} (target ≤ {TARGET_MS:.0f} ms)"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
