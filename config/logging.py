"""Logging that cannot leak: exception messages and tracebacks are replaced before output.

Any library may log an exception (Django logs every unhandled one). Its message can quote a
prompt, a question, SQL or a provider's reply; its traceback can hold all of those in frame
values. This filter keeps the exception's type and where it was raised, and drops the rest.
"""

from __future__ import annotations

import logging
import traceback
from pathlib import Path


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
