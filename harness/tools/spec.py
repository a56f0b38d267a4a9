"""One typed definition per tool: the JSON schema the model sees and the validator of its calls.

A tool's arguments are a pydantic model. ``ToolSpec.definition`` derives the schema from it and
``ToolSpec.parse`` validates what the model sent against the very same model, so the two can
never drift apart. The spec also says how the tool's evidence is cited (``CitationFields``):
adding a tool is one spec, handed to ``ChatApplication(tools=[...])`` by the composition root.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from harness.llm.base import ToolDefinition
from harness.ports import EvidenceStatus


class ToolArguments(BaseModel):
    """Base of every tool's arguments: unknown fields are an error, strings are stripped."""

    # strict: the JSON the model sends must match the schema it was shown ("5" is not an int).
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True, frozen=True, strict=True)


ArgsT = TypeVar("ArgsT", bound=ToolArguments)


@dataclass(frozen=True, slots=True)
class ToolOutput:
    """What a tool handler returns: the raw (JSON-serialisable) result and its evidence grade."""

    raw: Mapping[str, Any]
    evidence_status: EvidenceStatus


class ToolArgumentError(Exception):
    """The model's arguments do not match the schema. ``problems`` are safe to show the model."""

    def __init__(self, problems: list[dict[str, str]]) -> None:
        self.problems = problems
        super().__init__("invalid tool arguments")


class ToolRefused(Exception):
    """The backend refused a well-formed call (e.g. a SQL write). ``reason`` is safe to show."""

    def __init__(self, code: str, reason: str) -> None:
        self.code = code
        self.reason = reason
        super().__init__(reason)


@dataclass(frozen=True, slots=True)
class CitationFields:
    """How a tool's evidence is cited and shown, so that guards and release need no tool names.

    ``source``: the fields of a result record that say where a quote in it came from (the
    guards show them with the excerpt); ``shown``: those of them the published report prints
    beside the quote; ``reference``: a cited record that has the first of these fields is one
    of the report's listed sources, described by all of them (a document, its title, its section).
    """

    source: tuple[str, ...] = ()
    shown: tuple[str, ...] = ()
    reference: tuple[str, ...] = ()


@dataclass(frozen=True)
class ToolSpec(Generic[ArgsT]):
    name: str
    description: str
    args_model: type[ArgsT]
    handler: Callable[[ArgsT, float], ToolOutput] = field(repr=False)
    #: None: the run's tool timeout (``HarnessSettings.tool_timeout_s``)
    timeout_s: float | None = None
    citations: CitationFields = field(default_factory=CitationFields)

    @cached_property
    def definition(self) -> ToolDefinition:
        return ToolDefinition(self.name, self.description, _clean_schema(self.args_model.model_json_schema()))

    def parse(self, arguments: str) -> ArgsT:
        try:
            return self.args_model.model_validate_json(arguments.strip() or "{}")
        except ValidationError as exc:
            problems = [
                {"field": ".".join(str(p) for p in err["loc"]), "problem": err["msg"]}
                for err in exc.errors(include_url=False, include_input=False, include_context=False)
            ]
            raise ToolArgumentError(problems[:10]) from None

    def run(self, args: BaseModel, timeout_s: float) -> ToolOutput:
        if not isinstance(args, self.args_model):
            raise TypeError(f"{self.name} expects {self.args_model.__name__}")
        return self.handler(args, timeout_s)


def _clean_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """Drop pydantic's ``title`` keys: noise for the model, tokens for the budget."""

    def clean(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: clean(v) for k, v in node.items() if not (k == "title" and isinstance(v, str))}
        if isinstance(node, list):
            return [clean(v) for v in node]
        return node

    cleaned: dict[str, Any] = clean(schema)
    return cleaned
