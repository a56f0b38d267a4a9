"""The REST API against the real database and Redis: happy paths, isolation, bad input."""

from __future__ import annotations

import base64
import json
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.utils import timezone

from chat import services
from chat.events import RunEventStorage, channel_for
from chat.models import ApiKey, RunEvent
from tests.django_fixtures import Caller, broker_pointed_at_nothing
from traces.models import AgentStep, ChatSession, Run, ToolInvocation, TraceEvent

DIAGNOSIS = "Payments are timing out since 10:00, please investigate"


def ask(caller: Caller, question: str = DIAGNOSIS, **extra: Any) -> Any:
    headers = extra.pop("headers", {})
    return caller.post("/api/chat", {"question": question, **extra}, headers=headers)


def events_of(run_id: str) -> list[tuple[str, dict[str, Any]]]:
    """The run's stream as a client would replay it from the start."""
    events = RunEventStorage().get_events(channel_for(run_id), 0, limit=1_000)
    assert [e.id for e in events] == list(range(1, len(events) + 1))
    return [(e.type, json.loads(e.data)) for e in events]


def queued_messages(redis: Any) -> int:
    return int(redis.llen("runs"))


def assert_error(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.content
    body = response.json()
    assert set(body) == {"error"}
    assert body["error"]["code"] == code
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    assert "Traceback" not in response.content.decode()
    error: dict[str, Any] = body["error"]
    return error


# --- asking ----------------------------------------------------------------------------------


def test_a_question_creates_a_queued_run_and_enqueues_it(alice: Caller, service: Any) -> None:
    response = ask(alice)
    assert response.status_code == 202
    body = response.json()
    run = Run.objects.get(id=body["run_id"])
    assert body["status"] == "queued" and run.status == "queued"
    assert body["session_id"] == str(run.session_id) and run.owner == alice.user
    assert body["links"] == {
        "self": f"/api/runs/{run.id}",
        "events": f"/api/runs/{run.id}/events",
        "cancel": f"/api/runs/{run.id}/cancel",
        "trace": f"/api/runs/{run.id}/trace",
    }
    assert queued_messages(service) == 1
    assert events_of(body["run_id"]) == [
        ("metadata", {"session_id": str(run.session_id), "run_id": str(run.id)}),
        ("status", {"stage": "queued"}),
    ]


def test_the_worker_body_runs_the_run_once_and_polling_shows_the_result(alice: Caller) -> None:
    run_id = ask(alice).json()["run_id"]
    services.run_execute(run_id=run_id)
    polled = alice.get(f"/api/runs/{run_id}").json()
    assert polled["status"] == "completed" and polled["outcome"] == "success"
    assert polled["intent"] == "DIAGNOSIS"
    assert polled["content"]["content_type"] == "diagnosis_report"
    assert polled["usage"]["tool_calls"] > 0 and polled["usage"]["model_calls"] > 0
    kinds = [kind for kind, _ in events_of(run_id)]
    assert kinds[0] == "metadata" and kinds[-2:] == ["content", "done"]

    # The ended run's stream was archived to its rows, identical to the live list.
    assert [
        (r.event_type, json.loads(r.data)) for r in RunEvent.objects.filter(run_id=run_id).order_by("seq")
    ] == events_of(run_id)

    # A redelivered message for a finished run does nothing at all.
    before = events_of(run_id), AgentStep.objects.filter(run_id=run_id).count()
    services.run_execute(run_id=run_id)
    after = events_of(run_id), AgentStep.objects.filter(run_id=run_id).count()
    assert before == after
    assert alice.get(f"/api/runs/{run_id}").json() == polled


def test_a_redelivered_message_for_a_running_run_does_nothing(alice: Caller) -> None:
    run_id = ask(alice).json()["run_id"]
    Run.objects.filter(id=run_id).update(status="running", started_at=timezone.now())
    services.run_execute(run_id=run_id)
    run = Run.objects.get(id=run_id)
    assert run.status == "running" and not AgentStep.objects.filter(run_id=run_id).exists()


def test_a_run_whose_worker_died_is_declared_lost(alice: Caller) -> None:
    run_id = ask(alice).json()["run_id"]
    Run.objects.filter(id=run_id).update(status="running", started_at=timezone.now() - timedelta(hours=3))
    polled = alice.get(f"/api/runs/{run_id}").json()
    assert polled["status"] == "failed" and polled["failure"]["code"] == "worker_lost"
    assert [kind for kind, _ in events_of(run_id)][-2:] == ["failure", "done"]


def test_a_second_question_in_a_busy_session_is_refused(alice: Caller) -> None:
    first = ask(alice).json()
    error = assert_error(ask(alice, "and the gateway?", session_id=first["session_id"]), 409, "session_busy")
    assert error["details"] == {"run_id": first["run_id"]}
    assert Run.objects.count() == 1


def test_a_session_is_reused_once_its_run_has_finished(alice: Caller) -> None:
    first = ask(alice).json()
    services.run_execute(run_id=first["run_id"])
    second = ask(alice, "and what about the gateway?", session_id=first["session_id"])
    assert second.status_code == 202
    assert second.json()["session_id"] == first["session_id"]


def test_an_idempotency_key_returns_the_same_run(alice: Caller) -> None:
    first = ask(alice, headers={"Idempotency-Key": "k-1"})
    again = ask(alice, headers={"Idempotency-Key": "k-1"})
    assert first.status_code == 202 and again.status_code == 200
    assert again.json()["run_id"] == first.json()["run_id"]
    assert_error(ask(alice, "something else", headers={"Idempotency-Key": "k-1"}), 422, "idempotency_key_reused")
    assert Run.objects.count() == 1


@pytest.mark.parametrize(
    "change",
    [
        {"question": "Payments are timing out since 11:00, please investigate"},
        {"metadata": {"ticket": "INC-2"}},
        {"metadata": {"ticket": "INC-1", "team": "payments"}},
        {"webhook_url": "http://127.0.0.1/other-hook"},
        {"webhook_url": None},
        {"session_id": "given"},
    ],
    ids=["question", "metadata-value", "metadata-key", "webhook_url", "no-webhook_url", "session_id"],
)
def test_an_idempotency_key_reused_with_any_other_field_is_422_and_creates_nothing(
    alice: Caller, settings: Any, change: dict[str, Any]
) -> None:
    settings.WEBHOOK = {**settings.WEBHOOK, "ALLOWED_CIDRS": ["127.0.0.1/32"]}
    body: dict[str, Any] = {"metadata": {"ticket": "INC-1"}, "webhook_url": "http://127.0.0.1/hook"}
    first = ask(alice, **body, headers={"Idempotency-Key": "k-1"})
    assert first.status_code == 202
    changed: dict[str, Any] = {**body, **change}
    if changed.get("session_id") == "given":
        changed["session_id"] = first.json()["session_id"]  # the session the first request created
    changed = {k: v for k, v in changed.items() if v is not None}
    question = changed.pop("question", DIAGNOSIS)
    runs, sessions = Run.objects.count(), ChatSession.objects.count()

    assert_error(ask(alice, question, **changed, headers={"Idempotency-Key": "k-1"}), 422, "idempotency_key_reused")

    assert (Run.objects.count(), ChatSession.objects.count()) == (runs, sessions)
    again = ask(
        alice, metadata={"ticket": "INC-1"}, webhook_url=body["webhook_url"], headers={"Idempotency-Key": "k-1"}
    )
    assert again.status_code == 200 and again.json()["run_id"] == first.json()["run_id"]


def test_an_idempotency_key_replays_a_body_whose_metadata_keys_come_in_another_order(alice: Caller) -> None:
    first = ask(alice, metadata={"a": 1, "b": [1, 2]}, headers={"Idempotency-Key": "k-2"})
    again = ask(alice, metadata={"b": [1, 2], "a": 1}, headers={"Idempotency-Key": "k-2"})
    assert first.status_code == 202 and again.status_code == 200
    assert again.json()["run_id"] == first.json()["run_id"] and Run.objects.count() == 1


def test_the_broker_being_down_is_a_503_and_leaves_no_queued_run(alice: Caller, settings: Any) -> None:
    with broker_pointed_at_nothing():
        response = ask(alice)
    assert_error(response, 503, "queue_unavailable")
    assert response["Retry-After"]
    (run,) = Run.objects.all()
    assert run.status == "failed" and run.failure_code == "queue_unavailable"


def test_a_full_queue_is_a_503(alice: Caller, settings: Any) -> None:
    settings.MAX_QUEUED_RUNS = 1
    assert ask(alice).status_code == 202
    response = ask(alice, "another question")
    assert_error(response, 503, "queue_full")
    assert response["Retry-After"] and Run.objects.count() == 1


# --- bad input: a clear 4xx envelope, nothing written -----------------------------------------


@pytest.mark.parametrize(
    ("body", "content_type", "status", "code"),
    [
        ("{not json", "application/json", 400, "invalid_json"),
        (json.dumps({"question": "x", "colour": "red"}), "application/json", 400, "invalid_request"),
        (json.dumps({"question": ""}), "application/json", 400, "invalid_request"),
        (json.dumps({"question": "   "}), "application/json", 400, "invalid_request"),
        (json.dumps({}), "application/json", 400, "invalid_request"),
        (json.dumps(["question"]), "application/json", 400, "invalid_request"),
        (json.dumps({"question": 42}), "application/json", 400, "invalid_request"),
        (json.dumps({"question": "x" * 8_001}), "application/json", 400, "invalid_request"),
        (json.dumps({"question": "x" * 100_000}), "application/json", 413, "payload_too_large"),
        (json.dumps({"question": "x", "session_id": "not-a-uuid"}), "application/json", 400, "invalid_request"),
        ("question=x", "application/x-www-form-urlencoded", 415, "unsupported_media_type"),
    ],
)
def test_bad_bodies_are_refused_and_write_nothing(
    alice: Caller, service: Any, body: str, content_type: str, status: int, code: str
) -> None:
    response = alice.client.post("/api/chat", body, content_type=content_type)
    assert_error(response, status, code)
    assert Run.objects.count() == 0 and ChatSession.objects.count() == 0
    assert queued_messages(service) == 0


def test_unknown_fields_are_named(alice: Caller) -> None:
    error = assert_error(alice.post("/api/chat", {"question": "x", "webhook": "http://x"}), 400, "invalid_request")
    assert error["details"]["fields"] == {"webhook": ["Unknown field."]}


@pytest.mark.parametrize(
    ("header", "code"),
    [
        (None, "unauthenticated"),
        ("Bearer sba_nope", "invalid_api_key"),
        ("Basic abc", "invalid_api_key"),
        ("Bearer", "invalid_api_key"),
    ],
)
def test_missing_or_invalid_keys_are_401(service: Any, header: str | None, code: str) -> None:
    from rest_framework.test import APIClient

    client = APIClient()
    if header is not None:
        client.credentials(HTTP_AUTHORIZATION=header)
    response = client.post("/api/chat", {"question": DIAGNOSIS}, format="json")
    assert_error(response, 401, code)
    assert response["WWW-Authenticate"].startswith("Bearer")
    assert Run.objects.count() == 0


def test_a_revoked_key_no_longer_works(alice: Caller) -> None:
    assert ask(alice).status_code == 202
    services.api_key_revoke(key=ApiKey.objects.get(user=alice.user))
    assert_error(ask(alice, "again"), 401, "invalid_api_key")


def test_malformed_ids_in_urls_are_400(alice: Caller) -> None:
    for path in ("/api/runs/nope", "/api/runs/nope/trace", "/api/runs/nope/events", "/api/sessions/1234"):
        assert_error(alice.get(path), 400, "invalid_id")
    assert_error(alice.post("/api/runs/nope/cancel"), 400, "invalid_id")


def test_django_errors_under_api_use_the_envelope(alice: Caller) -> None:
    assert_error(alice.get("/api/nothing-here"), 404, "not_found")
    assert_error(alice.get("/api/chat"), 405, "method_not_allowed")
    assert_error(alice.client.delete(f"/api/runs/{uuid.uuid4()}"), 405, "method_not_allowed")


# --- isolation -------------------------------------------------------------------------------


def test_other_users_objects_answer_404(alice: Caller, bob: Caller) -> None:
    run = ask(alice).json()
    run_id, session_id = run["run_id"], run["session_id"]
    for path in (
        f"/api/runs/{run_id}",
        f"/api/runs/{run_id}/trace",
        f"/api/runs/{run_id}/events",
        f"/api/sessions/{session_id}",
        f"/api/sessions/{session_id}/runs",
    ):
        assert_error(bob.get(path), 404, "not_found")
    assert_error(bob.post(f"/api/runs/{run_id}/cancel"), 404, "not_found")
    assert_error(bob.post(f"/api/runs/{run_id}/feedback", {"rating": "up"}), 404, "not_found")
    assert_error(ask(bob, "hi", session_id=session_id), 404, "not_found")
    assert bob.get("/api/sessions").json()["results"] == []
    assert Run.objects.get(id=run_id).status == "queued"


def test_staff_may_read_every_run_and_the_reasoning_audit(alice: Caller, staff: Caller) -> None:
    run_id = ask(alice).json()["run_id"]
    services.run_execute(run_id=run_id)
    assert staff.get(f"/api/runs/{run_id}").status_code == 200
    assert_error(alice.get(f"/api/runs/{run_id}/trace/reasoning"), 403, "permission_denied")
    reasoning = staff.get(f"/api/runs/{run_id}/trace/reasoning").json()
    assert reasoning["run_id"] == run_id and reasoning["steps"]
    assert all(step["assistant_text"] for step in reasoning["steps"])


# --- trace, cancel, feedback, sessions ---------------------------------------------------------


def test_the_trace_is_metadata_only(alice: Caller) -> None:
    run_id = ask(alice).json()["run_id"]
    services.run_execute(run_id=run_id)
    trace = alice.get(f"/api/runs/{run_id}/trace").json()
    assert trace["run"]["id"] == run_id
    assert [s["index"] for s in trace["steps"]] == list(range(len(trace["steps"])))
    assert {t["tool"] for t in trace["tool_invocations"]} >= {"lookup_knowledge", "query_logs"}
    names = [e["name"] for e in trace["timeline"]]
    assert names[0] == "run.started" and names[-1] == "run.finished"
    parts = json.dumps({k: trace[k] for k in ("steps", "tool_invocations", "timeline")})
    for private in ("HikariPool", "Connection is not available", "db.pool.max_size", "timing out", "SELECT"):
        assert private not in parts
    assert ToolInvocation.objects.filter(run_id=run_id).count() == len(trace["tool_invocations"])
    assert TraceEvent.objects.filter(run_id=run_id).count() == len(trace["timeline"])


def test_cancelling_a_queued_run_ends_it_at_once_and_is_idempotent(alice: Caller) -> None:
    run_id = ask(alice).json()["run_id"]
    first = alice.post(f"/api/runs/{run_id}/cancel")
    assert first.status_code == 202
    assert first.json()["status"] == "cancelled" and first.json()["outcome"] == "cancelled"
    again = alice.post(f"/api/runs/{run_id}/cancel")
    assert again.status_code == 200 and again.json()["status"] == "cancelled"
    assert [kind for kind, _ in events_of(run_id)] == ["metadata", "status", "failure", "done"]
    assert events_of(run_id)[-1] == ("done", {"outcome": "cancelled"})
    services.run_execute(run_id=run_id)  # the message still arrives: it must do nothing
    assert Run.objects.get(id=run_id).status == "cancelled"


def test_cancelling_a_running_run_raises_its_cancel_flag(alice: Caller, service: Any) -> None:
    run_id = ask(alice).json()["run_id"]
    Run.objects.filter(id=run_id).update(status="running", started_at=timezone.now())
    response = alice.post(f"/api/runs/{run_id}/cancel")
    assert response.status_code == 202 and response.json()["status"] == "running"
    assert service.get(f"sba:cancel:{run_id}") == b"user"


def test_feedback_is_recorded_once_per_user_and_validated(alice: Caller) -> None:
    run_id = ask(alice).json()["run_id"]
    assert alice.post(f"/api/runs/{run_id}/feedback", {"rating": "down", "comment": "wrong service"}).status_code == 201
    updated = alice.post(f"/api/runs/{run_id}/feedback", {"rating": "up"})
    assert updated.json() == {"run_id": run_id, "rating": "up", "comment": ""}
    assert_error(alice.post(f"/api/runs/{run_id}/feedback", {"rating": "meh"}), 400, "invalid_request")
    assert_error(alice.post(f"/api/runs/{run_id}/feedback", {"rating": "up", "extra": 1}), 400, "invalid_request")


def test_sessions_are_listed_newest_first_and_paginated(alice: Caller) -> None:
    ids = []
    for i in range(3):
        body = ask(alice, f"question {i}").json()
        services.run_cancel(run=Run.objects.get(id=body["run_id"]))
        ids.append(body["session_id"])
    page = alice.get("/api/sessions?page_size=2").json()
    assert [s["id"] for s in page["results"]] == ids[::-1][:2]
    rest = alice.client.get(page["next"]).json()
    assert [s["id"] for s in rest["results"]] == ids[:1]
    assert alice.get(f"/api/sessions/{ids[0]}").json()["id"] == ids[0]
    runs = alice.get(f"/api/sessions/{ids[0]}/runs").json()["results"]
    assert [r["question"] for r in runs] == ["question 0"]


# --- ops -------------------------------------------------------------------------------------


def test_openapi_schema_and_docs_are_served(service: Any) -> None:
    from rest_framework.test import APIClient

    client = APIClient()
    schema = client.get("/api/schema", HTTP_ACCEPT="application/json")
    assert schema.status_code == 200
    spec = json.loads(schema.content)
    assert spec["openapi"].startswith("3.")
    assert "/api/chat" in spec["paths"] and "/api/runs/{run_id}" in spec["paths"]
    assert client.get("/api/docs").status_code == 200


def test_health_and_readiness(service: Any) -> None:
    from rest_framework.test import APIClient

    client = APIClient()
    assert client.get("/api/healthz").json() == {"status": "ok"}
    ready = client.get("/api/readyz").json()
    assert ready["status"] == "ready"
    required = {"database", "redis", "broker", "model_provider", "evidence"}
    assert set(ready["checks"]) == required | {"workers", "queue"}  # the last two inform, they do not decide
    assert ready["checks"]["model_provider"]["detail"] == {"router": "offline", "agent": "offline", "guard": "offline"}


def test_create_api_key_prints_a_key_once_and_stores_only_its_hash(
    service: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    call_command("create_api_key", "--user", "carol", "--staff")
    raw, webhook_secret = capsys.readouterr().out.split()
    assert raw.startswith("sba_") and len(raw) > 40
    assert webhook_secret.startswith("whsec_") and len(base64.b64decode(webhook_secret[6:])) == 32
    key = ApiKey.objects.get(user__username="carol")
    assert key.user.is_staff and raw not in (key.digest, key.prefix) and key.prefix == raw[:12]
    assert Caller(key.user, raw).get("/api/sessions").status_code == 200
    assert webhook_secret not in key.webhook_secret  # stored sealed, not as shown


def test_a_query_parameter_an_endpoint_does_not_take_is_refused_not_ignored(alice: Caller) -> None:
    error = assert_error(alice.get("/api/sessions?page_sise=5"), 400, "unknown_parameter")
    assert error["details"] == {"parameters": ["page_sise"]}
    assert_error(alice.get("/api/runs/00000000-0000-0000-0000-000000000000?verbose=1"), 400, "unknown_parameter")
    assert alice.get("/api/sessions?page_size=5").status_code == 200


@pytest.mark.parametrize("size", ["0", "101", "-1", "ten", ""])
def test_a_page_size_out_of_range_is_refused(alice: Caller, size: str) -> None:
    assert_error(alice.get(f"/api/sessions?page_size={size}"), 400, "invalid_request")


def test_a_method_an_endpoint_does_not_serve_is_405_even_where_staff_are_required(alice: Caller) -> None:
    assert_error(alice.client.put("/api/knowledge/rebuild"), 405, "method_not_allowed")
    assert_error(alice.client.delete("/api/chat"), 405, "method_not_allowed")
