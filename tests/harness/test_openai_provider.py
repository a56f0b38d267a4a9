"""OpenAICompatibleModel with the real ``openai`` client, against a local chat-completions stub.

Backoff sleeps go to a recorder so the retry tests are instant; only the deadline tests measure
real time.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from email.utils import formatdate
from typing import Any

import openai
import pytest

from harness.application import ChatApplication, ChatRequest
from harness.errors import (
    ModelAuthenticationFailed,
    ModelError,
    ModelRateLimited,
    ModelRefused,
    ModelResponseInvalid,
    ModelTimeout,
    ModelUnavailable,
    RunCancelled,
)
from harness.inmemory import InMemoryAudit, InMemoryInvocationStore, InMemoryRunStore, RecordingObserver
from harness.llm.base import (
    Message,
    ModelRequest,
    ModelRole,
    Models,
    Purpose,
    TokenUsage,
    ToolCall,
    ToolDefinition,
)
from harness.llm.openai_compat import RETRY_AFTER_MAX_S, OpenAICompatibleModel, OpenAIConfig
from tests.openai_stub import OpenAIStub, StubReply, chat_body, completion

API_KEY = "sk-test-7f3a9c1e5b2d4680"
PROVIDER_SECRET = "internal shard db-7 overloaded, trace 0xdeadbeef"

LOGS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "description": "Words the message must contain."},
        "level": {"type": "string", "enum": ["WARN", "ERROR"]},
    },
    "required": ["query"],
    "additionalProperties": False,
}


class SleepRecorder:
    def __init__(self) -> None:
        self.calls: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


@pytest.fixture
def sleep() -> SleepRecorder:
    return SleepRecorder()


def make_model(stub: OpenAIStub, sleep: SleepRecorder, **overrides: Any) -> OpenAICompatibleModel:
    settings: dict[str, Any] = {"base_url": stub.base_url, "api_key": API_KEY, "model": "gpt-test", **overrides}
    return OpenAICompatibleModel(OpenAIConfig(**settings), sleep=sleep)


def ask(
    content: str = "Payments time out, why?",
    *,
    messages: tuple[Message, ...] | None = None,
    tools: tuple[ToolDefinition, ...] = (),
    json_output: bool = False,
    timeout_s: float | None = 10.0,
    role: ModelRole = ModelRole.AGENT,
    max_output_tokens: int | None = None,
) -> ModelRequest:
    return ModelRequest(
        role=role,
        purpose=Purpose.AGENT_STEP,
        messages=messages or (Message.system("You are a careful on-call engineer."), Message.user(content)),
        tools=tools,
        json_output=json_output,
        timeout_s=timeout_s,
        max_output_tokens=max_output_tokens,
    )


def provider_error(status: int, headers: dict[str, str] | None = None) -> StubReply:
    """An error body the way providers send it, with details that must never reach our errors."""
    return StubReply(
        status,
        {"error": {"message": f"{PROVIDER_SECRET} (key {API_KEY})", "type": "server_error", "code": str(status)}},
        headers=headers or {},
    )


# --- successful replies --------------------------------------------------------------------


def test_a_plain_text_reply_comes_back_with_its_token_usage(stub: OpenAIStub, sleep: SleepRecorder) -> None:
    stub.queue(completion("The pool is exhausted.", prompt_tokens=123, completion_tokens=45))

    response = make_model(stub, sleep).complete(ask())

    assert response.content == "The pool is exhausted."
    assert response.tool_calls == ()
    assert response.usage == TokenUsage(input_tokens=123, output_tokens=45)
    assert response.usage.total == 168
    assert response.finish_reason == "stop"
    sent = stub.requests[0]
    assert sent["path"] == "/v1/chat/completions"
    assert sent["json"]["model"] == "gpt-test"
    assert sent["json"]["messages"] == [
        {"role": "system", "content": "You are a careful on-call engineer."},
        {"role": "user", "content": "Payments time out, why?"},
    ]
    assert sleep.calls == []


def test_tool_calls_round_trip_with_ids_names_and_arguments(stub: OpenAIStub, sleep: SleepRecorder) -> None:
    tools = (
        ToolDefinition("query_logs", "Search application logs.", LOGS_SCHEMA),
        ToolDefinition("lookup_knowledge", "Search the knowledge base.", {"type": "object", "properties": {}}),
    )
    stub.queue(
        completion(
            tool_calls=[
                ("call_a1", "query_logs", '{"query": "timed out", "level": "ERROR"}'),
                ("call_b2", "lookup_knowledge", '{"query": "连接池 耗尽"}'),
            ]
        )
    )

    response = make_model(stub, sleep).complete(ask(tools=tools, json_output=True))

    assert response.tool_calls == (
        ToolCall("call_a1", "query_logs", '{"query": "timed out", "level": "ERROR"}'),
        ToolCall("call_b2", "lookup_knowledge", '{"query": "连接池 耗尽"}'),
    )
    assert response.finish_reason == "tool_calls"
    sent = stub.requests[0]["json"]
    assert sent["tools"] == [
        {
            "type": "function",
            "function": {"name": "query_logs", "description": "Search application logs.", "parameters": LOGS_SCHEMA},
        },
        {
            "type": "function",
            "function": {
                "name": "lookup_knowledge",
                "description": "Search the knowledge base.",
                "parameters": {"type": "object", "properties": {}},
            },
        },
    ]
    # With tools on offer the model must be free to call them: no JSON mode.
    assert "response_format" not in sent


def test_json_output_without_tools_asks_for_a_json_object(stub: OpenAIStub, sleep: SleepRecorder) -> None:
    stub.queue(completion('{"intent": "DIAGNOSIS"}'))

    response = make_model(stub, sleep).complete(ask(json_output=True))

    assert json.loads(response.content or "") == {"intent": "DIAGNOSIS"}
    sent = stub.requests[0]["json"]
    assert sent["response_format"] == {"type": "json_object"}
    assert "tools" not in sent


def test_a_plain_request_sends_neither_tools_nor_json_mode(stub: OpenAIStub, sleep: SleepRecorder) -> None:
    stub.queue(completion("ok"))

    make_model(stub, sleep, temperature=0.0, max_output_tokens=512).complete(ask(max_output_tokens=64))

    sent = stub.requests[0]["json"]
    assert "tools" not in sent
    assert "response_format" not in sent
    assert sent["temperature"] == 0.0
    assert sent["max_tokens"] == 64  # the request's own limit wins over the configured default


def test_a_tool_conversation_is_sent_in_the_protocol_shape(stub: OpenAIStub, sleep: SleepRecorder) -> None:
    conversation = (
        Message.system("Diagnose."),
        Message.user("Payments time out."),
        Message.assistant(None, [ToolCall("call_1", "query_logs", '{"query": "timeout"}')]),
        Message.tool("call_1", '{"total": 3, "lines": []}'),
        Message.assistant("Looking further.", [ToolCall("call_2", "lookup_knowledge", '{"query": "pool"}')]),
        Message.tool("call_2", ""),
    )
    stub.queue(completion("done"))

    make_model(stub, sleep).complete(ask(messages=conversation))

    assert stub.requests[0]["json"]["messages"] == [
        {"role": "system", "content": "Diagnose."},
        {"role": "user", "content": "Payments time out."},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "query_logs", "arguments": '{"query": "timeout"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": '{"total": 3, "lines": []}'},
        {
            "role": "assistant",
            "content": "Looking further.",
            "tool_calls": [
                {
                    "id": "call_2",
                    "type": "function",
                    "function": {"name": "lookup_knowledge", "arguments": '{"query": "pool"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_2", "content": ""},
    ]


def test_reasoning_content_from_the_provider_is_kept(stub: OpenAIStub, sleep: SleepRecorder) -> None:
    stub.queue(
        completion("The pool is too small.", reasoning="The pool errors start a minute before the timeouts."),
        completion("No reasoning here."),
    )
    model = make_model(stub, sleep)

    with_reasoning = model.complete(ask())
    without = model.complete(ask())

    assert with_reasoning.reasoning == "The pool errors start a minute before the timeouts."
    assert with_reasoning.content == "The pool is too small."
    assert without.reasoning is None
    assert without.content == "No reasoning here."


# --- retries and the deadline --------------------------------------------------------------


def test_a_rate_limit_is_retried_once_after_the_servers_retry_after(stub: OpenAIStub, sleep: SleepRecorder) -> None:
    stub.queue(provider_error(429, {"Retry-After": "3"}), completion("second time lucky"))

    response = make_model(stub, sleep).complete(ask(timeout_s=30.0))

    assert response.content == "second time lucky"
    assert len(stub.requests) == 2
    assert sleep.calls == [3.0]


def test_a_retry_after_beyond_the_deadline_is_not_waited_for(stub: OpenAIStub, sleep: SleepRecorder) -> None:
    stub.queue(provider_error(429, {"Retry-After": "20"}), completion("too late"))

    with pytest.raises(ModelRateLimited) as caught:
        make_model(stub, sleep).complete(ask(timeout_s=2.0))

    assert caught.value.code == "model_rate_limited"
    assert len(stub.requests) == 1
    assert sleep.calls == []


def test_server_errors_are_retried_max_retries_times_then_unavailable(stub: OpenAIStub, sleep: SleepRecorder) -> None:
    stub.queue(provider_error(500), provider_error(502), provider_error(503), completion("never reached"))

    with pytest.raises(ModelUnavailable) as caught:
        make_model(stub, sleep, max_retries=2, backoff_base_s=0.5, backoff_max_s=8.0).complete(ask())

    assert type(caught.value) is ModelUnavailable
    assert len(stub.requests) == 3  # the first attempt and two retries
    assert len(sleep.calls) == 2
    # Exponential backoff with jitter: attempt n waits between half and all of base * 2**(n-1).
    assert 0.25 <= sleep.calls[0] <= 0.5
    assert 0.5 <= sleep.calls[1] <= 1.0


def test_a_server_error_then_success_recovers(stub: OpenAIStub, sleep: SleepRecorder) -> None:
    stub.queue(provider_error(503), completion("recovered"))

    response = make_model(stub, sleep, max_retries=2).complete(ask())

    assert response.content == "recovered"
    assert len(stub.requests) == 2
    assert len(sleep.calls) == 1


def test_a_slow_provider_times_out_within_the_requests_time(stub: OpenAIStub, sleep: SleepRecorder) -> None:
    stub.queue(StubReply(body=completion("late").body, delay_s=3.0), completion("also late"))
    model = make_model(stub, sleep, timeout_s=30.0, max_retries=3)

    started = time.monotonic()
    with pytest.raises(ModelTimeout) as caught:
        model.complete(ask(timeout_s=0.5))
    elapsed = time.monotonic() - started

    assert caught.value.code == "model_timeout"
    assert 0.4 <= elapsed < 1.5  # bounded by the request's 0.5 s, not the configured 30 s nor the 3 s delay
    assert len(stub.requests) == 1  # no retry past the deadline
    assert sleep.calls == []


def test_the_configured_timeout_bounds_a_call_with_more_time_left(stub: OpenAIStub, sleep: SleepRecorder) -> None:
    stub.queue(StubReply(body=completion("late").body, delay_s=3.0))
    model = make_model(stub, sleep, timeout_s=0.5, max_retries=0)

    started = time.monotonic()
    with pytest.raises(ModelTimeout):
        model.complete(ask(timeout_s=60.0))

    assert time.monotonic() - started < 1.5


# --- unusable replies ----------------------------------------------------------------------


def test_a_malformed_body_is_an_invalid_response(stub: OpenAIStub, sleep: SleepRecorder) -> None:
    stub.queue(StubReply(raw=b"{not json"))

    with pytest.raises(ModelResponseInvalid):
        make_model(stub, sleep).complete(ask())

    assert len(stub.requests) == 1
    assert sleep.calls == []


@pytest.mark.parametrize(
    "body",
    [
        {"id": "chatcmpl-x", "object": "chat.completion", "created": 0, "model": "gpt-test"},
        {"id": "chatcmpl-x", "object": "chat.completion", "created": 0, "model": "gpt-test", "choices": []},
    ],
    ids=["no-choices", "empty-choices"],
)
def test_a_body_without_choices_is_an_invalid_response(
    stub: OpenAIStub, sleep: SleepRecorder, body: dict[str, Any]
) -> None:
    stub.queue(StubReply(body=body))

    with pytest.raises(ModelResponseInvalid):
        make_model(stub, sleep).complete(ask())


def test_rejected_credentials_fail_at_once_without_retry(stub: OpenAIStub, sleep: SleepRecorder) -> None:
    stub.queue(provider_error(401), completion("should not be asked for"))

    with pytest.raises(ModelAuthenticationFailed) as caught:
        make_model(stub, sleep, max_retries=5).complete(ask())

    assert caught.value.code == "model_auth_failed"
    assert len(stub.requests) == 1
    assert sleep.calls == []


def test_a_bad_request_is_a_refusal_without_retry(stub: OpenAIStub, sleep: SleepRecorder) -> None:
    stub.queue(provider_error(400), completion("should not be asked for"))

    with pytest.raises(ModelRefused) as caught:
        make_model(stub, sleep, max_retries=5).complete(ask())

    assert caught.value.code == "model_refused"
    assert len(stub.requests) == 1


def test_a_content_filter_stop_is_a_refusal(stub: OpenAIStub, sleep: SleepRecorder) -> None:
    stub.queue(completion("partial answer", finish_reason="content_filter"))

    with pytest.raises(ModelRefused):
        make_model(stub, sleep).complete(ask())


# --- secrets -------------------------------------------------------------------------------


def test_the_key_goes_only_into_the_authorization_header(stub: OpenAIStub, sleep: SleepRecorder) -> None:
    stub.queue(completion("ok"))
    model = make_model(stub, sleep)

    model.complete(ask())

    assert stub.headers[0]["authorization"] == f"Bearer {API_KEY}"
    assert API_KEY not in json.dumps(stub.requests[0]["json"])
    assert API_KEY not in repr(model.config)
    assert API_KEY not in str(model.config)
    assert "gpt-test" in repr(model.config)


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (provider_error(401), ModelAuthenticationFailed),
        (provider_error(400), ModelRefused),
        (provider_error(422), ModelRefused),
        (provider_error(403), ModelAuthenticationFailed),
        (provider_error(404), ModelUnavailable),
        (provider_error(500), ModelUnavailable),
        (provider_error(429), ModelRateLimited),
        (StubReply(raw=f"<html>{PROVIDER_SECRET} {API_KEY}</html>".encode()), ModelResponseInvalid),
    ],
    ids=["401", "400", "422", "403", "404", "500", "429", "garbage"],
)
def test_typed_errors_never_carry_the_key_or_the_providers_text(
    stub: OpenAIStub, sleep: SleepRecorder, reply: StubReply, expected: type[ModelError]
) -> None:
    stub.queue(reply, reply, reply)

    with pytest.raises(expected) as caught:
        make_model(stub, sleep, max_retries=2).complete(ask())

    error = caught.value
    for text in (str(error), repr(error), error.safe_message, error.code, *map(str, error.args)):
        assert API_KEY not in text
        assert PROVIDER_SECRET not in text
        assert "deadbeef" not in text
    # Nothing from the client's own exception rides along.
    assert error.__cause__ is None
    assert error.__context__ is None


# --- one model per role --------------------------------------------------------------------


def role_models(stub: OpenAIStub, sleep: SleepRecorder) -> Models:
    return Models(
        router=make_model(stub, sleep, model="router-mini"),
        agent=make_model(stub, sleep, model="agent-large"),
        guard=make_model(stub, sleep, model="guard-medium"),
    )


def test_each_role_calls_its_own_model(stub: OpenAIStub, sleep: SleepRecorder) -> None:
    models = role_models(stub, sleep)
    stub.queue(completion("a"), completion("b"), completion("c"))

    for role in (ModelRole.GUARD, ModelRole.ROUTER, ModelRole.AGENT):
        models.for_role(role).complete(ask(role=role))

    assert [r["json"]["model"] for r in stub.requests] == ["guard-medium", "router-mini", "agent-large"]


def test_a_chat_question_runs_end_to_end_on_the_provider(stub: OpenAIStub, sleep: SleepRecorder) -> None:
    stub.queue(
        completion('{"intent": "SYSTEM_CHAT"}', prompt_tokens=40, completion_tokens=6),
        completion("Hello! I diagnose incidents from your logs and runbooks.", prompt_tokens=90, completion_tokens=14),
    )
    audit = InMemoryAudit()
    app = ChatApplication(
        models=role_models(stub, sleep),
        run_store=InMemoryRunStore(),
        invocations=InMemoryInvocationStore(),
        audit=audit.sinks(),
    )
    observer = RecordingObserver()

    result = app.execute(ChatRequest("hello, who are you?", owner="alice"), observer)

    assert result.outcome.value == "success"
    assert result.intent == "SYSTEM_CHAT"
    assert result.content is not None
    assert result.content.content_type.value == "system_chat"
    assert result.content.payload["text"] == "Hello! I diagnose incidents from your logs and runbooks."
    assert result.usage.model_calls == 2
    assert result.usage.input_tokens == 130
    assert result.usage.output_tokens == 20
    router_request, chat_request = (r["json"] for r in stub.requests)
    assert router_request["model"] == "router-mini"
    assert router_request["response_format"] == {"type": "json_object"}
    assert json.loads(router_request["messages"][-1]["content"])["query"] == "hello, who are you?"
    assert chat_request["model"] == "agent-large"
    assert chat_request["messages"][-1] == {"role": "user", "content": "hello, who are you?"}
    assert [(s.purpose, s.input_tokens, s.output_tokens) for s in audit.steps] == [
        ("routing", 40, 6),
        ("system_chat", 90, 14),
    ]
    assert ("result", result) in observer.events


# --- the client's own retries, the run's retry gate, odd Retry-After values ------------------


def test_a_client_passed_in_does_not_retry_on_top_of_the_provider(stub: OpenAIStub, sleep: SleepRecorder) -> None:
    stub.queue(*[provider_error(500)] * 12)
    client = openai.OpenAI(base_url=stub.base_url, api_key=API_KEY, max_retries=5)
    model = OpenAICompatibleModel(
        OpenAIConfig(stub.base_url, API_KEY, "gpt-test", max_retries=2, backoff_base_s=0.001),
        client=client,
        sleep=sleep,
    )

    with pytest.raises(ModelUnavailable):
        model.complete(ask())

    # Three attempts of ours, each one request: not 3 x (1 + the client's 5 retries).
    assert len(stub.requests) == 3
    assert len(sleep.calls) == 2


class Gate:
    """A run's retry gate: grants ``allowed`` retries, records every question and wait."""

    def __init__(self, allowed: int, *, cancel_on_wait: bool = False) -> None:
        self.allowed = allowed
        self.asked: list[float] = []
        self.waits: list[float] = []
        self.cancel_on_wait = cancel_on_wait

    def begin_model_retry(self, delay_s: float) -> bool:
        self.asked.append(delay_s)
        return len(self.asked) <= self.allowed

    def wait(self, seconds: float) -> None:
        self.waits.append(seconds)
        if self.cancel_on_wait:
            raise RunCancelled()


def test_the_runs_retry_gate_bounds_the_providers_retries(stub: OpenAIStub, sleep: SleepRecorder) -> None:
    stub.queue(*[provider_error(429, {"Retry-After": "1"})] * 6)
    gate = Gate(allowed=1)

    with pytest.raises(ModelRateLimited):
        make_model(stub, sleep, max_retries=5).complete(replace(ask(timeout_s=30.0), retry_gate=gate))

    assert len(stub.requests) == 2  # the first attempt and the one retry the run allowed
    assert gate.asked == [1.0, 1.0]
    assert gate.waits == [1.0]  # the wait is the run's (cancel-aware), not the provider's sleep
    assert sleep.calls == []


def test_a_run_cancelled_during_a_backoff_sends_no_further_request(stub: OpenAIStub, sleep: SleepRecorder) -> None:
    stub.queue(provider_error(503), completion("must not be asked for"))
    gate = Gate(allowed=5, cancel_on_wait=True)

    with pytest.raises(RunCancelled):
        make_model(stub, sleep, max_retries=3).complete(replace(ask(), retry_gate=gate))

    assert len(stub.requests) == 1
    assert len(gate.waits) == 1


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"Retry-After": "-5"}, 0.0),
        ({"Retry-After": "2.5"}, 2.5),
        ({"Retry-After": "86400"}, RETRY_AFTER_MAX_S),
        ({"retry-after-ms": "1500", "Retry-After": "9"}, 1.5),
    ],
    ids=["negative", "fraction", "huge", "milliseconds"],
)
def test_retry_after_is_clamped_to_a_sane_wait(
    stub: OpenAIStub, sleep: SleepRecorder, headers: dict[str, str], expected: float
) -> None:
    stub.queue(provider_error(429, headers), completion("ok"))

    assert make_model(stub, sleep).complete(ask(timeout_s=60.0)).content == "ok"

    assert sleep.calls == [expected]


def test_retry_after_as_an_http_date_is_the_time_until_then(stub: OpenAIStub, sleep: SleepRecorder) -> None:
    when = formatdate(time.time() + 5, usegmt=True)
    stub.queue(provider_error(429, {"Retry-After": when}), completion("ok"))

    make_model(stub, sleep).complete(ask(timeout_s=60.0))

    assert len(sleep.calls) == 1
    assert 3.0 <= sleep.calls[0] <= 5.0


@pytest.mark.parametrize("value", ["nan", "inf", "soon"])
def test_an_unreadable_retry_after_falls_back_to_the_backoff(
    stub: OpenAIStub, sleep: SleepRecorder, value: str
) -> None:
    stub.queue(provider_error(429, {"Retry-After": value}), completion("ok"))

    make_model(stub, sleep, backoff_base_s=0.5).complete(ask())

    assert len(sleep.calls) == 1
    assert 0.25 <= sleep.calls[0] <= 0.5


def test_a_dropped_connection_is_retried_as_unavailable(stub: OpenAIStub, sleep: SleepRecorder) -> None:
    stub.queue(StubReply(disconnect=True), completion("back"))

    assert make_model(stub, sleep).complete(ask()).content == "back"

    assert len(stub.requests) == 2
    assert len(sleep.calls) == 1


# --- JSON that is not a well-formed chat completion -----------------------------------------


def _assistant(**message: Any) -> dict[str, Any]:
    return {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", **message}}


@pytest.mark.parametrize(
    "body",
    [
        {"hello": "world"},
        [1, 2, 3],
        "just a string",
        chat_body("not a list"),  # type: ignore[arg-type]
        chat_body([{"index": 0, "finish_reason": "stop"}]),
        chat_body([_assistant(content=42)]),
        chat_body([_assistant(content=["a", "b"])]),
        chat_body([_assistant(content=None, tool_calls=[{"id": "c1", "type": "function"}])]),
        chat_body(
            [
                _assistant(
                    content=None,
                    tool_calls=[{"id": "c1", "type": "function", "function": {"name": "q", "arguments": {"a": 1}}}],
                )
            ]
        ),
        chat_body(
            [_assistant(content=None, tool_calls=[{"id": "c1", "type": "function", "function": {"arguments": "{}"}}])]
        ),
        chat_body(
            [_assistant(content=None, tool_calls=[{"type": "function", "function": {"name": "q", "arguments": "{}"}}])]
        ),
        chat_body([_assistant(content="ok")], usage={"prompt_tokens": "many", "completion_tokens": 1}),
        chat_body([_assistant(content="ok")], usage={"prompt_tokens": -3, "completion_tokens": 1}),
    ],
    ids=[
        "object",
        "list",
        "string",
        "choices-not-a-list",
        "no-message",
        "number-content",
        "list-content",
        "call-without-function",
        "object-arguments",
        "call-without-name",
        "call-without-id",
        "text-usage",
        "negative-usage",
    ],
)
def test_json_that_is_not_a_chat_completion_is_an_invalid_response(
    stub: OpenAIStub, sleep: SleepRecorder, body: Any
) -> None:
    stub.queue(StubReply(body=body), completion("never asked for"))

    with pytest.raises(ModelResponseInvalid) as caught:
        make_model(stub, sleep).complete(ask())

    assert caught.value.__context__ is None
    assert len(stub.requests) == 1  # an unreadable reply is not retried
    assert sleep.calls == []
