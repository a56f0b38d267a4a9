"""A worker keeps its database connection from one task to the next (Celery's Django fixup would
otherwise close it around every task, and every run would open a new MySQL connection), and
still drops a connection that is past its age, as Django does at each request."""

from __future__ import annotations

import time
from types import SimpleNamespace
from unittest import mock

import pytest
from celery.fixups.django import DjangoWorkerFixup
from django.db import connection

from config.celery import _fresh_connections, app

pytestmark = pytest.mark.django_db(transaction=True)

TASK = SimpleNamespace(request=SimpleNamespace(is_eager=False))


def _one_task(fixup: DjangoWorkerFixup) -> None:
    """The connection hooks a worker runs around a task, in their order."""
    fixup.on_task_prerun(sender=TASK)
    _fresh_connections()
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    fixup.on_task_postrun(sender=TASK)


def test_the_connection_outlives_many_tasks() -> None:
    fixup = DjangoWorkerFixup(app)
    connection.close()
    # the service's CONN_MAX_AGE for MySQL; the SQLite test database uses 0 (one connection per use)
    with mock.patch.dict(connection.settings_dict, {"CONN_MAX_AGE": 300}):
        connection.ensure_connection()
        opened = connection.connection

        for _ in range(25):
            _one_task(fixup)

        assert connection.connection is opened


def test_a_connection_past_its_age_is_replaced_before_the_next_task() -> None:
    fixup = DjangoWorkerFixup(app)
    connection.close()
    with mock.patch.dict(connection.settings_dict, {"CONN_MAX_AGE": 300}):
        connection.ensure_connection()
        opened = connection.connection
        connection.close_at = time.monotonic() - 1

        _one_task(fixup)

        assert connection.connection is not None
        assert connection.connection is not opened
