"""The run's states have one definition, the harness's: the columns' choices and the router's
reply follow it, so a new status, outcome or intent cannot exist in one place only."""

from __future__ import annotations

import enum
import json

import pytest
from django.db import models

from harness.context import Outcome, RunStatus
from harness.routing import Intent, parse_intent
from traces.models import TERMINAL_STATUSES, Run


@pytest.mark.parametrize(("field", "values"), [("status", RunStatus), ("outcome", Outcome), ("intent", Intent)])
def test_the_run_columns_accept_exactly_the_harness_values(field: str, values: type[enum.StrEnum]) -> None:
    column = Run._meta.get_field(field)
    assert isinstance(column, models.CharField)
    assert [value for value, _label in column.choices or ()] == [m.value for m in values]


def test_terminal_statuses_are_every_status_a_run_can_end_in() -> None:
    assert set(TERMINAL_STATUSES) == set(RunStatus) - {RunStatus.QUEUED, RunStatus.RUNNING}


def test_the_router_accepts_every_intent_and_nothing_else() -> None:
    for intent in Intent:
        assert parse_intent(json.dumps({"intent": intent.value})) is intent
    assert parse_intent(json.dumps({"intent": "diagnosis"})) is None
    assert parse_intent(json.dumps({"intent": "SMALL_TALK"})) is None
