"""Logging that cannot leak: an exception's message and traceback never reach the output."""

from __future__ import annotations

import io
import logging
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from config.logging import RedactExceptions, RunIdFilter, plain_formatter

SECRET = "sk-live-SECRET-0123456789 SELECT card_number FROM payments"


def _fail_deep(secret: str) -> None:
    prompt = f"the user asked: {secret}"  # a frame value a full traceback could show
    raise ValueError(f"provider said: {prompt}")


def _raise_and_capture() -> tuple[type[BaseException], BaseException, object]:
    try:
        _fail_deep(SECRET)
    except ValueError:
        info = sys.exc_info()
        assert info[0] is not None and info[1] is not None
        return info[0], info[1], info[2]
    raise AssertionError("unreachable")


def _record(msg: str, args: tuple[object, ...] | None, exc_info: object) -> logging.LogRecord:
    return logging.LogRecord("payments.worker", logging.ERROR, __file__, 10, msg, args, exc_info)  # type: ignore[arg-type]


@pytest.fixture
def output() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    """A logger wired like the service's console: its format, the redacting filter on the handler."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(plain_formatter())
    handler.addFilter(RedactExceptions())
    handler.addFilter(RunIdFilter())
    logger = logging.getLogger("tests.redaction")
    logger.addHandler(handler)
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    try:
        yield logger, stream
    finally:
        logger.removeHandler(handler)
        logger.propagate = True


def test_an_exception_record_keeps_only_its_type_and_where_it_was_raised() -> None:
    record = _record("request for %s failed", (SECRET,), _raise_and_capture())
    record.exc_text = f"Traceback (most recent call last): ... {SECRET}"
    record.stack_info = f"Stack (most recent call last): {SECRET}"

    assert RedactExceptions().filter(record) is True

    here = Path(__file__).name
    lines = (_fail_deep.__code__.co_firstlineno + 2, _raise_and_capture.__code__.co_firstlineno + 2)
    assert record.msg == (
        f"payments.worker: ValueError at {here}:{lines[0]} _fail_deep <- {here}:{lines[1]} _raise_and_capture"
    )
    assert record.args is None and record.exc_info is None and record.exc_text is None
    assert record.stack_info is None
    formatted = plain_formatter().format(record)
    assert SECRET not in formatted and "sk-live" not in formatted
    assert "Traceback" not in formatted and "provider said" not in formatted
    assert "ValueError" in formatted


def test_logger_exception_output_has_no_secret_and_no_traceback(
    output: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, stream = output
    try:
        _fail_deep(SECRET)
    except ValueError:
        logger.exception("run %s failed on %r", "run-1", SECRET)
    text = stream.getvalue()
    assert "ERROR tests.redaction run=- tests.redaction: ValueError at " in text
    assert "_fail_deep" in text
    assert SECRET not in text and "sk-live" not in text and "the user asked" not in text
    assert "Traceback" not in text and "provider said" not in text
    assert text.count("\n") == 1  # one line: no traceback lines after it


def test_a_chained_exception_leaks_neither_its_cause_nor_its_context(
    output: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, stream = output
    try:
        try:
            _fail_deep(SECRET)
        except ValueError as inner:
            raise RuntimeError("wrapped") from inner
    except RuntimeError:
        logger.error("failed", exc_info=True)
    text = stream.getvalue()
    assert "RuntimeError at" in text
    assert SECRET not in text and "direct cause" not in text and "Traceback" not in text


def test_records_without_an_exception_are_untouched(output: tuple[logging.Logger, io.StringIO]) -> None:
    record = _record("run %s finished in %.1f ms", ("run-1", 12.34), None)
    assert RedactExceptions().filter(record) is True
    assert (record.msg, record.args, record.exc_info) == ("run %s finished in %.1f ms", ("run-1", 12.34), None)
    assert record.getMessage() == "run run-1 finished in 12.3 ms"

    empty = _record("nothing raised", None, (None, None, None))
    assert RedactExceptions().filter(empty) is True
    assert empty.msg == "nothing raised" and empty.exc_info == (None, None, None)

    logger, stream = output
    logger.warning("run %s: broker unavailable: %s", "run-2", "OperationalError")
    assert (
        stream.getvalue()
        .rstrip()
        .endswith("WARNING tests.redaction run=- run run-2: broker unavailable: OperationalError")
    )


def test_the_service_console_handler_redacts() -> None:
    handlers = [h for h in logging.getLogger().handlers if isinstance(h, logging.StreamHandler)]
    redacting = [h for h in handlers if any(isinstance(f, RedactExceptions) for f in h.filters)]
    assert redacting, "the root console handler must carry the RedactExceptions filter"
