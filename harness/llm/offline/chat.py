"""Offline small talk and knowledge answers."""

from __future__ import annotations

import json
import re

from harness.guards.injection import looks_like_instruction
from harness.llm.offline.conversation import loads, untruncated
from harness.llm.offline.lexicon import CHAT_CUES, salient
from harness.text import has_cjk

_CAPABILITIES_EN = (
    "I'm SuperBizAgent, a fault-diagnosis assistant for on-call engineers. Describe an incident "
    '(for example "payments are timing out since 10:00") and I will search the knowledge base, '
    "the logs and the business database, and publish a report in which every claim is checked "
    "against the evidence I gathered — or say plainly that the evidence is not enough. You can "
    "also ask me how-to questions about your systems; I answer from the documents, with sources."
)
_CAPABILITIES_ZH = (
    "我是 SuperBizAgent，面向值班工程师的故障诊断助手。描述一个故障（例如“10 点起支付一直超时”），"
    "我会检索知识库、日志和业务数据库，发布一份每条结论都经过证据核验的报告；证据不足时我会如实说明。"
    "你也可以问我系统相关的操作问题，我会基于文档回答并给出来源。"
)
_THANKS = re.compile(r"\b(thanks|thank\s+you|cheers)\b|谢谢|多谢", re.IGNORECASE)


def system_chat(question: str) -> str:
    zh = has_cjk(question)
    if _THANKS.search(question):
        return ("不客气！" if zh else "You're welcome! ") + (_CAPABILITIES_ZH if zh else _CAPABILITIES_EN)
    if CHAT_CUES.search(question):
        return ("你好！" if zh else "Hello! ") + (_CAPABILITIES_ZH if zh else _CAPABILITIES_EN)
    return _CAPABILITIES_ZH if zh else _CAPABILITIES_EN


#: a sentence ends after its stop, not after an ellipsis (`Ignored ... unknown property` goes on)
_SENTENCE = re.compile(r"(?<=[.!?。！？])(?<!\.\.\.)\s+|\n+")


def sentences(text: str) -> list[str]:
    return [s.strip(" -*#\t") for s in _SENTENCE.split(untruncated(text)) if len(s.strip(" -*#\t")) >= 12]


def knowledge_answer(payload_text: str | None) -> str:
    payload = loads(payload_text)
    question = str(payload.get("question", "")) if isinstance(payload, dict) else ""
    chunks = payload.get("chunks", []) if isinstance(payload, dict) else []
    wanted = salient(question)
    scored: list[tuple[float, int, str, str]] = []
    for rank, chunk in enumerate(chunks):
        if not isinstance(chunk, dict) or not chunk.get("document_id"):
            continue
        for sentence in sentences(str(chunk.get("text", ""))):
            if looks_like_instruction(sentence):
                continue
            overlap = len(wanted & salient(sentence))
            if overlap:
                scored.append((overlap - 0.1 * rank, rank, str(chunk["document_id"]), sentence))
    scored.sort(key=lambda item: (-item[0], item[1]))
    zh = has_cjk(question)
    if not scored:
        first = next((c for c in chunks if isinstance(c, dict) and c.get("document_id")), None)
        if first is None:
            return json.dumps({"answer": "", "cited_document_ids": []})
        text = (
            "知识库中最接近的文档没有直接回答这个问题。"
            if zh
            else "The closest documents do not answer this question directly."
        )
        return json.dumps({"answer": text, "cited_document_ids": [first["document_id"]]}, ensure_ascii=False)
    picked = scored[:3]
    picked.sort(key=lambda item: item[1])
    lines = []
    titles = {str(c.get("document_id")): c for c in chunks if isinstance(c, dict)}
    for _, _, doc_id, sentence in picked:
        chunk = titles[doc_id]
        where = " › ".join(p for p in (str(chunk.get("title") or ""), str(chunk.get("section") or "")) if p)
        lines.append(f"{sentence} ({where})" if where else sentence)
    lead = "根据知识库：" if zh else "According to the knowledge base: "
    cited = list(dict.fromkeys(doc_id for _, _, doc_id, _ in picked))
    return json.dumps({"answer": lead + " ".join(lines), "cited_document_ids": cited}, ensure_ascii=False)
