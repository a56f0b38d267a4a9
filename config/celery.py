"""The Celery application. Tasks live in the Django apps (chat/tasks.py)."""

from __future__ import annotations

import os

from celery import Celery
from celery.signals import task_prerun, worker_process_shutdown, worker_ready

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("superbizagent")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_ready.connect  # type: ignore[untyped-decorator]
def _freeze(**_: object) -> None:
    from config.gc import freeze_startup_objects

    freeze_startup_objects()


@worker_ready.connect  # type: ignore[untyped-decorator]
def _sweep_webhooks(sender: object = None, **_: object) -> None:
    """A worker consuming the webhooks queue also re-sends, now and then, deliveries that are due
    and held by nobody: the database, not a message in Redis, is the schedule's truth."""
    consumed = getattr(getattr(sender, "task_consumer", None), "queues", None) or []
    if "webhooks" not in {getattr(queue, "name", "") for queue in consumed}:
        return
    import threading

    def loop() -> None:
        from django.conf import settings
        from django.db import close_old_connections

        from chat.webhooks.services import deliveries_sweep

        stop = threading.Event()
        every_s = float(settings.WEBHOOK["SWEEP_S"])  # type: ignore[arg-type]
        while not stop.wait(every_s):
            try:
                close_old_connections()
                deliveries_sweep()
            except Exception as exc:  # noqa: BLE001 - the next round tries again
                import logging

                logging.getLogger(__name__).warning("webhook sweep failed: %s", type(exc).__name__)

    threading.Thread(target=loop, name="webhook-sweep", daemon=True).start()


@task_prerun.connect  # type: ignore[untyped-decorator]
def _fresh_connections(**_: object) -> None:
    """What Django does at the start of every request: drop a connection that is past
    CONN_MAX_AGE or broken, and check the next one's health before it is used."""
    from django.db import close_old_connections

    close_old_connections()


@worker_process_shutdown.connect  # type: ignore[untyped-decorator]
def _metrics_process_exited(pid: int | None = None, **_: object) -> None:
    """A pool child exits without running atexit: drop its live gauges (chat.metrics)."""
    from chat.metrics import process_exited

    process_exited(pid)
