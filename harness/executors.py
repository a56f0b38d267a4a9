"""The three fixed executors, one per intent. Each returns a Release (never an unverified draft).

- SystemChat: one model call with the fixed capability prompt; no tools, no history.
- KnowledgeQuery: exactly one ``lookup_knowledge``; ``no_evidence`` gives the fixed answer; else
  one model call whose answer may cite only the document ids the lookup returned.
- Diagnosis: the agent, then EvidenceGuard (with at most one EvidenceRepair), SemanticGuard and
  the release policy.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Annotated, Any, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from harness.agent import DiagnosisAgent
from harness.context import Outcome
from harness.draft import Draft, strip_code_fence
from harness.errors import HarnessError, ModelResponseInvalid
from harness.guards.evidence import EvidenceGuard, GuardResult
from harness.guards.recommendations import approved_knowledge_texts, check_recommendations
from harness.guards.repair import EvidenceRepair
from harness.guards.semantic import SemanticGuard, Verdict
from harness.llm.base import Message, ModelRole, Purpose, ToolCall
from harness.memory import PreviousTurn, PublishedResultPolicy
from harness.ports import InvocationStatus, RunbookSource, Stage, TimelineCategory
from harness.prompts import KNOWLEDGE_ANSWER, SYSTEM_CHAT
from harness.release import ContentType, FallbackReason, PublishedContent, Release, ReleasePolicy
from harness.scope import RunScope
from harness.text import has_cjk
from harness.tools.evidence import LOOKUP_KNOWLEDGE

SYSTEM_CHAT_MAX_CHARS = 4_000


class Executor(Protocol):
    def execute(self, scope: RunScope, question: str, previous_turn: PreviousTurn | None) -> Release: ...


class KnowledgeUnavailable(HarnessError):
    code = "knowledge_unavailable"
    safe_message = "The knowledge base could not be searched."


class SystemChatExecutor:
    def execute(self, scope: RunScope, question: str, previous_turn: PreviousTurn | None) -> Release:
        messages = [Message.system(SYSTEM_CHAT), Message.user(question)]
        response = scope.caller.call(ModelRole.AGENT, Purpose.SYSTEM_CHAT, messages)
        text = (response.content or "").strip()
        if not text:
            raise ModelResponseInvalid()
        payload: dict[str, Any] = {"text": text[:SYSTEM_CHAT_MAX_CHARS]}
        if response.finish_reason == "length" or len(text) > SYSTEM_CHAT_MAX_CHARS:
            # cut short (by the provider's token limit or ours): said so, not passed off as whole
            payload = {"text": payload["text"].rstrip()[: SYSTEM_CHAT_MAX_CHARS - 1] + "…", "truncated": True}
        return Release(Outcome.SUCCESS, PublishedContent(ContentType.SYSTEM_CHAT, payload))


class _KnowledgeReply(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, str_strip_whitespace=True)

    answer: Annotated[str, Field(min_length=1, max_length=6_000)]
    cited_document_ids: Annotated[list[Annotated[str, Field(max_length=200)]], Field(min_length=1, max_length=8)]


class KnowledgeQueryExecutor:
    def __init__(self, release: ReleasePolicy, *, top_k: int = 5) -> None:
        self._release = release
        self._top_k = top_k

    def execute(self, scope: RunScope, question: str, previous_turn: PreviousTurn | None) -> Release:
        boundary = scope.boundary
        if LOOKUP_KNOWLEDGE not in boundary.tool_names:
            return self._release.fallback(FallbackReason.NO_KNOWLEDGE_EVIDENCE, boundary.observations)
        scope.status(Stage.KNOWLEDGE_LOOKUP)
        arguments = json.dumps({"query": question[:500], "top_k": self._top_k}, ensure_ascii=False)
        (call,) = boundary.issue([ToolCall("", LOOKUP_KNOWLEDGE, arguments)])
        observation = boundary.invoke(call)
        if observation.status is not InvocationStatus.READY:
            raise KnowledgeUnavailable()
        if observation.evidence_status != "ok":
            return self._release.fallback(FallbackReason.NO_KNOWLEDGE_EVIDENCE, boundary.observations)
        view = json.loads(observation.content)["result"]
        # provenance: False for a document only the asker sees (their own, not yet approved)
        approved = {c.get("document_id"): c.get("approved") is not False for c in view.get("chunks", [])}
        chunks = [
            {k: chunk.get(k) for k in ("document_id", "title", "section", "text")} for chunk in view.get("chunks", [])
        ]
        messages = [
            Message.system(KNOWLEDGE_ANSWER),
            Message.user(json.dumps({"question": question, "chunks": chunks}, ensure_ascii=False)),
        ]
        response = scope.caller.call(ModelRole.AGENT, Purpose.KNOWLEDGE_ANSWER, messages, json_output=True)
        by_id = {c["document_id"]: c for c in chunks}
        try:
            reply = _KnowledgeReply.model_validate_json(strip_code_fence(response.content or ""))
        except ValidationError:
            reply = None
        cited = list(dict.fromkeys(reply.cited_document_ids)) if reply else []
        if reply is None or any(doc_id not in by_id for doc_id in cited):
            scope.audit.event(TimelineCategory.EVIDENCE, "knowledge.answer_rejected", parsed=reply is not None)
            return self._release.fallback(FallbackReason.KNOWLEDGE_ANSWER_INVALID, boundary.observations)
        sources = [
            {**{k: by_id[d][k] for k in ("document_id", "title", "section")}, "approved": approved[d]} for d in cited
        ]
        scope.audit.event(TimelineCategory.EVIDENCE, "knowledge.answer_verified", sources=len(sources))
        return Release(
            Outcome.SUCCESS,
            PublishedContent(ContentType.KNOWLEDGE_ANSWER, {"answer": reply.answer, "sources": sources}),
        )


class DiagnosisExecutor:
    def __init__(
        self,
        *,
        agent: DiagnosisAgent,
        evidence_guard: EvidenceGuard,
        repair: EvidenceRepair,
        semantic_guard: SemanticGuard,
        release: ReleasePolicy,
        memory: PublishedResultPolicy,
        runbooks: RunbookSource | None,
        runbook_limit: int = 3,
    ) -> None:
        self._agent = agent
        self._evidence = evidence_guard
        self._repair = repair
        self._semantic = semantic_guard
        self._release = release
        self._memory = memory
        self._runbooks = runbooks
        self._runbook_limit = runbook_limit

    def execute(self, scope: RunScope, question: str, previous_turn: PreviousTurn | None) -> Release:
        observations = scope.boundary.observations
        runbooks: Sequence[Any] = self._runbooks.match(question, limit=self._runbook_limit) if self._runbooks else ()
        scope.audit.event(
            TimelineCategory.AGENT, "agent.started", runbooks=len(runbooks), previous_turn=previous_turn is not None,
            runbook_titles=" | ".join(str(getattr(r, "title", "")) for r in runbooks)[:500],
        )  # fmt: skip
        outcome = self._agent.run(scope, question, previous_turn, runbooks)
        draft = outcome.draft
        if draft is None:
            return self._release.fallback(FallbackReason.DRAFT_INVALID, observations)
        if not draft.claims or not draft.root_cause.strip():
            # The agent itself found no supported cause: that is an honest fallback, not a report.
            scope.audit.event(TimelineCategory.EVIDENCE, "evidence.no_conclusion", claims=len(draft.claims))
            return self._release.fallback(FallbackReason.INSUFFICIENT_EVIDENCE, observations)

        scope.status(Stage.EVIDENCE_CHECK)
        check = self._evidence.check(scope.run_id, draft)
        scope.audit.event(
            TimelineCategory.EVIDENCE, "evidence.checked",
            passed=check.result.passed, findings=len(check.result.findings), codes=",".join(check.result.codes),
        )  # fmt: skip
        _record_findings(scope, check.result)
        if not check.result.passed:
            scope.status(Stage.EVIDENCE_REPAIR)
            repaired = self._repair.repair(scope.caller, outcome.conversation, draft, check.result)
            if repaired is None or not repaired.claims or not repaired.root_cause.strip():
                scope.audit.event(TimelineCategory.EVIDENCE, "evidence.repair_failed", parsed=repaired is not None)
                return self._release.fallback(FallbackReason.EVIDENCE_REJECTED, observations)
            draft = repaired
            check = self._evidence.check(scope.run_id, draft)
            scope.audit.event(
                TimelineCategory.EVIDENCE, "evidence.rechecked",
                passed=check.result.passed, findings=len(check.result.findings), codes=",".join(check.result.codes),
            )  # fmt: skip
            _record_findings(scope, check.result)
            if not check.result.passed:
                return self._release.fallback(FallbackReason.EVIDENCE_REJECTED, observations)

        draft = _grounded_recommendations(scope, draft, runbooks, question)
        scope.status(Stage.SEMANTIC_REVIEW)
        semantic = self._semantic.review(scope.caller, draft, check)
        scope.audit.event(
            TimelineCategory.SEMANTIC, "semantic.reviewed", verdict=semantic.verdict.value, issues=len(semantic.issues)
        )
        if not semantic.passed:
            reason = (
                FallbackReason.SEMANTIC_REJECTED
                if semantic.verdict is Verdict.REJECT
                else FallbackReason.SEMANTIC_UNAVAILABLE
            )
            return self._release.fallback(reason, observations)

        release = self._release.diagnosis(draft, check, observations)
        published = self._memory.from_report(question, release.content.payload)
        return Release(release.outcome, release.content, None, published.to_dict() if published else None)


#: The draft's limit on limitations (harness.draft.Draft).
MAX_LIMITATIONS = 10
#: Findings kept per check in the timeline: enough to see which claims failed and why.
MAX_FINDING_EVENTS = 20


def _record_findings(scope: RunScope, result: GuardResult) -> None:
    """Each finding of the evidence guard as a timeline event: its code and the claim and
    citation it is about (numbers only: the claim's text is the model's and stays out)."""
    for finding in result.findings[:MAX_FINDING_EVENTS]:
        scope.audit.event(
            TimelineCategory.EVIDENCE,
            "evidence.finding",
            code=finding.code,
            claim=finding.claim,
            citation=finding.citation,
        )


def _grounded_recommendations(scope: RunScope, draft: Draft, runbooks: Sequence[Any], question: str) -> Draft:
    """The draft with only the recommendations a runbook of this run, or an approved document
    section one of its knowledge lookups returned, supports; a note says how many were withheld."""
    if not draft.recommendations:
        return draft
    raws = []
    for observation in scope.boundary.observations:
        if observation.tool == LOOKUP_KNOWLEDGE and observation.status is InvocationStatus.READY:
            try:
                invocation = scope.invocations.get(scope.run_id, observation.tool_call_id)
            except Exception:  # noqa: BLE001 - an unreadable result supports nothing
                invocation = None
            if invocation is not None:
                raws.append(invocation.raw_result)
    sources = [str(getattr(r, "body", "")) for r in runbooks] + approved_knowledge_texts(raws)
    check = check_recommendations(draft.recommendations, sources)
    scope.audit.event(
        TimelineCategory.EVIDENCE, "recommendations.checked", kept=len(check.kept), withheld=check.withheld
    )
    if not check.withheld:
        return draft
    note = (
        f"有 {check.withheld} 条建议没有运行手册或已批准文档的依据，未予发布。"
        if has_cjk(question)
        else f"{check.withheld} recommendation(s) withheld: no runbook or approved document consulted in this run supports them."
    )
    limitations = (*draft.limitations[: MAX_LIMITATIONS - 1], note)
    return draft.model_copy(update={"recommendations": check.kept, "limitations": limitations})
