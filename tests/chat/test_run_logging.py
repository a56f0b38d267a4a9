"""Every line the service logs while a worker executes a run names the run, from the task's own
thread and from the tool pool's threads alike; a request about a run names it too; and nothing
stays bound once the run or the request is over."""

from __future__ import annotations

import io
import logging
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from chat import selectors, services, wiring
from core.logcontext import current_run_id, run_bound
from tests.django_fixtures import Caller

DIAGNOSIS = "Payments are timing out since 10:00, please investigate"
_FIELDS = ("threadName", "run_id", "name", "message")


@dataclass
class Line:
    thread: str
    run_id: str
    logger: str
    message: str


@dataclass
class Console:
    lines: list[Line] = field(default_factory=list)


def _configured_console() -> logging.Handler:
    (handler,) = [h for h in logging.getLogger().handlers if h.name == "console"]
    return handler


@contextmanager
def console_lines() -> Iterator[Console]:
    """What the service's console handler writes, with its own filters, one field per column."""
    console = _configured_console()
    assert isinstance(console, logging.StreamHandler)
    stream, formatter = io.StringIO(), console.formatter
    previous = console.setStream(stream)
    console.setFormatter(logging.Formatter("\x1f".join(f"%({name})s" for name in _FIELDS)))
    captured = Console()
    try:
        yield captured
    finally:
        console.setFormatter(formatter)
        console.setStream(previous)
        for text in stream.getvalue().splitlines():
            captured.lines.append(Line(*text.split("\x1f", 3)))


@pytest.fixture
def fresh_application() -> Iterator[None]:
    wiring.application.cache_clear()
    try:
        yield
    finally:
        wiring.application.cache_clear()


def test_the_console_filters_stamp_and_redact() -> None:
    names = [type(f).__name__ for f in _configured_console().filters]
    assert names == ["RedactExceptions", "RunIdFilter"]


def test_every_line_logged_while_a_run_executes_carries_its_id(
    alice: Caller, monkeypatch: pytest.MonkeyPatch, fresh_application: None
) -> None:
    original = wiring.evidence

    def logged(name: str) -> Any:
        def handler(*args: Any, **kwargs: Any) -> Any:
            logging.getLogger("tests.backend").warning("backend %s called", name)
            raise RuntimeError("the backend is down")  # and the harness logs that, from its own thread

        return handler

    def logging_evidence() -> wiring.Evidence:
        chosen = original()
        return wiring.Evidence([replace(s, handler=logged(s.name)) for s in chosen.tools], chosen.runbooks)

    monkeypatch.setattr(wiring, "evidence", logging_evidence)
    run_id = alice.post("/api/chat", {"question": DIAGNOSIS}).json()["run_id"]

    with console_lines() as console:
        services.run_execute(run_id=run_id)
        logging.getLogger("tests.after").warning("after the run")

    *during, after = console.lines
    backend = [line for line in during if line.logger == "tests.backend"]
    harness = [line for line in during if line.logger.startswith("harness.")]
    assert backend and all(line.thread.startswith("harness-tool") for line in backend)
    assert harness and all(line.thread == "MainThread" for line in harness)
    assert {line.run_id for line in during} == {run_id}, [line for line in during if line.run_id != run_id]
    assert (after.logger, after.run_id) == ("tests.after", "-")
    assert current_run_id() is None


def test_a_request_about_a_run_logs_its_id_and_unbinds_it(alice: Caller, monkeypatch: pytest.MonkeyPatch) -> None:
    run_id = alice.post("/api/chat", {"question": "hello"}).json()["run_id"]
    looked_up = selectors.run_get

    def logging_run_get(**kwargs: Any) -> Any:
        logging.getLogger("tests.view").warning("reading a run")
        return looked_up(**kwargs)

    monkeypatch.setattr(selectors, "run_get", logging_run_get)
    with console_lines() as console:
        assert alice.get(f"/api/runs/{run_id}").status_code == 200
        assert alice.get(f"/api/runs/{uuid.uuid4()}").status_code == 404
        assert alice.get("/api/runs/not-a-uuid%0Aforged").status_code in (400, 404)
    ids = [line.run_id for line in console.lines if line.logger == "tests.view"]
    assert ids[0] == run_id and ids[1] != run_id
    assert ids[2:] in ([], ["-"])  # a malformed id is never written into a line
    assert current_run_id() is None


def _fail_while_bound() -> None:
    with run_bound("r-1"):
        assert current_run_id() == "r-1"
        raise ValueError("boom")


def test_a_binding_ends_with_its_block_even_when_it_raises() -> None:
    with pytest.raises(ValueError, match="boom"):
        _fail_while_bound()
    assert current_run_id() is None
