"""PublishedResult and PreviousTurn: the only memory a session has, and all of its limits.

A successful DIAGNOSIS run stores a small PublishedResult (its question, conclusion, root cause,
limitations and knowledge sources). The next run in the session reads it back as a bounded
PreviousTurn for the agent. Nothing else of a run is ever remembered; anything malformed is
forgotten (``None``), never half-trusted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class MemoryLimits:
    query_chars: int = 500
    conclusion_chars: int = 1_000
    root_cause_chars: int = 1_000
    limitations: int = 10
    limitation_chars: int = 500
    sources: int = 10
    source_field_chars: int = 200
    router_query_chars: int = 500


LIMITS = MemoryLimits()
_SOURCE_KEYS = ("document_id", "title", "section")


def _text(value: Any, limit: int) -> str | None:
    return value.strip()[:limit] if isinstance(value, str) else None


@dataclass(frozen=True, slots=True)
class PublishedResult:
    query: str
    conclusion: str
    root_cause: str
    limitations: tuple[str, ...]
    sources: tuple[Mapping[str, str], ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "query": self.query,
            "conclusion": self.conclusion,
            "root_cause": self.root_cause,
            "limitations": list(self.limitations),
            "sources": [dict(s) for s in self.sources],
        }


#: The agent sees exactly what was published, bounded the same way.
PreviousTurn = PublishedResult


class PublishedResultPolicy:
    def __init__(self, limits: MemoryLimits = LIMITS) -> None:
        self.limits = limits

    def from_report(self, query: str, report: Mapping[str, Any]) -> PublishedResult | None:
        """Build what a successful diagnosis leaves behind; ``None`` without a conclusion."""
        return self._build({**report, "query": query})

    def previous_turn(self, stored: Mapping[str, Any] | None) -> PreviousTurn | None:
        """Read a stored PublishedResult back, bounded; invalid or empty means no memory."""
        return self._build(stored) if isinstance(stored, Mapping) else None

    def _build(self, data: Mapping[str, Any]) -> PublishedResult | None:
        lim = self.limits
        query = _text(data.get("query"), lim.query_chars)
        conclusion = _text(data.get("conclusion"), lim.conclusion_chars)
        root_cause = _text(data.get("root_cause", ""), lim.root_cause_chars)
        limitations = data.get("limitations", [])
        sources = data.get("sources", [])
        if not query or not conclusion or root_cause is None:
            return None
        if not isinstance(limitations, list | tuple) or not isinstance(sources, list | tuple):
            return None
        bounded_limitations = []
        for item in limitations[: lim.limitations]:
            text = _text(item, lim.limitation_chars)
            if text is None:
                return None
            bounded_limitations.append(text)
        bounded_sources: dict[str, Mapping[str, str]] = {}
        for source in sources:
            if not isinstance(source, Mapping):
                return None
            if "document_id" not in source:
                continue  # not a document (only documents are remembered)
            if any(not isinstance(source[k], str) for k in _SOURCE_KEYS if k in source):
                return None
            entry = {k: t for k in _SOURCE_KEYS if (t := _text(source.get(k), lim.source_field_chars))}
            if entry.get("document_id"):
                bounded_sources.setdefault(entry["document_id"], entry)
        return PublishedResult(
            query,
            conclusion,
            root_cause,
            tuple(bounded_limitations),
            tuple(list(bounded_sources.values())[: lim.sources]),
        )
