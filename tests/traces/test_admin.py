"""The trace console (/admin/): staff read runs with their steps, tools and timeline; nobody
adds, edits or deletes them there."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from chat import services
from tests.django_fixtures import Caller
from traces.models import AgentStep, ChatSession, Run, ToolInvocation, TraceEvent

DIAGNOSIS = "Payments are timing out since 10:00, please investigate"


@pytest.fixture
def console(staff: Caller) -> Client:
    """The admin, logged in as a staff superuser (the on-call lead)."""
    user = staff.user
    user.is_superuser = True
    user.save(update_fields=["is_superuser"])
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def finished_run(alice: Caller) -> Run:
    response = alice.post("/api/chat", {"question": DIAGNOSIS})
    assert response.status_code == 202
    services.run_execute(run_id=response.json()["run_id"])
    run = Run.objects.get(id=response.json()["run_id"])
    assert run.status == "completed"
    return run


def test_the_run_list_shows_the_runs(console: Client, finished_run: Run) -> None:
    response = console.get("/admin/traces/run/")
    assert response.status_code == 200
    page = response.content.decode()
    assert str(finished_run.id) in page
    assert "alice" in page and "completed" in page
    # Read-only: no add button and no bulk delete action.
    assert "/admin/traces/run/add/" not in page
    assert "delete_selected" not in page


def test_the_list_filters_and_search_work(console: Client, finished_run: Run) -> None:
    assert console.get("/admin/traces/run/?status__exact=completed").status_code == 200
    found = console.get("/admin/traces/run/", {"q": "timing out"})
    assert found.status_code == 200 and str(finished_run.id) in found.content.decode()
    missing = console.get("/admin/traces/run/", {"q": "no-such-question"})
    assert missing.status_code == 200 and str(finished_run.id) not in missing.content.decode()


def test_a_runs_page_lists_its_steps_tool_invocations_and_timeline(console: Client, finished_run: Run) -> None:
    response = console.get(f"/admin/traces/run/{finished_run.id}/change/")
    assert response.status_code == 200
    page = response.content.decode()
    assert DIAGNOSIS in page

    steps = AgentStep.objects.filter(run=finished_run)
    tools = ToolInvocation.objects.filter(run=finished_run)
    timeline = TraceEvent.objects.filter(run=finished_run)
    assert steps.exists() and tools.exists() and timeline.exists()
    # the console's sections: one waterfall row per step and per tool call, the timeline's events
    assert page.count("sba-row-model") + page.count("sba-row-routing") >= steps.count()
    assert page.count('class="sba-depth-1 sba-row-tool"') == tools.count()
    assert "<h2>Model steps</h2>" in page and "<h2>Tool calls</h2>" in page and "<h2>Timeline</h2>" in page
    for tool in tools:
        assert tool.tool_call_id in page and tool.tool in page
    for name in ("run.started", "routing.routed", "release.decided", "run.finished"):
        assert name in page
    # View only: nothing on the page can be saved.
    assert 'name="_save"' not in page and 'name="_continue"' not in page


def test_runs_cannot_be_added_or_deleted_in_the_admin(console: Client, finished_run: Run) -> None:
    assert console.get("/admin/traces/run/add/").status_code == 403
    assert console.post("/admin/traces/run/add/", {"question": "injected"}).status_code == 403
    assert console.get(f"/admin/traces/run/{finished_run.id}/delete/").status_code == 403
    assert console.post(f"/admin/traces/run/{finished_run.id}/delete/", {"post": "yes"}).status_code == 403
    assert console.get("/admin/traces/chatsession/add/").status_code == 403
    # Nor changed through the change form.
    edited = console.post(f"/admin/traces/run/{finished_run.id}/change/", {"question": "edited", "status": "failed"})
    assert edited.status_code == 403
    run = Run.objects.get(id=finished_run.id)
    assert (run.question, run.status) == (DIAGNOSIS, "completed")
    assert Run.objects.count() == 1 and ChatSession.objects.count() == 1


def test_a_logged_in_user_who_is_not_staff_is_sent_to_the_login_page(alice: Caller, finished_run: Run) -> None:
    client = Client()
    client.force_login(alice.user)
    for path in ("/admin/traces/run/", f"/admin/traces/run/{finished_run.id}/change/"):
        response = client.get(path)
        assert response.status_code == 302
        assert response["Location"] == f"/admin/login/?next={path}"


def test_an_api_key_does_not_open_the_admin(staff: Caller, service: Any) -> None:
    response = Client().get("/admin/traces/run/", headers={"Authorization": f"Bearer {staff.key}"})
    assert response.status_code == 302 and response["Location"].startswith("/admin/login/")
