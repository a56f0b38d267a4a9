"""Tokenisation shared by the offline provider, the in-memory adapters and the knowledge index.

It works for English and Chinese alike: words and identifier parts, CJK runs as character
bigrams, and the stopwords of both languages. (Log message templates are :mod:`harness.logs`.)
"""

from __future__ import annotations

import re

_RAW_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]*[A-Za-z0-9]|[A-Za-z0-9]")
_CAMEL = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")
_CJK_RUN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
_SPLIT_IDENT = re.compile(r"[._\-]")

STOPWORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "been",
        "but",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "for",
        "from",
        "had",
        "has",
        "have",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "me",
        "my",
        "no",
        "not",
        "of",
        "on",
        "or",
        "our",
        "please",
        "so",
        "than",
        "that",
        "the",
        "their",
        "them",
        "then",
        "there",
        "these",
        "they",
        "this",
        "to",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
        "about",
        "after",
        "again",
        "all",
        "any",
        "also",
        "because",
        "before",
        "being",
        "both",
        "during",
        "each",
        "few",
        "further",
        "here",
        "just",
        "more",
        "most",
        "other",
        "over",
        "same",
        "should",
        "some",
        "such",
        "very",
        "own",
        "only",
        "out",
        "up",
        "down",
        "off",
        "once",
        "under",
        "until",
        "while",
        "whom",
        "let",
        "us",
        "see",
        "check",
        "tell",
        "look",
        "find",
        "know",
        "want",
        "need",
        "help",
        "get",
        "got",
        "could",
        "any",
        "anything",
        "的",
        "了",
        "是",
        "在",
        "和",
        "有",
        "我",
        "你",
        "他",
        "她",
        "它",
        "们",
        "这",
        "那",
        "吗",
        "呢",
        "吧",
        "啊",
        "请",
        "帮",
        "一下",
        "什么",
        "怎么",
        "为什么",
    ]
)


def tokens(text: str) -> list[str]:
    """Lower-case word tokens; identifiers (``db.pool.max_size``, ``HikariPool``) also yield
    their parts; CJK runs yield character bigrams."""
    lowered = text.lower()
    out: list[str] = []
    for raw in _RAW_WORD.findall(text):
        word = raw.lower()
        out.append(word)
        parts = [p.lower() for piece in _SPLIT_IDENT.split(raw) for p in _CAMEL.findall(piece) or [piece] if p]
        if len(parts) > 1:
            out.extend(parts)
    for run in _CJK_RUN.findall(lowered):
        if len(run) == 1:
            out.append(run)
        out.extend(run[i : i + 2] for i in range(len(run) - 1))
    return out


def content_tokens(text: str) -> set[str]:
    """Tokens that carry meaning: no stopwords, no pure numbers, no single letters."""
    return {t for t in tokens(text) if t not in STOPWORDS and not t.isdigit() and len(t) > 1}


def has_cjk(text: str) -> bool:
    return _CJK_RUN.search(text) is not None
