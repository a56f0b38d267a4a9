"""Plain SQL for the rows written on every run, with the backend's own value adapters.

The ORM's query compiler costs more than the database spends on a run's few small writes, so
the hot path (claiming and finishing a run, inserting its trace rows) is written here as SQL.
"""

from __future__ import annotations

import json
import uuid
from collections import defaultdict
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection
from django.db.models.constants import OnConflict

from traces.models import Run


def uuid_hex(value: str | uuid.UUID) -> str:
    """Run and session ids as the database stores them (Django's UUIDField: 32 hex chars)."""
    return (value if isinstance(value, uuid.UUID) else uuid.UUID(value)).hex


def when(value: datetime) -> Any:
    return connection.ops.adapt_datetimefield_value(value)


def run_table() -> str:
    return connection.ops.quote_name(Run._meta.db_table)


def _read_when(value: Any) -> datetime | None:
    """A datetime column as read by the driver (SQLite: text; MySQL: naive UTC) → aware UTC."""
    if value is None:
        return None
    when = datetime.fromisoformat(value) if isinstance(value, str) else value
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def load_run_for_execution(run_id: str) -> Run | None:
    """The fields a worker needs to start a run, in one light query (a Run, not saved)."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT status, question, owner_id, session_id, started_at FROM {run_table()} WHERE id = %s",  # noqa: S608
            [uuid_hex(run_id)],
        )
        row = cursor.fetchone()
    if row is None:
        return None
    started_at = _read_when(row[4])
    run = Run(
        id=uuid.UUID(run_id),
        status=row[0],
        question=row[1],
        owner_id=row[2],
        session_id=uuid.UUID(str(row[3])),
        started_at=started_at,
    )
    run._state.adding = False
    return run


Row = tuple[type[Any], dict[str, Any]]


def _db_value(value: Any) -> Any:
    if isinstance(value, datetime):
        return when(value)
    if isinstance(value, uuid.UUID):
        return value.hex
    if isinstance(value, dict | list | tuple):
        return json.dumps(value, cls=DjangoJSONEncoder)
    return value


def insert_rows(rows: Sequence[Row], *, skip_duplicates: bool = False) -> None:
    """Insert rows of several tables, one multi-row statement per table. Plain SQL: the ORM's
    bulk_create spends more time preparing a run's few dozen rows than the database spends
    storing them. ``skip_duplicates`` ignores rows that break a unique constraint (for rows
    that may be written twice); it is off by default because on MySQL it also hides other
    errors (foreign keys, truncation) as mere warnings."""
    by_model: dict[type[Any], list[dict[str, Any]]] = defaultdict(list)
    for model, values in rows:
        by_model[model].append(values)
    quote = connection.ops.quote_name
    insert = connection.ops.insert_statement(on_conflict=OnConflict.IGNORE if skip_duplicates else None)
    with connection.cursor() as cursor:
        for model, batch in by_model.items():
            columns = list(batch[0])
            cursor.executemany(
                f"{insert} {quote(model._meta.db_table)} ({', '.join(quote(c) for c in columns)}) "
                f"VALUES ({', '.join(['%s'] * len(columns))})",
                [[_db_value(values[c]) for c in columns] for values in batch],
            )


_INSERT_SQL: dict[type[Any], tuple[str, list[Any]]] = {}


def fast_insert(obj: Any) -> None:
    """INSERT one model instance, its values prepared by the fields themselves (defaults,
    auto_now, JSON, UUIDs) but without the ORM's query compiler: for rows written on every
    request. Database errors (IntegrityError…) surface as Django's, as with ``save()``."""
    model = type(obj)
    cached = _INSERT_SQL.get(model)
    if cached is None:
        fields = [f for f in model._meta.concrete_fields if not getattr(f, "db_returning", False)]
        quote = connection.ops.quote_name
        sql = (
            f"INSERT INTO {quote(model._meta.db_table)} ({', '.join(quote(f.column) for f in fields)}) "  # noqa: S608 - names from the model
            f"VALUES ({', '.join(['%s'] * len(fields))})"
        )
        cached = _INSERT_SQL[model] = (sql, fields)
    sql, fields = cached
    values = [f.get_db_prep_save(f.pre_save(obj, True), connection) for f in fields]
    with connection.cursor() as cursor:
        cursor.execute(sql, values)
    obj._state.adding = False
    obj._state.db = connection.alias
