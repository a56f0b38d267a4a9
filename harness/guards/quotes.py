"""Finding a quoted excerpt in a tool's raw result.

Matching is on normalised text (Unicode NFKC, case-folded, typographic quotes and dashes made
plain, every run of whitespace one space), over the scalar values of the raw result joined by
newlines. Keys are not searched: a quote must come from the evidence, not from its field names.
"""

from __future__ import annotations

import bisect
import re
import unicodedata
from collections.abc import Mapping
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
    if text.isascii():
        # The same result for ASCII, several times faster: NFKC and the typography table change
        # nothing, casefold is lower, and str.split() splits on exactly the characters \s does.
        return " ".join(text.lower().split())
    text = unicodedata.normalize("NFKC", text).translate(_TYPOGRAPHY).casefold()
    return _SPACE.sub(" ", text).strip()


def quote_weight(text: str) -> int:
    normalised = normalise(text)
    return len(normalised) + len(_CJK.findall(normalised))


_EMPTY: Mapping[str, Any] = {}


def _collect(value: Any, record: Mapping[str, Any], leaves: list[str], records: list[Mapping[str, Any]]) -> None:
    # Written out by hand (no generators, exact type checks first): it runs over every value of
    # every cited result.
    if type(value) is dict or isinstance(value, Mapping):
        items: Any = value.values()
        record = value
    elif type(value) is list or type(value) is tuple:
        items = value
    else:
        items = (value,)
    for item in items:
        kind = type(item)
        if kind is str:
            leaves.append(item)
            records.append(record)
        elif kind is int or kind is float:
            leaves.append(str(item))
            records.append(record)
        elif kind is bool:
            leaves.append("true" if item else "false")
            records.append(record)
        elif item is None:
            continue
        elif kind is dict or kind is list or kind is tuple or isinstance(item, Mapping | list | tuple):
            _collect(item, record, leaves, records)
        else:
            leaves.append(str(item))
            records.append(record)


def scalar_leaves(value: Any) -> list[tuple[str, Mapping[str, Any]]]:
    """Every scalar value of a JSON-like structure, depth first, as text, with its record
    (the innermost object that holds it: a chunk, a log line, the result itself)."""
    leaves: list[str] = []
    records: list[Mapping[str, Any]] = []
    _collect(value, _EMPTY, leaves, records)
    return list(zip(leaves, records, strict=True))


#: Fields that say where a value came from; a match inside a record with more of them is preferred
#: (a log line with its service and time over the masked template that summarises it).
IDENTIFYING_FIELDS = ("document_id", "title", "section", "service", "ts", "level")
_MAX_OCCURRENCES = 20


@dataclass(frozen=True, slots=True)
class QuoteMatch:
    #: every value the quote touches (one, or several adjacent ones such as the cells of a row)
    leaves: tuple[str, ...]
    excerpt: str
    record: Mapping[str, Any]


class EvidenceText:
    """The searchable text of one raw result."""

    EXCERPT_CHARS = 400

    def __init__(self, raw: Any) -> None:
        leaves: list[str] = []
        records: list[Mapping[str, Any]] = []
        _collect(raw, _EMPTY, leaves, records)
        self.leaves, self._records, self._starts = [], [], []
        normalised: list[str] = []
        position = 0
        for leaf, record in zip(leaves, records, strict=True):
            # normalise(), with its ASCII path written out: this runs over every value cited
            text = " ".join(leaf.lower().split()) if leaf.isascii() else normalise(leaf)
            if text:
                self.leaves.append(leaf)
                self._records.append(record)
                self._starts.append(position)
                normalised.append(text)
                position += len(text) + 1
        self.text = " ".join(normalised)

    def find(self, quote: str) -> QuoteMatch | None:
        needle = normalise(quote)
        if not needle:
            return None
        best: tuple[int, int, int] | None = None
        at = self.text.find(needle)
        for _ in range(_MAX_OCCURRENCES):
            if at < 0:
                break
            first = bisect.bisect_right(self._starts, at) - 1
            last = bisect.bisect_right(self._starts, at + len(needle) - 1) - 1
            record = self._records[first]
            richness = sum(1 for k in IDENTIFYING_FIELDS if isinstance(record.get(k), str | int | float))
            if best is None or richness > best[0]:
                best = (richness, first, last)
            if richness >= 3:
                break
            at = self.text.find(needle, at + 1)
        if best is None:
            return None
        _, first, last = best
        leaves = tuple(self.leaves[first : last + 1])
        limit = self.EXCERPT_CHARS if first == last else 2 * self.EXCERPT_CHARS
        return QuoteMatch(leaves, _excerpt(" ".join(leaves), quote, limit), self._records[first])


def _excerpt(text: str, quote: str, limit: int) -> str:
    """The text itself, or a window of it that contains the quote when the text is long."""
    if len(text) <= limit:
        return text
    words = quote.split()
    found = re.search(r"\s+".join(re.escape(w) for w in words), text, re.IGNORECASE) if words else None
    if found is None:
        # The quote matched only after normalisation (typography, Unicode forms): show the
        # normalised text, where the offsets are exact.
        text = normalise(text)
        at = max(text.find(normalise(quote)), 0)
        span = (at, at + len(normalise(quote)))
    else:
        span = found.span()
    room = max(limit - (span[1] - span[0]), 0)
    start = max(0, min(span[0] - room // 2, len(text) - limit))
    return text[start : start + limit]
