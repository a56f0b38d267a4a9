"""harness/ is plain Python: no Django, Celery, DRF, Redis or django-eventstream inside it."""

from __future__ import annotations

import ast
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import harness

FORBIDDEN = ("django", "celery", "rest_framework", "redis", "django_eventstream", "kombu", "drf_spectacular")
HARNESS = Path(harness.__file__).parent


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
