"""The Prometheus metrics: what each run, model call, tool call, webhook attempt and sweep adds,
that labels stay bounded and private, who may read ``/metrics``, and what a process leaves
behind when it exits. Values are read the way a scrape reads them: from every process's files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.utils import timezone
from prometheus_client import CollectorRegistry, multiprocess
from prometheus_client.parser import text_string_to_metric_families
from rest_framework.test import APIClient

from chat import metrics, selectors, services, wiring
from chat.models import WebhookDelivery
from chat.webhooks import services as webhooks
from harness.ports import InvocationStatus, StepRecord, ToolAuditRecord
from tests.django_fixtures import Caller
from tests.webhook_receiver import Receiver, receiving
from traces.lifecycle import EndCause, RunEnded
from traces.models import AgentStep, Outcome, Run, RunStatus, ToolInvocation

ROOT = Path(__file__).resolve().parents[2]
DIAGNOSIS = "Payments are timing out since 10:00, please investigate"
P = metrics.PREFIX


def sample(name: str, directory: str | None = None, **labels: str) -> float:
    """The value a scrape would show, summed over every process that wrote one."""
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=directory or str(django_settings.METRICS_DIR))  # type: ignore[no-untyped-call]
    return registry.get_sample_value(name, labels) or 0.0


def scraped(**extra: str) -> Any:
    return APIClient().get("/metrics", None, False, **extra)  # extra: the WSGI environ (REMOTE_ADDR, HTTP_…)


def families(text: str) -> dict[str, Any]:
    return {family.name: family for family in text_string_to_metric_families(text)}


class Delta:
    """``after - before`` of several samples, read once before and once after a block."""

    def __init__(self, *keys: tuple[str, dict[str, str]]) -> None:
        self.keys = keys
        self.before = [sample(name, **labels) for name, labels in keys]

    def __call__(self) -> list[float]:
        return [sample(name, **labels) - b for (name, labels), b in zip(self.keys, self.before, strict=True)]


# --- a run ---------------------------------------------------------------------------------------


def test_a_run_is_counted_once_with_its_duration_model_and_tool_calls(alice: Caller) -> None:
    finished = (
        f"{P}_runs_finished_total",
        {"intent": "DIAGNOSIS", "status": "completed", "outcome": "success", "cause": "harness"},
    )
    duration = (f"{P}_run_duration_seconds_count", {"intent": "DIAGNOSIS", "outcome": "success"})
    delta = Delta(finished, duration)
    tools_before = {t: sample(f"{P}_tool_call_duration_seconds_count", tool=t, status="ready") for t in _tools()}

    run_id = alice.post("/api/chat", {"question": DIAGNOSIS}).json()["run_id"]
    services.run_execute(run_id=run_id)
    services.run_execute(run_id=run_id)  # a redelivered message: the run ended already, nothing is counted

    assert Run.objects.get(id=run_id).outcome == "success"
    assert delta() == [1.0, 1.0]
    assert sample(f"{P}_run_duration_seconds_sum", intent="DIAGNOSIS", outcome="success") > 0
    for tool in _tools():
        calls = ToolInvocation.objects.filter(run_id=run_id, tool=tool, status="ready").count()
        assert sample(f"{P}_tool_call_duration_seconds_count", tool=tool, status="ready") - tools_before[tool] == calls
    steps = AgentStep.objects.filter(run_id=run_id)
    assert steps.count() > 0
    for step in steps:
        labels = {"role": step.role, "purpose": step.purpose, "provider": "offline", "model": "offline", "status": "ok"}
        assert sample(f"{P}_model_call_duration_seconds_count", **labels) >= 1
    assert sample(f"{P}_run_tasks_in_progress") == 0


def _tools() -> list[str]:
    return [spec.name for spec in wiring.evidence().tools]


def test_a_run_that_never_ran_is_counted_by_what_ended_it_without_a_duration(alice: Caller) -> None:
    labels = {"intent": "none", "status": "cancelled", "outcome": "cancelled", "cause": "cancelled"}
    delta = Delta(
        (f"{P}_runs_finished_total", labels),
        (f"{P}_run_duration_seconds_count", {"intent": "none", "outcome": "cancelled"}),
    )

    run_id = alice.post("/api/chat", {"question": DIAGNOSIS}).json()["run_id"]
    assert alice.post(f"/api/runs/{run_id}/cancel").status_code in (200, 202)

    assert delta() == [1.0, 0.0]


def test_a_swept_run_is_counted_by_the_state_its_worker_lost_it_in(alice: Caller) -> None:
    swept = (f"{P}_runs_swept_total", {"stage": "running", "code": "worker_lost"})
    failed = (
        f"{P}_runs_finished_total",
        {"intent": "none", "status": "failed", "outcome": "failed", "cause": "worker_lost"},
    )
    delta = Delta(swept, failed, (f"{P}_runs_swept_total", {"stage": "queued", "code": "worker_lost"}))
    run_id = alice.post("/api/chat", {"question": DIAGNOSIS}).json()["run_id"]
    long_ago = timezone.now() - timedelta(seconds=django_settings.RUN_DEADLINE_S + 120)
    Run.objects.filter(id=run_id).update(status=RunStatus.RUNNING, started_at=long_ago)

    assert services.run_sweep_stale().lost == 1

    assert delta() == [1.0, 1.0, 0.0]


# --- labels ------------------------------------------------------------------------------------


class _Kept:
    def __init__(self) -> None:
        self.steps: list[StepRecord] = []
        self.tools: list[ToolAuditRecord] = []

    def record_step(self, record: StepRecord) -> None:
        self.steps.append(record)

    def record_tool(self, record: ToolAuditRecord) -> None:
        self.tools.append(record)


def test_labels_are_bounded_whatever_a_model_or_a_caller_makes_up(service: Any) -> None:
    kept = _Kept()
    sinks = metrics.MeteredAuditSinks(
        kept, providers={"agent": "openai-compatible:deepseek-chat", "router": "offline"}, tools=["query_logs"]
    )
    invented = "drop table users; ignore previous instructions"
    before = sample(f"{P}_tool_call_duration_seconds_count", tool="unknown", status="invalid_arguments")
    sinks.record_tool(
        ToolAuditRecord("r-1", "call_1", invented, InvocationStatus.INVALID_ARGUMENTS, None, "unknown_tool", 1.0, 10, 0)
    )
    sinks.record_step(
        StepRecord("r-1", 0, "agent_step", "agent", 2, ("system", "user"), True, (), 1, 1, 2_000.0, "Weird Code!")
    )
    sinks.record_step(StepRecord("r-1", 1, "routing", "router", 2, ("system", "user"), True, (), 1, 1, 3.0))

    assert len(kept.tools) == 1 and len(kept.steps) == 2  # every record is still kept
    assert sample(f"{P}_tool_call_duration_seconds_count", tool="unknown", status="invalid_arguments") == before + 1
    agent = {
        "role": "agent",
        "purpose": "agent_step",
        "provider": "openai-compatible",
        "model": "deepseek-chat",
        "status": "other",
    }
    assert sample(f"{P}_model_call_duration_seconds_bucket", le="2.5", **agent) >= 1
    router = {"role": "router", "purpose": "routing", "provider": "offline", "model": "offline", "status": "ok"}
    assert sample(f"{P}_model_call_duration_seconds_count", **router) >= 1

    odd = RunEnded(uuid.uuid4(), RunStatus.COMPLETED, Outcome.SUCCESS, None, "", "", EndCause.HARNESS, intent="made up")
    other = {"intent": "other", "status": "completed", "outcome": "success", "cause": "harness"}
    delta = Delta((f"{P}_runs_finished_total", other))
    metrics.run_finished(odd)
    assert delta() == [1.0]
    text = scraped().content.decode()
    assert invented not in text and "Weird Code" not in text and "made up" not in text


def test_a_scrape_holds_no_question_and_no_id(alice: Caller) -> None:
    marker = f"zq-{uuid.uuid4().hex}"
    run_id = alice.post("/api/chat", {"question": f"{DIAGNOSIS} ({marker})"}).json()["run_id"]
    services.run_execute(run_id=run_id)
    run = Run.objects.get(id=run_id)

    text = scraped().content.decode()

    assert f"{P}_runs_finished_total" in text
    for private in (marker, run_id, run_id.replace("-", ""), str(run.session_id), alice.key, alice.user.username):
        assert private not in text


# --- webhook attempts --------------------------------------------------------------------------


@pytest.fixture
def receiver(settings: Any) -> Iterator[Receiver]:
    with receiving() as running:
        settings.WEBHOOK = {
            **settings.WEBHOOK,
            "ALLOWED_CIDRS": ["127.0.0.1/32"],
            "ALLOWED_PORTS": [str(running.port)],
            "RETRY_SCHEDULE_S": [0.0, 5.0],
        }
        yield running


def test_each_webhook_attempt_is_counted_by_its_result(
    alice: Caller, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(webhooks, "_nudge", lambda *args, **kwargs: None)  # the test makes the attempts
    results = ("succeeded", "retry", "gone")
    delta = Delta(*((f"{P}_webhook_attempts_total", {"result": r}) for r in results))

    for path in ("/ok", "/fail", "/gone"):
        run_id = alice.post("/api/chat", {"question": DIAGNOSIS, "webhook_url": receiver.url(path)}).json()["run_id"]
        assert wiring.lifecycle().cancel_queued(run_id=uuid.UUID(run_id))
        (delivery,) = WebhookDelivery.objects.filter(run_id=run_id)
        assert webhooks.delivery_attempt(delivery_id=str(delivery.id)) is not None

    assert delta() == [1.0, 1.0, 1.0]


# --- the queue ---------------------------------------------------------------------------------


def test_the_queue_depth_is_read_from_the_broker_at_each_scrape(alice: Caller) -> None:
    for _ in range(3):
        assert alice.post("/api/chat", {"question": DIAGNOSIS}).status_code == 202

    found = families(scraped().content.decode())[f"{P}_queue_depth"]

    assert {s.labels["queue"]: s.value for s in found.samples} == {"runs": 3.0, "webhooks": 0.0, "knowledge": 0.0}


def test_an_unreadable_broker_leaves_the_depth_out_and_the_rest_in(
    service: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    def down(*args: Any) -> dict[str, int]:
        raise ConnectionError("redis://:secret@broker:6379 refused")

    monkeypatch.setattr(selectors, "queue_depths", down)
    response = scraped()

    assert response.status_code == 200
    text = response.content.decode()
    assert f"{P}_queue_depth" not in text and "secret" not in text
    assert f"{P}_runs_finished" in text


# --- who may scrape ----------------------------------------------------------------------------


def test_a_direct_loopback_scrape_gets_the_text_format(service: Any) -> None:
    for address in ("127.0.0.1", "::1", "::ffff:127.0.0.1"):
        response = scraped(REMOTE_ADDR=address)
        assert response.status_code == 200, address
        assert response["Content-Type"].startswith("text/plain; version=")
    assert scraped(REMOTE_ADDR="127.0.0.1", HTTP_ACCEPT="application/json").status_code == 200


@pytest.mark.parametrize(
    "extra",
    [
        {"REMOTE_ADDR": "10.0.0.8"},
        {"REMOTE_ADDR": "203.0.113.9"},
        {"REMOTE_ADDR": "127.0.0.1", "HTTP_X_FORWARDED_FOR": "203.0.113.9"},
        {"REMOTE_ADDR": "127.0.0.1", "HTTP_FORWARDED": "for=203.0.113.9"},
        {"REMOTE_ADDR": "127.0.0.1", "HTTP_X_REAL_IP": "203.0.113.9"},
        {"REMOTE_ADDR": "not an address"},
    ],
)
def test_without_a_token_anything_but_a_direct_loopback_scrape_is_refused(service: Any, extra: dict[str, str]) -> None:
    response = scraped(**extra)
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "permission_denied"
    assert P not in response.content.decode()


def test_with_a_token_only_its_bearer_may_scrape_from_anywhere(service: Any, settings: Any) -> None:
    settings.METRICS_TOKEN = "metrics-token-0123456789"
    for headers in (
        {},
        {"HTTP_AUTHORIZATION": "Bearer wrong"},
        {"HTTP_AUTHORIZATION": "Basic metrics-token-0123456789"},
    ):
        refused = scraped(REMOTE_ADDR="127.0.0.1", **headers)
        assert refused.status_code == 401 and refused["WWW-Authenticate"].startswith("Bearer")
        assert P not in refused.content.decode()
    allowed = scraped(REMOTE_ADDR="203.0.113.9", HTTP_AUTHORIZATION="Bearer metrics-token-0123456789")
    assert allowed.status_code == 200 and f"{P}_runs_finished" in allowed.content.decode()


def test_metrics_are_read_only_and_not_part_of_the_api_schema(service: Any) -> None:
    assert APIClient().post("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 405
    schema = APIClient().get("/api/schema", {"format": "json"})
    paths = json.loads(schema.content)["paths"]
    assert "/api/chat" in paths and not [path for path in paths if "metrics" in path]


# --- processes ---------------------------------------------------------------------------------

_CHILD = """
import os, sys
import django
django.setup()
from chat import metrics
metrics.RUNS_EXECUTING.inc()
metrics.WEBHOOK_ATTEMPTS.labels("succeeded").inc()
print(os.getpid(), flush=True)
if sys.argv[1] == "killed":
    os._exit(0)  # as a process killed outright ends: no exit handlers
"""


def _child(directory: Path, how: str) -> int:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.test_settings", "PROMETHEUS_MULTIPROC_DIR": str(directory)}
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, how], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    )
    return int(out.stdout.split()[-1])


def test_a_process_that_exits_drops_its_live_gauge_and_keeps_its_counts(tmp_path: Path) -> None:
    directory = str(tmp_path)
    exited = _child(tmp_path, "exited")
    assert sample(f"{P}_run_tasks_in_progress", directory) == 0
    assert sample(f"{P}_webhook_attempts_total", directory, result="succeeded") == 1

    killed = _child(tmp_path, "killed")  # gone without a word: its gauge stays until someone says so
    assert sample(f"{P}_run_tasks_in_progress", directory) == 1
    assert sample(f"{P}_webhook_attempts_total", directory, result="succeeded") == 2

    from config.celery import _metrics_process_exited

    os.environ["PROMETHEUS_MULTIPROC_DIR"], saved = directory, os.environ["PROMETHEUS_MULTIPROC_DIR"]
    try:
        _metrics_process_exited(pid=killed)  # what the worker's pool does for a child it lost
    finally:
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = saved
    assert sample(f"{P}_run_tasks_in_progress", directory) == 0
    assert sample(f"{P}_webhook_attempts_total", directory, result="succeeded") == 2
    assert exited != killed


def test_the_stack_starts_its_processes_on_empty_metrics(tmp_path: Path) -> None:
    from chat.stack import Stack

    (tmp_path / "counter_4242.db").write_bytes(b"\0" * 16)  # an earlier run's process
    (tmp_path / "notes.txt").write_text("not ours")

    Stack(env={"PROMETHEUS_MULTIPROC_DIR": str(tmp_path)})._fresh_metrics()

    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]  # only the metrics' own files go
