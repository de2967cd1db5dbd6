"""The code's shape, read from the source (issues 47 and 60): modules and functions small enough
to read in one sitting, the step's and the run's constructors compositions, one writer of the
run's state, the run on top (``run_loop`` called by the run's ``fit`` alone; the step has no
run-level method) and a state record that imports no thread or stream code."""

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


def _methods(path: str, class_name: str) -> dict[str, ast.FunctionDef]:
    """The methods of ``class_name`` in ``path`` (relative to the checkout) by name."""
    tree = ast.parse((REPO_ROOT / path).read_text())
    (cls,) = [c for c in ast.walk(tree) if isinstance(c, ast.ClassDef) and c.name == class_name]
    return {node.name: node for node in cls.body if isinstance(node, ast.FunctionDef)}


def test_the_step_and_run_constructors_compose() -> None:
    assert _length(_methods("src/astrai/training/trainer.py", "Trainer")["__init__"]) <= (
        MAX_TRAINER_INIT_LINES
    )
    assert _length(_methods("src/astrai/training/run.py", "Run")["__init__"]) <= (
        MAX_TRAINER_INIT_LINES
    )


# what happens between the steps of a run: the run's (``training.run.Run``), not the step's
RUN_LEVEL = {"fit", "train_step", "save_checkpoint", "wait_for_checkpoint", "close", "announce"}
RUN_LEVEL |= {"save_config", "eval_metrics", "log_samples", "log_eval_line", "prompt_counts"}


def test_the_step_has_no_run_level_method() -> None:
    step = set(_methods("src/astrai/training/trainer.py", "Trainer"))
    assert step & RUN_LEVEL == set()
    assert RUN_LEVEL <= set(_methods("src/astrai/training/run.py", "Run"))


def _callers(name: str) -> list[str]:
    """``path:function`` of every call of ``name`` (a plain or attribute call) in the sources."""
    found = []
    for path in _sources():
        tree = ast.parse(path.read_text())
        for function in _functions(tree):
            for node in ast.walk(function):
                if isinstance(node, ast.Call):
                    called = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
                    if called == name:
                        found.append(f"{path.relative_to(REPO_ROOT)}:{function.name}")
    return found


def test_run_loop_has_one_caller_the_runs_fit() -> None:
    assert _callers("run_loop") == ["src/astrai/training/run.py:fit"]
    fit = _methods("src/astrai/training/run.py", "Run")["fit"]
    assert any(
        getattr(n.func, "id", None) == "run_loop" for n in ast.walk(fit) if isinstance(n, ast.Call)
    )
    # the one lifecycle: train.py's job and every rank of a launch call ``training.run.fit``
    lifecycle = sorted(set(_callers("fit")) - {"src/astrai/training/run.py:fit"})
    assert (
        "src/astrai/train.py:run" in lifecycle
        and "src/astrai/training/launch.py:run_worker" in lifecycle
    )


# modules whose code starts or waits on threads or device streams
THREADED = {"threading", "concurrent", "queue", "astrai.training.sampling.overlap"}
THREADED |= {"astrai.training.sampling.sampling_thread", "astrai.training.sampling.cuda_streams"}


def _imported_closure(module: str) -> set[str]:
    """Every module ``module`` imports at module level or in a function, transitively within
    ``astrai`` (external modules by their top-level name; ``astrai.x.y`` by its full name)."""

    def path_of(name: str) -> Path | None:
        base = REPO_ROOT / "src" / name.replace(".", "/")
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate
        return None

    seen: set[str] = set()
    todo = [module]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        path = path_of(name)
        if path is None:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            else:
                continue
            for imported in names:
                if imported.startswith("astrai"):
                    if path_of(imported) is not None:
                        todo.append(imported)
                else:
                    seen.add(imported.split(".")[0])
    return seen


def test_the_state_record_imports_no_thread_or_stream_code() -> None:
    closure = _imported_closure("astrai.training.state")
    # the closure is followed (what it holds)
    assert "astrai.training.sampling.in_flight" in closure
    assert closure & THREADED == set()
    # the check can fail: the sampling pipeline is threaded code
    assert _imported_closure("astrai.training.sampling.overlap") & THREADED


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
    tree = ast.parse(
        "def f(self):\n    self.state.step += 1\n    self.state.in_flight, x = [], 1\n"
    )
    assert _state_writes(tree) == [2, 3]
