"""DiagnosisAgent: the only tool loop in the product.

It receives the unmodified question and the bounded PreviousTurn, with the matching runbooks in
its instructions, and runs a ReAct loop over the evidence tools:

- every step is a model call through the RunContext (budget, deadline, cancel);
- the tool calls of one step run in parallel through the ToolBoundary;
- an identical repeated call is not run again: the model gets a hint pointing at the first one;
- the last allowed step offers no tools and asks for the final draft;
- the draft is parsed strictly, with one format-repair attempt.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

from harness.draft import Draft, DraftFormatError, parse_draft
from harness.llm.base import Message, ModelRole, Purpose, ToolCall
from harness.memory import PreviousTurn
from harness.ports import Runbook, Stage, TimelineCategory
from harness.prompts import FINAL_STEP, FORMAT_REPAIR, agent_instructions
from harness.scope import RunScope
from harness.tools.projection import project_error


@dataclass(frozen=True, slots=True)
class AgentSettings:
    max_steps: int = 6
    #: model calls kept back for the format repair, the evidence repair and the semantic review
    reserved_model_calls: int = 3


@dataclass
class AgentOutcome:
    draft: Draft | None
    conversation: list[Message]
    steps: int
    problem: str | None = None
    duplicate_calls: int = field(default=0)


def agent_input(question: str, previous_turn: PreviousTurn | None) -> str:
    return json.dumps(
        {"question": question, "previous_turn": previous_turn.to_dict() if previous_turn else None},
        ensure_ascii=False,
    )


def _signature(call: ToolCall) -> str:
    try:
        args = json.dumps(json.loads(call.arguments or "{}"), sort_keys=True, ensure_ascii=False)
    except json.JSONDecodeError:
        args = call.arguments
    return f"{call.name}:{args}"


class DiagnosisAgent:
    def __init__(self, settings: AgentSettings | None = None) -> None:
        self.settings = settings or AgentSettings()

    def run(
        self,
        scope: RunScope,
        question: str,
        previous_turn: PreviousTurn | None,
        runbooks: Sequence[Runbook],
    ) -> AgentOutcome:
        ctx, boundary = scope.ctx, scope.boundary
        messages = [Message.system(agent_instructions(runbooks)), Message.user(agent_input(question, previous_turn))]
        executed: dict[str, str] = {}
        duplicates = 0
        limit = max(1, min(self.settings.max_steps, ctx.remaining_model_calls - self.settings.reserved_model_calls))
        step = 0
        reply: str | None = None
        while True:
            final = step == limit - 1 or ctx.remaining_tool_calls <= 0 or not boundary.definitions
            scope.status(Stage.AGENT_STEP, {"step": step + 1})
            prompt = [*messages, Message.user(FINAL_STEP)] if final and step > 0 else messages
            response = scope.caller.call(
                ModelRole.AGENT, Purpose.AGENT_STEP, prompt, tools=() if final else boundary.definitions
            )
            step += 1
            scope.audit.event(
                TimelineCategory.AGENT, "agent.step", step=step, final=final, tool_calls=len(response.tool_calls)
            )
            if final or not response.tool_calls:
                reply = response.content if not response.tool_calls else None
                if final and step > 1:
                    messages.append(Message.user(FINAL_STEP))
                break
            calls = boundary.issue(response.tool_calls)
            messages.append(Message.assistant(response.content, calls))
            results: dict[str, str] = {}
            to_run: list[ToolCall] = []
            budget = ctx.remaining_tool_calls
            for call in calls:
                signature = _signature(call)
                if signature in executed:
                    duplicates += 1
                    results[call.id] = project_error(
                        call.name, call.id, "duplicate_call",
                        f"This exact call was already made as {executed[signature]}; use that result "
                        "or change the arguments.",
                    )  # fmt: skip
                elif len(to_run) >= budget:
                    results[call.id] = project_error(
                        call.name, call.id, "tool_budget_exhausted",
                        "No tool calls remain in this run's budget; write the final draft.",
                    )  # fmt: skip
                else:
                    executed[signature] = call.id
                    to_run.append(call)
            for observation in boundary.invoke_all(to_run):
                results[observation.tool_call_id] = observation.content
            messages.extend(Message.tool(call.id, results[call.id]) for call in calls)

        try:
            return AgentOutcome(parse_draft(reply), messages, step, None, duplicates)
        except DraftFormatError as exc:
            problem = exc.problem if reply is not None else "the reply asked for tools instead of giving the draft"
        repair = [*messages, Message.assistant(reply or ""), Message.user(FORMAT_REPAIR.format(problem=problem))]
        response = scope.caller.call(ModelRole.AGENT, Purpose.FORMAT_REPAIR, repair, json_output=True)
        try:
            return AgentOutcome(parse_draft(response.content), repair, step + 1, None, duplicates)
        except DraftFormatError as exc:
            return AgentOutcome(None, repair, step + 1, exc.problem, duplicates)
