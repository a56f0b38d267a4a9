"""A run seen through every window at once: the SSE stream, polling, and the database rows."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from httpx_sse import ServerSentEvent, connect_sse

from chat.stack import Stack
from tests.django_fixtures import Caller
from tests.e2e.conftest import api_client
from traces.models import AgentStep, Run, ToolInvocation

DIAGNOSIS = "Payments are timing out since 10:00, please investigate"
pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def api(live_stack: Stack, alice: Caller) -> Iterator[httpx.Client]:
    with api_client(live_stack, alice, read_s=60) as client:
        yield client


def ask(client: httpx.Client, question: str = DIAGNOSIS) -> dict[str, Any]:
    response = client.post("/api/chat", json={"question": question})
    assert response.status_code == 202, response.text
    body: dict[str, Any] = response.json()
    return body


def read_stream(
    client: httpx.Client, run_id: str, *, last_event_id: str | None = None, stop_after: int | None = None
) -> list[ServerSentEvent]:
    headers = {"Last-Event-ID": last_event_id} if last_event_id is not None else {}
    events: list[ServerSentEvent] = []
    with connect_sse(client, "GET", f"/api/runs/{run_id}/events", headers=headers) as source:
        assert source.response.status_code == 200
        assert source.response.headers["content-type"].startswith("text/event-stream")
        for event in source.iter_sse():
            events.append(event)
            if event.event == "done" or (stop_after is not None and len(events) >= stop_after):
                break
    return events


def wait_terminal(client: httpx.Client, run_id: str, timeout_s: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        run: dict[str, Any] = client.get(f"/api/runs/{run_id}").json()
        if run["status"] in ("completed", "failed", "cancelled"):
            return run
        time.sleep(0.1)
    raise AssertionError("the run did not finish")


def kinds(events: list[ServerSentEvent]) -> list[str]:
    return [e.event for e in events]


def test_a_diagnosis_streams_in_order_and_every_window_agrees(api: httpx.Client) -> None:
    run = ask(api)
    events = read_stream(api, run["run_id"])
    assert [int(e.id) for e in events] == list(range(1, len(events) + 1))
    assert kinds(events)[:3] == ["metadata", "status", "status"]
    assert json.loads(events[0].data) == {"session_id": run["session_id"], "run_id": run["run_id"]}
    stages = [json.loads(e.data)["stage"] for e in events if e.event == "status"]
    assert stages[:3] == ["queued", "routing", "routed"]
    for stage in ("agent_step", "tool_call", "evidence_check", "semantic_review", "releasing"):
        assert stage in stages
    assert kinds(events)[-2:] == ["content", "done"]
    assert json.loads(events[-1].data) == {"outcome": "success"}

    polled = api.get(f"/api/runs/{run['run_id']}").json()
    assert polled["status"] == "completed" and polled["outcome"] == "success"
    assert polled["content"] == json.loads(events[-2].data)
    row = Run.objects.get(id=run["run_id"])
    assert row.content == polled["content"] and row.outcome == "success"
    tool_events = [e for e in events if e.event == "status" and json.loads(e.data)["stage"] == "tool_call"]
    assert ToolInvocation.objects.filter(run_id=row.id).count() == len(tool_events) == row.tool_calls
    assert AgentStep.objects.filter(run_id=row.id).count() == row.model_calls


def test_a_late_client_gets_the_whole_stream_from_the_first_event(api: httpx.Client) -> None:
    run = ask(api)
    wait_terminal(api, run["run_id"])
    late = read_stream(api, run["run_id"])
    assert [int(e.id) for e in late] == list(range(1, len(late) + 1))
    assert kinds(late)[0] == "metadata" and kinds(late)[-1] == "done"
    again = read_stream(api, run["run_id"])
    assert [(e.id, e.event, e.data) for e in again] == [(e.id, e.event, e.data) for e in late]


def test_a_client_joining_mid_run_still_starts_at_the_first_event(api: httpx.Client) -> None:
    run = ask(api)
    deadline = time.monotonic() + 20
    while api.get(f"/api/runs/{run['run_id']}").json()["status"] != "running" and time.monotonic() < deadline:
        time.sleep(0.02)
    events = read_stream(api, run["run_id"])
    assert [int(e.id) for e in events] == list(range(1, len(events) + 1))
    assert kinds(events)[0] == "metadata" and kinds(events)[-1] == "done"


def test_reconnecting_with_last_event_id_loses_nothing_and_repeats_nothing(api: httpx.Client) -> None:
    run = ask(api)
    first = read_stream(api, run["run_id"], stop_after=4)
    assert [int(e.id) for e in first] == [1, 2, 3, 4]
    rest = read_stream(api, run["run_id"], last_event_id=first[-1].id)
    ids = [int(e.id) for e in first + rest]
    assert ids == list(range(1, len(ids) + 1))
    assert kinds(rest)[-1] == "done"
    # The library's own id form is accepted too.
    tail = read_stream(api, run["run_id"], last_event_id=f"run-{run['run_id']}:{len(ids) - 2}")
    assert [int(e.id) for e in tail] == [len(ids) - 1, len(ids)]
    # After done there is nothing more: 204 tells an EventSource to stop reconnecting.
    finished = api.get(f"/api/runs/{run['run_id']}/events", headers={"Last-Event-ID": str(len(ids))})
    assert finished.status_code == 204


def test_cancelling_a_running_run_ends_its_stream_cancelled(api: httpx.Client) -> None:
    run = ask(api)
    events: list[ServerSentEvent] = []
    with connect_sse(api, "GET", f"/api/runs/{run['run_id']}/events") as source:
        for event in source.iter_sse():
            events.append(event)
            if event.event == "status" and json.loads(event.data)["stage"] == "tool_call":
                assert api.post(f"/api/runs/{run['run_id']}/cancel").status_code == 202
            if event.event == "done":
                break
    assert kinds(events)[-2:] == ["failure", "done"]
    assert json.loads(events[-2].data)["code"] == "cancelled"
    assert json.loads(events[-1].data) == {"outcome": "cancelled"}
    polled = wait_terminal(api, run["run_id"])
    assert polled["status"] == "cancelled" and polled["outcome"] == "cancelled" and polled["content"] is None
    assert Run.objects.get(id=run["run_id"]).status == "cancelled"
    assert api.post(f"/api/runs/{run['run_id']}/cancel").status_code == 200  # idempotent


def test_only_the_owner_can_read_a_stream(api: httpx.Client, live_stack: Stack, bob: Caller) -> None:
    run = ask(api)
    with httpx.Client(base_url=live_stack.base_url, timeout=10) as anonymous:
        assert anonymous.get(f"/api/runs/{run['run_id']}/events").status_code == 401
        stranger = anonymous.get(f"/api/runs/{run['run_id']}/events", headers={"Authorization": f"Bearer {bob.key}"})
        assert stranger.status_code == 404 and stranger.json()["error"]["code"] == "not_found"
        bad = anonymous.get(f"/api/runs/{run['run_id']}/events", headers={"Authorization": "Bearer sba_forged"})
        assert bad.status_code == 401 and bad.json()["error"]["code"] == "invalid_api_key"
    garbage = api.get(f"/api/runs/{run['run_id']}/events", headers={"Last-Event-ID": "'; drop table"})
    assert garbage.status_code == 400 and garbage.json()["error"]["code"] == "invalid_last_event_id"
    wait_terminal(api, run["run_id"])


def test_a_redelivered_task_message_does_nothing(api: httpx.Client) -> None:
    from chat.events import RunEventStorage, channel_for
    from chat.tasks import noop, run_chat

    def stream_of(run_id: str) -> list[tuple[int, str]]:
        return [(e.id, e.type) for e in RunEventStorage().get_events(channel_for(run_id), 0, limit=1_000)]

    run = ask(api)
    wait_terminal(api, run["run_id"])
    before = stream_of(run["run_id"])
    steps = AgentStep.objects.filter(run_id=run["run_id"]).count()
    run_chat.apply_async(args=[run["run_id"]])  # the same message, delivered again
    run_chat.apply_async(args=[run["run_id"]])
    noop.apply_async().get(timeout=20)  # the worker has drained the queue up to here
    time.sleep(0.3)
    assert stream_of(run["run_id"]) == before
    assert AgentStep.objects.filter(run_id=run["run_id"]).count() == steps
    assert api.get(f"/api/runs/{run['run_id']}").json()["status"] == "completed"
