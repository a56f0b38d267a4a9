"""``.env.example`` lists exactly the settings the service reads from the environment: a name
the code reads is documented there, and a name documented there is read by the code."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

from tests.config.test_startup import ROOT

#: the service's code; tests/ and bench/ read their own variables (the README's Benchmarks)
SOURCES = ("manage.py", "config", "core", "chat", "traces", "knowledge", "harness")
#: config/env.py's readers: the first argument is the variable's name
ENV_READERS = frozenset({"env_str", "env_bool", "env_int", "env_float", "env_list"})
#: read by the code but set by the code, not by an operator
INTERNAL = frozenset(
    {
        "DJANGO_SETTINGS_MODULE",  # manage.py, asgi, wsgi and celery name config.settings themselves
        "SBA_STACK_PID",  # the stack names itself to its children (config/lifeline.py)
        "SBA_EVAL_SCRATCH",  # eval_scenarios runs itself again in a scratch database
    }
)
_ASSIGNMENT = re.compile(r"^#?\s*([A-Z][A-Z0-9_]*)=", re.MULTILINE)


def _python_files() -> Iterator[Path]:
    for source in SOURCES:
        path = ROOT / source
        if path.is_file():
            yield path
        else:
            yield from (p for p in path.rglob("*.py") if "migrations" not in p.parts)


def _is_environ(node: ast.expr) -> bool:
    """``os.environ`` (also ``__import__("os").environ``)."""
    return isinstance(node, ast.Attribute) and node.attr == "environ"


def _name(node: ast.expr, constants: dict[str, str]) -> str | None:
    """The variable's name, or for an f-string a regular expression of the names it makes."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return re.escape(node.value)
    if isinstance(node, ast.Name) and node.id in constants:
        return re.escape(constants[node.id])
    if isinstance(node, ast.JoinedStr):
        return "".join(
            re.escape(str(part.value)) if isinstance(part, ast.Constant) else "[A-Z0-9_]+" for part in node.values
        )
    return None


def _is_read(call: ast.Call) -> bool:
    """``env_str("X")`` and the other readers, ``os.environ.get("X")``, ``os.getenv("X")``."""
    func = call.func
    if isinstance(func, ast.Name):
        return func.id in ENV_READERS
    if isinstance(func, ast.Attribute):
        return func.attr == "getenv" or (func.attr in ("get", "setdefault") and _is_environ(func.value))
    return False


def _read_names(tree: ast.AST) -> Iterator[ast.expr]:
    """The name expression of every read of the environment in ``tree``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args and _is_read(node):
            yield node.args[0]
        elif isinstance(node, ast.Subscript) and _is_environ(node.value) and isinstance(node.ctx, ast.Load):
            yield node.slice
        elif (
            isinstance(node, ast.Compare)
            and any(isinstance(op, ast.In | ast.NotIn) for op in node.ops)
            and any(_is_environ(c) for c in node.comparators)
        ):
            yield node.left


def names_read_by_the_code() -> dict[str, list[str]]:
    """Each name (or f-string pattern) the code reads, with where it is read."""
    found: dict[str, list[str]] = {}
    for path in _python_files():
        tree = ast.parse(path.read_text(), filename=str(path))
        constants = {
            target.id: node.value.value
            for node in tree.body
            if isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
            for target in node.targets
            if isinstance(target, ast.Name)
        }
        # inside the readers themselves the name is their parameter; their callers are scanned
        forwarded = {
            id(inner)
            for node in tree.body
            if isinstance(node, ast.FunctionDef) and node.name in ENV_READERS
            for inner in _read_names(node)
            if isinstance(inner, ast.Name) and inner.id in {a.arg for a in node.args.args}
        }
        for expr in _read_names(tree):
            if id(expr) in forwarded:
                continue
            name = _name(expr, constants)
            assert name is not None, f"{path.relative_to(ROOT)}:{expr.lineno}: a variable name the scan cannot read"
            found.setdefault(name, []).append(f"{path.relative_to(ROOT)}:{expr.lineno}")
    return found


def names_in_env_example() -> set[str]:
    return set(_ASSIGNMENT.findall((ROOT / ".env.example").read_text()))


def test_the_scan_sees_the_readers_it_is_meant_to_see() -> None:
    read = names_read_by_the_code()
    for expected in ("DATABASE_URL", "DJANGO_SECRET_KEY", "PORT", "TEST_REDIS_URL", "SBA_STACK_PID"):
        assert re.escape(expected) in read, expected
    assert "LLM_[A-Z0-9_]+_BASE_URL" in read  # the per-role overrides, read through an f-string


def test_every_variable_the_code_reads_is_in_env_example() -> None:
    documented = names_in_env_example()
    missing = {
        pattern: where
        for pattern, where in names_read_by_the_code().items()
        if not any(re.fullmatch(pattern, name) for name in documented | INTERNAL)
    }
    assert missing == {}


def test_every_variable_in_env_example_is_read_by_the_code() -> None:
    patterns = list(names_read_by_the_code())
    unread = sorted(name for name in names_in_env_example() if not any(re.fullmatch(p, name) for p in patterns))
    assert unread == []


def test_env_example_lists_each_variable_once() -> None:
    names = _ASSIGNMENT.findall((ROOT / ".env.example").read_text())
    assert sorted({n for n in names if names.count(n) > 1}) == []
