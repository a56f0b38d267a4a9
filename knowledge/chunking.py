"""Chunking documents by their section headings.

Each section (a Markdown heading and what follows it, up to the next heading of the same or a
higher level) becomes one or more chunks. A section longer than the limits is split at
paragraph, then sentence boundaries; consecutive chunks of one section overlap by their
last sentence(s) (or, when the last sentence is longer than the overlap, its last words; never
more than half a chunk), so a fact that straddles a boundary is whole in at least one of them.
Every chunk keeps its heading path ("Runbook › Symptoms"). Limits are both in characters
and in tokens (words, and CJK characters one by one, as an embedding model counts them
roughly).

The same text, heading path first, feeds the lexical and the dense index (``search_text``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

_HEADING = re.compile(r"(#{1,6})\s+(.+)")
_SENTENCE_END = re.compile(r"(?<=[.!?。！？;；])\s+|(?<=[。！？；])")
_WORD = re.compile(r"[A-Za-z0-9_]+|[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]|[^\sA-Za-z0-9_]")
SEPARATOR = " › "


def count_tokens(text: str) -> int:
    return len(_WORD.findall(text))


@dataclass(frozen=True, slots=True)
class ChunkLimits:
    max_chars: int = 1_200
    max_tokens: int = 256
    overlap_chars: int = 200

    def __post_init__(self) -> None:
        if self.max_chars < 200 or self.max_tokens < 32 or not 0 <= self.overlap_chars < self.max_chars // 2:
            raise ValueError("chunk limits too small, or overlap too large for them")


@dataclass(frozen=True, slots=True)
class TextChunk:
    ordinal: int
    heading_path: str
    text: str

    @property
    def char_count(self) -> int:
        return len(self.text)

    @property
    def token_count(self) -> int:
        return count_tokens(self.text)


def search_text(title: str, heading_path: str, text: str) -> str:
    """What is indexed for a chunk: where it is, then what it says."""
    where = SEPARATOR.join(p for p in (title, heading_path) if p)
    return f"{where}\n{text}" if where else text


def _heading(line: str) -> tuple[int, str] | None:
    """A Markdown heading's level and title, without its closing marks ("## Title ##").

    The title is the shortest start of the rest that leaves only spaces and ``#`` behind;
    found with ``rstrip``, as a lazy regex would try every end, each against the whole run of
    spaces after it (cubic on a heading line full of them).
    """
    match = _HEADING.match(line)
    if match is None:
        return None
    rest = match.group(2)
    kept = len(rest.rstrip().rstrip("#").rstrip())
    return len(match.group(1)), rest[: max(1, kept)].strip()


def _sections(text: str) -> Iterator[tuple[str, str]]:
    """(heading path, body) per section, in order; text before any heading has no path."""
    path: list[tuple[int, str]] = []
    body: list[str] = []
    in_code = False

    def flush() -> tuple[str, str]:
        return SEPARATOR.join(title for _, title in path), "\n".join(body).strip()

    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            in_code = not in_code
        heading = None if in_code else _heading(line)
        if heading is None:
            body.append(line)
            continue
        current = flush()
        if current[1]:
            yield current
        body = []
        level, title = heading
        path = [(lv, t) for lv, t in path if lv < level] + [(level, title)]
    last = flush()
    if last[1]:
        yield last


def _fits(text: str, limits: ChunkLimits) -> bool:
    return len(text) <= limits.max_chars and count_tokens(text) <= limits.max_tokens


def _pieces(body: str, limits: ChunkLimits) -> list[str]:
    """The body cut into pieces that each fit: paragraphs, else sentences, else hard cuts."""
    out: list[str] = []
    for paragraph in (p.strip() for p in re.split(r"\n\s*\n", body)):
        if not paragraph:
            continue
        if _fits(paragraph, limits):
            out.append(paragraph)
            continue
        for sentence in (s.strip() for s in _SENTENCE_END.split(paragraph)):
            while sentence and not _fits(sentence, limits):
                cut = _hard_cut(sentence, limits)
                out.append(sentence[:cut].strip())
                sentence = sentence[cut:].strip()
            if sentence:
                out.append(sentence)
    return out


def _hard_cut(text: str, limits: ChunkLimits) -> int:
    """Where to cut an over-long run of text: within both limits, at a space if there is one."""
    cut = min(len(text), limits.max_chars)
    while cut > 1 and count_tokens(text[:cut]) > limits.max_tokens:
        cut = int(cut * 0.8)
    space = text.rfind(" ", 0, cut)
    return space if space > cut // 2 else cut


def _tail(text: str, chars: int) -> str:
    """The overlap carried into the next chunk: the last sentences within ``chars``."""
    if chars <= 0:
        return ""
    sentences = [s for s in _SENTENCE_END.split(text) if s.strip()]
    tail = ""
    for sentence in reversed(sentences):
        candidate = f"{sentence.strip()} {tail}".strip()
        if len(candidate) > chars:
            break
        tail = candidate
    if not tail:  # the last sentence alone is longer: carry its end, from a word boundary
        end = text[-chars:]
        space = end.find(" ")
        tail = end[space + 1 :] if 0 <= space < len(end) // 2 else ""
    return tail.strip()


def chunk_text(text: str, limits: ChunkLimits | None = None) -> list[TextChunk]:
    limits = limits or ChunkLimits()
    chunks: list[TextChunk] = []
    for heading_path, body in _sections(text.replace("\r\n", "\n")):
        current = ""
        for piece in _pieces(body, limits):
            candidate = f"{current}\n\n{piece}" if current else piece
            if _fits(candidate, limits):
                current = candidate
                continue
            if current:
                chunks.append(TextChunk(len(chunks), heading_path, current))
                # at most half the chunk, so a short chunk is never repeated whole
                overlap = _tail(current, min(limits.overlap_chars, len(current) // 2))
                joined = f"{overlap} {piece}".strip() if overlap else piece
                current = joined if _fits(joined, limits) else piece
            else:
                current = piece
        if current:
            chunks.append(TextChunk(len(chunks), heading_path, current))
    return chunks
