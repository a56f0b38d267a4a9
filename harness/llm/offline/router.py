"""Offline intent routing: cue patterns for incidents, documentation questions and small talk."""

from __future__ import annotations

from harness.llm.offline.lexicon import (
    CHAT_CUES,
    DIAGNOSIS_CUES,
    FOLLOW_UP_CUES,
    INVESTIGATE_CUES,
    KNOWLEDGE_CUES,
    LIVE_CUES,
    salient,
)


def classify(query: str, last_intent: str | None = None) -> str:
    incident = len(DIAGNOSIS_CUES.findall(query))
    investigate = len(INVESTIGATE_CUES.findall(query))
    live = len(LIVE_CUES.findall(query))
    knowledge = len(KNOWLEDGE_CUES.findall(query))
    chat = len(CHAT_CUES.findall(query))
    words = len(salient(query))

    if chat and not incident and not investigate and words <= 6:
        return "SYSTEM_CHAT"
    if last_intent == "DIAGNOSIS" and FOLLOW_UP_CUES.search(query) and not knowledge:
        return "DIAGNOSIS"
    diagnosis = 2 * incident + 3 * investigate + 2 * live * (1 if incident or investigate else 0)
    documentation = 3 * knowledge
    if diagnosis and diagnosis >= documentation:
        return "DIAGNOSIS"
    if documentation:
        return "KNOWLEDGE_QUERY"
    if chat or words <= 2:
        return "SYSTEM_CHAT"
    return "KNOWLEDGE_QUERY"
