"""Provider-neutral chat model types: messages, tool calls, usage and the ``ChatModel`` port."""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

Role = Literal["system", "user", "assistant", "tool"]


class ModelRole(enum.StrEnum):
    """Which configured model answers a call. Each role may use its own endpoint and model."""

    ROUTER = "router"
    AGENT = "agent"
    GUARD = "guard"


class Purpose(enum.StrEnum):
    """Why the harness makes a model call; recorded in the step audit."""

    ROUTING = "routing"
    SYSTEM_CHAT = "system_chat"
    KNOWLEDGE_ANSWER = "knowledge_answer"
    AGENT_STEP = "agent_step"
    FORMAT_REPAIR = "format_repair"
    EVIDENCE_REPAIR = "evidence_repair"
    SEMANTIC_REVIEW = "semantic_review"


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool call requested by a model; ``arguments`` is the raw JSON text the model sent."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class Message:
    role: Role
    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None

    @staticmethod
    def system(content: str) -> Message:
        return Message("system", content)

    @staticmethod
    def user(content: str) -> Message:
        return Message("user", content)

    @staticmethod
    def assistant(content: str | None, tool_calls: Sequence[ToolCall] = ()) -> Message:
        return Message("assistant", content, tuple(tool_calls))

    @staticmethod
    def tool(tool_call_id: str, content: str) -> Message:
        return Message("tool", content, tool_call_id=tool_call_id)


@dataclass(frozen=True, slots=True)
class ToolDefinition:
    """What a model is told about a tool: its name, description and JSON schema."""

    name: str
    description: str
    parameters: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class TokenUsage:
    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def total(self) -> int:
        return self.input_tokens + self.output_tokens


class RetryGate(Protocol):
    """What a provider asks before it retries a failed attempt on behalf of a run."""

    def begin_model_retry(self, delay_s: float) -> bool:
        """Charge one retry that starts after ``delay_s``; ``False`` (nothing charged) when the
        run's retry budget is spent or the wait would outlast its deadline. Raises the run's
        interruption (:class:`harness.errors.RunInterrupted`) if the run has ended."""
        ...

    def wait(self, seconds: float) -> None:
        """Wait before the retry; raises the run's interruption as soon as the run ends."""
        ...


@dataclass(frozen=True, slots=True)
class ModelRequest:
    role: ModelRole
    purpose: Purpose
    messages: tuple[Message, ...]
    tools: tuple[ToolDefinition, ...] = ()
    json_output: bool = False
    #: how long the call may take, all attempts included (the time the run has left)
    timeout_s: float | None = None
    max_output_tokens: int | None = None
    #: the run's say over retries; without one a provider follows only its own policy
    retry_gate: RetryGate | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class ModelResponse:
    content: str | None
    tool_calls: tuple[ToolCall, ...] = ()
    usage: TokenUsage = field(default_factory=TokenUsage)
    reasoning: str | None = None
    finish_reason: str | None = None
    model: str | None = None


class ChatModel(Protocol):
    """The model port. Implementations raise :class:`harness.errors.ModelError` subclasses."""

    def complete(self, request: ModelRequest) -> ModelResponse:
        """Answer one request; never retries beyond the provider's own policy, and with a
        ``request.retry_gate`` only as far as the gate allows."""
        ...


@dataclass(frozen=True, slots=True)
class Models:
    """The model for each role. One model may serve several roles."""

    router: ChatModel
    agent: ChatModel
    guard: ChatModel

    @classmethod
    def single(cls, model: ChatModel) -> Models:
        return cls(router=model, agent=model, guard=model)

    def for_role(self, role: ModelRole) -> ChatModel:
        return {ModelRole.ROUTER: self.router, ModelRole.AGENT: self.agent, ModelRole.GUARD: self.guard}[role]
