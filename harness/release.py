"""Release: what a run publishes, and the rule that only verified content is ever published.

- PASS of both guards → ``success`` with the report view (statements, verified quotes and their
  sources; no call ids, no raw payloads).
- a guard rejection → ``fallback`` with the fixed SafeFallback (what was consulted, no claims).
- a technical failure → ``failed`` with a stable code; a cancel → ``cancelled``.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.context import Outcome, RunStatus, UsageSnapshot
from harness.draft import Draft
from harness.guards.evidence import EvidenceCheck
from harness.ports import InvocationStatus
from harness.tools.boundary import ToolObservation
from harness.tools.spec import CitationFields


class ContentType(enum.StrEnum):
    SYSTEM_CHAT = "system_chat"
    KNOWLEDGE_ANSWER = "knowledge_answer"
    DIAGNOSIS_REPORT = "diagnosis_report"
    SAFE_FALLBACK = "safe_fallback"


@dataclass(frozen=True, slots=True)
class PublishedContent:
    content_type: ContentType
    payload: Mapping[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"content_type": self.content_type.value, "payload": dict(self.payload)}


@dataclass(frozen=True, slots=True)
class Failure:
    code: str
    message: str


@dataclass(frozen=True, slots=True)
class RunResult:
    run_id: str
    session_id: str
    status: RunStatus
    outcome: Outcome
    intent: str | None = None
    content: PublishedContent | None = None
    failure: Failure | None = None
    fallback_reason: str | None = None
    usage: UsageSnapshot = field(default_factory=UsageSnapshot)
    duration_ms: float = 0.0
    #: of ``duration_ms``: time inside model providers, and inside evidence backends
    model_ms: float = 0.0
    backend_ms: float = 0.0
    published_result: Mapping[str, Any] | None = None


class FallbackReason(enum.StrEnum):
    INSUFFICIENT_EVIDENCE = "insufficient_evidence"
    EVIDENCE_REJECTED = "evidence_rejected"
    SEMANTIC_REJECTED = "semantic_rejected"
    SEMANTIC_UNAVAILABLE = "semantic_unavailable"
    DRAFT_INVALID = "draft_invalid"
    NO_KNOWLEDGE_EVIDENCE = "no_knowledge_evidence"
    KNOWLEDGE_ANSWER_INVALID = "knowledge_answer_invalid"


_FALLBACK_MESSAGES = {
    FallbackReason.INSUFFICIENT_EVIDENCE: (
        "The evidence gathered does not support a conclusion, so no diagnosis is published. "
        "Check the sources consulted below, or add logs, documents or data for the affected service."
    ),
    FallbackReason.EVIDENCE_REJECTED: (
        "A diagnosis was drafted but its claims could not be verified against the evidence "
        "gathered, so it is not published."
    ),
    FallbackReason.SEMANTIC_REJECTED: (
        "A diagnosis was drafted but an independent review found it was not supported by its "
        "evidence, so it is not published."
    ),
    FallbackReason.SEMANTIC_UNAVAILABLE: (
        "A diagnosis was drafted but could not be independently reviewed, so it is not published."
    ),
    FallbackReason.DRAFT_INVALID: (
        "The diagnosis could not be completed in a verifiable form, so nothing is published."
    ),
    FallbackReason.NO_KNOWLEDGE_EVIDENCE: (
        "The knowledge base has nothing that answers this question, so no answer is given."
    ),
    FallbackReason.KNOWLEDGE_ANSWER_INVALID: (
        "An answer could not be grounded in the knowledge base documents, so none is given."
    ),
}


@dataclass(frozen=True, slots=True)
class Release:
    outcome: Outcome
    content: PublishedContent
    fallback_reason: FallbackReason | None = None
    published_result: Mapping[str, Any] | None = None


def consulted(observations: Sequence[ToolObservation]) -> list[dict[str, Any]]:
    """Per tool: how many calls, how many returned a usable result and how many had evidence."""
    summary: dict[str, dict[str, Any]] = {}
    for obs in observations:
        entry = summary.setdefault(obs.tool, {"tool": obs.tool, "calls": 0, "succeeded": 0, "with_evidence": 0})
        entry["calls"] += 1
        if obs.status is InvocationStatus.READY:
            entry["succeeded"] += 1
            if obs.evidence_status == "ok":
                entry["with_evidence"] += 1
    return list(summary.values())


class ReleasePolicy:
    """``citations``: per tool, what the report shows of a quote's source (``CitationFields``)."""

    def __init__(self, citations: Mapping[str, CitationFields] | None = None) -> None:
        self._citations = dict(citations or {})

    def fallback(self, reason: FallbackReason, observations: Sequence[ToolObservation]) -> Release:
        payload = {"reason": reason.value, "message": _FALLBACK_MESSAGES[reason], "consulted": consulted(observations)}
        return Release(Outcome.FALLBACK, PublishedContent(ContentType.SAFE_FALLBACK, payload), reason)

    def diagnosis(self, draft: Draft, check: EvidenceCheck, observations: Sequence[ToolObservation]) -> Release:
        """The report view of a draft that passed both guards."""
        if not check.result.passed:
            raise ValueError("only a verified draft can be released")
        findings = []
        sources: list[dict[str, str | bool]] = []
        for claim, citations in zip(draft.claims, check.citations, strict=True):
            evidence = []
            for c in citations:
                fields = self._citations.get(c.tool, CitationFields())
                evidence.append({"tool": c.tool, "quote": c.quote, **_pick(c.source, fields.shown)})
                if fields.reference and fields.reference[0] in c.source:
                    source = _pick(c.source, fields.reference)
                    if source not in sources:
                        sources.append(source)
            findings.append({"statement": claim.statement, "evidence": evidence})
        payload = {
            "conclusion": draft.conclusion,
            "root_cause": draft.root_cause,
            "findings": findings,
            "recommendations": list(draft.recommendations),
            "limitations": list(draft.limitations),
            "sources": sources,
            "consulted": consulted(observations),
        }
        return Release(Outcome.SUCCESS, PublishedContent(ContentType.DIAGNOSIS_REPORT, payload))


def _pick(source: Mapping[str, str | bool], fields: Sequence[str]) -> dict[str, str | bool]:
    return {k: source[k] for k in fields if k in source}
