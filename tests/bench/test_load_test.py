"""The load test's own judgement: what it counts as a complete stream, a duplicate, a signed
webhook — checked on made-up streams, so that a bug it should catch cannot slip past it."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from standardwebhooks.webhooks import Webhook as Signer

from bench.load_test import Checks, Followed, Webhook, _check_stream, _fanout, _signed
from bench.loadgen import SseEvent, parse_events

RUN = "0b6f3c1e-2f52-4a39-9d8e-3f1d2c4b5a69"
ARCHIVED = [(1, "metadata"), (2, "status"), (3, "content"), (4, "done")]


def followed(types: list[str], ids: list[str | None] | None = None, **fields: object) -> Followed:
    stream = Followed(RUN, listener=True, live=True, status=200, ended=True, outcome="success")
    stream.types = types
    stream.ids = ids if ids is not None else [str(n) for n in range(1, len(types) + 1)]
    for name, value in fields.items():
        setattr(stream, name, value)
    return stream


def judged(stream: Followed, archived: list[tuple[int, str]] = ARCHIVED) -> Checks:
    checks = Checks()
    _check_stream(checks, stream, archived, "success")
    return checks


def test_events_are_parsed_as_an_event_source_dispatches_them() -> None:
    body = (
        b'retry: 2000\nevent: metadata\nid: 1\ndata: {"run_id": "x"}\n\n'
        b": keep-alive\nevent: content\nid: 2\ndata: line one\ndata: line two\n\n"
        b'event: done\nid: 3\ndata: {"outcome": "success"}\n\n'
    )
    assert parse_events(body) == [
        SseEvent("1", "metadata", b'{"run_id": "x"}'),
        SseEvent("2", "content", b"line one\nline two"),
        SseEvent("3", "done", b'{"outcome": "success"}'),
    ]


@pytest.mark.parametrize(("listeners", "clients"), [(200, 50), (40, 12), (20, 10), (0, 5), (7, 3)])
def test_each_run_gets_its_share_of_the_listeners(listeners: int, clients: int) -> None:
    shares = [_fanout(i, listeners, clients) for i in range(clients * 10)]
    assert sum(shares) == listeners * 10
    assert max(shares) - min(shares) <= 1


def test_a_complete_stream_passes() -> None:
    assert judged(followed(["metadata", "status", "content", "done"])).failed == 0


@pytest.mark.parametrize(
    ("stream", "kind"),
    [
        (followed(["metadata", "status", "content", "done", "done"]), "duplicate_done"),
        (followed(["metadata", "status", "content"]), "incomplete_streams"),
        (followed(["metadata", "status", "done", "content"]), "incomplete_streams"),
        (followed(["metadata", "status", "content", "done"], ids=["1", "2", "4", "5"]), "incomplete_streams"),
        (followed(["metadata", "content", "done"]), "incomplete_streams"),  # one missed, ids renumbered
        (followed(["metadata", "status", "content", "done"], ended=False), "incomplete_streams"),
        (followed(["metadata", "status", "content", "done"], status=503), "incomplete_streams"),
        (followed([], error="TimeoutError"), "incomplete_streams"),
        (followed(["metadata", "status", "content", "done"], outcome="fallback"), "inconsistent"),
    ],
)
def test_a_broken_stream_is_counted_as_what_it_is(stream: Followed, kind: str) -> None:
    checks = judged(stream)
    assert checks.failed == 1 and getattr(checks, kind) == 1, checks.examples
    assert RUN in checks.examples[0]


def test_signatures_are_checked_whatever_their_age() -> None:
    secret = "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
    body = b'{"type": "run.completed", "data": {"id": "x"}}'
    sent = datetime(2020, 1, 1, tzinfo=UTC)  # far older than the library's five minutes
    headers = {
        "webhook-id": "msg_1",
        "webhook-timestamp": str(int(sent.timestamp())),
        "webhook-signature": Signer(secret).sign(msg_id="msg_1", timestamp=sent, data=body.decode()),
    }
    assert _signed(secret, Webhook(headers, body))
    assert not _signed(secret, Webhook(headers, body.replace(b"x", b"y")))
    assert not _signed(secret, Webhook({**headers, "webhook-id": "msg_2"}, body))
    assert not _signed(secret, Webhook({k: v for k, v in headers.items() if k != "webhook-signature"}, body))
