"""Shared test helpers live in helper modules (``tests/helpers.py``, ``tests/train_runs.py``,
``tests/*/..._helpers``): no test module imports from another test module, whose collection would
then run (or hide) that module's tests and whose private names would become an API."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def imported_modules(source: str) -> list[str]:
    """Dotted names of every ``import x`` / ``from x import ...`` in ``source`` (absolute only)."""
    names = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


def imports_of_test_modules(names: list[str]) -> list[str]:
    """The names among ``names`` that are test modules (``tests.….test_*``)."""
    return [n for n in names if n.startswith("tests.") and n.rsplit(".", 1)[-1].startswith("test_")]


def test_the_check_finds_an_import_from_a_test_module() -> None:
    source = "from tests.test_train_cli import run_train\nimport tests.report.test_report\n"
    source += "from tests.helpers import run_main\nimport json\n"
    assert imports_of_test_modules(imported_modules(source)) == [
        "tests.test_train_cli",
        "tests.report.test_report",
    ]


def test_no_test_module_imports_from_another() -> None:
    offenders = {
        str(path.relative_to(TESTS)): found
        for path in sorted(TESTS.rglob("*.py"))
        if (found := imports_of_test_modules(imported_modules(path.read_text())))
    }
    assert offenders == {}, f"move the shared names into a helper module: {offenders}"
