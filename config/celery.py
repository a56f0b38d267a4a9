"""The Celery application. Tasks live in the Django apps (chat/tasks.py)."""

from __future__ import annotations

import os

from celery import Celery
from celery.signals import worker_ready

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("superbizagent")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_ready.connect  # type: ignore[untyped-decorator]
def _freeze(**_: object) -> None:
    from config.gc import freeze_startup_objects

    freeze_startup_objects()
