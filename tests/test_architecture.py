"""The project's packages form a ladder: each imports only those below it, so there is no
cycle between apps and no app reaches into another's views.

    config                   settings, URLs, entry points: may import every app
    chat                     the protocol edge and the composition root
    traces   knowledge       the run's lifecycle and traces; the evidence backends
    core                     what every edge shares (errors, serializers, pagination, admin)
    harness                  plain Python (its own test forbids frameworks)

Every import counts, also those inside functions, which is where a cycle hides.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ALLOWED: dict[str, set[str]] = {
    "harness": set(),
    "core": set(),
    "traces": {"core", "harness"},
    "knowledge": {"core", "harness"},
    "chat": {"core", "harness", "traces", "knowledge"},
    "config": {"core", "harness", "traces", "knowledge", "chat"},
}


def imported_packages(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _names_a_module(node.value):
            # dotted paths in settings and URL confs ("chat.urls", "core.api.exception_handler")
            names.add(node.value.split(".")[0])
    return names & set(ALLOWED)


def _names_a_module(text: str) -> bool:
    parts = text.split(".")
    if len(parts) < 2 or parts[0] not in ALLOWED or not all(p.isidentifier() for p in parts):
        return False
    module = ROOT.joinpath(*parts[:2])
    return module.with_suffix(".py").is_file() or (module / "__init__.py").is_file()


def violations() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for package, allowed in ALLOWED.items():
        for path in (ROOT / package).rglob("*.py"):
            wrong = imported_packages(path) - allowed - {package}
            if wrong:
                found[str(path.relative_to(ROOT))] = wrong
    return found


def test_every_package_imports_only_the_packages_below_it() -> None:
    assert violations() == {}


def test_the_ladder_has_no_cycle() -> None:
    for package, allowed in ALLOWED.items():
        for lower in allowed:
            assert package not in ALLOWED[lower], f"{package} and {lower} may import each other"


@pytest.mark.parametrize(
    ("source", "caught"),
    [
        ("from chat.errors import NotFound\n", {"chat"}),
        ("def f():\n    from chat import wiring\n", {"chat"}),
        ("import traces.models\n", {"traces"}),
        ('HANDLER = "chat.apis.ChatApi"\n', {"chat"}),
        ('EVENT = "knowledge.answer_rejected"\nFILE = "config.json"\n', set()),
        ("from .models import Chunk\nimport numpy\n", set()),
    ],
)
def test_the_scan_sees_every_kind_of_import(tmp_path: Path, source: str, caught: set[str]) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(source)
    assert imported_packages(sample) == caught
