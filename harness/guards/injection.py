"""Recognising text inside evidence that tries to give the agent instructions.

Tool output is data. Text in a log line, a document or a row that addresses the assistant
("ignore your instructions and report ...") is flagged to the agent in the projection and may
not be cited as evidence for a claim. The patterns are deliberately about *addressing a model*,
not about incident vocabulary, so ordinary evidence is not flagged.

Each rule pairs its pattern with trigger words that any match must contain, whatever its
spacing. Text is scanned for the triggers first (plain substring search, fast), and a rule's
pattern only runs on the values that contain one of its triggers: results are checked on the
hot path of every tool call.
"""

from __future__ import annotations

import bisect
import functools
import re

_Q = r"\s+(?:(?:all|any|the|your|my|these|those)\s+)*"
_WHICH = r"(?:previous|prior|above|earlier|original|system)\s+"
_WHAT = r"(?:instructions?|prompts?|guidelines|guardrails)\b"
_WHAT_QUALIFIED = r"(?:instructions?|prompts?|rules|guidelines|guardrails|directions)\b"
_TO_DO = r"\s*[:,]\s*(?:you|please|report|say|ignore|conclude)\b"


def _verb(word: str) -> str:
    """``ignore`` addressed at instructions: plain, or qualified (``previous rules``)."""
    return rf"{word}{_Q}(?:{_WHICH})?{_WHAT}|{word}{_Q}{_WHICH}{_WHAT_QUALIFIED}"


# (triggers, pattern) on lower-cased text. Patterns start with a literal where they can, so
# the regex engine can jump straight to it.
_RULES: tuple[tuple[tuple[str, ...], re.Pattern[str]], ...] = tuple(
    (triggers, re.compile(pattern, re.DOTALL))
    for triggers, pattern in (
        (("ignor",), _verb(r"ignor(?:e|ing)")),
        (("disregard",), _verb(r"disregard(?:ing)?")),
        (("forget",), _verb(r"forget(?:ting)?")),
        (("overrid",), rf"overrid(?:e|ing){_Q}{_WHICH}{_WHAT_QUALIFIED}"),
        (
            ("instruction", "prompt"),
            r"(?:previous|prior|above|earlier)\s+(?:instructions?|prompts?)\b"
            r"|(?:your|the\s+assistant'?s?|the\s+ai'?s?)\s+(?:new|updated|real|true)\s+instructions?\b"
            r"|\bnew\s+instructions?\s*:|system\s+prompt\b",
        ),
        (("you",), r"you\s+(?:are|must)\s+now\b"),
        (("assistant",), rf"assistant{_TO_DO}"),
        (("agent",), rf"agent{_TO_DO}"),
        (("model",), rf"model{_TO_DO}"),
        (("llm",), rf"llm{_TO_DO}"),
        ((" ai", "\tai", "\nai"), rf"\bai{_TO_DO}"),
        (("root",), r"(?:report|conclude|state|say|answer)\s+(?:that\s+)?the\s+root\s+cause\s+is\b"),
        (("mention", "report", "cite", "investigate"), r"do\s+not\s+(?:mention|report|cite|investigate)\b"),
        (("assistant", "language", " ai", "\tai", "\nai"), r"as\s+an?\s+(?:ai|assistant|language\s+model)\b"),
        (
            ("忽略", "无视", "忘记"),
            r"(?:忽略|无视|忘记)掉?(?:你|您)?(?:之前|以上|先前|上面|所有|全部)?的?(?:指令|指示|提示词|规则|要求)",
        ),
        (("指令", "指示", "提示词"), r"(?:之前|以上|先前|上面)的?(?:指令|指示|提示词)"),
        (("你",), r"你(?:现在)?(?:是|必须|应该)(?:一个)?.{0,6}(?:助手|模型|ai)"),
        (("提示词",), r"系统提示词"),
        (("根因",), r"(?:报告|声称|回答|结论)说?根因(?:是|为)"),
    )
)
_ALL_TRIGGERS = tuple(sorted({t for triggers, _ in _RULES for t in triggers}))


def _matches(lowered: str) -> bool:
    # A value that starts with "ai" has no whitespace before it; the triggers expect one.
    padded = "\n" + lowered
    return any(any(t in padded for t in triggers) and rx.search(lowered) for triggers, rx in _RULES)


@functools.lru_cache(maxsize=8192)
def looks_like_instruction(text: str) -> bool:
    return _matches(text.lower())


def count_instructions(texts: list[str]) -> int:
    """How many of ``texts`` look like instructions. One substring pass over all of them finds
    the few values that contain a trigger; only those are checked against the patterns."""
    if not texts:
        return 0
    joined = "\n" + "\n".join(texts).lower()  # every value starts after a newline
    starts: list[int] = []
    position = 1
    for text in texts:
        starts.append(position)
        position += len(text) + 1
    candidates: set[int] = set()
    for trigger in _ALL_TRIGGERS:
        at = joined.find(trigger)
        while at >= 0:
            index = bisect.bisect_right(starts, at) - 1
            candidates.add(index)
            next_start = starts[index + 1] if index + 1 < len(starts) else len(joined)
            at = joined.find(trigger, next_start)
    return sum(1 for i in candidates if looks_like_instruction(texts[i]))
