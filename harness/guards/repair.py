"""EvidenceRepair: one chance for the agent to fix the citations the EvidenceGuard rejected.

The agent continues its own conversation (so it still sees the tool results it gathered) with the
findings appended, and no tools. Exactly one round: a repaired draft that fails again, or a reply
that is not a draft, ends in the safe fallback.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from harness.draft import Draft, DraftFormatError, parse_draft
from harness.errors import ModelError
from harness.guards.evidence import GuardResult
from harness.llm.base import Message, ModelRole, Purpose
from harness.llm.call import ModelCaller
from harness.prompts import EVIDENCE_REPAIR


class EvidenceRepair:
    def repair(
        self, caller: ModelCaller, conversation: Sequence[Message], draft: Draft, result: GuardResult
    ) -> Draft | None:
        findings = json.dumps([f.as_dict() for f in result.findings], ensure_ascii=False, indent=1)
        messages = [
            *conversation,
            Message.assistant(draft.model_dump_json()),
            Message.user(EVIDENCE_REPAIR.format(findings=findings)),
        ]
        try:
            response = caller.call(ModelRole.AGENT, Purpose.EVIDENCE_REPAIR, messages, json_output=True)
            return parse_draft(response.content)
        except (ModelError, DraftFormatError):
            return None
