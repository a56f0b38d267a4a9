"""The chat page and the trace console as a person sees them: Debian's Chromium, headless,
driven by Playwright, against the real stack (uvicorn, a Celery worker, the test database).

Screenshots go to ``test-output/`` (ignored by git). Without a Chromium the module is skipped
locally and fails under CI (``CI`` set): ``make test`` installs Debian's ``chromium``.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from chat.stack import Stack
from tests.e2e.conftest import running_stack

pytestmark = pytest.mark.timeout(180)

DIAGNOSIS = "Payments are timing out since 10:00, please investigate"
CHAT = "hello, what can you do?"
PASSWORD = "correct horse battery staple"
OUTPUT = Path(__file__).resolve().parents[2] / "test-output"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]


def chromium_path() -> str | None:
    return os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    executable = chromium_path()
    if executable is None:
        if os.environ.get("CI"):
            pytest.fail("no Chromium: install Debian's chromium (make test does)")
        pytest.skip("no Chromium here (make test installs Debian's chromium)")
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an event loop in this thread; the tests' own database calls
    # (creating users, reading rows) stay synchronous and run beside it.
    saved = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        with sync_playwright() as playwright:
            launched = playwright.chromium.launch(executable_path=executable, args=FLAGS)
            try:
                yield launched
            finally:
                launched.close()
    finally:
        if saved is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = saved


@pytest.fixture(scope="module")
def site(django_db_setup: Any, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    from django.core.management import call_command

    call_command("collectstatic", interactive=False, verbosity=0)  # as `serve` does before it starts
    with running_stack(
        django_db_blocker, tmp_path_factory, env={"EVIDENCE_LATENCY_S": "0.05"}, worker_concurrency=1
    ) as stack:
        yield stack


@pytest.fixture
def people(service: Any) -> dict[str, Any]:
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Permission

    users = get_user_model().objects
    lead = users.create_superuser("lead", "lead@example.com", PASSWORD)
    viewer = users.create_user("viewer", password=PASSWORD, is_staff=True)
    viewer.user_permissions.add(
        *Permission.objects.filter(codename__startswith="view_", content_type__app_label="traces")
    )
    return {"lead": lead, "viewer": viewer}


def sign_in(page: Any, base: str, username: str) -> None:
    page.goto(f"{base}/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(f"{base}/")


def ask(page: Any, question: str) -> Any:
    page.fill("#question", question)
    page.click("#send")
    run = page.locator("section.run").first
    run.locator(".after").wait_for(state="visible", timeout=60_000)
    return run


def as_shown(status: dict[str, Any]) -> str:
    """A status event as the page lists it: its stage, then its details."""
    detail = " · ".join(str(v) for v in status.get("detail", {}).values())
    return str(status["stage"]).replace("_", " ") + (f" {detail}" if detail else "")


def shot(page: Any, name: str) -> None:
    OUTPUT.mkdir(exist_ok=True)
    page.screenshot(path=str(OUTPUT / f"{name}.png"), full_page=True)


def test_ask_on_the_chat_page_and_read_the_report_then_its_run_in_the_console(
    browser: Any, site: Stack, people: dict[str, Any]
) -> None:
    page = browser.new_page()
    failed_assets: list[str] = []
    page.on("response", lambda r: failed_assets.append(r.url) if "/static/" in r.url and r.status != 200 else None)
    sign_in(page, site.base_url, "lead")

    run = ask(page, DIAGNOSIS)
    assert run.locator(".state").inner_text() in ("success", "fallback")
    statuses = run.locator(".statuses li").all_inner_texts()
    assert statuses[0] == "queued" and any(s.startswith("tool call ") for s in statuses)
    report = run.locator(".report").inner_text().lower()
    assert "root cause" in report or "consulted" in report
    shot(page, "chat-page")

    run.locator(".up").click()
    run.locator(".feedback-state").filter(has_text="recorded").wait_for()
    run_id = run.get_attribute("data-run-id")

    run.locator("a.console").click()
    page.wait_for_url(f"**/admin/traces/run/{run_id}/change/")
    waterfall = page.locator("table.sba-wf")
    assert waterfall.is_visible()
    assert page.locator("tr.sba-row-queue").count() == 1 and page.locator("tr.sba-row-tool").count() >= 1
    # the admin is styled: its stylesheet arrived and applies
    assert page.evaluate("getComputedStyle(document.querySelector('#header')).display") == "flex"
    assert not failed_assets, failed_assets
    bar = page.locator("tr.sba-row-tool .sba-bar").first
    assert bar.evaluate("b => getComputedStyle(b).backgroundColor") not in ("", "rgba(0, 0, 0, 0)")
    assert page.locator("#reasoning").count() == 1  # a superuser sees the reasoning
    arguments = page.locator("table.sba-rows pre").first.inner_text()
    assert arguments.strip().startswith("{")
    shot(page, "console-run")
    page.close()


def test_a_staff_member_who_is_not_a_superuser_sees_no_reasoning(
    browser: Any, site: Stack, people: dict[str, Any]
) -> None:
    page = browser.new_page()
    sign_in(page, site.base_url, "lead")
    run_id = ask(page, CHAT).get_attribute("data-run-id")
    page.context.clear_cookies()
    sign_in(page, site.base_url, "viewer")
    page.goto(f"{site.base_url}/admin/traces/run/{run_id}/change/")
    assert page.locator("table.sba-wf").is_visible()
    assert page.locator("#reasoning").count() == 0
    page.close()


def test_a_dropped_stream_is_resumed_without_losing_or_repeating_an_event(
    browser: Any, site: Stack, people: dict[str, Any]
) -> None:
    """The first stream is cut after three events; the page asks again with Last-Event-ID: 3
    and shows every status once."""
    page = browser.new_page()
    sign_in(page, site.base_url, "lead")
    streams: list[dict[str, str]] = []
    full: list[str] = []

    def cut_first(route: Any) -> None:
        streams.append(route.request.headers)
        if len(streams) > 1:
            route.continue_()
            return
        whole = route.fetch(timeout=60_000).text()
        blocks = [b for b in whole.split("\n\n") if "event:" in b]
        full.extend(blocks)
        route.fulfill(status=200, headers={"content-type": "text/event-stream"}, body="\n\n".join(blocks[:3]) + "\n\n")

    page.route("**/api/runs/*/events", cut_first)
    run = ask(page, CHAT)

    assert len(streams) == 2 and streams[1].get("last-event-id") == "3"
    shown = run.locator(".statuses li").all_inner_texts()
    sent = [json.loads(b.split("data: ", 1)[1]) for b in full if "event: status" in b]
    assert shown == [as_shown(status) for status in sent]
    assert run.locator(".state").inner_text() == "success"
    page.close()
