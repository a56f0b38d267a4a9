"""Recommendations are grounded like claims: each one released comes from a source the team
stands behind — a runbook the run was given, or a section of an approved document that a
knowledge lookup of this very run returned. The rest are withheld, and the report says so.

A recommendation comes from a source when the source holds it (after normalising case, width
and spacing), or when one sentence of the source holds at least ``MIN_OVERLAP`` of its content
words (a model rephrases; it does not invent a fifth of the words it is given), and says "not"
only where the sentence does too (stopwords drop negations, which flip advice). A
recommendation that addresses an assistant is never released, whatever holds it. Exact by
construction: word sets and substring tests, no scores that depend on the machine.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness.guards.injection import looks_like_instruction
from harness.guards.quotes import normalise
from harness.text import content_tokens

#: The share of a recommendation's content words one source sentence must hold.
MIN_OVERLAP = 0.8
#: A recommendation with fewer content words than this must appear verbatim.
MIN_WORDS = 3
_SENTENCE = re.compile(r"(?<=[.!?。！？；;])\s+|\n+")
_NEGATION = re.compile(r"\b(?:not|no|never|don't|do not|without|avoid)\b|[不别勿未没]", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class RecommendationCheck:
    kept: tuple[str, ...]
    withheld: int


@dataclass(frozen=True, slots=True)
class _Source:
    text: str
    #: each sentence's content words, and whether it negates
    sentences: tuple[tuple[frozenset[str], bool], ...]


def _source(text: str) -> _Source:
    sentences = tuple(
        (frozenset(content_tokens(s)), _NEGATION.search(s) is not None) for s in _SENTENCE.split(text) if s.strip()
    )
    return _Source(normalise(text), sentences)


def check_recommendations(recommendations: Sequence[str], sources: Iterable[str]) -> RecommendationCheck:
    """The recommendations that come from ``sources`` (in their order), and how many did not."""
    prepared = [_source(text) for text in sources if text and text.strip()]
    kept = tuple(r for r in recommendations if _grounded(r, prepared))
    return RecommendationCheck(kept, len(recommendations) - len(kept))


def _grounded(recommendation: str, sources: Sequence[_Source]) -> bool:
    if not recommendation.strip() or looks_like_instruction(recommendation):
        return False
    needle = normalise(recommendation).rstrip(".。!！")
    if any(needle in source.text for source in sources):
        return True
    words = frozenset(content_tokens(recommendation))
    if len(words) < MIN_WORDS:
        return False
    need = MIN_OVERLAP * len(words)
    negates = _NEGATION.search(recommendation) is not None
    return any(
        len(words & sentence) >= need and negated == negates
        for source in sources
        for sentence, negated in source.sentences
    )


def approved_knowledge_texts(raw_results: Iterable[Any]) -> list[str]:
    """The chunk texts of ``lookup_knowledge`` results that come from approved documents
    (a chunk that does not say is approved: the runbooks and the operator's documents)."""
    texts: list[str] = []
    for raw in raw_results:
        chunks = raw.get("chunks", ()) if isinstance(raw, Mapping) else ()
        for chunk in chunks:
            if (
                isinstance(chunk, Mapping)
                and chunk.get("approved", True) is True
                and isinstance(chunk.get("text"), str)
            ):
                texts.append(chunk["text"])
    return texts
