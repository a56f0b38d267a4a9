"""The terms the lexical index is built from, for English and Chinese alike.

Words are lower-cased and stemmed (Snowball English, so "timeouts" finds "timeout");
identifiers also yield their parts (``db.pool.max_size`` → ``db``, ``pool``, ``max``, ``size``);
CJK runs become character bigrams; stopwords of both languages are dropped. Chinese function
words and question words (了, 的, 吗, 怎么办…) split a CJK run before it is cut into bigrams, so
"连接池耗尽了怎么办" yields the bigrams of 连接池耗尽 and nothing made of 了 or 怎么.
"""

from __future__ import annotations

import functools
import re

import Stemmer  # type: ignore[import-not-found]

from harness.text import STOPWORDS, tokens

_ASCII_WORD = re.compile(r"[a-z]+")
# Longest first. Only characters that are never part of a content word here: 有/是/在 are (有效期).
_CJK_FUNCTION_WORDS = re.compile(
    "|".join(
        (
            "为什么",
            "怎么办",
            "怎么样",
            "是不是",
            "有没有",
            "请问",
            "什么",
            "怎么",
            "如何",
            "一下",
            "我们",
            "你们",
            "他们",
            *"的了吗呢吧啊呀么嘛哪",
        )
    )
)


@functools.cache
def _stemmer() -> Stemmer.Stemmer:
    return Stemmer.Stemmer("english")


def terms(text: str) -> list[str]:
    """Index terms of ``text``, with repeats (BM25 counts them)."""
    out: list[str] = []
    for word in _CJK_FUNCTION_WORDS.sub(" ", text).split():
        out.extend(_word_terms(word))
    return out


@functools.lru_cache(maxsize=262_144)
def _word_terms(word: str) -> tuple[str, ...]:
    # Per whitespace-separated word, cached: a corpus repeats its words, and tokenising and
    # stemming dominate building the index. No token spans whitespace, so this is exact.
    stem = _stemmer().stemWord
    return tuple(
        stem(token) if _ASCII_WORD.fullmatch(token) else token for token in tokens(word) if token not in STOPWORDS
    )
