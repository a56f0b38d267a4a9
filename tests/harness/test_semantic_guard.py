"""SemanticGuard: an isolated review of the draft against its excerpts; only a clean PASS passes."""

from __future__ import annotations

import json
from typing import Any

import pytest

from harness.agent import DiagnosisAgent
from harness.draft import Draft, parse_draft
from harness.errors import ModelRefused, ModelTimeout
from harness.guards.evidence import EvidenceCheck, EvidenceGuard
from harness.guards.semantic import SemanticGuard, Verdict, parse_verdict, review_payload
from harness.inmemory import InMemoryInvocationStore
from harness.llm.base import ModelRole, Purpose
from harness.llm.offline.reviewer import review
from harness.llm.scripted import Step, assistant_message, json_message, raise_error, tool_call
from harness.prompts import SEMANTIC_GUARD
from tests.harness.scope_fixtures import (
    CITATIONS,
    LOG_LINES,
    POOL_ERROR,
    RUN_ID,
    SMTP_RETRY,
    Harness,
    build_scope,
    claim,
    draft_citing,
    draft_json,
    incident_scope,
    log_raw,
    ready_invocation,
)

LOGS_ID = "call_logs0000000000000000"
POOL_QUOTE = "Connection is not available, request timed out"
QUESTION = "Payments are timing out since 10:00 UTC — what is going on?"


def verified(draft_text: str) -> tuple[Draft, EvidenceCheck]:
    store = InMemoryInvocationStore()
    store.put(ready_invocation(LOGS_ID, log_raw(*LOG_LINES)))
    draft = parse_draft(draft_text)
    check = EvidenceGuard(store, citations=CITATIONS).check(RUN_ID, draft)
    assert check.result.passed, check.result.findings
    return draft, check


POOL_DRAFT = draft_json(
    [claim("payment-service logged “Connection is not available, request timed out”.", (LOGS_ID, POOL_QUOTE))]
)


def reviewed(*guard_steps: Step) -> tuple[Harness, Any]:
    h = build_scope(guard_steps=guard_steps)
    draft, check = verified(POOL_DRAFT)
    return h, SemanticGuard().review(h.scope.caller, draft, check)


def test_pass_passes() -> None:
    h, result = reviewed(json_message({"verdict": "PASS", "issues": []}))

    assert result.passed
    assert result.verdict is Verdict.PASS
    assert result.issues == ()
    h.guard.assert_complete()


def test_reject_does_not_pass_and_keeps_the_issues() -> None:
    _, result = reviewed(json_message({"verdict": "REJECT", "issues": ["claim 1 is not supported"]}))

    assert not result.passed
    assert result.verdict is Verdict.REJECT
    assert result.issues == ("claim 1 is not supported",)


NOT_PASS = {
    "not JSON": ("PASS", Verdict.UNPARSEABLE),
    "prose around the JSON": ('Looks good: {"verdict": "PASS", "issues": []}', Verdict.UNPARSEABLE),
    "extra field": ('{"verdict": "PASS", "issues": [], "confidence": 0.99}', Verdict.UNPARSEABLE),
    "lowercase verdict": ('{"verdict": "pass", "issues": []}', Verdict.UNPARSEABLE),
    "missing issues": ('{"verdict": "PASS"}', Verdict.UNPARSEABLE),
    "issues not a list": ('{"verdict": "PASS", "issues": "none"}', Verdict.UNPARSEABLE),
    "unknown verdict": ('{"verdict": "APPROVE", "issues": []}', Verdict.UNPARSEABLE),
    "empty reply": ("", Verdict.UNPARSEABLE),
    "whitespace reply": ("  \n ", Verdict.UNPARSEABLE),
    "PASS with issues": ('{"verdict": "PASS", "issues": ["the root cause goes further than claim 1"]}', Verdict.REJECT),
}


@pytest.mark.parametrize(("reply", "verdict"), list(NOT_PASS.values()), ids=list(NOT_PASS))
def test_anything_but_a_clean_pass_is_not_a_pass(reply: str, verdict: Verdict) -> None:
    _, result = reviewed(assistant_message(reply))

    assert not result.passed
    assert result.verdict is verdict


def test_a_pass_with_issues_keeps_the_issues() -> None:
    result = parse_verdict('{"verdict": "PASS", "issues": ["root cause overreaches"]}')

    assert result.verdict is Verdict.REJECT
    assert result.issues == ("root cause overreaches",)


def test_a_verdict_in_one_code_fence_is_read() -> None:
    assert parse_verdict('```json\n{"verdict": "PASS", "issues": []}\n```').verdict is Verdict.PASS


def test_a_reply_with_no_content_is_not_a_pass() -> None:
    assert parse_verdict(None).verdict is Verdict.UNPARSEABLE


@pytest.mark.parametrize("error", [ModelTimeout(), ModelRefused()])
def test_a_model_error_makes_the_review_unavailable(error: Exception) -> None:
    h, result = reviewed(raise_error(error))

    assert result.verdict is Verdict.UNAVAILABLE
    assert not result.passed
    assert len(h.guard.calls) == 1  # no retry


def test_the_review_is_isolated_from_the_agent() -> None:
    h = incident_scope(
        [tool_call("query_logs", {"level": "WARN"}), draft_citing(POOL_QUOTE)],
        guard_steps=[json_message({"verdict": "PASS", "issues": []})],
    )
    outcome = DiagnosisAgent().run(h.scope, QUESTION, None, ())
    assert outcome.draft is not None
    check = EvidenceGuard(h.store, citations=CITATIONS).check(RUN_ID, outcome.draft)
    assert check.result.passed

    SemanticGuard().review(h.scope.caller, outcome.draft, check)

    (request,) = h.guard.calls
    assert request.role is ModelRole.GUARD
    assert request.purpose is Purpose.SEMANTIC_REVIEW
    assert request.tools == ()
    assert [m.role for m in request.messages] == ["system", "user"]
    assert request.messages[0].content == SEMANTIC_GUARD
    assert all(m.tool_call_id is None and m.tool_calls == () for m in request.messages)
    text = request.messages[1].content or ""
    assert "tool_call_id" not in text
    call_ids = [o.tool_call_id for o in h.scope.boundary.observations]
    assert call_ids
    assert not any(i in text for i in call_ids)
    # nothing of the agent's conversation: its instructions, the question, the other log lines
    agent_system, agent_user = outcome.conversation[:2]
    assert (agent_system.content or "") not in text
    assert (agent_user.content or "") not in text
    assert "Payments are timing out" not in text
    assert "previous_turn" not in text
    assert SMTP_RETRY not in text
    assert "counts_by_level" not in text


def test_the_payload_is_the_draft_text_and_the_cited_excerpts_only() -> None:
    draft, check = verified(POOL_DRAFT)

    payload = json.loads(review_payload(draft, check))

    assert payload == {
        "conclusion": draft.conclusion,
        "root_cause": draft.root_cause,
        "recommendations": list(draft.recommendations),
        "claims": [
            {
                "statement": draft.claims[0].statement,
                "evidence": [
                    {
                        "tool": "query_logs",
                        "excerpt": POOL_ERROR,
                        "context": {"service": "payment-service", "ts": "2026-11-30T10:01:00Z", "level": "ERROR"},
                    }
                ],
            }
        ],
    }


def test_the_caller_accounts_the_review_against_the_run() -> None:
    h, _ = reviewed(json_message({"verdict": "PASS", "issues": []}))

    assert h.ctx.usage().model_calls == 1
    (step,) = h.audit.steps
    assert (step.role, step.purpose, step.message_count) == ("guard", "semantic_review", 2)


# --- the offline reviewer ------------------------------------------------------------------


def offline_verdict(statement: str, *, root_cause: str, conclusion: str) -> dict[str, Any]:
    draft, check = verified(
        draft_json([claim(statement, (LOGS_ID, POOL_QUOTE))], root_cause=root_cause, conclusion=conclusion)
    )
    reply: dict[str, Any] = json.loads(review(review_payload(draft, check)))
    assert parse_verdict(json.dumps(reply)).verdict.value == reply["verdict"]
    return reply


def test_offline_reviewer_rejects_a_claim_its_excerpt_does_not_support() -> None:
    reply = offline_verdict(
        "The root cause is a DNS outage.",
        root_cause="A DNS outage.",
        conclusion="Payments fail because of a DNS outage.",
    )

    assert reply["verdict"] == "REJECT"
    assert "claim 1 says more than its evidence supports" in reply["issues"]


def test_offline_reviewer_rejects_a_root_cause_beyond_the_evidence() -> None:
    reply = offline_verdict(
        "payment-service logged “Connection is not available, request timed out”.",
        root_cause="The root cause is a DNS outage.",
        conclusion="Payments time out because DNS resolution failed.",
    )

    assert reply["verdict"] == "REJECT"
    assert "the root cause is not supported by the claims' evidence" in reply["issues"]


def test_offline_reviewer_rejects_a_quote_the_excerpt_does_not_contain() -> None:
    reply = offline_verdict(
        "payment-service logged “Connection refused by payments-db”.",
        root_cause="The payment-service connection pool is exhausted (Connection is not available).",
        conclusion="Payments time out because the database connection pool is exhausted.",
    )

    assert reply["verdict"] == "REJECT"
    assert "claim 1 quotes text that is not in its evidence" in reply["issues"]


def test_offline_reviewer_passes_a_supported_draft() -> None:
    reply = offline_verdict(
        "payment-service logged “Connection is not available, request timed out”.",
        root_cause="The payment-service connection pool is exhausted (Connection is not available).",
        conclusion="Payments time out because the database connection pool is exhausted.",
    )

    assert reply == {"verdict": "PASS", "issues": []}


def test_offline_reviewer_rejects_an_unreadable_payload() -> None:
    assert json.loads(review("not json"))["verdict"] == "REJECT"
