"""The offline semantic reviewer: does each claim say only what its excerpts say?

Lexical, and deliberately strict: every quoted passage in a statement must occur in that claim's
excerpts, most of the statement's meaningful words must come from its excerpts or their context
(service, time, document), and the conclusion and root cause must be made of words the evidence
contains. Numbers and timestamps are not compared (the reviewer cannot count).
"""

from __future__ import annotations

import json
import re
from collections.abc import Set as AbstractSet
from typing import Any

from harness.guards.injection import looks_like_instruction
from harness.guards.quotes import normalise
from harness.llm.offline.conversation import loads
from harness.llm.offline.lexicon import salient

MIN_COVERAGE = 0.6
_QUOTED = re.compile(r"[“\"]([^”\"]{6,})[”\"]")


def _coverage(text: str, support: AbstractSet[str]) -> float:
    words = salient(text)
    return 1.0 if not words else len(words & support) / len(words)


def review(payload_text: str | None) -> str:
    payload = loads(payload_text)
    if not isinstance(payload, dict) or not isinstance(payload.get("claims"), list):
        return json.dumps({"verdict": "REJECT", "issues": ["the draft could not be read"]})
    issues: list[str] = []
    everything: set[str] = set()
    for i, claim in enumerate(payload["claims"], start=1):
        evidence: list[dict[str, Any]] = (
            [e for e in claim.get("evidence", []) if isinstance(e, dict)] if isinstance(claim, dict) else []
        )
        statement = str(claim.get("statement", "")) if isinstance(claim, dict) else ""
        excerpts = " ".join(str(e.get("excerpt", "")) for e in evidence)
        context = " ".join(str(v) for e in evidence for v in (e.get("context") or {}).values())
        support = salient(f"{excerpts} {context}")
        everything |= support
        if not evidence:
            issues.append(f"claim {i} has no evidence")
            continue
        if looks_like_instruction(excerpts):
            issues.append(f"claim {i} relies on text addressed to an assistant")
        for quoted in _QUOTED.findall(statement):
            if normalise(quoted) not in normalise(excerpts):
                issues.append(f"claim {i} quotes text that is not in its evidence")
                break
        if (
            _coverage(_QUOTED.sub(" ", statement), support) < MIN_COVERAGE
            or _coverage(statement, support) < MIN_COVERAGE
        ):
            issues.append(f"claim {i} says more than its evidence supports")
    for field in ("root_cause", "conclusion"):
        text = str(payload.get(field, ""))
        if text and _coverage(text, everything) < MIN_COVERAGE:
            issues.append(f"the {field.replace('_', ' ')} is not supported by the claims' evidence")
    verdict = "REJECT" if issues else "PASS"
    return json.dumps({"verdict": verdict, "issues": issues}, ensure_ascii=False)
