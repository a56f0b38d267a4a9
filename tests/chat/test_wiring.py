"""The composition root: which model answers each role, and a whole run against a local
OpenAI-protocol server through the real ``openai`` client."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from chat import services, wiring
from harness.llm.offline import OfflineAnalyst
from harness.llm.openai_compat import OpenAICompatibleModel
from tests.django_fixtures import Caller
from tests.openai_stub import OpenAIStub, completion
from traces.models import ReasoningAudit, Run

KEY = "sk-test-SECRET-0123456789abcdef"
GUARD_KEY = "sk-guard-SECRET-fedcba9876543210"


def llm_settings(
    *,
    base_url: str = "",
    api_key: str = "",
    model: str = "gpt-4o-mini",
    roles: dict[str, dict[str, str]] | None = None,
) -> dict[str, Any]:
    """settings.LLM as config/settings.py builds it, with these values."""
    own = roles or {}
    return {
        "BASE_URL": base_url,
        "API_KEY": api_key,
        "MODEL": model,
        "TIMEOUT_S": 10.0,
        "MAX_RETRIES": 0,
        "ROLES": {
            role: {"BASE_URL": "", "API_KEY": "", "MODEL": "", **own.get(role, {})}
            for role in ("router", "agent", "guard")
        },
    }


def openai_model(model: Any) -> OpenAICompatibleModel:
    assert isinstance(model, OpenAICompatibleModel), model
    return model


# --- models() and providers() ------------------------------------------------------------------


def test_every_role_is_offline_by_default() -> None:
    models = wiring.models()
    for model in (models.router, models.agent, models.guard):
        assert isinstance(model, OfflineAnalyst)
    assert wiring.providers() == {"router": "offline", "agent": "offline", "guard": "offline"}


@pytest.mark.parametrize(
    "llm",
    [
        llm_settings(),
        llm_settings(base_url="http://127.0.0.1:9/v1"),  # no key: not configured
        llm_settings(api_key=KEY),  # no endpoint: not configured
        llm_settings(roles={"guard": {"MODEL": "guard-model"}}),  # a model name alone configures nothing
    ],
)
def test_a_partial_configuration_stays_offline(settings: Any, llm: dict[str, Any]) -> None:
    settings.LLM = llm
    models = wiring.models()
    assert all(isinstance(m, OfflineAnalyst) for m in (models.router, models.agent, models.guard))
    assert set(wiring.providers().values()) == {"offline"}


def test_a_configured_endpoint_serves_every_role_with_the_guard_overridden(settings: Any) -> None:
    settings.LLM = llm_settings(
        base_url="http://127.0.0.1:9/v1",
        api_key=KEY,
        model="main-model",
        roles={"guard": {"BASE_URL": "http://127.0.0.1:10/v1", "API_KEY": GUARD_KEY, "MODEL": "guard-model"}},
    )
    models = wiring.models()
    router, agent, guard = (openai_model(m) for m in (models.router, models.agent, models.guard))
    assert (router.config.model, agent.config.model, guard.config.model) == ("main-model", "main-model", "guard-model")
    assert router.config.base_url == agent.config.base_url == "http://127.0.0.1:9/v1"
    assert router.config.api_key == agent.config.api_key == KEY
    assert (guard.config.base_url, guard.config.api_key) == ("http://127.0.0.1:10/v1", GUARD_KEY)
    assert (router.config.timeout_s, router.config.max_retries) == (10.0, 0)

    providers = wiring.providers()
    assert providers == {
        "router": "openai-compatible:main-model",
        "agent": "openai-compatible:main-model",
        "guard": "openai-compatible:guard-model",
    }
    shown = json.dumps(providers) + repr(router.config) + repr(guard.config)
    for secret in (KEY, GUARD_KEY, "SECRET"):
        assert secret not in shown


def test_a_role_may_override_only_its_model_on_the_shared_endpoint(settings: Any) -> None:
    settings.LLM = llm_settings(
        base_url="http://127.0.0.1:9/v1", api_key=KEY, model="main-model", roles={"guard": {"MODEL": "guard-model"}}
    )
    guard = openai_model(wiring.models().guard)
    assert (guard.config.base_url, guard.config.api_key, guard.config.model) == (
        "http://127.0.0.1:9/v1",
        KEY,
        "guard-model",
    )
    assert wiring.providers()["guard"] == "openai-compatible:guard-model"
    assert wiring.providers()["router"] == "openai-compatible:main-model"


def test_one_role_may_have_its_own_endpoint_while_the_others_stay_offline(settings: Any) -> None:
    settings.LLM = llm_settings(roles={"guard": {"BASE_URL": "http://127.0.0.1:10/v1", "API_KEY": GUARD_KEY}})
    models = wiring.models()
    assert isinstance(models.router, OfflineAnalyst) and isinstance(models.agent, OfflineAnalyst)
    assert openai_model(models.guard).config.model == "gpt-4o-mini"  # the shared model name
    assert wiring.providers() == {"router": "offline", "agent": "offline", "guard": "openai-compatible:gpt-4o-mini"}


# --- a run against a local OpenAI-protocol server ------------------------------------------------


@pytest.fixture
def stub(settings: Any) -> Iterator[OpenAIStub]:
    """settings.LLM pointed at a local stub, with the application rebuilt around it."""
    with OpenAIStub() as server:
        settings.LLM = llm_settings(
            base_url=server.base_url, api_key=KEY, model="stub-main", roles={"router": {"MODEL": "stub-router"}}
        )
        wiring.application.cache_clear()
        try:
            yield server
        finally:
            wiring.application.cache_clear()


def test_a_run_is_answered_by_the_configured_provider(alice: Caller, staff: Caller, stub: OpenAIStub) -> None:
    stub.queue(
        completion('{"intent":"SYSTEM_CHAT"}', reasoning="router-reasoning-zq1", prompt_tokens=13, completion_tokens=5),
        completion(
            "Hello, I help on-call engineers diagnose incidents.",
            reasoning="chat-reasoning-zq2",
            prompt_tokens=21,
            completion_tokens=8,
        ),
    )
    response = alice.post("/api/chat", {"question": "hello, what can you do?"})
    assert response.status_code == 202, response.content
    run_id = response.json()["run_id"]
    services.run_execute(run_id=run_id)

    run = alice.get(f"/api/runs/{run_id}").json()
    assert run["status"] == "completed" and run["outcome"] == "success", run
    assert run["intent"] == "SYSTEM_CHAT"
    assert run["content"] == {
        "content_type": "system_chat",
        "payload": {"text": "Hello, I help on-call engineers diagnose incidents."},
    }
    assert run["usage"] == {
        "input_tokens": 34,
        "output_tokens": 13,
        "model_calls": 2,
        "model_retries": 0,
        "tool_calls": 0,
    }

    # Both calls reached the stub, each with its role's model and the configured key.
    assert [r["path"] for r in stub.requests] == ["/v1/chat/completions"] * 2
    assert [r["json"]["model"] for r in stub.requests] == ["stub-router", "stub-main"]
    assert all(h["authorization"] == f"Bearer {KEY}" for h in stub.headers)
    assert stub.requests[0]["json"]["response_format"] == {"type": "json_object"}
    assert not stub.replies

    # The provider's reasoning is kept in the restricted audit only.
    rows = list(ReasoningAudit.objects.filter(run_id=run_id).order_by("step_index"))
    assert [(r.step_index, r.purpose, r.reasoning) for r in rows] == [
        (0, "routing", "router-reasoning-zq1"),
        (1, "system_chat", "chat-reasoning-zq2"),
    ]
    reasoning = staff.get(f"/api/runs/{run_id}/trace/reasoning")
    assert reasoning.status_code == 200
    assert [s["reasoning"] for s in reasoning.json()["steps"]] == ["router-reasoning-zq1", "chat-reasoning-zq2"]

    ordinary = [
        alice.get(f"/api/runs/{run_id}/trace"),
        staff.get(f"/api/runs/{run_id}/trace"),
        alice.get(f"/api/runs/{run_id}"),
        alice.get(f"/api/sessions/{run['session_id']}/runs"),
    ]
    assert [r.status_code for r in ordinary] == [200] * 4
    assert len(ordinary[0].json()["steps"]) == 2
    for body in (r.content.decode() for r in ordinary):
        assert "reasoning-zq" not in body and KEY not in body
    assert Run.objects.get(id=run_id).input_tokens == 34


def test_readiness_names_the_configured_provider_without_its_key(service: Any, stub: OpenAIStub) -> None:
    from rest_framework.test import APIClient

    response = APIClient().get("/api/readyz")
    detail = response.json()["checks"]["model_provider"]["detail"]
    assert detail == {
        "router": "openai-compatible:stub-router",
        "agent": "openai-compatible:stub-main",
        "guard": "openai-compatible:stub-main",
    }
    assert KEY not in response.content.decode() and stub.base_url not in response.content.decode()
    assert stub.requests == []  # readiness does not call the model


def test_a_role_endpoint_without_its_own_key_is_refused(settings: Any) -> None:
    """The shared key must never be sent to another provider's endpoint."""
    from django.core.exceptions import ImproperlyConfigured

    settings.LLM = llm_settings(roles={"guard": {"BASE_URL": "http://127.0.0.1:10/v1"}})
    with pytest.raises(ImproperlyConfigured, match="LLM_GUARD_API_KEY"):
        wiring.models()
