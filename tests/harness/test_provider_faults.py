"""Whole runs on the real ``openai`` client while the provider misbehaves.

Every fault a provider is known for — 429 bursts, slow answers, bodies that are not JSON or not a
chat completion, truncated or unknown tool calls, no choices, a 500 — must end the run in exactly
one well-defined terminal state (a safe fallback, or a failure with a stable code), with no
exception out of ``execute``, no prompt or model text in the logs, usage that adds up, and a
bounded number of requests to the provider.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import pytest

from harness.context import Budgets, CancelReason, Outcome, RunStatus
from harness.inmemory import RecordingObserver
from harness.llm.openai_compat import OpenAICompatibleModel, OpenAIConfig
from harness.ports import InvocationStatus, Stage
from harness.prompts import ROUTER, SYSTEM_CHAT
from harness.release import RunResult
from tests.harness.chain import POOL_LINE, Chain, build_chain
from tests.openai_stub import OpenAIStub, StubReply, chat_body, completion

QUESTION = "Payments are timing out since 10:00 (private-question-marker)"
MODEL_TEXT = "model-text-marker"
PROVIDER_TEXT = "provider-detail-marker"
API_KEY = "sk-fault-0123456789abcdef"
PRIVATE = ("private-question-marker", MODEL_TEXT, PROVIDER_TEXT, API_KEY, POOL_LINE, ROUTER[:60], SYSTEM_CHAT[:60])
#: every logger on the way to the provider, at its most verbose
LOGGERS = ("", "harness", "openai", "httpx", "httpx2", "httpcore", "httpcore2")


@pytest.fixture
def logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    for name in LOGGERS:
        caplog.set_level(logging.DEBUG, logger=name)
    return caplog


def chain_on(stub: OpenAIStub, *, budgets: Budgets | None = None, deadline_s: float = 20.0, **config: Any) -> Chain:
    settings: dict[str, Any] = {"timeout_s": 5.0, "max_retries": 2, "backoff_base_s": 0.01, "backoff_max_s": 0.05}
    model = OpenAICompatibleModel(OpenAIConfig(stub.base_url, API_KEY, "stub-model", **{**settings, **config}))
    return build_chain(router=model, agent=model, guard=model, budgets=budgets, deadline_s=deadline_s)


def ask(chain: Chain, observer: RecordingObserver | None = None) -> tuple[RunResult, float]:
    started = time.monotonic()
    result = chain.ask(QUESTION, observer=observer or RecordingObserver())
    return result, time.monotonic() - started


def error_reply(status: int, headers: dict[str, str] | None = None) -> StubReply:
    return StubReply(status, {"error": {"message": f"{PROVIDER_TEXT} {API_KEY}", "type": "x"}}, headers=headers or {})


def route(intent: str) -> StubReply:
    return completion(json.dumps({"intent": intent}), prompt_tokens=30, completion_tokens=5)


def assert_settled(
    chain: Chain,
    stub: OpenAIStub,
    logs: pytest.LogCaptureFixture,
    result: RunResult,
    expected: tuple[RunStatus, Outcome, str | None],
    *,
    budgets: Budgets | None = None,
) -> None:
    """One terminal state, stored and told once; usage that adds up; bounded requests; quiet logs."""
    status, outcome, code = expected
    assert (result.status, result.outcome) == (status, outcome)
    assert (result.failure.code if result.failure else result.fallback_reason) == code
    if status is RunStatus.COMPLETED:
        assert result.content is not None and result.failure is None
    else:
        assert result.content is None and result.failure is not None
        assert PROVIDER_TEXT not in result.failure.message
    stored = chain.store.runs[result.run_id]
    assert stored.status is status and stored.result == result
    assert [r for kind, r in chain.observer.events if kind == "result"] == [result]

    usage, steps = result.usage, chain.audit.steps
    assert usage.model_calls == len(steps)
    assert usage.input_tokens == sum(s.input_tokens for s in steps)
    assert usage.output_tokens == sum(s.output_tokens for s in steps)
    # One request per model call, one more per retry the run allowed — and nothing else.
    assert len(stub.requests) == usage.model_calls + usage.model_retries
    limits = budgets or Budgets()
    assert usage.model_calls <= limits.max_model_calls
    assert usage.model_retries <= limits.max_model_retries
    invocations = [i for (run_id, _), i in chain.invocations.items.items() if run_id == result.run_id]
    assert usage.tool_calls == len(chain.audit.tools) == len(invocations)

    assert any(r.name.startswith("openai") for r in logs.records)  # the client did log, verbosely
    text = "\n".join(f"{r.name} {r.getMessage()} {r.exc_text or ''}" for r in logs.records)
    for marker in PRIVATE:
        assert marker not in text, marker
    assert "Traceback" not in text


# --- 429 -------------------------------------------------------------------------------------


def test_a_short_429_burst_is_waited_out_as_the_server_asks(stub: OpenAIStub, logs: pytest.LogCaptureFixture) -> None:
    limited = error_reply(429, {"Retry-After": "0.3"})
    stub.queue(limited, limited, route("SYSTEM_CHAT"), completion(f"Hello! {MODEL_TEXT}"))
    chain = chain_on(stub)

    result, elapsed = ask(chain)

    assert_settled(chain, stub, logs, result, (RunStatus.COMPLETED, Outcome.SUCCESS, None))
    assert result.usage.model_calls == 2
    assert result.usage.model_retries == 2
    assert elapsed >= 0.6  # both Retry-After waits were honoured
    assert [s.error_code for s in chain.audit.steps] == [None, None]


def test_a_long_429_burst_stops_at_the_runs_retry_budget(stub: OpenAIStub, logs: pytest.LogCaptureFixture) -> None:
    stub.queue(*[error_reply(429)] * 10)  # no Retry-After: exponential backoff
    budgets = Budgets(max_model_retries=3)
    chain = chain_on(stub, budgets=budgets, max_retries=2)

    result, _ = ask(chain)

    assert_settled(
        chain, stub, logs, result, (RunStatus.FAILED, Outcome.FAILED, "routing_unavailable"), budgets=budgets
    )
    # Two routing attempts; the first retried twice, the second once: the run had three retries.
    assert result.usage.model_calls == 2
    assert result.usage.model_retries == 3
    assert len(stub.requests) == 5
    assert [s.error_code for s in chain.audit.steps] == ["model_rate_limited"] * 2


def test_a_retry_after_beyond_the_deadline_fails_fast(stub: OpenAIStub, logs: pytest.LogCaptureFixture) -> None:
    stub.queue(*[error_reply(429, {"Retry-After": "30"})] * 4)
    chain = chain_on(stub, deadline_s=5.0)

    result, elapsed = ask(chain)

    assert_settled(chain, stub, logs, result, (RunStatus.FAILED, Outcome.FAILED, "routing_unavailable"))
    assert elapsed < 2.0  # nothing waited for a retry that could never be made in time
    assert result.usage.model_retries == 0
    assert len(stub.requests) == 2


def test_a_cancel_during_a_retry_after_wait_ends_the_run_without_another_request(
    stub: OpenAIStub, logs: pytest.LogCaptureFixture
) -> None:
    observer = RecordingObserver()

    def limited_then_cancelled(_sent: dict[str, Any]) -> StubReply:
        assert observer.control is not None
        observer.control.cancel(CancelReason.USER)  # the user cancels while the server throttles
        return error_reply(429, {"Retry-After": "5"})

    stub.queue(StubReply(respond=limited_then_cancelled), route("SYSTEM_CHAT"))
    chain = chain_on(stub)

    result, elapsed = ask(chain, observer)

    assert_settled(chain, stub, logs, result, (RunStatus.CANCELLED, Outcome.CANCELLED, "cancelled"))
    assert elapsed < 1.5  # the 5 s wait ended with the run
    assert len(stub.requests) == 1
    assert [s.error_code for s in chain.audit.steps] == ["cancelled"]


# --- slow answers ----------------------------------------------------------------------------


def test_a_provider_slower_than_the_call_timeout_fails_as_model_timeout(
    stub: OpenAIStub, logs: pytest.LogCaptureFixture
) -> None:
    slow = StubReply(body=completion(MODEL_TEXT).body, delay_s=1.5)
    stub.queue(route("SYSTEM_CHAT"), slow, slow)
    chain = chain_on(stub, timeout_s=0.3, max_retries=1)

    result, elapsed = ask(chain)

    assert_settled(chain, stub, logs, result, (RunStatus.FAILED, Outcome.FAILED, "model_timeout"))
    assert result.usage.model_retries == 1
    assert elapsed < 1.5  # two attempts of 0.3 s, not the 1.5 s the server took
    assert [s.error_code for s in chain.audit.steps] == [None, "model_timeout"]


def test_a_provider_slower_than_the_run_fails_as_deadline_exceeded(
    stub: OpenAIStub, logs: pytest.LogCaptureFixture
) -> None:
    stub.queue(route("SYSTEM_CHAT"), StubReply(body=completion(MODEL_TEXT).body, delay_s=3.0))
    chain = chain_on(stub, timeout_s=30.0, deadline_s=1.0)

    result, elapsed = ask(chain)

    assert_settled(chain, stub, logs, result, (RunStatus.FAILED, Outcome.FAILED, "deadline_exceeded"))
    assert elapsed < 2.0
    assert result.usage.model_retries == 0


# --- replies that cannot be read ---------------------------------------------------------------


def _message(**fields: Any) -> dict[str, Any]:
    return {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", **fields}}


UNREADABLE = {
    "not-json": StubReply(raw=f"<html>{PROVIDER_TEXT}".encode()),
    "cut-off-json": StubReply(raw=json.dumps(completion(MODEL_TEXT).body).encode()[:40]),
    "json-object": StubReply(body={"status": "ok", "text": MODEL_TEXT}),
    "json-list": StubReply(body=[MODEL_TEXT]),
    "empty-choices": StubReply(body=chat_body([])),
    "number-content": StubReply(body=chat_body([_message(content=42)])),
    "object-arguments": StubReply(
        body=chat_body(
            [
                _message(
                    content=None,
                    tool_calls=[{"id": "c", "type": "function", "function": {"name": "query_logs", "arguments": {}}}],
                )
            ]
        )
    ),
}


@pytest.mark.parametrize("fault", list(UNREADABLE), ids=list(UNREADABLE))
def test_an_unreadable_answer_fails_the_run_as_an_invalid_response(
    stub: OpenAIStub, logs: pytest.LogCaptureFixture, fault: str
) -> None:
    stub.queue(route("DIAGNOSIS"), UNREADABLE[fault], completion("never asked for"))
    chain = chain_on(stub)

    result, _ = ask(chain)

    assert_settled(chain, stub, logs, result, (RunStatus.FAILED, Outcome.FAILED, "model_invalid_response"))
    assert result.intent == "DIAGNOSIS"
    assert result.usage.model_retries == 0  # an unreadable answer is not asked for again
    assert result.usage.tool_calls == 0


def test_a_router_that_keeps_answering_nothing_fails_closed(stub: OpenAIStub, logs: pytest.LogCaptureFixture) -> None:
    stub.queue(StubReply(body=chat_body([])), StubReply(body=chat_body([])), route("DIAGNOSIS"))
    chain = chain_on(stub)

    result, _ = ask(chain)

    assert_settled(chain, stub, logs, result, (RunStatus.FAILED, Outcome.FAILED, "routing_unavailable"))
    assert result.intent is None
    assert len(stub.requests) == 2


def test_a_500_then_success_recovers_on_every_call(stub: OpenAIStub, logs: pytest.LogCaptureFixture) -> None:
    stub.queue(error_reply(500), route("SYSTEM_CHAT"), error_reply(503), completion(f"Hi. {MODEL_TEXT}"))
    chain = chain_on(stub)

    result, _ = ask(chain)

    assert_settled(chain, stub, logs, result, (RunStatus.COMPLETED, Outcome.SUCCESS, None))
    assert result.content is not None and result.content.payload["text"] == f"Hi. {MODEL_TEXT}"
    assert (result.usage.model_calls, result.usage.model_retries) == (2, 2)
    assert result.usage.input_tokens == 30 + 11  # only the answers that arrived count


# --- tool calls the agent cannot run -----------------------------------------------------------


def tool_reply(name: str, arguments: str, *, finish_reason: str | None = None) -> StubReply:
    return completion(tool_calls=[("call_model", name, arguments)], finish_reason=finish_reason)


def tool_messages(sent: dict[str, Any]) -> list[dict[str, Any]]:
    return [json.loads(m["content"]) for m in sent["messages"] if m["role"] == "tool"]


def draft_citing_the_logs(sent: dict[str, Any]) -> StubReply:
    """The agent's final draft, quoting the pool error from the last logs result it was shown."""
    (call_id,) = [m["tool_call_id"] for m in tool_messages(sent) if m["tool"] == "query_logs" and "result" in m]
    claim = {"statement": "The pool is exhausted.", "citations": [{"tool_call_id": call_id, "quote": POOL_LINE}]}
    draft = {
        "conclusion": "Payments time out because the connection pool is exhausted.",
        "root_cause": "Connection pool exhausted",
        "claims": [claim],
        "recommendations": ["Restore the previous pool size."],
        "limitations": [],
    }
    return completion(json.dumps(draft))


def recovers_with(first: StubReply) -> list[StubReply]:
    """Routing, a faulty first agent step, then a good call, the draft and the review."""
    return [
        route("DIAGNOSIS"),
        first,
        tool_reply("query_logs", json.dumps({"query": "Connection is not available"})),
        StubReply(respond=draft_citing_the_logs),
        completion('{"verdict": "PASS", "issues": []}'),
    ]


@pytest.mark.parametrize(
    ("first", "status", "code"),
    [
        (
            tool_reply("query_logs", '{"query": "Connection is not', finish_reason="length"),
            InvocationStatus.INVALID_ARGUMENTS,
            "invalid_arguments",
        ),
        (tool_reply("drop_database", '{"everything": true}'), InvocationStatus.INVALID_ARGUMENTS, "unknown_tool"),
    ],
    ids=["truncated-arguments", "unknown-tool"],
)
def test_a_tool_call_that_cannot_run_is_a_tool_error_the_model_can_recover_from(
    stub: OpenAIStub, logs: pytest.LogCaptureFixture, first: StubReply, status: InvocationStatus, code: str
) -> None:
    stub.queue(*recovers_with(first))
    chain = chain_on(stub)

    result, _ = ask(chain)

    assert_settled(chain, stub, logs, result, (RunStatus.COMPLETED, Outcome.SUCCESS, None))
    assert [(t.status, t.error_code) for t in chain.audit.tools] == [(status, code), (InvocationStatus.READY, None)]
    # The model was told, in a tool message, what went wrong — and nothing from inside the harness.
    (told, _) = tool_messages(stub.requests[3]["json"])
    assert told["error"]["code"] == code
    assert "Traceback" not in json.dumps(told) and "Error" not in told["error"]["message"]
    assert chain.observer.stages().count(Stage.TOOL_CALL.value) == 2


def test_an_agent_whose_every_answer_is_cut_off_ends_in_the_safe_fallback(
    stub: OpenAIStub, logs: pytest.LogCaptureFixture
) -> None:
    cut = tool_reply("query_logs", '{"query": "Connection is not', finish_reason="length")
    cut_draft = completion('{"conclusion": "Payments time out bec', finish_reason="length")
    stub.queue(route("DIAGNOSIS"), *[cut] * 5, cut_draft, cut_draft)
    chain = chain_on(stub)

    result, _ = ask(chain)

    assert_settled(chain, stub, logs, result, (RunStatus.COMPLETED, Outcome.FALLBACK, "draft_invalid"))
    assert result.content is not None and result.content.content_type.value == "safe_fallback"
    # The same cut-off call is run once; its repeats get a hint instead of running again.
    assert [(t.status, t.error_code) for t in chain.audit.tools] == [
        (InvocationStatus.INVALID_ARGUMENTS, "invalid_arguments")
    ]
    assert stub.replies == type(stub.replies)()  # every scripted answer was asked for, no more
