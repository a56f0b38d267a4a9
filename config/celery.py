"""The Celery application. Tasks live in the Django apps (chat/tasks.py)."""

from __future__ import annotations

import os

from celery import Celery
from celery.signals import task_prerun, worker_ready

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("superbizagent")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_ready.connect  # type: ignore[untyped-decorator]
def _freeze(**_: object) -> None:
    from config.gc import freeze_startup_objects

    freeze_startup_objects()


@task_prerun.connect  # type: ignore[untyped-decorator]
def _fresh_connections(**_: object) -> None:
    """What Django does at the start of every request: drop a connection that is past
    CONN_MAX_AGE or broken, and check the next one's health before it is used."""
    from django.db import close_old_connections

    close_old_connections()
