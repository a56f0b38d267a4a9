"""DiagnosisAgent: the tool loop, duplicate refusal, budgets, the final step and format repair."""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Mapping
from typing import Any

import pytest

from harness.agent import AgentSettings, DiagnosisAgent
from harness.context import Budgets
from harness.inmemory import InMemoryLogs
from harness.llm.base import Message, ModelRequest, ModelResponse, Purpose, TokenUsage, ToolCall
from harness.llm.scripted import (
    Step,
    assistant_message,
    respond,
    tool_call,
    tool_calls,
    tool_results,
)
from harness.memory import PreviousTurn
from harness.ports import InvocationStatus, LogQuery, LogResult, Runbook
from harness.prompts import FINAL_STEP
from tests.harness.scope_fixtures import (
    LOG_LINES,
    POOL_ERROR,
    RUN_ID,
    build_scope,
    claim,
    draft_citing,
    draft_json,
    incident_scope,
)

QUESTION = "Payments are timing out since 10:00 UTC — what is going on?"
POOL_QUOTE = "Connection is not available, request timed out"
ERRORS = {"query": "", "level": "ERROR"}


def error_of(content: Mapping[str, Any]) -> dict[str, Any]:
    """The error a tool result carries (the result must be an error)."""
    error = content.get("error")
    assert isinstance(error, dict), content
    return error


def test_an_identical_repeated_call_is_refused_with_a_hint_and_not_charged() -> None:
    h = incident_scope(
        [
            tool_call("query_logs", {"query": "timed out", "level": "ERROR"}, call_id="m1"),
            # the same call, arguments in another order and spacing
            tool_call("query_logs", '{"level":"ERROR",  "query":"timed out"}', call_id="m2"),
            draft_citing(POOL_QUOTE),
        ]
    )

    outcome = DiagnosisAgent().run(h.scope, QUESTION, None, ())

    assert outcome.draft is not None
    assert outcome.duplicate_calls == 1
    assert len(h.scope.boundary.observations) == 1
    assert h.ctx.usage().tool_calls == 1
    assert len(h.audit.tools) == 1
    first, second = tool_results(h.model.calls[2])
    assert "error" not in first.content
    assert error_of(second.content)["code"] == "duplicate_call"
    assert first.tool_call_id in error_of(second.content)["message"]
    assert second.tool_call_id != first.tool_call_id
    h.model.assert_complete()


def test_an_identical_call_twice_in_one_step_runs_once() -> None:
    h = incident_scope(
        [tool_calls(("query_logs", ERRORS), ("query_logs", ERRORS)), draft_citing(POOL_QUOTE)],
    )

    outcome = DiagnosisAgent().run(h.scope, QUESTION, None, ())

    assert outcome.duplicate_calls == 1
    assert len(h.scope.boundary.observations) == 1
    assert h.ctx.usage().tool_calls == 1
    first, second = tool_results(h.model.calls[1])
    assert error_of(second.content)["code"] == "duplicate_call"
    assert first.tool_call_id in error_of(second.content)["message"]


def test_a_call_with_other_arguments_is_not_a_duplicate() -> None:
    h = incident_scope(
        [
            tool_call("query_logs", {"query": "timed out"}),
            tool_call("query_logs", {"query": "timed out", "service": "payment-service"}),
            draft_citing(POOL_QUOTE),
        ]
    )

    outcome = DiagnosisAgent().run(h.scope, QUESTION, None, ())

    assert outcome.duplicate_calls == 0
    assert len(h.scope.boundary.observations) == 2


class RendezvousLogs:
    """Answers only when two queries are in flight at once: a sequential loop would fail them."""

    def __init__(self) -> None:
        self._barrier = threading.Barrier(2, timeout=5.0)
        self._logs = InMemoryLogs(LOG_LINES)

    def query(self, query: LogQuery) -> LogResult:
        self._barrier.wait()
        return self._logs.query(query)


def test_the_tool_calls_of_one_step_run_in_parallel() -> None:
    h = incident_scope(
        [
            tool_calls(
                ("query_logs", {"query": "timed out"}),
                ("query_logs", {"service": "payment-service"}),
                ("lookup_knowledge", {"query": "connection pool exhaustion"}),
            ),
            draft_citing(POOL_QUOTE),
        ],
        logs=RendezvousLogs(),
    )

    DiagnosisAgent().run(h.scope, QUESTION, None, ())

    observations = h.scope.boundary.observations
    assert [o.tool for o in observations] == ["query_logs", "query_logs", "lookup_knowledge"]
    assert [o.status for o in observations] == [InvocationStatus.READY] * 3
    results = tool_results(h.model.calls[1])
    assert [r.tool_call_id for r in results] == [o.tool_call_id for o in observations]
    assert all("error" not in r.content for r in results)


def test_the_last_allowed_step_offers_no_tools_and_asks_for_the_final_draft() -> None:
    h = incident_scope([tool_call("query_logs", ERRORS), draft_citing(POOL_QUOTE)])

    outcome = DiagnosisAgent(AgentSettings(max_steps=2)).run(h.scope, QUESTION, None, ())

    first, last = h.model.calls
    assert {t.name for t in first.tools} == {"lookup_knowledge", "query_logs"}
    assert Message.user(FINAL_STEP) not in first.messages
    assert last.tools == ()
    assert last.messages[-1] == Message.user(FINAL_STEP)
    assert outcome.steps == 2
    assert outcome.draft is not None
    assert outcome.conversation[-1] == Message.user(FINAL_STEP)


def test_tool_calls_asked_for_on_the_final_step_are_not_run() -> None:
    h = incident_scope(
        [
            tool_call("query_logs", ERRORS),
            tool_call("query_logs", {"query": "pool"}),  # ignores that no tools were offered
            draft_citing(POOL_QUOTE),  # the format repair
        ]
    )

    outcome = DiagnosisAgent(AgentSettings(max_steps=2)).run(h.scope, QUESTION, None, ())

    assert len(h.scope.boundary.observations) == 1
    assert h.model.calls[2].purpose is Purpose.FORMAT_REPAIR
    assert outcome.draft is not None
    h.model.assert_complete()


GOOD_DRAFT = draft_json([claim("payment-service logged pool errors.", ("call_x", POOL_QUOTE))])


def test_a_reply_that_is_not_a_draft_gets_one_format_repair() -> None:
    h = incident_scope([assistant_message("The root cause is the connection pool."), assistant_message(GOOD_DRAFT)])

    outcome = DiagnosisAgent().run(h.scope, QUESTION, None, ())

    assert outcome.draft is not None
    assert outcome.draft.claims[0].citations[0].quote == POOL_QUOTE
    assert outcome.problem is None
    assert outcome.steps == 2
    repair = h.model.calls[1]
    assert repair.purpose is Purpose.FORMAT_REPAIR
    assert repair.tools == ()
    assert repair.json_output is True
    assert repair.messages[-2] == Message.assistant("The root cause is the connection pool.")
    assert "not a valid draft" in (repair.messages[-1].content or "")
    h.model.assert_complete()


def test_a_second_bad_reply_gives_no_draft_and_a_problem() -> None:
    h = incident_scope([assistant_message("prose, not JSON"), assistant_message('{"conclusion": "pool"}')])

    outcome = DiagnosisAgent().run(h.scope, QUESTION, None, ())

    assert outcome.draft is None
    assert outcome.problem is not None
    assert "root_cause" in outcome.problem
    assert len(h.model.calls) == 2  # exactly one repair, never a second
    h.model.assert_complete()


def test_an_empty_reply_is_repaired_too() -> None:
    h = incident_scope([assistant_message(""), assistant_message(GOOD_DRAFT)])

    outcome = DiagnosisAgent().run(h.scope, QUESTION, None, ())

    assert outcome.draft is not None
    assert "empty" in (h.model.calls[1].messages[-1].content or "")


def test_a_draft_in_a_code_fence_parses_without_repair() -> None:
    h = incident_scope([assistant_message(f"```json\n{GOOD_DRAFT}\n```")])

    outcome = DiagnosisAgent().run(h.scope, QUESTION, None, ())

    assert outcome.draft is not None
    assert outcome.draft.root_cause.startswith("The payment-service connection pool")
    assert len(h.model.calls) == 1


def test_runbooks_are_in_the_instructions_and_the_previous_turn_in_the_user_message() -> None:
    runbook = Runbook("diagnose-db-pool", "Diagnose pool exhaustion", "## Workflow\n1. Find HikariPool errors.")
    previous = PreviousTurn(
        query="Checkout failed at 09:00",
        conclusion="Checkout failed because the cache was cold.",
        root_cause="cache stampede",
        limitations=("no metrics",),
        sources=({"document_id": "cache-stampede#0", "title": "Cache stampede", "section": "Symptoms"},),
    )
    h = incident_scope([assistant_message(GOOD_DRAFT)])

    DiagnosisAgent().run(h.scope, QUESTION, previous, [runbook])

    system, user = h.model.calls[0].messages
    assert system.role == "system"
    assert "diagnose-db-pool" in (system.content or "")
    assert "Diagnose pool exhaustion" in (system.content or "")
    assert "1. Find HikariPool errors." in (system.content or "")
    assert json.loads(user.content or "") == {"question": QUESTION, "previous_turn": previous.to_dict()}


def test_without_runbooks_or_memory_neither_appears() -> None:
    h = incident_scope([assistant_message(GOOD_DRAFT)])

    DiagnosisAgent().run(h.scope, QUESTION, None, ())

    system, user = h.model.calls[0].messages
    assert "runbook:" not in (system.content or "")
    assert json.loads(user.content or "") == {"question": QUESTION, "previous_turn": None}


def _explorer() -> Step:
    """Asks for a new log query while tools are offered; writes the draft when they are not."""
    counter = itertools.count()

    def answer(request: ModelRequest) -> ModelResponse | str:
        if request.tools:
            n = next(counter)
            return ModelResponse(
                None, (ToolCall(f"m{n}", "query_logs", json.dumps({"query": f"q{n}"})),), TokenUsage(1, 1)
            )
        return GOOD_DRAFT

    return respond(answer)


@pytest.mark.parametrize(
    ("max_model_calls", "steps"),
    [(20, 6), (12, 6), (8, 5), (5, 2), (4, 1), (2, 1)],
)
def test_the_step_limit_keeps_model_calls_in_reserve(max_model_calls: int, steps: int) -> None:
    explorer = _explorer()
    h = incident_scope([explorer] * 10, budgets=Budgets(max_model_calls=max_model_calls, max_tool_calls=50))

    outcome = DiagnosisAgent().run(h.scope, QUESTION, None, ())

    assert outcome.steps == steps
    assert outcome.draft is not None
    assert [bool(c.tools) for c in h.model.calls] == [True] * (steps - 1) + [False]
    assert h.ctx.usage().model_calls == steps


def test_the_reserve_is_left_for_repairs_and_review() -> None:
    h = incident_scope([_explorer()] * 10, budgets=Budgets(max_model_calls=7))

    DiagnosisAgent(AgentSettings(max_steps=6, reserved_model_calls=3)).run(h.scope, QUESTION, None, ())

    assert h.ctx.remaining_model_calls == 3


def test_model_tool_call_ids_are_replaced_by_framework_ids() -> None:
    h = incident_scope(
        [
            tool_calls(
                ("query_logs", ERRORS, "model-id-1"),
                ("lookup_knowledge", {"query": "pool exhaustion"}, "model-id-2"),
            ),
            draft_citing(POOL_QUOTE),
        ]
    )

    outcome = DiagnosisAgent().run(h.scope, QUESTION, None, ())

    request = h.model.calls[1]
    assistant = next(m for m in request.messages if m.tool_calls)
    ids = [c.id for c in assistant.tool_calls]
    assert all(i.startswith("call_") for i in ids)
    assert len(set(ids)) == 2
    results = tool_results(request)
    assert [r.tool_call_id for r in results] == ids
    assert [r.content["tool_call_id"] for r in results] == ids  # the projection names the same id
    assert "model-id" not in repr(request.messages)
    assert "model-id" not in repr(outcome.conversation)
    assert h.store.get(RUN_ID, "model-id-1") is None
    assert h.store.get(RUN_ID, ids[0]) is not None


def test_calls_beyond_the_tool_budget_get_a_hint_instead_of_running() -> None:
    h = incident_scope(
        [
            tool_calls(
                ("query_logs", ERRORS),
                ("query_logs", {"query": "timed out"}),
                ("lookup_knowledge", {"query": "pool exhaustion"}),
            ),
            draft_citing(POOL_QUOTE),
        ],
        budgets=Budgets(max_tool_calls=2),
    )

    outcome = DiagnosisAgent().run(h.scope, QUESTION, None, ())

    assert [o.tool for o in h.scope.boundary.observations] == ["query_logs", "query_logs"]
    assert h.ctx.usage().tool_calls == 2
    results = tool_results(h.model.calls[1])
    assert len(results) == 3
    assert "error" not in results[0].content
    assert "error" not in results[1].content
    assert error_of(results[2].content)["code"] == "tool_budget_exhausted"
    # with the budget spent, the next step is the final one
    assert h.model.calls[1].tools == ()
    assert h.model.calls[1].messages[-1] == Message.user(FINAL_STEP)
    assert outcome.draft is not None


def test_the_draft_can_cite_what_the_tools_returned() -> None:
    h = incident_scope([tool_call("query_logs", ERRORS), draft_citing(POOL_QUOTE)])

    outcome = DiagnosisAgent().run(h.scope, QUESTION, None, ())

    assert outcome.draft is not None
    cited = outcome.draft.claims[0].citations[0].tool_call_id
    invocation = h.store.get(RUN_ID, cited)
    assert invocation is not None
    assert POOL_ERROR in json.dumps(invocation.raw_result)


def test_without_tools_the_first_step_is_final() -> None:
    h = build_scope([assistant_message(GOOD_DRAFT)])

    outcome = DiagnosisAgent().run(h.scope, QUESTION, None, ())

    assert h.model.calls[0].tools == ()
    assert Message.user(FINAL_STEP) not in h.model.calls[0].messages
    assert outcome.draft is not None
