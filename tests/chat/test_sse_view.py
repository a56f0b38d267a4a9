"""GET /api/runs/{id}/events through Django (``chat.sse.run_events``): replay, resume, refusals.

The ASGI entry point serves this path with ``serve_stream`` before Django; the Django view is
the one the test client, WSGI and ``reverse`` reach. Each request here runs in its own event
loop (``async_to_sync``), as under WSGI.
"""

from __future__ import annotations

import datetime
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.http import HttpResponseBase
from django.test import AsyncClient, Client
from django.utils import timezone
from django_eventstream.views import get_listener_manager

from chat import services, sse
from chat.events import RunEventStorage, channel_for, ended_in_row, events_key
from chat.models import RunEvent
from tests.django_fixtures import Caller

DIAGNOSIS = "Payments are timing out since 10:00, please investigate"

Event = tuple[int, str, str]


@pytest.fixture(autouse=True)
def _stored_events_only(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every stream here is of a finished run, served from storage. django-eventstream's Redis
    pub/sub task is started in the first event loop that adds a listener and is never
    restarted, so with one loop per request it is left out; the async Redis client is made per
    request for the same reason."""
    monkeypatch.setattr(get_listener_manager(), "redis_listener", None)
    sse._client_for.cache_clear()
    yield
    sse._client_for.cache_clear()


def request(path: str, *, method: str = "GET", headers: dict[str, str] | None = None) -> tuple[HttpResponseBase, bytes]:
    """One request through Django's async test client; a stream is read to its end."""

    async def go() -> tuple[HttpResponseBase, bytes]:
        try:
            response: Any = await AsyncClient().generic(method, path, headers=headers or {})
            if response.streaming:
                body = b"".join([chunk async for chunk in response.streaming_content])
            else:
                body = response.content
            return response, body
        finally:
            await sse._aredis().aclose()
            sse._client_for.cache_clear()

    return async_to_sync(go)()


def auth(caller: Caller, **extra: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {caller.key}", **extra}


def parse(body: bytes) -> list[Event]:
    """(id, event, data) of every event block of an SSE body."""
    events = []
    for block in body.decode().split("\n\n"):
        fields: dict[str, str] = {}
        for line in block.split("\n"):
            if line and not line.startswith(":"):
                name, _, value = line.partition(": ")
                fields[name] = value
        if "event" in fields:
            events.append((int(fields["id"]), fields["event"], fields["data"]))
    return events


def stored(run_id: str) -> list[Event]:
    return [(int(e.id), e.type, e.data) for e in RunEventStorage().get_events(channel_for(run_id), 0, limit=1_000)]


@pytest.fixture
def finished_run(alice: Caller) -> str:
    """A diagnosis run executed in-process to its end: every event is stored (and archived)."""
    response = alice.post("/api/chat", {"question": DIAGNOSIS})
    assert response.status_code == 202
    run_id: str = response.json()["run_id"]
    services.run_execute(run_id=run_id)
    assert stored(run_id)[-1][1] == "done"
    return run_id


def assert_refusal(response: HttpResponseBase, body: bytes, status: int, code: str) -> None:
    assert response.status_code == status, body
    assert response["Content-Type"] == "application/json"
    error = json.loads(body)["error"]
    assert error["code"] == code and error["message"]
    assert "text/event-stream" not in response["Content-Type"]


# --- replay ----------------------------------------------------------------------------------


def test_a_finished_run_is_replayed_from_event_one_to_done(alice: Caller, finished_run: str) -> None:
    response, body = request(f"/api/runs/{finished_run}/events", headers=auth(alice))
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/event-stream")
    assert response["Cache-Control"] == "no-cache" and response["X-Accel-Buffering"] == "no"
    assert body.startswith(b"retry: 2000\n")

    events = parse(body)
    assert [e[0] for e in events] == list(range(1, len(events) + 1))
    assert events == stored(finished_run)
    assert events[0][1] == "metadata" and json.loads(events[0][2])["run_id"] == finished_run
    assert [e[1] for e in events][-2:] == ["content", "done"]
    assert json.loads(events[-1][2]) == {"outcome": "success"}


def test_staff_may_replay_anyones_run(staff: Caller, finished_run: str) -> None:
    response, body = request(f"/api/runs/{finished_run}/events", headers=auth(staff))
    assert response.status_code == 200 and parse(body) == stored(finished_run)


def test_an_expired_live_list_is_replayed_from_the_archived_rows(
    alice: Caller, finished_run: str, service: Any
) -> None:
    live = stored(finished_run)
    assert RunEvent.objects.filter(run_id=finished_run).count() == len(live)
    service.delete(events_key(finished_run))
    response, body = request(f"/api/runs/{finished_run}/events", headers=auth(alice))
    assert response.status_code == 200 and parse(body) == live

    response, body = request(f"/api/runs/{finished_run}/events", headers=auth(alice, **{"Last-Event-ID": "3"}))
    assert response.status_code == 200 and parse(body) == live[3:]


@pytest.mark.parametrize("form", ["{k}", "run-{run_id}:{k}", "query"])
def test_a_reconnect_resumes_after_its_last_event_id(alice: Caller, finished_run: str, form: str) -> None:
    events = stored(finished_run)
    k = len(events) - 3
    path = f"/api/runs/{finished_run}/events"
    if form == "query":
        response, body = request(f"{path}?lastEventId={k}", headers=auth(alice))
    else:
        last = form.format(k=k, run_id=finished_run)
        response, body = request(path, headers=auth(alice, **{"Last-Event-ID": last}))
    assert response.status_code == 200
    assert parse(body) == events[k:]


@pytest.mark.parametrize("form", ["{n}", "run-{run_id}:{n}", "query"])
def test_reconnecting_after_done_is_204(alice: Caller, finished_run: str, form: str) -> None:
    n = len(stored(finished_run))
    path = f"/api/runs/{finished_run}/events"
    if form == "query":
        response, body = request(f"{path}?lastEventId={n}", headers=auth(alice))
    else:
        response, body = request(path, headers=auth(alice, **{"Last-Event-ID": form.format(n=n, run_id=finished_run)}))
    assert response.status_code == 204 and body == b""


# --- refusals --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "code"),
    [
        ("Bearer sba_not-a-real-key", "invalid_api_key"),
        ("Basic YWxpY2U6cHc=", "invalid_api_key"),
        (None, "unauthenticated"),
    ],
)
def test_a_missing_or_wrong_key_is_401_with_the_envelope(finished_run: str, header: str | None, code: str) -> None:
    headers = {"Authorization": header} if header is not None else {}
    response, body = request(f"/api/runs/{finished_run}/events", headers=headers)
    assert_refusal(response, body, 401, code)
    assert response["WWW-Authenticate"] == 'Bearer realm="api"'


def test_another_users_run_is_404(bob: Caller, finished_run: str) -> None:
    response, body = request(f"/api/runs/{finished_run}/events", headers=auth(bob))
    assert_refusal(response, body, 404, "not_found")
    response, body = request(f"/api/runs/{uuid.uuid4()}/events", headers=auth(bob))
    assert_refusal(response, body, 404, "not_found")


def test_a_malformed_run_id_is_400(alice: Caller) -> None:
    response, body = request("/api/runs/not-a-uuid/events", headers=auth(alice))
    assert_refusal(response, body, 400, "invalid_id")


@pytest.mark.parametrize("last", ["abc", "-1", "1.5", "run-nope:3", "1234567890"])
def test_a_bad_last_event_id_is_400(alice: Caller, finished_run: str, last: str) -> None:
    response, body = request(f"/api/runs/{finished_run}/events", headers=auth(alice, **{"Last-Event-ID": last}))
    assert_refusal(response, body, 400, "invalid_last_event_id")


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE"])
def test_other_methods_are_405(alice: Caller, finished_run: str, method: str) -> None:
    response, body = request(f"/api/runs/{finished_run}/events", method=method, headers=auth(alice))
    assert_refusal(response, body, 405, "method_not_allowed")


# --- the view under a synchronous (WSGI) handler ---------------------------------------------


@pytest.mark.filterwarnings("ignore:StreamingHttpResponse must consume asynchronous iterators")
def test_the_view_streams_under_a_synchronous_handler(alice: Caller, finished_run: str) -> None:
    response = Client().get(f"/api/runs/{finished_run}/events", headers=auth(alice))
    assert response.status_code == 200
    body = b"".join(response)  # what a WSGI server does with the response
    assert parse(body) == stored(finished_run)


# --- with Redis down ---------------------------------------------------------------------------


@pytest.fixture
def redis_down(monkeypatch: pytest.MonkeyPatch, settings: Any) -> Iterator[None]:
    """The stream's Redis client points where nothing listens (the database stays up)."""
    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    sse._client_for.cache_clear()
    yield
    sse._client_for.cache_clear()


def test_with_redis_down_a_finished_run_is_served_from_its_archived_rows(
    alice: Caller, finished_run: str, redis_down: None
) -> None:
    archived = [(e.seq, e.event_type, e.data) for e in RunEvent.objects.filter(run_id=finished_run).order_by("seq")]

    response, body = request(f"/api/runs/{finished_run}/events", headers=auth(alice))

    assert response.status_code == 200 and parse(body) == archived and archived[-1][1] == "done"


def test_with_redis_down_a_live_run_answers_503_in_the_envelope_not_a_traceback(
    alice: Caller, redis_down: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chat import wiring

    run_id = str(wiring.lifecycle().open(owner=alice.user, question=DIAGNOSIS).run.id)

    response, body = request(f"/api/runs/{run_id}/events", headers=auth(alice))

    assert_refusal(response, body, 503, "stream_unavailable")
    assert response["Retry-After"] == "5"
    assert b"Traceback" not in body
    _, other = request(f"/api/runs/{uuid.uuid4()}/events", headers=auth(alice))
    assert json.loads(other)["error"]["code"] == "not_found"  # ownership still checked, in the database


def test_a_stream_that_cannot_be_opened_for_any_reason_is_a_500_envelope(
    alice: Caller, finished_run: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(*args: Any) -> Any:
        raise RuntimeError("secret detail: redis://user:pw@internal")

    monkeypatch.setattr(sse, "_newest", broken)

    response, body = request(f"/api/runs/{finished_run}/events", headers=auth(alice))

    assert_refusal(response, body, 500, "internal_error")
    assert b"secret detail" not in body and b"Traceback" not in body


# --- a run whose stored events were lost -----------------------------------------------------


def lose_events(run_id: str, service: Any) -> None:
    """What a Redis restart without persistence does to a run's events, archive not written yet."""
    service.delete(events_key(run_id))
    RunEvent.objects.filter(run_id=run_id).delete()


def test_a_run_whose_events_were_lost_everywhere_is_told_by_its_row(
    alice: Caller, finished_run: str, service: Any
) -> None:
    original = stored(finished_run)
    lose_events(finished_run, service)

    response, body = request(f"/api/runs/{finished_run}/events", headers=auth(alice))

    assert response.status_code == 200
    events = parse(body)
    assert [e[1] for e in events] == ["metadata", "status", "content", "done"]
    assert [e[0] for e in events] == [1, 2, 3, 4]
    assert json.loads(events[2][2]) == json.loads(original[-2][2])  # the published content, from the row
    assert events[3] == (4, "done", original[-1][2])


def test_with_redis_down_a_run_that_ended_unarchived_is_told_by_its_row(
    alice: Caller, finished_run: str, service: Any, redis_down: None
) -> None:
    original = stored(finished_run)
    RunEvent.objects.filter(run_id=finished_run).delete()

    response, body = request(f"/api/runs/{finished_run}/events", headers=auth(alice, **{"Last-Event-ID": "6"}))

    assert response.status_code == 200
    events = parse(body)
    assert [(e[0], e[1]) for e in events] == [(7, "content"), (8, "done")]
    assert events[1][2] == original[-1][2]


def test_a_stream_left_waiting_by_lost_events_ends_as_the_row_says(
    alice: Caller, finished_run: str, service: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis restarted mid-run: the client has seen 7 events, the list now holds fewer and
    never reaches a ``done`` it would accept. The stream still ends, in sequence."""
    original = stored(finished_run)
    lose_events(finished_run, service)
    service.rpush(events_key(finished_run), b'{"t":"status","d":"{\\"stage\\":\\"agent_step\\"}"}')
    monkeypatch.setattr(sse, "POLL_S", 0.05)
    monkeypatch.setattr(sse, "ROW_CHECK_S", 0.2)
    monkeypatch.setattr(sse, "END_GRACE_S", 0.0)

    response, body = request(f"/api/runs/{finished_run}/events", headers=auth(alice, **{"Last-Event-ID": "7"}))

    assert response.status_code == 200
    events = parse(body)
    assert [(e[0], e[1]) for e in events] == [(8, "content"), (9, "done")]
    assert events[1][2] == original[-1][2]


def test_the_row_stands_in_only_for_a_run_over_for_the_grace_period(
    alice: Caller, finished_run: str, service: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Within END_GRACE_S of the run's end, the row does not stand in for its ``done``: the
    real one is normally a few milliseconds behind the row and would arrive twice."""
    a_minute_ago = timezone.now() - datetime.timedelta(seconds=60)
    assert ended_in_row(finished_run, ended_before=a_minute_ago) is None
    assert ended_in_row(finished_run) is not None
