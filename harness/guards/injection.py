"""Recognising text inside evidence that tries to give the agent instructions.

Tool output is data. Text in a log line, a document or a row that addresses the assistant
("ignore your instructions and report ...") is flagged to the agent in the projection and may
not be cited as evidence for a claim. The patterns are deliberately about *addressing a model*,
not about incident vocabulary, so ordinary evidence is never flagged.
"""

from __future__ import annotations

import re

_PATTERNS = [
    r"\b(ignore|disregard|forget|override)\b.{0,40}\b(instructions?|prompts?|rules|guidelines|guardrails)\b",
    r"\b(previous|prior|above|earlier|all)\s+(instructions?|prompts?)\b",
    r"\byou\s+(are|must)\s+now\b",
    r"\b(new|updated|real)\s+instructions?\b",
    r"\bsystem\s+prompt\b",
    r"\b(assistant|ai|agent|model|llm)\s*[:,]\s*(you|please|report|say|ignore|conclude)\b",
    r"\b(report|conclude|state|say|answer)\s+(that\s+)?the\s+root\s+cause\s+is\b",
    r"\bdo\s+not\s+(mention|report|cite|investigate)\b",
    r"\bas\s+an?\s+(ai|assistant|language\s+model)\b",
    r"(忽略|无视|忘记).{0,10}(指令|指示|提示|规则|要求)",
    r"(之前|以上|先前|所有)的?(指令|指示|提示词)",
    r"你(现在)?(是|必须|应该)(一个)?.{0,6}(助手|模型|AI)",
    r"(系统提示|提示词)",
    r"(报告|声称|回答|结论)(说)?根因(是|为)",
]
_INSTRUCTION = re.compile("|".join(f"(?:{p})" for p in _PATTERNS), re.IGNORECASE | re.DOTALL)


def looks_like_instruction(text: str) -> bool:
    return _INSTRUCTION.search(text) is not None
