"""Finding a quoted excerpt in a tool's raw result.

Matching is on normalised text (Unicode NFKC, case-folded, typographic quotes and dashes made
plain, every run of whitespace one space), over the scalar values of the raw result joined by
newlines. Keys are not searched: a quote must come from the evidence, not from its field names.
"""

from __future__ import annotations

import bisect
import re
import unicodedata
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

_TYPOGRAPHY = str.maketrans(
    {
        "\u2018": "'", "\u2019": "'", "\u201a": "'", "\u201b": "'",
        "\u201c": '"', "\u201d": '"', "\u201e": '"', "\u201f": '"',
        "\u2013": "-", "\u2014": "-", "\u2212": "-",
        "\u00a0": " ",
    }
)  # fmt: skip
_SPACE = re.compile(r"\s+")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]")

#: A quote shorter than this (CJK characters count double) proves nothing: "error" is everywhere.
MIN_QUOTE_WEIGHT = 12


def normalise(text: str) -> str:
    text = unicodedata.normalize("NFKC", text).translate(_TYPOGRAPHY).casefold()
    return _SPACE.sub(" ", text).strip()


def quote_weight(text: str) -> int:
    normalised = normalise(text)
    return len(normalised) + len(_CJK.findall(normalised))


def scalar_leaves(value: Any, record: Mapping[str, Any] | None = None) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Every scalar value of a JSON-like structure, depth first, as text, with its record
    (the innermost object that holds it: a chunk, a log line, the result itself)."""
    if isinstance(value, Mapping):
        for item in value.values():
            yield from scalar_leaves(item, value)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from scalar_leaves(item, record)
    elif isinstance(value, bool):
        yield ("true" if value else "false"), record or {}
    elif value is not None:
        yield str(value), record or {}


@dataclass(frozen=True, slots=True)
class QuoteMatch:
    leaf: str
    excerpt: str
    record: Mapping[str, Any]


class EvidenceText:
    """The searchable text of one raw result."""

    EXCERPT_CHARS = 400

    def __init__(self, raw: Any) -> None:
        pairs = [(leaf, record) for leaf, record in scalar_leaves(raw) if leaf.strip()]
        self.leaves = [leaf for leaf, _ in pairs]
        self._records = [record for _, record in pairs]
        normalised = [normalise(leaf) for leaf in self.leaves]
        self._starts: list[int] = []
        position = 0
        for leaf in normalised:
            self._starts.append(position)
            position += len(leaf) + 1
        self.text = " ".join(normalised)

    def find(self, quote: str) -> QuoteMatch | None:
        needle = normalise(quote)
        if not needle:
            return None
        at = self.text.find(needle)
        if at < 0:
            return None
        first = bisect.bisect_right(self._starts, at) - 1
        last = bisect.bisect_right(self._starts, at + len(needle) - 1) - 1
        if first == last:
            leaf = self.leaves[first]
            return QuoteMatch(leaf, _excerpt(leaf, quote, self.EXCERPT_CHARS), self._records[first])
        # The quote spans adjacent values (e.g. the cells of one row): show all of them.
        span = " ".join(self.leaves[first : last + 1])
        return QuoteMatch(self.leaves[first], span[: 2 * self.EXCERPT_CHARS], self._records[first])


def _excerpt(leaf: str, quote: str, limit: int) -> str:
    """The leaf itself, or a window of it around the quote when the leaf is long."""
    if len(leaf) <= limit:
        return leaf
    # Offsets in normalised text are close to offsets in the leaf; centre the window on them.
    at = max(normalise(leaf).find(normalise(quote)), 0)
    start = max(0, min(at - limit // 4, len(leaf) - limit))
    return leaf[start : start + limit]
