"""PublishedResultPolicy / PreviousTurn: the only memory of a session, bounded, and never half-trusted."""

from __future__ import annotations

import json
from typing import Any

import pytest

from harness.memory import LIMITS, MemoryLimits, PreviousTurn, PublishedResult, PublishedResultPolicy
from harness.ports import RoutingContext
from harness.routing import router_input

DOC = {"document_id": "runbook-db-pool#1", "title": "Database connection pool exhaustion", "section": "Causes"}


def stored(**overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "query": "Payments are timing out since 10:00 UTC",
        "conclusion": "Payments time out because the connection pool is exhausted.",
        "root_cause": "db.pool.max_size was cut from 50 to 10.",
        "limitations": ["No metrics were available."],
        "sources": [DOC],
    }
    data.update(overrides)
    return data


def test_a_valid_stored_result_is_read_back_unchanged() -> None:
    turn = PublishedResultPolicy().previous_turn(stored())

    assert turn == PreviousTurn(
        query="Payments are timing out since 10:00 UTC",
        conclusion="Payments time out because the connection pool is exhausted.",
        root_cause="db.pool.max_size was cut from 50 to 10.",
        limitations=("No metrics were available.",),
        sources=(DOC,),
    )
    assert PublishedResultPolicy().previous_turn(turn.to_dict()) == turn


def test_a_report_becomes_a_published_result_with_only_what_is_remembered() -> None:
    report = {
        "conclusion": "Payments time out because the connection pool is exhausted.",
        "root_cause": "db.pool.max_size was cut from 50 to 10.",
        "findings": [{"statement": "pool errors", "evidence": [{"tool": "query_logs", "quote": "x"}]}],
        "recommendations": ["Restore the pool size."],
        "limitations": [],
        "sources": [DOC],
        "consulted": [{"tool": "query_logs", "calls": 1, "succeeded": 1, "with_evidence": 1}],
    }

    published = PublishedResultPolicy().from_report("  Why do payments time out?  ", report)

    assert published is not None
    assert published.to_dict() == {
        "query": "Why do payments time out?",
        "conclusion": report["conclusion"],
        "root_cause": report["root_cause"],
        "limitations": [],
        "sources": [DOC],
    }


def test_a_report_without_conclusion_leaves_no_memory() -> None:
    assert PublishedResultPolicy().from_report("Why?", {"root_cause": "pool", "conclusion": ""}) is None


SMALL = MemoryLimits(
    query_chars=11,
    conclusion_chars=12,
    root_cause_chars=13,
    limitations=2,
    limitation_chars=14,
    sources=3,
    source_field_chars=15,
)


def test_every_limit_is_applied_to_its_own_field() -> None:
    data = stored(
        query="q" * 100,
        conclusion="c" * 100,
        root_cause="r" * 100,
        limitations=["a" * 100, "b" * 100, "c" * 100],
        sources=[{"document_id": f"doc-{i}-" + "d" * 100, "title": "t" * 100, "section": "s" * 100} for i in range(5)],
    )

    turn = PublishedResultPolicy(SMALL).previous_turn(data)

    assert turn is not None
    assert turn.query == "q" * 11
    assert turn.conclusion == "c" * 12
    assert turn.root_cause == "r" * 13
    assert turn.limitations == ("a" * 14, "b" * 14)
    assert len(turn.sources) == 3
    for i, source in enumerate(turn.sources):
        assert source == {"document_id": f"doc-{i}-" + "d" * 9, "title": "t" * 15, "section": "s" * 15}


def test_the_default_limits_bound_a_huge_stored_result() -> None:
    data = stored(
        query="q" * 10_000,
        conclusion="c" * 10_000,
        root_cause="r" * 10_000,
        limitations=["l" * 10_000] * 50,
        sources=[{"document_id": f"doc-{i}", "title": "t" * 10_000, "section": "s"} for i in range(50)],
    )

    turn = PublishedResultPolicy().previous_turn(data)

    assert turn is not None
    assert len(turn.query) == LIMITS.query_chars == 500
    assert len(turn.conclusion) == LIMITS.conclusion_chars == 1_000
    assert len(turn.root_cause) == LIMITS.root_cause_chars == 1_000
    assert len(turn.limitations) == LIMITS.limitations == 10
    assert {len(x) for x in turn.limitations} == {LIMITS.limitation_chars}
    assert len(turn.sources) == LIMITS.sources == 10
    assert {len(s["title"]) for s in turn.sources} == {LIMITS.source_field_chars}
    assert len(json.dumps(turn.to_dict())) < 20_000


def test_strings_are_stripped_before_they_are_cut() -> None:
    turn = PublishedResultPolicy(SMALL).previous_turn(stored(query="   " + "q" * 20, conclusion="\n ok \n"))

    assert turn is not None
    assert turn.query == "q" * 11
    assert turn.conclusion == "ok"


def test_sources_are_deduplicated_before_they_are_capped() -> None:
    other = {"document_id": "cache-stampede#0", "title": "Cache stampede", "section": "Symptoms"}
    third = {"document_id": "smtp#0", "title": "Email retries", "section": "Overview"}
    data = stored(sources=[DOC, dict(DOC), DOC, other, dict(other), third])

    turn = PublishedResultPolicy(MemoryLimits(sources=3)).previous_turn(data)

    assert turn is not None
    assert turn.sources == (DOC, other, third)


def test_sources_that_differ_only_past_the_limit_are_one_source() -> None:
    a = {"document_id": "d" * 15 + "-a", "title": "T"}
    b = {"document_id": "d" * 15 + "-b", "title": "T"}

    turn = PublishedResultPolicy(SMALL).previous_turn(stored(sources=[a, b]))

    assert turn is not None
    assert turn.sources == ({"document_id": "d" * 15, "title": "T"},)


def test_only_document_sources_are_kept_and_only_their_document_fields() -> None:
    data = stored(
        sources=[
            {"service": "payment-service", "ts": "2026-11-30T10:01:00Z"},  # a log line: not a document
            {"document_id": "  ", "title": "blank id"},
            {**DOC, "text": "the whole chunk text", "score": 2.5, "tool_call_id": "call_abc"},
        ]
    )

    turn = PublishedResultPolicy().previous_turn(data)

    assert turn is not None
    assert turn.sources == (DOC,)


def test_a_missing_root_cause_is_remembered_as_empty() -> None:
    data = stored()
    del data["root_cause"]

    turn = PublishedResultPolicy().previous_turn(data)

    assert turn is not None
    assert turn.root_cause == ""


def test_missing_limitations_and_sources_are_empty() -> None:
    data = stored()
    del data["limitations"], data["sources"]

    turn = PublishedResultPolicy().previous_turn(data)

    assert turn is not None
    assert (turn.limitations, turn.sources) == ((), ())


INVALID = {
    "conclusion missing": {k: v for k, v in stored().items() if k != "conclusion"},
    "conclusion empty": stored(conclusion="   "),
    "conclusion not a string": stored(conclusion=["pool"]),
    "query missing": {k: v for k, v in stored().items() if k != "query"},
    "query not a string": stored(query=42),
    "root cause null": stored(root_cause=None),
    "root cause not a string": stored(root_cause={"text": "pool"}),
    "limitations not a list": stored(limitations="No metrics."),
    "a limitation not a string": stored(limitations=["ok", 3]),
    "sources not a list": stored(sources={"document_id": "x"}),
    "a source not a mapping": stored(sources=[DOC, "runbook-db-pool#1"]),
}


@pytest.mark.parametrize("data", list(INVALID.values()), ids=list(INVALID))
def test_invalid_stored_data_is_forgotten(data: dict[str, Any]) -> None:
    assert PublishedResultPolicy().previous_turn(data) is None


@pytest.mark.parametrize("data", [None, [], "a stored string", 42, [stored()]])
def test_a_stored_value_that_is_not_a_mapping_is_forgotten(data: Any) -> None:
    assert PublishedResultPolicy().previous_turn(data) is None


@pytest.mark.parametrize(
    "source",
    [{"document_id": 42, "title": "Pool"}, {"document_id": "runbook-db-pool#1", "title": ["Pool"], "section": 3}],
    ids=["document id not a string", "title and section not strings"],
)
def test_a_source_with_wrongly_typed_fields_is_forgotten(source: dict[str, Any]) -> None:
    assert PublishedResultPolicy().previous_turn(stored(sources=[DOC, source])) is None


def test_published_result_is_the_previous_turn() -> None:
    assert PreviousTurn is PublishedResult


def test_the_router_sees_at_most_the_bounded_last_question() -> None:
    payload = json.loads(router_input("why?", RoutingContext("DIAGNOSIS", "x" * 5_000)))

    assert payload == {"query": "why?", "last_intent": "DIAGNOSIS", "last_user_query": "x" * LIMITS.router_query_chars}
