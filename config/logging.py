"""The service's log lines: which run they belong to, and nothing that could leak.

Any library may log an exception (Django logs every unhandled one). Its message can quote a
prompt, a question, SQL or a provider's reply; its traceback can hold all of those in frame
values. ``RedactExceptions`` keeps the exception's type and where it was raised, and drops the
rest. ``RunIdFilter`` stamps each line with the run the logging code works for
(``core.logcontext``), so one run's lines can be found among all the others a worker writes.
"""

from __future__ import annotations

import logging
import traceback
from pathlib import Path

from core.logcontext import current_run_id

FORMAT = "%(asctime)s %(levelname)s %(name)s run=%(run_id)s %(message)s"
NO_RUN = "-"


def plain_formatter() -> logging.Formatter:
    """The console format; a record that no ``RunIdFilter`` saw still formats (``run=-``)."""
    return logging.Formatter(FORMAT, defaults={"run_id": NO_RUN})


class RunIdFilter(logging.Filter):
    """Sets ``record.run_id`` to the run bound where the record was made (``-`` for none),
    unless the caller passed one itself (``extra={"run_id": ...}``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "run_id"):
            record.run_id = current_run_id() or NO_RUN
        return True


class RedactExceptions(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and record.exc_info[1] is not None:
            exc = record.exc_info[1]
            frames = traceback.extract_tb(exc.__traceback__)[-3:]
            where = " <- ".join(f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in reversed(frames))
            record.msg = f"{record.name}: {type(exc).__name__} at {where or '?'}"
            record.args = None
            record.exc_info = None
            record.exc_text = None
            record.stack_info = None
        return True
