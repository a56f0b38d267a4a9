"""EvidenceGuard: deterministic verification of every citation in a draft. No model involved.

A claim passes only if it cites at least one invocation, every cited ``tool_call_id`` is a READY
canonical invocation of *this* run, and every quote occurs (normalised) in that invocation's raw
result, is long enough to mean something, and is not text addressed to an assistant.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from harness.draft import Draft
from harness.guards.injection import looks_like_instruction
from harness.guards.quotes import MIN_QUOTE_WEIGHT, EvidenceText, quote_weight
from harness.ports import CanonicalInvocation, InvocationStatus, InvocationStore
from harness.tools.spec import CitationFields


@dataclass(frozen=True, slots=True)
class Finding:
    code: str
    message: str
    claim: int | None = None
    citation: int | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"code": self.code, "claim": self.claim, "citation": self.citation, "message": self.message}


@dataclass(frozen=True, slots=True)
class GuardResult:
    passed: bool
    findings: tuple[Finding, ...] = ()

    @property
    def codes(self) -> tuple[str, ...]:
        return tuple(sorted({f.code for f in self.findings}))


@dataclass(frozen=True, slots=True)
class VerifiedCitation:
    tool_call_id: str
    tool: str
    quote: str
    excerpt: str
    #: the identifying fields of the record the quote is in (a flag such as ``approved`` stays a bool)
    source: Mapping[str, str | bool]


@dataclass(frozen=True, slots=True)
class EvidenceCheck:
    result: GuardResult
    #: per claim, its verified citations (only meaningful when the result passed)
    citations: tuple[tuple[VerifiedCitation, ...], ...]


class EvidenceGuard:
    """``citations``: per tool, the fields that say where a quote came from (``CitationFields``)."""

    def __init__(
        self,
        store: InvocationStore,
        *,
        citations: Mapping[str, CitationFields] | None = None,
        min_quote_weight: int = MIN_QUOTE_WEIGHT,
    ) -> None:
        self._store = store
        self._citations = dict(citations or {})
        self._min_weight = min_quote_weight

    def check(self, run_id: str, draft: Draft) -> EvidenceCheck:
        findings: list[Finding] = []
        texts: dict[str, EvidenceText] = {}
        verified: list[tuple[VerifiedCitation, ...]] = []
        if not draft.conclusion.strip():
            findings.append(Finding("no_conclusion", "The draft has no conclusion."))
        if not draft.claims:
            findings.append(Finding("no_claims", "The draft makes no claim that evidence could support."))
        for ci, claim in enumerate(draft.claims):
            if not claim.citations:
                findings.append(Finding("claim_without_citation", "The claim cites no evidence.", ci))
            good: list[VerifiedCitation] = []
            for qi, citation in enumerate(claim.citations):
                invocation = self._store.get(run_id, citation.tool_call_id)
                problem = self._invocation_problem(run_id, invocation)
                if problem is not None:
                    findings.append(Finding(problem[0], problem[1], ci, qi))
                    continue
                assert invocation is not None
                if quote_weight(citation.quote) < self._min_weight:
                    findings.append(Finding("quote_too_short", "The quote is too short to identify evidence.", ci, qi))
                    continue
                text = texts.get(citation.tool_call_id)
                if text is None:
                    text = texts[citation.tool_call_id] = EvidenceText(invocation.raw_result)
                match = text.find(citation.quote)
                if match is None:
                    findings.append(Finding("quote_not_found", "The quote does not occur in the cited result.", ci, qi))
                    continue
                if any(looks_like_instruction(leaf) for leaf in match.leaves):
                    findings.append(
                        Finding("instruction_like_evidence", "The quoted text addresses an assistant; it is not evidence.", ci, qi)
                    )  # fmt: skip
                    continue
                source = _source(match.record, self._citations.get(invocation.tool, CitationFields()).source)
                good.append(
                    VerifiedCitation(citation.tool_call_id, invocation.tool, citation.quote, match.excerpt, source)
                )
            verified.append(tuple(good))
        return EvidenceCheck(GuardResult(not findings, tuple(findings)), tuple(verified))

    @staticmethod
    def _invocation_problem(run_id: str, invocation: CanonicalInvocation | None) -> tuple[str, str] | None:
        if invocation is None:
            return "unknown_invocation", "No tool call of this run has that id."
        if invocation.run_id != run_id:
            return "foreign_invocation", "The cited call belongs to another run."
        if invocation.status is not InvocationStatus.READY:
            return "invocation_not_ready", "The cited call did not return a usable result."
        return None


def _source(record: Mapping[str, Any], fields: tuple[str, ...]) -> dict[str, str | bool]:
    """Where a quote came from: the identifying fields of the record that holds it."""
    out: dict[str, str | bool] = {}
    for key in fields:
        value = record.get(key)
        if isinstance(value, bool):
            out[key] = value
            continue
        if isinstance(value, list | tuple):
            value = ", ".join(str(v) for v in value)
        if value not in (None, ""):
            out[key] = str(value)[:200]
    return out
