"""Writing: the draft report from the analysis, in the language of the question.

Every claim quotes the evidence verbatim (the symptom's and the cause's log lines, the document
sentence that explains the cause, the change row) and cites the call it came from. Without a
symptom and a cause there is no claim at all, only what is missing, so the run falls back
honestly. A repair leaves out the claims the evidence check rejected.
"""

from __future__ import annotations

import json
import re
from typing import Any

from harness.guards.quotes import normalise
from harness.llm.offline.conversation import Conversation
from harness.llm.offline.evidence import Pattern, excerpt, literal, named
from harness.llm.offline.lexicon import ANY_REASON, SETTING_NAMED, STATED_REASON
from harness.llm.offline.reasoning import Analysis, analyse
from harness.text import has_cjk


def _claim(statement: str, call_id: str, quote: str) -> dict[str, Any]:
    return {"statement": statement, "citations": [{"tool_call_id": call_id, "quote": quote}]}


def _state_claim(p: Pattern, zh: bool) -> dict[str, Any]:
    """A claim of a state table's row: what the orchestrator recorded about the workload."""
    quote = excerpt(p.example)
    # Only the row's words and framing: a reviewer holds a statement to the words of its evidence.
    return _claim(
        f"记录：“{quote}”。" if zh else f"A recorded row: “{quote}”.",
        p.call_id,
        quote,
    )


def _who(conv: Conversation, p: Pattern) -> str:
    """The services of a pattern as a claim names them: the one its cited line is of (the first
    line of the call's result that holds the quote, as the evidence check finds it), and how
    many more share the template; naming them all would say more than the excerpt shows."""
    if len(p.services) <= 1:
        return p.services[0] if p.services else "?"
    quote = normalise(excerpt(p.example))
    lines = next((o.view.get("lines") or [] for o in conv.observations if o.call_id == p.call_id), [])
    cited = next(
        (
            str(line.get("service"))
            for line in lines
            if isinstance(line, dict) and quote in normalise(str(line.get("message", "")))
        ),
        p.services[0],
    )
    return f"{cited} (+{len(p.services) - 1})"


def write_draft(conv: Conversation, analysis: Analysis | None = None) -> dict[str, Any]:
    """The draft (conclusion, root cause, claims, recommendations, limitations) of the analysis."""
    a = analysis or analyse(conv)
    zh = has_cjk(conv.question)
    s, c = a.symptom, a.cause
    if s is None or c is None:
        return {
            "conclusion": (
                "收集到的证据不足以确定原因。"
                if zh
                else "The evidence gathered does not support a conclusion about the cause."
            ),
            "root_cause": "",
            "claims": [],
            "recommendations": [],
            "limitations": a.limitations,
        }
    claims = []
    services = _who(conv, s)
    s_quote = excerpt(s.example)
    claims.append(
        _state_claim(s, zh) if s.table else _claim(
            f"{services} 在 {s.window()} 期间记录了 {s.count} 条 {s.level} 日志，例如“{s_quote}”。" if zh
            else f"{services} logged {s.count} {s.level} events like “{s_quote}” between {s.window()}.",
            s.call_id, s_quote,
        )
    )  # fmt: skip
    c_services = _who(conv, c)
    if c is not s:
        c_quote = excerpt(c.example)
        lead = ""
        if c.first and s.first and c.first < s.first:
            minutes = max(1, round((s.first - c.first).total_seconds() / 60))
            lead = f"，比症状早 {minutes} 分钟" if zh else f", {minutes} min before the first symptom"
        claims.append(
            _state_claim(c, zh) if c.table else _claim(
                f"{c_services} 自 {c.window().split(' – ')[0]} 起记录了 {c.count} 条“{c_quote}”{lead}。" if zh
                else f"{c_services} logged “{c_quote}” {c.count} times starting {c.window().split(' – ')[0]}{lead}.",
                c.call_id, c_quote,
            )
        )  # fmt: skip
    if a.passage is not None:
        p = a.passage
        section = p.section.removeprefix(p.title).removeprefix(" › ") if p.title else p.section
        where = " › ".join(x for x in (p.title, section) if x)
        claims.append(
            _claim(
                f"知识库（{where}）指出：“{p.sentence}”"
                if zh
                else f"The knowledge base ({where}) says: “{p.sentence}”",
                p.call_id,
                p.sentence,
            )
        )
    if a.change is not None:
        row = a.change
        claims.append(
            _claim(
                # the row as recorded, no more: a reviewer holds the statement to the words of its
                # excerpt, which need not show the column names
                f"变更记录：“{row.quote}”。" if zh else f"A recorded change: “{row.quote}”.",
                row.call_id, row.quote,
            )
        )  # fmt: skip
    # A row is quoted whole: its cells are not a message with variable parts. A long message is
    # named by the system's own words for why, where it holds them ("Vault is sealed" at the end
    # of a FailedMount the orchestrator reports), else by any reason it states.
    reasons = (STATED_REASON, ANY_REASON, SETTING_NAMED)
    cause_text = excerpt(c.example) if c.table else named(c.template, c.example, *reasons)
    symptom_text = s_quote if s.table else literal(s.template) or s_quote
    change_text = ""
    if a.change is not None:
        change_text = f"，发生在变更“{a.change.quote}”之后" if zh else f", after the change “{a.change.quote}”"
    if c is s:
        conclusion = (
            f"{c_services} 的问题直接由“{cause_text}”引起{change_text}。" if zh
            else f"The reported problem is the error “{cause_text}” in {c_services}{change_text}."
        )  # fmt: skip
    else:
        conclusion = (
            f"“{symptom_text}”最可能由 {c_services} 的“{cause_text}”导致{change_text}。" if zh
            else f"“{symptom_text}” is most likely caused by “{cause_text}” in {c_services}{change_text}."
        )  # fmt: skip
    root_cause = f"{c_services}：{cause_text}{change_text}" if zh else f"{cause_text} ({c_services}){change_text}"
    if a.passage is not None and a.passage.title:
        root_cause += f"（参见“{a.passage.title}”）" if zh else f" — see “{a.passage.title}”"
    recommendations = a.recommendations or [
        "在变更系统之前，先在受影响的服务上确认以上发现。"
        if zh
        else "Confirm these findings on the affected service before changing anything."
    ]
    return {
        "conclusion": conclusion,
        "root_cause": root_cause,
        "claims": claims,
        "recommendations": recommendations,
        "limitations": a.limitations,
    }


def repair_draft(conv: Conversation, findings_text: str) -> dict[str, Any]:
    """Rewrite the draft without the claims the evidence check rejected."""
    draft = write_draft(conv)
    findings = re.search(r"\[.*\]", findings_text, re.DOTALL)
    rejected: set[int] = set()
    if findings:
        try:
            rejected = {
                int(f["claim"])
                for f in json.loads(findings.group(0))
                if isinstance(f, dict) and f.get("claim") is not None
            }
        except (ValueError, TypeError, KeyError):
            rejected = set()
    draft["claims"] = [c for i, c in enumerate(draft["claims"]) if i not in rejected]
    if not draft["claims"]:
        draft["root_cause"] = ""
    return draft
