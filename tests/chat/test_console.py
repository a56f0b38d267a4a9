"""The trace console (the Django admin): a run's page shows where its time went, what it called
and got back, why it ended as it did; the lists filter and cost a fixed number of queries."""

from __future__ import annotations

import datetime
import re
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from chat import services, waterfall
from tests.django_fixtures import Caller
from traces.models import Feedback, Run, ToolInvocation

DIAGNOSIS = "Payments are timing out since 10:00, please investigate"
CHAT = "hello, what can you do?"


@pytest.fixture
def console(service: Any) -> Client:
    admin = get_user_model().objects.create_superuser("console-admin", "a@example.com", "pw-console-1")
    client = Client()
    client.force_login(admin)
    return client


def finished(caller: Caller, question: str = DIAGNOSIS) -> str:
    response = caller.post("/api/chat", {"question": question})
    assert response.status_code == 202, response.content
    run_id: str = response.json()["run_id"]
    services.run_execute(run_id=run_id)
    return run_id


def page(client: Client, path: str) -> str:
    response = client.get(path)
    assert response.status_code == 200, path
    return response.content.decode()


def queries(client: Client, path: str) -> int:
    with CaptureQueriesContext(connection) as captured:
        assert client.get(path).status_code == 200
    return len(captured)


# --- the run page ---------------------------------------------------------------------------


def test_a_run_page_shows_its_waterfall_report_tools_and_steps(console: Client, alice: Caller) -> None:
    run_id = finished(alice)
    run = Run.objects.get(id=run_id)
    html = page(console, f"/admin/traces/run/{run_id}/change/")

    assert "Where the time went" in html and DIAGNOSIS in html
    # the waterfall: queue wait, routing, model steps, each tool call nested under its step, checks, release
    assert 'class="sba-depth-0 sba-row-queue"' in html
    assert "sba-row-routing" in html and "sba-row-model" in html and "sba-row-check" in html
    tools = list(ToolInvocation.objects.filter(run=run))
    assert tools and all(t.step_index is not None and t.started_ms is not None for t in tools)
    assert html.count('class="sba-depth-1 sba-row-tool"') == len(tools)
    assert "sba-row-release" in html
    # the report, rendered, and each tool call's arguments from the canonical invocation
    assert "<h3>root cause</h3>" in html and "<blockquote><code>" in html
    assert "arguments_text" not in html and "no longer kept" not in html
    assert "&quot;" in html  # the arguments' JSON, escaped
    # readable: no float dumps, no "object (1)" labels
    assert "AgentStep object" not in html and "ToolInvocation object" not in html
    assert not re.search(r"\d+\.\d{6,}", html)


def test_the_waterfall_lays_out_steps_and_the_tools_they_asked_for() -> None:
    created = datetime.datetime(2026, 1, 1, 10, 0, 0, tzinfo=datetime.UTC)
    run = Run(created_at=created, started_at=created + datetime.timedelta(milliseconds=40))
    run.finished_at = created + datetime.timedelta(milliseconds=400)
    steps = [
        {"index": 0, "purpose": "routing", "started_ms": 1.0, "duration_ms": 9.0, "input_tokens": 5, "output_tokens": 1, "error_code": ""},
        {"index": 1, "purpose": "agent_step", "started_ms": 12.0, "duration_ms": 50.0, "input_tokens": 9, "output_tokens": 3, "error_code": ""},
    ]  # fmt: skip
    tools = [
        {"tool": "query_logs", "step_index": 1, "started_ms": 63.0, "duration_ms": 100.0, "status": "ready", "error_code": ""},
        {"tool": "query_sql", "step_index": 1, "started_ms": 63.5, "duration_ms": 20.0, "status": "timeout", "error_code": "tool_timeout"},
    ]  # fmt: skip
    built = waterfall.build(run, steps, tools, [])
    by_label = {bar.label: bar for bar in built.bars}
    assert by_label["queue wait"].duration_ms == pytest.approx(40.0)
    assert by_label["step 0 · routing"].start_ms == pytest.approx(41.0)  # after the queue wait
    assert by_label["query_logs"].start_ms == pytest.approx(103.0) and by_label["query_logs"].depth == 1
    assert by_label["query_sql"].failed and not by_label["query_logs"].failed
    assert built.total_ms == pytest.approx(400.0)
    assert all(0 <= b.left_pct <= 100 and b.left_pct + b.width_pct <= 100.0001 for b in built.bars)
    assert list(by_label) == [
        "queue wait",
        "step 0 · routing",
        "step 1 · agent step",
        "query_logs",
        "query_sql",
    ]


def test_rows_without_offsets_are_laid_one_after_another() -> None:
    created = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    run = Run(created_at=created, started_at=created)
    steps = [
        {"index": i, "purpose": "agent_step", "started_ms": None, "duration_ms": 10.0, "input_tokens": 0, "output_tokens": 0, "error_code": ""}
        for i in range(2)
    ]  # fmt: skip
    tools = [
        {"tool": "t", "step_index": 0, "started_ms": None, "duration_ms": 5.0, "status": "ready", "error_code": ""}
    ]
    starts = [(b.label, b.start_ms) for b in waterfall.build(run, steps, tools, []).bars if b.kind != "queue"]
    assert starts == [("step 0 · agent step", 0.0), ("t", 10.0), ("step 1 · agent step", 15.0)]


@pytest.mark.parametrize(
    ("value", "text"), [(1467.1144309995725, "1.47 s"), (12.34, "12 ms"), (0.4211, "0.42 ms"), (None, "—")]
)
def test_durations_read_as_people_write_them(value: float | None, text: str) -> None:
    assert waterfall.format_ms(value) == text


def test_a_run_page_costs_the_same_queries_whatever_the_run_did(console: Client, alice: Caller) -> None:
    small, large = finished(alice, CHAT), finished(alice)
    assert ToolInvocation.objects.filter(run_id=large).count() > 0
    page(console, f"/admin/traces/run/{small}/change/")  # warm the session and content types
    assert queries(console, f"/admin/traces/run/{small}/change/") == queries(
        console, f"/admin/traces/run/{large}/change/"
    )


def test_the_evidence_findings_say_which_claim_failed_and_why(console: Client, alice: Caller) -> None:
    from traces.models import TraceEvent

    run_id = finished(alice)
    run = Run.objects.get(id=run_id)
    TraceEvent.objects.create(
        run=run, category="evidence", name="evidence.finding", at=run.created_at,
        details={"code": "quote_not_found", "claim": 1, "citation": 0},
    )  # fmt: skip
    html = page(console, f"/admin/traces/run/{run_id}/change/")
    assert "quote_not_found" in html and "the quote does not occur in the cited result" in html


# --- lists ----------------------------------------------------------------------------------


def test_the_run_list_filters_by_fallback_reason_and_feedback_in_fixed_queries(console: Client, alice: Caller) -> None:
    ids = [finished(alice, CHAT) for _ in range(3)]
    Run.objects.filter(id=ids[0]).update(fallback_reason="insufficient_evidence", outcome="fallback")
    Feedback.objects.create(run_id=ids[1], owner=alice.user, rating="down")

    html = page(console, "/admin/traces/run/?fallback_reason=insufficient_evidence")
    assert ids[0] in html and ids[1] not in html
    html = page(console, "/admin/traces/run/?feedback=down")
    assert ids[1] in html and ids[0] not in html
    html = page(console, "/admin/traces/run/")
    assert CHAT in html and "tokens" in html

    few = queries(console, "/admin/traces/run/")
    for _ in range(5):
        finished(alice, CHAT)
    assert queries(console, "/admin/traces/run/") == few


def test_tool_invocations_feedback_and_a_sessions_runs_have_pages(console: Client, alice: Caller) -> None:
    run_id = finished(alice)
    run = Run.objects.get(id=run_id)
    Feedback.objects.create(run=run, owner=alice.user, rating="up", comment="spot on")
    assert "query_logs" in page(console, "/admin/traces/toolinvocation/?tool=query_logs")
    assert "spot on" in page(console, "/admin/traces/feedback/")
    assert DIAGNOSIS[:60] in page(console, f"/admin/traces/chatsession/{run.session_id}/change/")


def test_cancel_from_the_console_goes_through_the_service(console: Client, alice: Caller) -> None:
    response = alice.post("/api/chat", {"question": CHAT})
    run_id = response.json()["run_id"]
    answer = console.post(
        "/admin/traces/run/", {"action": "cancel_runs", "_selected_action": [run_id], "index": 0}, follow=True
    )
    assert answer.status_code == 200
    assert Run.objects.get(id=run_id).status == "cancelled"


def test_the_console_changes_nothing_else(console: Client, alice: Caller) -> None:
    run_id = finished(alice)
    response = console.post(f"/admin/traces/run/{run_id}/change/", {"question": "changed"})
    assert response.status_code == 403
    assert Run.objects.get(id=run_id).question == DIAGNOSIS
    assert console.get("/admin/traces/run/add/").status_code == 403
    assert console.get(f"/admin/traces/run/{run_id}/delete/").status_code == 403


def test_only_superusers_see_the_providers_reasoning(console: Client, alice: Caller) -> None:
    from django.contrib.auth.models import Permission

    run_id = finished(alice)
    assert 'id="reasoning"' in page(console, f"/admin/traces/run/{run_id}/change/")
    viewer = get_user_model().objects.create_user("viewer", password="pw-viewer-1", is_staff=True)
    viewer.user_permissions.add(
        *Permission.objects.filter(codename__startswith="view_", content_type__app_label="traces")
    )
    client = Client()
    client.force_login(viewer)
    html = page(client, f"/admin/traces/run/{run_id}/change/")
    assert "Where the time went" in html and 'id="reasoning"' not in html
