"""SemanticGuard: an isolated model review of the draft against the excerpts it cites.

Isolated means: a fresh conversation of two messages (instructions, then the draft with its
evidence excerpts), no tools, no agent history, no memory. The verdict is parsed strictly; an
unparseable reply or an unavailable model is *not* a PASS.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from harness.draft import Draft, strip_code_fence
from harness.errors import ModelError
from harness.guards.evidence import EvidenceCheck
from harness.llm.base import Message, ModelRole, Purpose
from harness.llm.call import ModelCaller
from harness.prompts import SEMANTIC_GUARD


class Verdict(enum.StrEnum):
    PASS = "PASS"  # noqa: S105 - a verdict, not a password
    REJECT = "REJECT"
    UNPARSEABLE = "UNPARSEABLE"
    UNAVAILABLE = "UNAVAILABLE"


class _VerdictReply(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    verdict: Literal["PASS", "REJECT"]
    issues: Annotated[list[Annotated[str, Field(max_length=1000)]], Field(max_length=20)]


@dataclass(frozen=True, slots=True)
class SemanticResult:
    verdict: Verdict
    issues: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        return self.verdict is Verdict.PASS


def review_payload(draft: Draft, check: EvidenceCheck) -> str:
    """What the reviewer sees: the draft's text and, per claim, its verified excerpts only."""
    claims = [
        {
            "statement": claim.statement,
            "evidence": [{"tool": c.tool, "excerpt": c.excerpt, "context": dict(c.source)} for c in citations],
        }
        for claim, citations in zip(draft.claims, check.citations, strict=True)
    ]
    return json.dumps(
        {
            "conclusion": draft.conclusion,
            "root_cause": draft.root_cause,
            "recommendations": list(draft.recommendations),
            "claims": claims,
        },
        ensure_ascii=False,
    )


class SemanticGuard:
    def review(self, caller: ModelCaller, draft: Draft, check: EvidenceCheck) -> SemanticResult:
        messages = [Message.system(SEMANTIC_GUARD), Message.user(review_payload(draft, check))]
        try:
            response = caller.call(ModelRole.GUARD, Purpose.SEMANTIC_REVIEW, messages, json_output=True)
        except ModelError:
            return SemanticResult(Verdict.UNAVAILABLE)
        return parse_verdict(response.content)


def parse_verdict(text: str | None) -> SemanticResult:
    try:
        reply = _VerdictReply.model_validate_json(strip_code_fence(text or ""))
    except ValidationError:
        return SemanticResult(Verdict.UNPARSEABLE)
    if reply.verdict == "PASS" and reply.issues:
        # A PASS that lists issues is not a clean verdict.
        return SemanticResult(Verdict.REJECT, tuple(reply.issues))
    return SemanticResult(Verdict(reply.verdict), tuple(reply.issues))
