"""knowledge/ works the same whatever model the service runs: none of its modules imports the
offline model, whose vocabulary is tuned to reading logs as a stand-in for a real LLM."""

from __future__ import annotations

from pathlib import Path

import knowledge
from tests.harness.test_architecture import imported_modules

KNOWLEDGE = Path(knowledge.__file__).parent


def test_no_knowledge_module_imports_the_offline_model() -> None:
    offenders = {
        str(path.relative_to(KNOWLEDGE.parent)): sorted(
            name for name in imported_modules(path) if name.startswith("harness.llm.offline")
        )
        for path in sorted(KNOWLEDGE.rglob("*.py"))
    }
    assert {path: names for path, names in offenders.items() if names} == {}


def test_runbook_matching_reads_text_with_the_knowledge_side_terms() -> None:
    imported = imported_modules(KNOWLEDGE / "runbooks.py")
    assert "knowledge.lexical.terms" in imported
    assert not {name for name in imported if name.startswith(("harness.text", "harness.llm"))}
