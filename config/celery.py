"""The Celery application. Tasks live in the Django apps (chat/tasks.py)."""

from __future__ import annotations

import os

from celery import Celery
from celery.signals import task_prerun, worker_init, worker_process_shutdown, worker_ready, worker_shutting_down

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("superbizagent")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_ready.connect  # type: ignore[untyped-decorator]
def _freeze(**_: object) -> None:
    from config.gc import freeze_startup_objects

    freeze_startup_objects()


_upkeep: list[object] = []


@worker_ready.connect  # type: ignore[untyped-decorator]
def _start_upkeep(sender: object = None, **_: object) -> None:
    """Heartbeats and sweeps beside the tasks (chat.upkeep): a runs worker beats for its runs
    and sweeps lost runs; a webhooks worker re-sends due deliveries (the database, not a
    message in Redis, is the truth of both)."""
    from chat.upkeep import Upkeep

    consumed = getattr(getattr(sender, "task_consumer", None), "queues", None) or []
    names = {getattr(queue, "name", "") for queue in consumed}
    if names & {"runs", "webhooks"}:
        _upkeep.append(Upkeep(runs="runs" in names, webhooks="webhooks" in names).start())


@worker_init.connect  # type: ignore[untyped-decorator]
def _in_worker(**_: object) -> None:
    """Before any task: a process executing runs here beats for them (chat.upkeep)."""
    from chat import upkeep

    upkeep.in_worker = True


@worker_shutting_down.connect  # type: ignore[untyped-decorator]
def _shutting_down(**_: object) -> None:
    for upkeep in _upkeep:
        upkeep.shutting_down()  # type: ignore[attr-defined]


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
