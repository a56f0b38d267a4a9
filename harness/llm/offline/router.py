"""Offline intent routing: cue patterns for incidents, documentation questions and small talk.

A question is an incident when it names an alert (``KubePodCrashLooping``, ``TargetDown``) or a
workload in a bad state ("what is the issue with pod X?", "the pod never becomes Ready", "why
has payment-service been performing poorly?"), whatever its first words; it stays a
documentation question when it asks for documentation ("what is our runbook for Y?", "how do I
configure X?"), asks for a definition only ("What is CrashLoopBackOff?"), or speaks of any
workload rather than one ("why would a pod be evicted?") — unless it also says the trouble is
happening now or asks for its cause. Otherwise incident and documentation cues are weighed.
"""

from __future__ import annotations

import re

from harness.llm.offline.lexicon import (
    ALERT_NAME,
    BAD_STATE_CUES,
    CHAT_CUES,
    DEFINITION,
    DIAGNOSIS_CUES,
    DOCUMENTATION_CUES,
    FOLLOW_UP_CUES,
    GENERIC_WORKLOAD,
    HOW_TO_CUES,
    INVESTIGATE_CUES,
    KNOWLEDGE_CUES,
    LIVE_CUES,
    WORKLOAD_CUES,
    salient,
)

#: A workload named, not just spoken of: a service-like name, a quoted identifier, or a workload
#: word followed by something that can only be a name (``pod payment-7f9c``, ``node ip-10-0-1-5``).
_NAMED = re.compile(
    r"(?<![\w./-])[a-z][a-z0-9]*(?:-[a-z0-9]+)+(?![\w/-])|`[^`\s]+`|"
    r"\b(?:pod|deployment|statefulset|daemonset|job|cronjob|node|container|service|namespace|host|instance)s?"
    r"\s+[\"']?[\w.-]*[\d_.-][\w.-]*",
    re.IGNORECASE,
)


def _workloads(query: str) -> list[bool]:
    """For each workload the query mentions, whether it is a particular one (not *a* workload)."""
    return [not GENERIC_WORKLOAD.search(query[: m.end()]) for m in WORKLOAD_CUES.finditer(query)]


def workload_in_trouble(query: str) -> bool:
    """Whether the query speaks of a particular workload (not *a* workload) and of a bad state."""
    return bool(BAD_STATE_CUES.search(query)) and any(_workloads(query))


def incident_named(query: str) -> bool:
    """An alert's name, or a particular workload in a bad state."""
    return bool(ALERT_NAME.search(query)) or workload_in_trouble(query)


def classify(query: str, last_intent: str | None = None) -> str:
    incident = len(DIAGNOSIS_CUES.findall(query))
    investigate = len(INVESTIGATE_CUES.findall(query))
    # an alert's name is no verb: "is KubePodCrashLooping" does not say it is happening now
    live = len(LIVE_CUES.findall(ALERT_NAME.sub("alert", query)))
    knowledge = len(KNOWLEDGE_CUES.findall(query))
    chat = len(CHAT_CUES.findall(query))
    words = len(salient(query))
    named_incident = incident_named(query)

    if chat and not incident and not investigate and not named_incident and words <= 6:
        return "SYSTEM_CHAT"
    if last_intent == "DIAGNOSIS" and FOLLOW_UP_CUES.search(query) and not knowledge:
        return "DIAGNOSIS"
    if named_incident:
        if live or investigate:
            return "DIAGNOSIS"  # it is happening, or its cause is asked for
        if DOCUMENTATION_CUES.search(query):
            return "KNOWLEDGE_QUERY"
        if (HOW_TO_CUES.search(query) or DEFINITION.search(query)) and not _NAMED.search(query):
            return "KNOWLEDGE_QUERY"
        return "DIAGNOSIS"
    workloads = _workloads(query)
    if workloads and not any(workloads) and not investigate and HOW_TO_CUES.search(query):
        return "KNOWLEDGE_QUERY"  # how to handle any workload: "how do I roll back a deployment that is failing?"
    diagnosis = 2 * incident + 3 * investigate + 2 * live * (1 if incident or investigate else 0)
    documentation = 3 * knowledge
    if diagnosis and diagnosis >= documentation:
        return "DIAGNOSIS"
    if documentation:
        return "KNOWLEDGE_QUERY"
    if chat or (words <= 2 and not (WORKLOAD_CUES.search(query) and BAD_STATE_CUES.search(query))):
        return "SYSTEM_CHAT"
    return "KNOWLEDGE_QUERY"
