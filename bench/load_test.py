"""Load test: many runs at once, every one accounted for — in the database, the polling API, each
SSE stream that followed it, and its webhook.

Starts the real stack (ASGI server, run workers, the webhook worker) on its own MariaDB
database and Redis database, and a webhook receiver on loopback. ``--clients`` clients each ask
a question with a ``webhook_url`` and follow the run's stream to ``done`` before asking the next
(three questions in four are small talk, one is a diagnosis; offline analyst), until ``--runs``
runs are done. Each run, as it is created, is also handed to ``--listeners`` ÷ ``--clients`` of
the ``--listeners`` listeners, which follow its stream too: with every client's run in flight,
every listener has a stream open.

Checked, and the exit status is 1 if any fails: no run lost (each accepted run is terminal in the
database and in ``GET /api/runs/{id}``, and they agree with its stream and webhook); no duplicate
terminal event (one ``done`` per stream and per archived stream); every stream complete (200,
ids 1…n without a gap, ends with ``done``, equals the archived events); every run's webhook
received exactly once (deduplicated on ``webhook-id``; the same ``webhook-id`` again with the
same body is a retry, reported apart; with another body, or a second ``webhook-id`` for a run, it
is a duplicate) and correctly signed; no submission refused.

Reported: runs/s; submit → ``done`` p50/p95/p99; the CPU time the stack's processes spent per
run; the peak resident memory (VmHWM) of each process of the stack; and, after ``--accumulate`` finished runs were added to the database, the same
again: the goal is ≥ 90 % of the fresh throughput. Each throughput is also given as a ratio to a
burst of no-op Celery tasks on the same broker and workers, measured just before and just after
it, and the goal is judged on those ratios, so that a machine busy with other work moves both alike. The
goal is reported, never a failure; so is the CPU per run, which other work on the machine
hardly moves.

The accumulated runs are inserted, not run: each is a copy of one of the fresh phase's real
runs — session, run, archived events, steps, tool invocations, timeline, webhook delivery and
attempts — with new ids and earlier times. That is the shape and size real history has, for a
few seconds of inserts instead of minutes of both cores running runs; what is measured is how
the grown tables slow the next runs.

    python -m bench.load_test [--runs 1000] [--clients 50] [--listeners 200] [--accumulate 3000] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import signal
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlparse

import orjson

from bench.loadgen import Connection, StreamRead
from bench.service_bench import UNLIMITED, percentile, prepared_service

DEFAULT_DB = "mysql://root@127.0.0.1:3306/sba_load"
#: its own Redis database: the benchmarks use 14, the tests 15
DEFAULT_REDIS = "redis://127.0.0.1:6379/10"
SMALL_TALK = "hello, what can you do?"
DIAGNOSIS = "Payments are timing out since 10:00 UTC, please investigate"
TERMINAL = ("completed", "failed", "cancelled")
GOAL_ACCUMULATED = 0.90
#: a kept-alive connection idle longer than this is replaced before use: the server may be
#: closing it (uvicorn's keep-alive timeout is 5 s), and a POST must never be sent twice
REUSE_S = 2.0
EXAMPLES = 12


def question_for(index: int) -> str:
    return DIAGNOSIS if index % 4 == 3 else SMALL_TALK


class ReceivedWebhook(Protocol):
    """A request the webhook receiver got (its header names in lower case)."""

    @property
    def headers(self) -> Mapping[str, str]: ...

    @property
    def body(self) -> bytes: ...


@dataclass(frozen=True)
class Target:
    """A running stack and what the load test needs of it."""

    base_url: str
    api_key: str
    #: the key's ``whsec_…`` secret, to check every signature
    webhook_secret: str
    webhook_url: str
    #: every request the receiver has got so far
    received: Callable[[], Sequence[ReceivedWebhook]]
    #: the stack's processes by name (``Stack.processes``), whose CPU time is counted
    processes: Mapping[str, Any] = field(default_factory=dict)


# --- the webhook receiver ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Webhook:
    headers: dict[str, str]
    body: bytes


@contextlib.contextmanager
def receiving() -> Iterator[tuple[int, list[Webhook]]]:
    """A receiver on loopback that answers 204 and keeps every request; a daemon thread of this
    process, so it ends with it however it ends."""
    got: list[Webhook] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length") or 0))
            self.send_response(204)
            self.send_header("content-length", "0")
            self.end_headers()
            got.append(Webhook({k.lower(): v for k, v in self.headers.items()}, body))

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="webhook-receiver", daemon=True).start()
    try:
        yield server.server_address[1], got
    finally:
        server.shutdown()
        server.server_close()


# --- driving the load ----------------------------------------------------------------------------


@dataclass(slots=True)
class Followed:
    """One stream of a run as a client or a listener read it."""

    run_id: str
    listener: bool
    #: opened before the run's ``done`` had reached the client that asked
    live: bool
    status: int = 0
    ended: bool = False
    ids: list[str | None] = field(default_factory=list)
    types: list[str] = field(default_factory=list)
    outcome: str | None = None
    done_at: float | None = None
    error: str = ""


@dataclass(slots=True)
class Asked:
    run_id: str
    asked_at: float
    done_at: float | None = None


@dataclass
class Observed:
    asked: dict[str, Asked] = field(default_factory=dict)
    streams: list[Followed] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    started: float = 0.0
    finished: float = 0.0
    peak_listener_streams: int = 0
    peak_streams: int = 0
    stopped_by_time: bool = False


class _Client:
    """A keep-alive connection that is replaced when idle too long or after any error."""

    def __init__(self, host: str, port: int, key: str) -> None:
        self.host, self.port, self.key = host, port, key
        self.connection: Connection | None = None
        self.last_used = 0.0

    async def _ready(self) -> Connection:
        if self.connection is not None and time.perf_counter() - self.last_used > REUSE_S:
            await self.close()
        if self.connection is None:
            connection = Connection(self.host, self.port, self.key)
            await asyncio.wait_for(connection.open(), 10)
            self.connection = connection
        return self.connection

    async def request(self, method: str, path: str, body: bytes = b"", *, timeout_s: float = 30) -> tuple[int, bytes]:
        connection = await self._ready()
        try:
            return await asyncio.wait_for(connection.request(method, path, body), timeout_s)
        except BaseException:
            await self.close()
            raise
        finally:
            self.last_used = time.perf_counter()

    async def stream(self, path: str, *, timeout_s: float) -> StreamRead:
        connection = await self._ready()
        try:
            return await asyncio.wait_for(connection.stream(path), timeout_s)
        except BaseException:
            await self.close()
            raise
        finally:
            self.last_used = time.perf_counter()

    async def close(self) -> None:
        connection, self.connection = self.connection, None
        if connection is not None and connection.writer is not None:
            connection.writer.close()
            with contextlib.suppress(OSError):
                await connection.writer.wait_closed()


def _fanout(index: int, listeners: int, clients: int) -> int:
    """How many listeners follow run ``index``: listeners ÷ clients on average, spread evenly."""
    return (index + 1) * listeners // clients - index * listeners // clients


_TRANSPORT_ERRORS = (OSError, EOFError, asyncio.IncompleteReadError, TimeoutError, ValueError, IndexError)


async def _drive(
    target: Target, *, runs: int, clients: int, listeners: int, max_seconds: float, stream_timeout_s: float
) -> Observed:
    parsed = urlparse(target.base_url)
    host, port = parsed.hostname or "127.0.0.1", parsed.port or 80
    observed = Observed()
    handed: asyncio.Queue[str | None] = asyncio.Queue()
    counter = itertools.count()
    open_streams = {"listeners": 0, "all": 0}
    observed.started = time.perf_counter()
    stop_at = observed.started + max_seconds

    async def follow(client: _Client, run_id: str, *, listener: bool) -> Followed:
        asked = observed.asked[run_id]
        followed = Followed(run_id, listener, live=asked.done_at is None)
        open_streams["all"] += 1
        observed.peak_streams = max(observed.peak_streams, open_streams["all"])
        if listener:
            open_streams["listeners"] += 1
            observed.peak_listener_streams = max(observed.peak_listener_streams, open_streams["listeners"])
        try:
            read = await client.stream(f"/api/runs/{run_id}/events", timeout_s=stream_timeout_s)
        except _TRANSPORT_ERRORS as exc:
            followed.error = type(exc).__name__
        else:
            followed.status, followed.ended, followed.done_at = read.status, read.ended, read.done_at
            followed.ids = [e.id for e in read.events]
            followed.types = [e.type for e in read.events]
            done = next((e for e in read.events if e.type == "done"), None)
            with contextlib.suppress(ValueError, AttributeError):  # a malformed done: no outcome, a mismatch
                followed.outcome = orjson.loads(done.data).get("outcome") if done is not None else None
        finally:
            open_streams["all"] -= 1
            if listener:
                open_streams["listeners"] -= 1
        observed.streams.append(followed)
        return followed

    async def asker() -> None:
        client = _Client(host, port, target.api_key)
        try:
            while (index := next(counter)) < runs:
                if time.perf_counter() > stop_at:
                    observed.stopped_by_time = True
                    return
                body = orjson.dumps({"question": question_for(index), "webhook_url": target.webhook_url})
                asked_at = time.perf_counter()
                try:
                    status, answer = await client.request("POST", "/api/chat", body)
                except _TRANSPORT_ERRORS as exc:
                    observed.refused.append(f"POST /api/chat: {type(exc).__name__}")
                    continue
                if status != 202:
                    observed.refused.append(f"POST /api/chat answered {status}: {answer[:160]!r}")
                    continue
                run_id = orjson.loads(answer)["run_id"]
                asked = observed.asked[run_id] = Asked(run_id, asked_at)
                for _ in range(_fanout(index, listeners, clients)):
                    handed.put_nowait(run_id)
                asked.done_at = (await follow(client, run_id, listener=False)).done_at
        finally:
            await client.close()

    async def listener() -> None:
        client = _Client(host, port, target.api_key)
        try:
            while (run_id := await handed.get()) is not None:
                await follow(client, run_id, listener=True)
        finally:
            await client.close()

    listening = [asyncio.ensure_future(listener()) for _ in range(listeners)]
    await asyncio.gather(*(asker() for _ in range(clients)))
    observed.finished = max((a.done_at for a in observed.asked.values() if a.done_at), default=time.perf_counter())
    for _ in listening:
        handed.put_nowait(None)
    await asyncio.gather(*listening)
    return observed


def _run_async(main: Any) -> Any:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - a dependency of the service
        return asyncio.run(main)
    return uvloop.run(main)


# --- checking ------------------------------------------------------------------------------------


@dataclass
class Checks:
    runs: int = 0
    #: failures
    lost: int = 0
    duplicate_done: int = 0
    incomplete_streams: int = 0
    missing_webhooks: int = 0
    duplicate_webhooks: int = 0
    bad_signatures: int = 0
    inconsistent: int = 0
    refused: int = 0
    #: reported only
    webhook_retries_received: int = 0
    webhook_deliveries_retried: int = 0
    streams: int = 0
    listener_streams: int = 0
    listener_streams_live: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    examples: list[str] = field(default_factory=list)

    FAILURES = (
        "lost",
        "duplicate_done",
        "incomplete_streams",
        "missing_webhooks",
        "duplicate_webhooks",
        "bad_signatures",
        "inconsistent",
        "refused",
    )

    @property
    def failed(self) -> int:
        return sum(getattr(self, name) for name in self.FAILURES)

    def fail(self, kind: str, example: str) -> None:
        setattr(self, kind, getattr(self, kind) + 1)
        if len(self.examples) < EXAMPLES:
            self.examples.append(f"{kind}: {example}")


def _chunks(values: Sequence[str], size: int = 500) -> Iterator[Sequence[str]]:
    for start in range(0, len(values), size):
        yield values[start : start + size]


def _webhooks_by_run(received: Sequence[ReceivedWebhook], wanted: set[str]) -> dict[str, list[ReceivedWebhook]]:
    found: dict[str, list[ReceivedWebhook]] = defaultdict(list)
    for hook in received:
        try:
            run_id = orjson.loads(hook.body)["data"]["id"]
        except (orjson.JSONDecodeError, KeyError, TypeError):
            continue
        if run_id in wanted:
            found[run_id].append(hook)
    return found


def _settled(target: Target, run_ids: Sequence[str], settle_s: float) -> None:
    """Wait (at most ``settle_s``) until every run is archived with its ``done`` and its webhook
    has arrived: both happen just after the client saw ``done``."""
    from chat.models import RunEvent

    pending = set(run_ids)
    deadline = time.monotonic() + settle_s
    while pending and time.monotonic() < deadline:
        hooked = _webhooks_by_run(target.received(), pending)
        archived: set[str] = set()
        for chunk in _chunks(sorted(pending)):
            archived.update(
                str(r)
                for r in RunEvent.objects.filter(run_id__in=chunk, event_type="done").values_list("run_id", flat=True)
            )
        pending = {r for r in pending if r not in hooked or r not in archived}
        if pending:
            time.sleep(0.25)


def _polled(target: Target, run_ids: Sequence[str]) -> dict[str, tuple[int, dict[str, Any]]]:
    """GET /api/runs/{id} of every run, over a few connections."""
    parsed = urlparse(target.base_url)
    answers: dict[str, tuple[int, dict[str, Any]]] = {}
    todo = list(run_ids)

    async def poller() -> None:
        client = _Client(parsed.hostname or "127.0.0.1", parsed.port or 80, target.api_key)
        try:
            while todo:
                run_id = todo.pop()
                try:
                    status, body = await client.request("GET", f"/api/runs/{run_id}")
                except _TRANSPORT_ERRORS as exc:
                    answers[run_id] = (0, {"error": type(exc).__name__})
                    continue
                answers[run_id] = (status, orjson.loads(body) if body else {})
        finally:
            await client.close()

    async def all_of_them() -> None:
        await asyncio.gather(*(poller() for _ in range(8)))

    _run_async(all_of_them())
    return answers


def _signed(secret: str, hook: ReceivedWebhook) -> bool:
    """The signature checked with the Standard Webhooks library, at the time the request says it
    was sent (the library's own ``verify`` also refuses requests older than five minutes, which
    a long run of the load test would make of its first webhooks)."""
    from standardwebhooks.webhooks import Webhook as Verifier

    headers = hook.headers
    try:
        sent = datetime.fromtimestamp(int(headers["webhook-timestamp"]), UTC)
        expected = Verifier(secret).sign(msg_id=headers["webhook-id"], timestamp=sent, data=hook.body.decode())
    except (KeyError, ValueError):
        return False
    return expected in headers.get("webhook-signature", "").split(" ")


def _check_stream(checks: Checks, followed: Followed, archived: list[tuple[int, str]], outcome: str) -> None:
    who = f"run {followed.run_id} ({'listener' if followed.listener else 'client'} stream)"
    if followed.error or followed.status != 200 or not followed.ended:
        checks.fail(
            "incomplete_streams", f"{who}: {followed.error or f'status {followed.status}'}, ended={followed.ended}"
        )
        return
    dones = followed.types.count("done")
    if dones > 1:
        checks.fail("duplicate_done", f"{who}: {dones} done events")
        return
    if dones == 0 or followed.types[-1] != "done":
        checks.fail("incomplete_streams", f"{who}: does not end with done: {followed.types[-3:]}")
        return
    if any(i is not None for i in followed.ids) and followed.ids != [str(n) for n in range(1, len(followed.ids) + 1)]:
        checks.fail("incomplete_streams", f"{who}: ids {followed.ids} are not 1…{len(followed.ids)}")
        return
    if archived and [t for _, t in archived] != followed.types:
        checks.fail("incomplete_streams", f"{who}: {followed.types} differs from the archived {archived}")
        return
    if followed.outcome != outcome:
        checks.fail("inconsistent", f"{who}: done says {followed.outcome}, the run {outcome}")


def check(target: Target, observed: Observed, *, settle_s: float) -> Checks:
    """Every check on what one phase did, against the database, the API and the receiver."""
    from chat.models import RunEvent, WebhookDelivery
    from traces.models import Run

    checks = Checks(runs=len(observed.asked))
    for refusal in observed.refused:
        checks.fail("refused", refusal)
    run_ids = sorted(observed.asked)
    _settled(target, run_ids, settle_s)

    rows: dict[str, tuple[str, str]] = {}
    archive: dict[str, list[tuple[int, str]]] = defaultdict(list)
    attempts: dict[str, list[int]] = defaultdict(list)
    for chunk in _chunks(run_ids):
        for row_id, status, outcome in Run.objects.filter(id__in=chunk).values_list("id", "status", "outcome"):
            rows[str(row_id)] = (status, outcome)
        for row_id, seq, kind in (
            RunEvent.objects.filter(run_id__in=chunk)
            .order_by("run_id", "seq")
            .values_list("run_id", "seq", "event_type")
        ):
            archive[str(row_id)].append((seq, kind))
        for row_id, count in WebhookDelivery.objects.filter(run_id__in=chunk).values_list("run_id", "attempts"):
            attempts[str(row_id)].append(count)
    polled = _polled(target, run_ids)
    hooks = _webhooks_by_run(target.received(), set(run_ids))
    streams: dict[str, list[Followed]] = defaultdict(list)
    for followed in observed.streams:
        streams[followed.run_id].append(followed)
    outcomes: Counter[str] = Counter()

    for run_id in run_ids:
        status, outcome = rows.get(run_id, ("missing", ""))
        api_status, resource = polled.get(run_id, (0, {}))
        outcomes[outcome or status] += 1
        if status not in TERMINAL:
            checks.fail("lost", f"run {run_id} is {status} in the database")
            continue
        if api_status != 200 or resource.get("status") not in TERMINAL:
            checks.fail("lost", f"run {run_id}: GET /api/runs answered {api_status} {resource.get('status')}")
            continue
        if (resource["status"], resource.get("outcome") or "") != (status, outcome):
            checks.fail("inconsistent", f"run {run_id}: the API says {resource['status']}/{resource.get('outcome')}")

        events = archive.get(run_id, [])
        if [s for s, _ in events] != list(range(1, len(events) + 1)) or not events or events[-1][1] != "done":
            checks.fail("incomplete_streams", f"run {run_id}: archived events {events}")
        elif [k for _, k in events].count("done") != 1:
            checks.fail("duplicate_done", f"run {run_id}: archived events {events}")

        for followed in streams.get(run_id, []):
            checks.streams += 1
            if followed.listener:
                checks.listener_streams += 1
                checks.listener_streams_live += followed.live
            _check_stream(checks, followed, events, outcome)

        received = hooks.get(run_id, [])
        receipts: Counter[str] = Counter()
        bodies: dict[str, set[bytes]] = defaultdict(set)
        for hook in received:
            webhook_id = hook.headers.get("webhook-id", "")
            receipts[webhook_id] += 1
            bodies[webhook_id].add(hook.body)
            if not _signed(target.webhook_secret, hook):
                checks.fail("bad_signatures", f"run {run_id}: webhook {webhook_id}")
        if not received:
            checks.fail("missing_webhooks", f"run {run_id}: no webhook (deliveries' attempts: {attempts.get(run_id)})")
            continue
        if len(bodies) > 1:
            checks.fail("duplicate_webhooks", f"run {run_id}: delivered as {sorted(bodies)}")
        for webhook_id, sent in bodies.items():
            if len(sent) > 1:
                checks.fail("duplicate_webhooks", f"run {run_id}: {webhook_id} came with {len(sent)} different bodies")
            else:  # the same delivery again, with the same content: a retry (its 2xx was lost on the way)
                checks.webhook_retries_received += receipts[webhook_id] - 1
        data = orjson.loads(received[0].body)["data"]
        if (data.get("status"), data.get("outcome") or "") != (status, outcome):
            checks.fail("inconsistent", f"run {run_id}: the webhook says {data.get('status')}/{data.get('outcome')}")
    checks.webhook_deliveries_retried = sum(1 for counts in attempts.values() for n in counts if n > 1)
    checks.outcomes = dict(outcomes)
    return checks


# --- the baseline and the accumulated history ------------------------------------------------------


def noop_burst(count: int, rounds: int = 3) -> float:
    """No-op Celery tasks per second: ``count`` sent at once to the runs' queue, each answered
    through the result backend — the broker and the workers' per-task cost, nothing else. The
    median of ``rounds`` bursts: one lasts a second or two, and other work on the machine comes
    and goes at that pace."""
    from chat.tasks import noop

    for warm in [noop.apply_async() for _ in range(10)]:
        warm.get(timeout=30)
    rates = []
    for _ in range(rounds):
        started = time.perf_counter()
        pending = [noop.apply_async() for _ in range(count)]
        for result in pending:
            result.get(timeout=60)
        rates.append(count / (time.perf_counter() - started))
    return statistics.median(rates)


def _values(queryset: Any) -> list[dict[str, Any]]:
    return [dict(values) for values in queryset.values()]


def _moved(values: Mapping[str, Any], shift: timedelta, **changes: Any) -> dict[str, Any]:
    """A row's values with its own id left out (or replaced), every time ``shift`` earlier."""
    copy = {k: (v - shift if isinstance(v, datetime) else v) for k, v in values.items() if k != "id"}
    return {**copy, **changes}


def accumulate(count: int, templates: Sequence[str]) -> float:
    """Insert ``count`` finished runs, each a copy of one of ``templates`` (real finished runs)
    with new ids and earlier times, with everything a run leaves behind; returns the seconds."""
    from django.db import transaction

    from chat.models import RunEvent, WebhookAttempt, WebhookDelivery
    from traces.models import AgentStep, ChatSession, ReasoningAudit, Run, ToolInvocation, TraceEvent
    from traces.sql import Row, insert_rows

    started = time.perf_counter()
    runs = {str(r["id"]): r for r in _values(Run.objects.filter(id__in=templates))}
    sessions = {
        r["id"]: r for r in _values(ChatSession.objects.filter(id__in=[r["session_id"] for r in runs.values()]))
    }
    children: dict[str, list[Row]] = defaultdict(list)
    for model in (RunEvent, AgentStep, ToolInvocation, TraceEvent, ReasoningAudit):
        for row in _values(model.objects.filter(run_id__in=list(runs))):
            children[str(row["run_id"])].append((model, row))
    deliveries: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in _values(WebhookDelivery.objects.filter(run_id__in=list(runs), status="succeeded")):
        deliveries[str(row["run_id"])].append(row)
    attempts: dict[uuid.UUID, list[dict[str, Any]]] = defaultdict(list)
    for row in _values(WebhookAttempt.objects.filter(delivery__run_id__in=list(runs))):
        attempts[row["delivery_id"]].append(row)
    order = sorted(runs, key=lambda r: runs[r]["created_at"])

    batch: list[Row] = []
    with transaction.atomic():
        for i in range(count):
            template = runs[order[i % len(order)]]
            run_id, session_id = uuid.uuid4(), uuid.uuid4()
            old = ((str(template["id"]), str(run_id)), (str(template["session_id"]), str(session_id)))
            # the copies come before the fresh runs, half a second apart
            shift = timedelta(hours=1, seconds=(count - i) * 0.5)
            batch.append((ChatSession, _moved(sessions[template["session_id"]], shift, id=session_id)))
            batch.append((Run, _moved(template, shift, id=run_id, session_id=session_id)))
            for model, row in children.get(str(template["id"]), []):
                extra = {"data": _renamed(row["data"], old)} if model is RunEvent else {}
                batch.append((model, _moved(row, shift, run_id=run_id, **extra)))
            for delivery in deliveries.get(str(template["id"]), []):
                delivery_id = uuid.uuid4()
                body = _renamed(delivery["body"], old)
                batch.append((WebhookDelivery, _moved(delivery, shift, id=delivery_id, run_id=run_id, body=body)))
                for attempt in attempts.get(delivery["id"], []):
                    batch.append((WebhookAttempt, _moved(attempt, shift, delivery_id=delivery_id)))
            if len(batch) >= 5_000:
                insert_rows(batch)
                batch = []
        if batch:
            insert_rows(batch)
    return time.perf_counter() - started


def _renamed(text: str, pairs: Sequence[tuple[str, str]]) -> str:
    for before, after in pairs:
        text = text.replace(before, after)
    return text


# --- one phase, the whole test -------------------------------------------------------------------


@dataclass
class Phase:
    name: str
    runs: int
    seconds: float
    runs_per_s: float
    latency_ms: dict[str, float]
    clients: int
    listeners: int
    peak_listener_streams: int
    peak_streams: int
    stopped_by_time: bool
    #: no-op Celery tasks per second (the mean of a burst before and one after), and runs/s as a ratio to it
    baseline_tasks_per_s: float | None
    ratio: float | None
    #: CPU time of the stack's processes per run while the runs were driven: what a run costs
    #: whatever else the machine is doing (the load generator and the database not included)
    cpu_ms_per_run: float | None
    checks: Checks
    database_runs: int


@dataclass
class Report:
    phases: list[Phase] = field(default_factory=list)
    accumulated: int = 0
    accumulate_seconds: float = 0.0
    processes: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(p.checks.failed == 0 for p in self.phases) and bool(self.phases)

    def goal(self) -> dict[str, Any] | None:
        """The accumulated phase against the fresh one: by the baseline ratios when measured."""
        if len(self.phases) < 2:
            return None
        fresh, grown = self.phases[0], self.phases[1]
        raw = grown.runs_per_s / fresh.runs_per_s if fresh.runs_per_s else 0.0
        normalised = grown.ratio / fresh.ratio if grown.ratio and fresh.ratio else None
        judged = normalised if normalised is not None else raw
        cpu = fresh.cpu_ms_per_run / grown.cpu_ms_per_run if fresh.cpu_ms_per_run and grown.cpu_ms_per_run else None
        return {
            "raw": raw,
            "normalised": normalised,
            "cpu": cpu,
            "target": GOAL_ACCUMULATED,
            "met": judged >= GOAL_ACCUMULATED,
        }


def phase(
    target: Target,
    name: str,
    *,
    runs: int,
    clients: int,
    listeners: int,
    baseline_tasks: int = 300,
    max_seconds: float = 600.0,
    stream_timeout_s: float = 150.0,
    settle_s: float = 90.0,
) -> Phase:
    """Measure the baseline, drive ``runs`` runs, then check every one of them."""
    from traces.models import Run

    before = noop_burst(baseline_tasks) if baseline_tasks else None
    cpu_before = stack_cpu_s(target.processes)
    observed: Observed = _run_async(
        _drive(
            target,
            runs=runs,
            clients=clients,
            listeners=listeners,
            max_seconds=max_seconds,
            stream_timeout_s=stream_timeout_s,
        )
    )
    done = [a for a in observed.asked.values() if a.done_at is not None]
    seconds = observed.finished - observed.started
    latencies = [(a.done_at - a.asked_at) * 1000.0 for a in done if a.done_at is not None]
    rate = len(done) / seconds if seconds > 0 else 0.0
    # the phase's CPU includes its last runs' webhooks, not the checks' own requests
    _settled(target, sorted(observed.asked), settle_s)
    cpu = stack_cpu_s(target.processes) - cpu_before
    checks = check(target, observed, settle_s=settle_s)
    # Before and after: other work on the machine that comes or goes during the phase moves the
    # baseline as it moves the runs. After the checks, which wait until every webhook is in: a
    # burst beside the last deliveries would measure them, not the broker.
    baseline = (before + noop_burst(baseline_tasks)) / 2 if before is not None else None
    return Phase(
        name=name,
        runs=len(observed.asked),
        seconds=seconds,
        runs_per_s=rate,
        latency_ms={q: percentile(latencies, v) for q, v in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99))}
        if latencies
        else {},
        clients=clients,
        listeners=listeners,
        peak_listener_streams=observed.peak_listener_streams,
        peak_streams=observed.peak_streams,
        stopped_by_time=observed.stopped_by_time,
        baseline_tasks_per_s=baseline,
        ratio=rate / baseline if baseline else None,
        cpu_ms_per_run=cpu * 1000.0 / len(done) if target.processes and done else None,
        checks=checks,
        database_runs=Run.objects.count(),
    )


def load_test(
    target: Target,
    *,
    runs: int,
    clients: int,
    listeners: int,
    accumulate_runs: int = 0,
    **options: Any,
) -> Report:
    """The fresh phase; then, with ``accumulate_runs``, the history inserted and a second phase."""
    from traces.models import Run

    report = Report()
    report.phases.append(phase(target, "fresh", runs=runs, clients=clients, listeners=listeners, **options))
    if accumulate_runs:
        templates = [str(i) for i in Run.objects.filter(status__in=TERMINAL).values_list("id", flat=True)[:1000]]
        report.accumulated = accumulate_runs
        report.accumulate_seconds = accumulate(accumulate_runs, templates)
        report.phases.append(phase(target, "accumulated", runs=runs, clients=clients, listeners=listeners, **options))
    return report


# --- peak memory of the stack's processes --------------------------------------------------------


def _parents() -> dict[int, list[int]]:
    children: dict[int, list[int]] = defaultdict(list)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # the command name is in parentheses and may hold spaces: the fields follow the last ")"
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children[ppid].append(int(entry.name))
    return children


def _peak_rss_mib(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        return None
    return None


def _command(pid: int) -> str:
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "?"
    text = " ".join(a.decode(errors="replace") for a in argv if a)
    if "resource_tracker" in text:
        return "multiprocessing's resource tracker"
    if "spawn_main" in text:
        return "worker process (spawned)"
    return text if len(text) <= 60 else text[:57] + "…"


def _tree(processes: Mapping[str, Any]) -> Iterator[tuple[str, int, int]]:
    """(name, pid, depth) of each process of the stack and of each of their descendants."""
    children = _parents()
    for name, popen in processes.items():
        todo = [(popen.pid, 0)]
        while todo:
            pid, depth = todo.pop(0)
            yield name, pid, depth
            todo.extend((child, depth + 1) for child in sorted(children.get(pid, [])))


def stack_cpu_s(processes: Mapping[str, Any]) -> float:
    """User + system CPU seconds so far of the stack's processes and their descendants."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for _, pid, _ in _tree(processes):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    return total / ticks


def process_peaks(processes: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Peak resident memory (VmHWM) of each process of the stack and of their descendants."""
    found: list[dict[str, Any]] = []
    for name, pid, depth in _tree(processes):
        label = name if depth == 0 else f"{name} child"
        found.append({"process": label, "pid": pid, "command": _command(pid), "peak_rss_mib": _peak_rss_mib(pid)})
    found.append(
        {
            "process": "load test",
            "pid": os.getpid(),
            "command": "clients, listeners, receiver",
            "peak_rss_mib": _peak_rss_mib(os.getpid()),
        }
    )
    return found


# --- the command ---------------------------------------------------------------------------------


def _print(report: Report, args: argparse.Namespace) -> None:
    print(
        f"load test — {args.runs} runs per phase from {args.clients} clients, {args.listeners} SSE listeners, "
        f"a webhook per run; MariaDB + Redis, offline analyst, {args.web_workers} web workers, "
        f"{args.worker_concurrency} run workers"
    )
    for p in report.phases:
        c = p.checks
        lat = p.latency_ms
        print(f"  {p.name} ({p.database_runs} runs in the database afterwards)")
        print(
            f"    {p.runs_per_s:6.1f} runs/s ({p.runs} in {p.seconds:.1f} s{', stopped at the time bound' if p.stopped_by_time else ''})"
            f"   submit → done p50 {lat.get('p50', float('nan')):.0f} ms  p95 {lat.get('p95', float('nan')):.0f} ms"
            f"  p99 {lat.get('p99', float('nan')):.0f} ms"
        )
        if p.baseline_tasks_per_s:
            print(
                f"    baseline: {p.baseline_tasks_per_s:.0f} no-op tasks/s on the same broker and workers"
                f" → {p.ratio:.4f} runs per no-op task"
            )
        if p.cpu_ms_per_run:
            print(f"    CPU of the stack's processes: {p.cpu_ms_per_run:.0f} ms per run")
        print(
            f"    streams: {c.streams} read ({c.listener_streams} by listeners, {c.listener_streams_live} of them "
            f"attached while the run was live); open at once: {p.peak_listener_streams} listeners, {p.peak_streams} in all"
        )
        print(f"    outcomes: {', '.join(f'{k} {v}' for k, v in sorted(c.outcomes.items()))}")
        verdict = "OK" if c.failed == 0 else "FAILED"
        print(
            f"    checks {verdict}: lost {c.lost}, duplicate done {c.duplicate_done}, incomplete streams "
            f"{c.incomplete_streams}, missing webhooks {c.missing_webhooks}, duplicate webhooks "
            f"{c.duplicate_webhooks}, bad signatures {c.bad_signatures}, inconsistent {c.inconsistent}, refused {c.refused}"
        )
        print(
            f"    webhook retries (reported, not failures): {c.webhook_retries_received} received again, "
            f"{c.webhook_deliveries_retried} deliveries took more than one attempt"
        )
        for example in c.examples:
            print(f"      {example}")
    if report.accumulated:
        print(f"  accumulated: {report.accumulated} finished runs copied in {report.accumulate_seconds:.1f} s")
    goal = report.goal()
    if goal is not None:
        shown = f"{goal['normalised']:.0%} by the baseline ratios, " if goal["normalised"] is not None else ""
        print(
            f"  throughput with the history: {shown}{goal['raw']:.0%} raw of the fresh figure "
            f"(goal ≥ {goal['target']:.0%}) {'MET' if goal['met'] else 'MISSED'}"
        )
        if goal["cpu"] is not None:
            print(f"  CPU per run with the history: the fresh figure is {goal['cpu']:.0%} of it")
    print("  peak resident memory (VmHWM):")
    for row in report.processes:
        mib = row["peak_rss_mib"]
        print(
            f"    {row['process']:<16} pid {row['pid']:<8} {mib if mib is not None else float('nan'):7.1f} MiB  {row['command']}"
        )


def _stop_on_sigterm() -> None:
    """SIGTERM ends the test as Ctrl-C does, through every ``finally`` (the stack's stop)."""

    def stop(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000, help="runs per phase")
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--listeners", type=int, default=200)
    parser.add_argument("--accumulate", type=int, default=3000, help="finished runs added before the second phase")
    parser.add_argument("--max-seconds", type=float, default=600.0, help="no run is asked after this, per phase")
    parser.add_argument("--web-workers", type=int, default=int(os.environ.get("BENCH_WEB_WORKERS", "2")))
    parser.add_argument("--worker-concurrency", type=int, default=int(os.environ.get("BENCH_WORKER_CONCURRENCY", "3")))
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    if min(args.runs, args.clients) < 1 or args.listeners < 0 or args.accumulate < 0:
        parser.error("--runs and --clients must be positive, --listeners and --accumulate not negative")

    _stop_on_sigterm()
    database_url = os.environ.get("LOAD_DATABASE_URL", DEFAULT_DB)
    redis_url = prepared_service(database_url, os.environ.get("LOAD_REDIS_URL", DEFAULT_REDIS))
    from chat.services import api_key_create
    from chat.stack import Stack, free_port

    log_dir = Path(tempfile.mkdtemp(prefix="load-test-"))
    with receiving() as (port, got):
        env = {
            "DATABASE_URL": database_url,
            "REDIS_URL": redis_url,
            "LOG_LEVEL": "WARNING",
            "EVIDENCE_SOURCE": "example",
            "WEBHOOK_ALLOWED_CIDRS": "127.0.0.1/32",
            "WEBHOOK_ALLOWED_PORTS": str(port),
            **UNLIMITED,
        }
        stack = Stack(
            port=free_port(),
            env=env,
            web_workers=args.web_workers,
            worker_concurrency=args.worker_concurrency,
            log_dir=log_dir,
        )
        # not ``with stack``: a stack interrupted while it starts must stop what it has started
        try:
            stack.start()
            _, key, secret = api_key_create(username="load")
            hook = f"http://127.0.0.1:{port}/hook"
            target = Target(stack.base_url, key, secret, hook, lambda: list(got), stack.processes)
            # every process has served a few runs before anything is measured (these are not counted),
            # and their webhooks are in before the first baseline is taken
            warm: Observed = _run_async(
                _drive(
                    target,
                    runs=args.clients * 2,
                    clients=args.clients,
                    listeners=0,
                    max_seconds=60,
                    stream_timeout_s=60,
                )
            )
            _settled(target, sorted(warm.asked), 60)
            report = load_test(
                target,
                runs=args.runs,
                clients=args.clients,
                listeners=args.listeners,
                accumulate_runs=args.accumulate,
                max_seconds=args.max_seconds,
            )
            report.processes = process_peaks(stack.processes)
        finally:
            stack.stop()
    if args.json:
        print(json.dumps({**asdict(report), "ok": report.ok, "goal": report.goal()}, indent=2, default=str))
    else:
        _print(report, args)
        if not report.ok:
            print(f"  the stack's logs: {log_dir}")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.path.insert(0, os.getcwd())
    raise SystemExit(main())
