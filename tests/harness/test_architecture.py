"""harness/ is plain Python: no Django, Celery, DRF, Redis, django-eventstream or Prometheus client
inside it; and no production code leans on the helpers that only tests use."""

from __future__ import annotations

import ast
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import harness

FORBIDDEN = (
    "django",
    "celery",
    "rest_framework",
    "redis",
    "django_eventstream",
    "kombu",
    "drf_spectacular",
    "prometheus_client",  # metrics are recorded by the service's audit sinks and hooks
)
HARNESS = Path(harness.__file__).parent
#: The packages that run in the service, the evaluator and the benchmarks.
PRODUCTION = ("harness", "chat", "traces", "knowledge", "config", "bench")


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in (
            "import_module",
            "__import__",
        ):
            names.extend(a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str))
    return names


def test_no_source_file_under_harness_imports_a_framework() -> None:
    offenders = {
        str(path.relative_to(HARNESS.parent)): name
        for path in HARNESS.rglob("*.py")
        for name in _imports(path)
        if name.split(".")[0] in FORBIDDEN
    }
    assert offenders == {}


def test_the_scan_would_catch_a_framework_import(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("import os\nfrom django.db import models\nimportlib.import_module('redis')\n")
    assert [n for n in _imports(sample) if n.split(".")[0] in FORBIDDEN] == ["django.db", "redis"]


def test_importing_every_harness_module_loads_no_framework() -> None:
    modules = [m.name for m in pkgutil.walk_packages([str(HARNESS)], prefix="harness.")]
    assert "harness.application" in modules
    script = (
        "import importlib, json, sys\n"
        f"for name in {modules!r}: importlib.import_module(name)\n"
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {FORBIDDEN!r})))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=HARNESS.parent)
    assert json.loads(out.stdout) == []


def imported_modules(path: Path) -> set[str]:
    """What ``_imports`` finds, plus ``package.name`` for ``from package import name``."""
    names = set(_imports(path))
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_production_code_never_imports_the_test_helpers() -> None:
    root = HARNESS.parent
    offenders = sorted(
        str(path.relative_to(root))
        for package in PRODUCTION
        for path in (root / package).rglob("*.py")
        if "harness.testing" in imported_modules(path)
    )
    assert offenders == [], "production code uses harness.inmemory, never harness.testing"


def test_the_test_helper_scan_sees_both_import_forms(tmp_path: Path) -> None:
    for text in ("from harness.testing import ManualCancelSignal\n", "from harness import testing\n"):
        sample = tmp_path / "sample.py"
        sample.write_text(text)
        assert "harness.testing" in imported_modules(sample)
