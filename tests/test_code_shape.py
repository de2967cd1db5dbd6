"""The code's shape, read from the source (issue 47): modules and functions small enough to read
in one sitting, the trainer's constructor a composition, and one writer of the run's state."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

from astrai.paths import REPO_ROOT
from astrai.training.state import TrainState

MAX_FILE_LINES = 400
MAX_FUNCTION_LINES = 80
MAX_TRAINER_INIT_LINES = 40
STATE_WRITER = Path("src/astrai/training/loop.py")


def _sources() -> list[Path]:
    """Every Python file of the package and the launcher plugin (not build artifacts)."""
    roots = [REPO_ROOT / "src" / "astrai", REPO_ROOT / "launchers" / "hydra_plugins"]
    return sorted(p for root in roots for p in root.rglob("*.py") if "build" not in p.parts)


def _functions(tree: ast.AST) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef)
    return [node for node in ast.walk(tree) if isinstance(node, kinds)]


def _length(node: ast.AST) -> int:
    assert node.end_lineno is not None
    return node.end_lineno - node.lineno + 1


def test_every_module_and_function_is_short() -> None:
    long_files, long_functions = [], []
    for path in _sources():
        text = path.read_text()
        name = path.relative_to(REPO_ROOT)
        if len(text.splitlines()) > MAX_FILE_LINES:
            long_files.append(f"{name}: {len(text.splitlines())} lines")
        for function in _functions(ast.parse(text)):
            if _length(function) > MAX_FUNCTION_LINES:
                long_functions.append(f"{name}:{function.lineno} {function.name}")
    assert not long_files, f"over {MAX_FILE_LINES} lines: {long_files}"
    assert not long_functions, f"functions over {MAX_FUNCTION_LINES} lines: {long_functions}"


def test_the_trainer_constructor_composes() -> None:
    tree = ast.parse((REPO_ROOT / "src/astrai/training/trainer.py").read_text())
    (init,) = [
        node
        for cls in ast.walk(tree)
        if isinstance(cls, ast.ClassDef) and cls.name == "Trainer"
        for node in cls.body
        if isinstance(node, ast.FunctionDef) and node.name == "__init__"
    ]
    assert _length(init) <= MAX_TRAINER_INIT_LINES


def _state_writes(tree: ast.AST) -> list[int]:
    """Lines that write a ``TrainState``: an assignment to one of its fields on an object
    named ``state`` or ``….state``, or a ``TrainState(...)`` made."""
    fields = {f.name for f in dataclasses.fields(TrainState)}
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "TrainState":
            lines.append(node.lineno)
        targets = []
        if isinstance(node, ast.Assign):
            targets = [t for target in node.targets for t in getattr(target, "elts", [target])]
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        for target in targets:
            if isinstance(target, ast.Attribute) and target.attr in fields:
                owner = target.value
                named = getattr(owner, "id", None) or getattr(owner, "attr", None)
                if named == "state":
                    lines.append(node.lineno)
    return lines


def test_the_train_state_has_one_writer() -> None:
    writers = {
        str(path.relative_to(REPO_ROOT)): lines
        for path in _sources()
        if (lines := _state_writes(ast.parse(path.read_text())))
    }
    assert set(writers) == {str(STATE_WRITER)}, writers


def test_the_writer_check_sees_a_write() -> None:
    """The check above can fail: a step that advanced the state itself would be seen."""
    tree = ast.parse("def f(self):\n    self.state.step += 1\n    self.state.reissue, x = [], 1\n")
    assert _state_writes(tree) == [2, 3]
