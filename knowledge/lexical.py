"""The terms the knowledge side matches text by, for English and Chinese alike.

:func:`terms` is what the lexical index of documents is built from, and what runbook matching
(:mod:`knowledge.runbooks`) reads questions and runbooks with. Words are lower-cased and stemmed
(Snowball English, so "timeouts" finds "timeout"); identifiers also yield their parts
(``db.pool.max_size`` → ``db``, ``pool``, ``max``, ``size``); CJK runs become character bigrams;
stopwords of both languages are dropped. Chinese function words and question words (了, 的, 吗,
怎么办…) split a CJK run before it is cut into bigrams, so "连接池耗尽了怎么办" yields the bigrams
of 连接池耗尽 and nothing made of 了 or 怎么.

:data:`EQUIVALENTS` and :func:`equivalent_terms` are for matching by words alone across a
language gap: a Chinese question against English runbooks, where no embedding helps. Documents
do not use them: their Chinese queries meet English text through the dense index.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping

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


#: Words and phrasings mapped to the English terms that say the same in runbooks and logs: the
#: Chinese of incidents ("支付超时" meets "payment timeout"), and English phrasal forms the
#: stemmer cannot join ("timing out" is a timeout, but "out" is a stopword and "timing" stems
#: to "time"). Matched case-insensitively as substrings; general SRE language, no incident's.
EQUIVALENTS: Mapping[str, tuple[str, ...]] = {
    # what users and callers see
    "超时": ("timeout", "timed"), "timing out": ("timeout",), "timed out": ("timeout",),
    "time out": ("timeout",), "times out": ("timeout",), "慢": ("slow", "latency"),
    "延迟": ("latency", "slow", "lag"), "错误": ("error",), "报错": ("error", "exception"),
    "失败": ("fail", "failed", "failure"), "异常": ("exception", "error"), "不可用": ("unavailable",),
    "拒绝": ("refused", "rejected"), "崩溃": ("crash",), "重启": ("restart",),
    # what runs out or breaks
    "连接池": ("pool", "connection"), "连接": ("connection",), "线程": ("thread",), "队列": ("queue",),
    "消息": ("message",), "内存": ("memory", "oom", "heap"), "泄漏": ("leak",), "磁盘": ("disk", "space"),
    "空间": ("space",), "磁盘满": ("disk", "full"), "满": ("full",), "耗尽": ("exhausted",),
    "证书": ("certificate", "cert", "tls", "ssl"), "过期": ("expired", "expiry"), "锁": ("lock",),
    "死锁": ("deadlock",), "限流": ("throttle", "rate", "limit"), "网络": ("network",),
    "域名": ("dns", "domain"), "解析": ("resolve", "dns"), "缓存": ("cache", "redis"),
    "击穿": ("stampede", "miss"), "雪崩": ("stampede", "avalanche"), "命中": ("hit",),
    "主从": ("replication", "replica"), "复制": ("replication",), "数据库": ("database", "db", "mysql", "sql"),
    "查询": ("query",), "索引": ("index",),
    # what changed
    "部署": ("deploy", "deployment"), "发布": ("release", "deploy", "rollout"), "上线": ("release", "deploy"),
    "配置": ("config", "configuration"), "变更": ("change", "changed"),
    # where
    "支付": ("payment", "pay"), "付款": ("payment", "pay"), "订单": ("order",), "下单": ("order", "checkout"),
    "结算": ("checkout",), "库存": ("inventory", "stock"), "用户": ("user",), "登录": ("login", "auth"),
    "认证": ("auth", "authentication"), "网关": ("gateway",), "接口": ("api", "endpoint"),
    "搜索": ("search",), "通知": ("notification",), "邮件": ("email", "mail", "smtp"),
}  # fmt: skip


def equivalent_terms(text: str) -> list[str]:
    """The :func:`terms` of the equivalents of every word or phrasing of :data:`EQUIVALENTS` in
    ``text``, once per occurrence."""
    lowered = text.lower()
    out: list[str] = []
    for phrase, equivalents in EQUIVALENTS.items():
        occurrences = lowered.count(phrase)
        if occurrences:
            out.extend(term for word in equivalents for term in terms(word) for _ in range(occurrences))
    return out
