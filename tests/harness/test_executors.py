"""The three executors: what each one asks of the model and the tools, and what it publishes."""

from __future__ import annotations

import json

import pytest

from harness.agent import DiagnosisAgent
from harness.context import Outcome
from harness.errors import ModelResponseInvalid, ModelTimeout
from harness.executors import (
    SYSTEM_CHAT_MAX_CHARS,
    DiagnosisExecutor,
    KnowledgeQueryExecutor,
    KnowledgeUnavailable,
    SystemChatExecutor,
)
from harness.guards.evidence import EvidenceGuard
from harness.guards.repair import EvidenceRepair
from harness.guards.semantic import SemanticGuard
from harness.inmemory import InMemoryKnowledge, InMemoryRunbooks
from harness.llm.base import Message, ModelRequest, ModelResponse, ModelRole, Purpose
from harness.llm.scripted import Step, assistant_message, json_message, raise_error, respond, tool_calls
from harness.memory import PreviousTurn, PublishedResultPolicy
from harness.ports import KnowledgeResult, Runbook
from harness.prompts import KNOWLEDGE_ANSWER, SYSTEM_CHAT
from harness.release import ContentType, FallbackReason, Release, ReleasePolicy
from tests.harness.scope_fixtures import (
    CHUNKS,
    CITATIONS,
    POOL_ERROR,
    RUN_ID,
    SMTP_RETRY,
    Harness,
    claim,
    draft_json,
    incident_scope,
    seen_ids,
)

QUESTION = "Payments are timing out since 10:00 UTC — what is going on?"
HOW_TO = "How do I fix database connection pool exhaustion?"
POOL_QUOTE = "Connection is not available, request timed out"
DOC_QUOTE = "a configuration change reduced db.pool.max_size"
PREVIOUS = PreviousTurn("Earlier question", "Earlier conclusion", "earlier cause", (), ())
PASS = json_message({"verdict": "PASS", "issues": []})


def published_text(release: Release) -> str:
    return json.dumps(release.content.to_dict(), ensure_ascii=False) + json.dumps(
        release.published_result, ensure_ascii=False
    )


def call_ids(h: Harness) -> list[str]:
    ids = [o.tool_call_id for o in h.scope.boundary.observations]
    assert ids
    return ids


# --- SystemChat ----------------------------------------------------------------------------


def test_system_chat_is_one_call_with_the_fixed_prompt_and_no_tools() -> None:
    h = incident_scope([assistant_message("  I diagnose incidents from logs and docs.  ")])

    release = SystemChatExecutor().execute(h.scope, "what can you do?", PREVIOUS)

    (request,) = h.model.calls
    assert request.messages == (Message.system(SYSTEM_CHAT), Message.user("what can you do?"))
    assert request.tools == ()
    assert (request.role, request.purpose) == (ModelRole.AGENT, Purpose.SYSTEM_CHAT)
    assert "Earlier conclusion" not in repr(request.messages)  # no memory either
    assert h.scope.boundary.observations == []
    assert release.outcome is Outcome.SUCCESS
    assert release.content.content_type is ContentType.SYSTEM_CHAT
    assert dict(release.content.payload) == {"text": "I diagnose incidents from logs and docs."}


def test_a_long_system_chat_reply_is_cut() -> None:
    h = incident_scope([assistant_message("x" * 10_000)])

    release = SystemChatExecutor().execute(h.scope, "hello", None)

    assert release.content.payload == {"text": "x" * (SYSTEM_CHAT_MAX_CHARS - 1) + "…", "truncated": True}


def test_a_system_chat_reply_the_provider_cut_off_says_so() -> None:
    h = incident_scope([respond(lambda _: ModelResponse("I diagnose incidents from logs and", finish_reason="length"))])

    release = SystemChatExecutor().execute(h.scope, "hello", None)

    assert release.outcome is Outcome.SUCCESS
    assert dict(release.content.payload) == {"text": "I diagnose incidents from logs and…", "truncated": True}


@pytest.mark.parametrize("reply", ["", "  \n ", None])
def test_an_empty_system_chat_reply_is_an_invalid_response(reply: str | None) -> None:
    h = incident_scope([respond(lambda _: ModelResponse(reply))])

    with pytest.raises(ModelResponseInvalid):
        SystemChatExecutor().execute(h.scope, "hello", None)
    assert len(h.model.calls) == 1


# --- KnowledgeQuery ------------------------------------------------------------------------


def knowledge_reply(*doc_ids: str, answer: str = "Restore the previous db.pool.max_size.") -> Step:
    return json_message({"answer": answer, "cited_document_ids": list(doc_ids)})


def knowledge() -> KnowledgeQueryExecutor:
    return KnowledgeQueryExecutor(ReleasePolicy(CITATIONS))


def test_a_grounded_answer_is_published_with_its_sources() -> None:
    h = incident_scope([knowledge_reply("runbook-db-pool#1")])

    release = knowledge().execute(h.scope, HOW_TO, None)

    assert release.outcome is Outcome.SUCCESS
    assert release.content.content_type is ContentType.KNOWLEDGE_ANSWER
    assert dict(release.content.payload) == {
        "answer": "Restore the previous db.pool.max_size.",
        "sources": [
            {
                "document_id": "runbook-db-pool#1",
                "title": "Database connection pool exhaustion",
                "section": "Causes",
                "approved": True,
            }
        ],
    }
    (call_id,) = call_ids(h)
    assert call_id not in published_text(release)
    assert "call_" not in published_text(release)
    assert "tool_call_id" not in published_text(release)


def test_the_knowledge_query_is_exactly_one_lookup() -> None:
    h = incident_scope([knowledge_reply("runbook-db-pool#1")])

    knowledge().execute(h.scope, HOW_TO, None)

    (observation,) = h.scope.boundary.observations
    assert observation.tool == "lookup_knowledge"
    assert h.ctx.usage().tool_calls == 1
    invocation = h.store.get(RUN_ID, observation.tool_call_id)
    assert invocation is not None
    assert invocation.request["arguments"] == {"query": HOW_TO, "top_k": 5}


def test_the_answer_request_holds_the_chunks_and_nothing_internal() -> None:
    h = incident_scope([knowledge_reply("runbook-db-pool#1")])

    knowledge().execute(h.scope, HOW_TO, PREVIOUS)

    (request,) = h.model.calls
    assert (request.role, request.purpose, request.tools, request.json_output) == (
        ModelRole.AGENT,
        Purpose.KNOWLEDGE_ANSWER,
        (),
        True,
    )
    system, user = request.messages
    assert system == Message.system(KNOWLEDGE_ANSWER)
    payload = json.loads(user.content or "")
    assert payload["question"] == HOW_TO
    assert payload["chunks"]
    assert all(set(c) == {"document_id", "title", "section", "text"} for c in payload["chunks"])
    assert "runbook-db-pool#1" in {c["document_id"] for c in payload["chunks"]}
    (call_id,) = call_ids(h)
    assert call_id not in (user.content or "")
    assert "Earlier conclusion" not in (user.content or "")


def test_cited_ids_are_deduplicated_in_the_sources() -> None:
    h = incident_scope([knowledge_reply("runbook-db-pool#1", "runbook-db-pool#1")])

    release = knowledge().execute(h.scope, HOW_TO, None)

    assert [s["document_id"] for s in release.content.payload["sources"]] == ["runbook-db-pool#1"]


def test_no_knowledge_evidence_gives_the_fixed_answer_without_a_model_call() -> None:
    h = incident_scope([])

    release = knowledge().execute(h.scope, "What is the parental leave policy for interns?", None)

    assert h.model.calls == []
    assert release.outcome is Outcome.FALLBACK
    assert release.fallback_reason is FallbackReason.NO_KNOWLEDGE_EVIDENCE
    assert release.content.content_type is ContentType.SAFE_FALLBACK
    assert release.content.payload["reason"] == "no_knowledge_evidence"
    assert release.content.payload["consulted"] == [
        {"tool": "lookup_knowledge", "calls": 1, "succeeded": 1, "with_evidence": 0}
    ]


def test_without_a_knowledge_base_there_is_no_lookup_and_no_model_call() -> None:
    h = incident_scope([], knowledge=None)

    release = knowledge().execute(h.scope, HOW_TO, None)

    assert release.fallback_reason is FallbackReason.NO_KNOWLEDGE_EVIDENCE
    assert h.scope.boundary.observations == []
    assert h.model.calls == []


INVALID_ANSWERS = {
    "an id the lookup did not return": knowledge_reply("runbook-disk-full#0"),
    "one good id and one invented": knowledge_reply("runbook-db-pool#1", "made-up#9"),
    "no cited id": knowledge_reply(),
    "empty answer": knowledge_reply("runbook-db-pool#1", answer="  "),
    "extra field": json_message({"answer": "x", "cited_document_ids": ["runbook-db-pool#1"], "confidence": 1}),
    "prose": assistant_message("Restore the pool size (see runbook-db-pool#1)."),
    "empty reply": assistant_message(""),
}


@pytest.mark.parametrize("reply", list(INVALID_ANSWERS.values()), ids=list(INVALID_ANSWERS))
def test_an_answer_that_is_not_grounded_is_not_published(reply: Step) -> None:
    h = incident_scope([reply])

    release = knowledge().execute(h.scope, HOW_TO, None)

    assert release.outcome is Outcome.FALLBACK
    assert release.fallback_reason is FallbackReason.KNOWLEDGE_ANSWER_INVALID
    assert release.content.payload["reason"] == "knowledge_answer_invalid"
    assert "answer" not in release.content.payload
    assert len(h.model.calls) == 1  # no retry
    assert "knowledge.answer_rejected" in h.audit.names()


def test_a_fenced_knowledge_answer_is_read() -> None:
    body = json.dumps({"answer": "Restore it.", "cited_document_ids": ["runbook-db-pool#1"]})
    h = incident_scope([assistant_message(f"```json\n{body}\n```")])

    release = knowledge().execute(h.scope, HOW_TO, None)

    assert release.outcome is Outcome.SUCCESS


class BrokenKnowledge:
    def search(self, query: str, top_k: int) -> KnowledgeResult:
        raise ConnectionError("vector store down")


def test_a_failing_knowledge_base_is_a_failure_not_an_answer() -> None:
    h = incident_scope([], knowledge=BrokenKnowledge())

    with pytest.raises(KnowledgeUnavailable):
        knowledge().execute(h.scope, HOW_TO, None)
    assert h.model.calls == []


# --- Diagnosis -----------------------------------------------------------------------------


def run_diagnosis(h: Harness, runbooks: InMemoryRunbooks | None = None) -> Release:
    executor = DiagnosisExecutor(
        agent=DiagnosisAgent(),
        evidence_guard=EvidenceGuard(h.store, citations=CITATIONS),
        repair=EvidenceRepair(),
        semantic_guard=SemanticGuard(),
        release=ReleasePolicy(CITATIONS),
        memory=PublishedResultPolicy(),
        runbooks=runbooks,
    )
    return executor.execute(h.scope, QUESTION, None)


GATHER = tool_calls(("query_logs", {"level": "ERROR"}), ("lookup_knowledge", {"query": "connection pool exhaustion"}))


def drafted(
    *citations: tuple[str, str],
    root_cause: str = "The payment-service connection pool is exhausted (Connection is not available).",
    claims: bool = True,
    recommendations: tuple[str, ...] = (),
) -> Step:
    """A draft whose one claim cites, per (tool, quote), the first result of that tool."""

    def build(request: ModelRequest) -> str:
        cited = [(seen_ids(request, tool)[0], quote) for tool, quote in citations]
        claim_list = [claim("payment-service ran out of pool connections after a config change.", *cited)]
        return draft_json(claim_list if claims else [], root_cause=root_cause, recommendations=recommendations)

    return respond(build)


GOOD = drafted(("query_logs", POOL_QUOTE), ("lookup_knowledge", DOC_QUOTE))
BAD = drafted(("query_logs", "DNS resolution failed for payments-db"))


def test_a_verified_diagnosis_is_published_without_call_ids() -> None:
    h = incident_scope([GATHER, GOOD], guard_steps=[PASS])

    release = run_diagnosis(h)

    assert release.outcome is Outcome.SUCCESS
    assert release.fallback_reason is None
    assert release.content.content_type is ContentType.DIAGNOSIS_REPORT
    payload = release.content.payload
    assert payload["root_cause"].startswith("The payment-service connection pool is exhausted")
    (finding,) = payload["findings"]
    logs_evidence, docs_evidence = finding["evidence"]
    assert (logs_evidence["tool"], logs_evidence["quote"]) == ("query_logs", POOL_QUOTE)
    assert set(logs_evidence) <= {"tool", "quote", "service", "ts"}
    assert [docs_evidence] == [
        {
            "tool": "lookup_knowledge",
            "quote": DOC_QUOTE,
            "document_id": "runbook-db-pool#1",
            "title": "Database connection pool exhaustion",
            "section": "Causes",
            "approved": True,
        },
    ]
    assert payload["sources"] == [
        {
            "document_id": "runbook-db-pool#1",
            "title": "Database connection pool exhaustion",
            "section": "Causes",
            "approved": True,
        }
    ]
    text = published_text(release)
    assert "tool_call_id" not in text
    assert not any(i in text for i in call_ids(h))
    assert POOL_ERROR not in text  # quotes are published, raw results are not
    assert SMTP_RETRY not in text
    h.model.assert_complete()
    h.guard.assert_complete()


def test_a_verified_diagnosis_leaves_a_bounded_memory() -> None:
    h = incident_scope([GATHER, GOOD], guard_steps=[PASS])

    release = run_diagnosis(h)

    assert release.published_result == {
        "query": QUESTION,
        "conclusion": release.content.payload["conclusion"],
        "root_cause": release.content.payload["root_cause"],
        "limitations": [],
        # the next turn remembers which documents, not their provenance (the same owner's session)
        "sources": [{k: v for k, v in s.items() if k != "approved"} for s in release.content.payload["sources"]],
    }


def test_the_semantic_guard_reviews_the_verified_excerpts() -> None:
    h = incident_scope([GATHER, GOOD], guard_steps=[PASS])

    run_diagnosis(h)

    (review,) = h.guard.calls
    assert review.role is ModelRole.GUARD
    payload = json.loads(review.messages[1].content or "")
    excerpts = [e["excerpt"] for e in payload["claims"][0]["evidence"]]
    assert len(excerpts) == 2
    assert POOL_QUOTE in excerpts[0]
    assert DOC_QUOTE in excerpts[1]
    assert SMTP_RETRY not in (review.messages[1].content or "")


def test_evidence_repair_happens_at_most_once() -> None:
    h = incident_scope([GATHER, BAD, BAD], guard_steps=[])

    release = run_diagnosis(h)

    assert release.outcome is Outcome.FALLBACK
    assert release.fallback_reason is FallbackReason.EVIDENCE_REJECTED
    assert release.content.payload["reason"] == "evidence_rejected"
    purposes = [c.purpose for c in h.model.calls]
    assert purposes == [Purpose.AGENT_STEP, Purpose.AGENT_STEP, Purpose.EVIDENCE_REPAIR]
    repair = h.model.calls[2]
    assert repair.tools == ()
    assert "quote_not_found" in (repair.messages[-1].content or "")
    assert h.guard.calls == []
    assert "DNS" not in published_text(release)
    h.model.assert_complete()


def test_a_repaired_draft_goes_on_to_the_semantic_review() -> None:
    h = incident_scope([GATHER, BAD, GOOD], guard_steps=[PASS])

    release = run_diagnosis(h)

    assert release.outcome is Outcome.SUCCESS
    assert [c.purpose for c in h.model.calls][-1] is Purpose.EVIDENCE_REPAIR
    assert len(h.guard.calls) == 1
    assert "evidence.rechecked" in h.audit.names()


@pytest.mark.parametrize(
    "repair",
    [
        assistant_message("Sorry, I cannot fix this."),
        raise_error(ModelTimeout()),
        drafted(claims=False),
        drafted(("query_logs", POOL_QUOTE), root_cause=""),
    ],
    ids=["not a draft", "model error", "no claims", "empty root cause"],
)
def test_a_repair_that_gives_no_usable_draft_is_rejected(repair: Step) -> None:
    h = incident_scope([GATHER, BAD, repair], guard_steps=[])

    release = run_diagnosis(h)

    assert release.fallback_reason is FallbackReason.EVIDENCE_REJECTED
    assert h.guard.calls == []


def test_a_draft_with_no_claims_is_insufficient_evidence_without_review() -> None:
    h = incident_scope([GATHER, drafted(claims=False, root_cause="")], guard_steps=[])

    release = run_diagnosis(h)

    assert release.outcome is Outcome.FALLBACK
    assert release.fallback_reason is FallbackReason.INSUFFICIENT_EVIDENCE
    assert len(h.model.calls) == 2  # no repair
    assert h.guard.calls == []
    assert release.content.payload["consulted"] == [
        {"tool": "query_logs", "calls": 1, "succeeded": 1, "with_evidence": 1},
        {"tool": "lookup_knowledge", "calls": 1, "succeeded": 1, "with_evidence": 1},
    ]


@pytest.mark.parametrize("root_cause", ["", "   \n"])
def test_a_draft_with_cited_claims_but_no_root_cause_is_an_honest_fallback(root_cause: str) -> None:
    h = incident_scope([GATHER, drafted(("query_logs", POOL_QUOTE), root_cause=root_cause)], guard_steps=[])

    release = run_diagnosis(h)

    # The agent found no supported cause: nothing is verified, repaired, reviewed or published.
    assert release.outcome is Outcome.FALLBACK
    assert release.fallback_reason is FallbackReason.INSUFFICIENT_EVIDENCE
    assert len(h.model.calls) == 2
    assert h.guard.calls == []
    assert "findings" not in release.content.payload
    assert POOL_QUOTE not in published_text(release)
    assert release.published_result is None
    assert "evidence.no_conclusion" in h.audit.names()
    assert "evidence.checked" not in h.audit.names()


def test_a_semantic_reject_is_not_published() -> None:
    h = incident_scope([GATHER, GOOD], guard_steps=[json_message({"verdict": "REJECT", "issues": ["overreach"]})])

    release = run_diagnosis(h)

    assert release.outcome is Outcome.FALLBACK
    assert release.fallback_reason is FallbackReason.SEMANTIC_REJECTED
    assert "findings" not in release.content.payload
    assert release.published_result is None


@pytest.mark.parametrize(
    "verdict",
    [assistant_message("PASS"), assistant_message('{"verdict": "pass", "issues": []}'), raise_error(ModelTimeout())],
    ids=["prose", "lowercase", "model error"],
)
def test_an_unreadable_or_missing_review_is_semantic_unavailable(verdict: Step) -> None:
    h = incident_scope([GATHER, GOOD], guard_steps=[verdict])

    release = run_diagnosis(h)

    assert release.outcome is Outcome.FALLBACK
    assert release.fallback_reason is FallbackReason.SEMANTIC_UNAVAILABLE
    assert release.published_result is None


def test_an_agent_that_never_writes_a_draft_gives_draft_invalid() -> None:
    h = incident_scope([assistant_message("no idea"), assistant_message("still no idea")], guard_steps=[])

    release = run_diagnosis(h)

    assert release.fallback_reason is FallbackReason.DRAFT_INVALID
    assert h.guard.calls == []


def test_matching_runbooks_reach_the_agent() -> None:
    runbook = Runbook(
        "diagnose-db-pool", "Diagnose payments timing out", "Payments timing out: look for pool errors first."
    )
    h = incident_scope([GATHER, GOOD], guard_steps=[PASS])

    run_diagnosis(h, InMemoryRunbooks([runbook]))

    assert "Payments timing out: look for pool errors first." in (h.model.calls[0].messages[0].content or "")


def test_knowledge_chunks_in_fixtures_are_searchable() -> None:
    # guards the other tests: the fixture knowledge base answers the how-to question
    assert InMemoryKnowledge(CHUNKS, min_score=0.5).search(HOW_TO, 5).evidence_status == "ok"


# --- recommendations are grounded like claims ---------------------------------------------------

GROUNDED = "Raise the maximum pool size that is too small for the traffic."  # the cause document's words
INVENTED = "Do not revert the pool size change."


def test_only_recommendations_a_consulted_source_supports_are_released() -> None:
    h = incident_scope(
        [
            GATHER,
            drafted(("query_logs", POOL_QUOTE), ("lookup_knowledge", DOC_QUOTE), recommendations=(GROUNDED, INVENTED)),
        ],
        guard_steps=[PASS],
    )

    release = run_diagnosis(h)

    assert release.outcome is Outcome.SUCCESS
    assert release.content.payload["recommendations"] == [GROUNDED]
    assert release.content.payload["limitations"][-1].startswith("1 recommendation(s) withheld")
    assert [e.details for e in h.audit.timeline if e.name == "recommendations.checked"] == [{"kept": 1, "withheld": 1}]


def test_a_runbook_the_run_was_given_grounds_its_recommendations() -> None:
    runbook = Runbook("payments", "Payments timing out", "## Remediation\nDo not revert the pool size change.")
    h = incident_scope(
        [GATHER, drafted(("query_logs", POOL_QUOTE), ("lookup_knowledge", DOC_QUOTE), recommendations=(INVENTED,))],
        guard_steps=[PASS],
    )

    release = run_diagnosis(h, InMemoryRunbooks([runbook]))

    assert release.content.payload["recommendations"] == [INVENTED]
