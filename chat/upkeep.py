"""What a worker does beside its tasks, so that no accepted run is lost or stuck.

- **Heartbeats.** Every ``HEARTBEAT_S`` the worker marks the runs it is executing alive; a
  running run whose worker stops beating (killed, frozen, cut off) is found by any sweeper
  within ``HEARTBEAT_TIMEOUT_S`` plus one sweep period.
- **Sweeps.** Every ``SWEEP_S`` (with jitter, so workers do not sweep in step) a runs worker
  ends lost runs and re-publishes queued runs whose task the broker lost
  (``RunLifecycle.sweep``); a webhooks worker re-sends due deliveries. Every sweep is a set
  of conditional updates: any number of sweepers may run at once.
- **Warm shutdown.** On SIGTERM the worker's current run may go on for ``SHUTDOWN_GRACE_S``;
  then it is asked to stop, and ends at its next boundary as ``worker_shutdown``.

Runs are executed one per process (solo pool) but the registry allows several.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import threading
import time
from collections.abc import Iterator

from django.conf import settings
from django.db import close_old_connections, connection

from harness.context import CancelReason

logger = logging.getLogger(__name__)

_lock = threading.Lock()
#: run id → the reason this process asked it to stop, if any
_executing: dict[str, CancelReason | None] = {}


_beating_in: int | None = None
#: set in a Celery worker (and inherited by its pool's children): heartbeats run only there
in_worker = False


@contextlib.contextmanager
def executing(run_id: str) -> Iterator[None]:
    """Mark ``run_id`` as executed by this process for as long as the block runs; the process's
    heartbeat thread (started here, in whichever process executes runs) beats for it."""
    global _beating_in
    with _lock:
        _executing[run_id] = None
        if in_worker and _beating_in != os.getpid():
            _beating_in = os.getpid()
            threading.Thread(target=_beat_forever, name="heartbeat", daemon=True).start()
    try:
        yield
    finally:
        with _lock:
            _executing.pop(run_id, None)


def stop_requested(run_id: str) -> CancelReason | None:
    """Why this process wants ``run_id`` to stop (read by the run's cancel signal)."""
    return _executing.get(run_id)


def _stop(run_ids: list[str] | set[str], reason: CancelReason) -> None:
    with _lock:
        for run_id in run_ids:
            if run_id in _executing and _executing[run_id] is None:
                _executing[run_id] = reason


def _beat_forever() -> None:
    every = float(settings.RUN_UPKEEP["HEARTBEAT_S"])
    while True:
        time.sleep(every)
        Upkeep._quietly("heartbeat", Upkeep.beat)


def executing_now() -> list[str]:
    with _lock:
        return list(_executing)


class Upkeep:
    """The worker's upkeep thread. ``runs``: sweep runs; ``webhooks``: sweep deliveries."""

    def __init__(self, *, runs: bool, webhooks: bool) -> None:
        self.runs, self.webhooks = runs, webhooks
        self._closing = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Upkeep:
        self._thread = threading.Thread(target=self._loop, name="upkeep", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self._closing.set()

    def shutting_down(self) -> None:
        """SIGTERM: the current runs have ``SHUTDOWN_GRACE_S`` left, then are asked to stop."""
        grace = float(settings.RUN_UPKEEP["SHUTDOWN_GRACE_S"])
        timer = threading.Timer(grace, lambda: _stop(executing_now(), CancelReason.SHUTDOWN))
        timer.daemon = True
        timer.start()

    def _loop(self) -> None:
        upkeep = settings.RUN_UPKEEP
        sweep_every = float(upkeep["SWEEP_S"])
        webhook_every = float(settings.WEBHOOK["SWEEP_S"])  # type: ignore[arg-type]
        now = time.monotonic()
        next_sweep = now + random.uniform(0, sweep_every)  # noqa: S311 - jitter, not security
        next_webhooks = now + random.uniform(0, webhook_every)  # noqa: S311
        while not self._closing.wait(min(sweep_every, webhook_every) / 2):
            now = time.monotonic()
            if self.runs and now >= next_sweep:
                next_sweep = now + sweep_every * random.uniform(0.8, 1.2)  # noqa: S311
                self._quietly("sweep", self.sweep)
            if self.webhooks and now >= next_webhooks:
                next_webhooks = now + webhook_every
                self._quietly("webhook sweep", self.sweep_webhooks)
        connection.close()

    @staticmethod
    def beat() -> None:
        from chat.wiring import lifecycle

        running = executing_now()
        if not running:
            return
        gone = lifecycle().heartbeat(running)
        if gone:
            # Someone else ended them (a sweeper that thought this worker lost): stop working on them.
            logger.warning("%d run(s) this worker executes were ended elsewhere; stopping them", len(gone))
            _stop(gone, CancelReason.SHUTDOWN)

    @staticmethod
    def sweep() -> None:
        from chat.services import run_sweep_stale

        swept = run_sweep_stale()
        if swept.ended or swept.republished:
            logger.warning(
                "swept runs: %d lost with their worker, %d lost by the queue, %d re-published",
                swept.lost, swept.expired, swept.republished,
            )  # fmt: skip

    @staticmethod
    def sweep_webhooks() -> None:
        from chat.webhooks.services import deliveries_sweep

        deliveries_sweep()

    @staticmethod
    def _quietly(what: str, step: object) -> None:
        try:
            close_old_connections()
            step()  # type: ignore[operator]
        except Exception as exc:  # noqa: BLE001 - the next round tries again
            logger.warning("%s failed: %s", what, type(exc).__name__)
            with contextlib.suppress(Exception):
                connection.close()
