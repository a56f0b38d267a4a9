"""The diagnosis draft the agent writes, and its strict parser.

The draft is internal: it carries ``tool_call_id`` citations that never leave the harness. It
is parsed strictly (one JSON object, exactly these fields); the only leniency is a single
Markdown code fence around the object, which models add out of habit.
"""

from __future__ import annotations

import json
import re
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, str_strip_whitespace=True)


class Citation(_Strict):
    tool_call_id: Annotated[str, Field(min_length=1, max_length=100)]
    quote: Annotated[str, Field(min_length=1, max_length=1000)]


class Claim(_Strict):
    statement: Annotated[str, Field(min_length=1, max_length=2000)]
    citations: Annotated[tuple[Citation, ...], Field(max_length=8)]


class Draft(_Strict):
    conclusion: Annotated[str, Field(max_length=2000)]
    root_cause: Annotated[str, Field(max_length=2000)]
    claims: Annotated[tuple[Claim, ...], Field(max_length=20)]
    recommendations: Annotated[tuple[Annotated[str, Field(max_length=1000)], ...], Field(max_length=10)] = ()
    limitations: Annotated[tuple[Annotated[str, Field(max_length=1000)], ...], Field(max_length=10)] = ()


DRAFT_SCHEMA_HINT = json.dumps(
    {
        "conclusion": "one or two sentences",
        "root_cause": "the cause the evidence supports, or empty if it supports none",
        "claims": [
            {
                "statement": "a factual finding",
                "citations": [{"tool_call_id": "call_...", "quote": "exact text from that result"}],
            }
        ],
        "recommendations": ["..."],
        "limitations": ["..."],
    },
    ensure_ascii=False,
)

_FENCE = re.compile(r"^```(?:json)?\s*\n(?P<body>.*)\n```$", re.DOTALL)


class DraftFormatError(Exception):
    """The reply is not a valid draft. ``problem`` is safe to tell the model."""

    def __init__(self, problem: str) -> None:
        self.problem = problem
        super().__init__(problem)


def strip_code_fence(text: str) -> str:
    """The text inside one Markdown code fence wrapping the whole reply, else the text itself."""
    body = text.strip()
    fenced = _FENCE.match(body)
    return fenced.group("body").strip() if fenced else body


def parse_draft(text: str | None) -> Draft:
    if not text or not text.strip():
        raise DraftFormatError("the reply was empty")
    body = strip_code_fence(text)
    try:
        return Draft.model_validate_json(body)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False, include_context=False)
        where = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(root)'}: {e['msg']}" for e in errors[:5])
        raise DraftFormatError(f"the reply is not a valid draft ({where})") from None
