"""Single-turn or episodes is the collector's question (issue 60): nothing in ``src/astrai`` asks
whether a run has an environment, outside the modules that must.

The rule, checked on the syntax tree of every module of ``src/astrai`` but the ``envs`` package
(where ``env`` is an environment instance an episode slot holds, not the run's choice): an *env
expression* is

- a name ``env``, ``env_spec`` or ``env_node``, or an attribute ``<anything>.env``;
- a subscript ``<anything>["env"]`` or a call ``<anything>.get("env")`` (the config's node);
- a call of ``configured_env``, ``env_spec`` or ``run_env`` (what reads that node into an
  ``EnvSpec`` or None).

No env expression may be compared with ``None`` (``is``, ``is not``, ``==``, ``!=``, either
side), nor be tested for truth (the test of an ``if``, ``while``, ``assert`` or conditional
expression, an operand of ``and``/``or``/``not``, the argument of ``bool()``).

Allowed (``ALLOWED``): the collectors module, which makes the one choice (``collector=auto``);
the env node's own readers, which must tell ``env=single_turn`` (``_target_: null``) from an
environment: ``rollout/episodes/env_spec.py`` (the node into an ``EnvSpec`` or None) and the config
checks of the env node (``config/env_checks.py``, ``config/env_reward.py``,
``config/checkpoint_run.py``, which reads a checkpoint's saved env node). ``generate.py`` asks
the run's collector class (``run_collector``: ``Collector.episodes``) whether to print episode
transcripts.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "astrai"
ALLOWED = {
    "rollout/collectors.py",
    "rollout/episodes/env_spec.py",
    "config/env_checks.py",
    "config/env_reward.py",
    "config/checkpoint_run.py",
}
ENV_NAMES = {"env", "env_spec", "env_node"}
ENV_READERS = {"configured_env", "env_spec", "run_env"}


def is_env(node: ast.AST) -> bool:
    """Whether ``node`` is an env expression (module docstring)."""
    if isinstance(node, ast.Name):
        return node.id in ENV_NAMES
    if isinstance(node, ast.Attribute):
        return node.attr == "env"
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == "env"
    if isinstance(node, ast.Call):
        func = node.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
        if name in ENV_READERS:
            return True
        first = node.args[0] if node.args else None
        return name == "get" and isinstance(first, ast.Constant) and first.value == "env"
    return False


def _is_none(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value is None


def env_questions(tree: ast.AST) -> list[int]:
    """The lines of ``tree`` that ask whether there is an environment (module docstring)."""
    lines = []
    for node in ast.walk(tree):
        tested: list[ast.AST] = []
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            pairs = zip(sides, sides[1:], strict=False)
            if any(_is_none(a) and is_env(b) or is_env(a) and _is_none(b) for a, b in pairs):
                lines.append(node.lineno)
        elif isinstance(node, ast.If | ast.While | ast.IfExp | ast.Assert):
            tested = [node.test]
        elif isinstance(node, ast.BoolOp):
            tested = list(node.values)
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            tested = [node.operand]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            tested = node.args if node.func.id == "bool" else []
        lines += [t.lineno for t in tested if is_env(t)]
    return lines


def test_the_rule_finds_each_shape_of_the_question() -> None:
    asks = [
        "env is None", "x.env is not None", "None == env", 'cfg.get("env") is None',
        'run["env"] != None', "configured_env(node) is None", "if env:\n    pass",
        "y = 1 if not self.env else 2", "ok = env_spec and x", "bool(facts.env)",
        "while env_node:\n    break", "assert env",
    ]  # fmt: skip
    for source in asks:
        assert env_questions(ast.parse(source)) == [1], source
    fine = ["collector.episodes", "spec is None", "env.target", "environment is None"]
    for source in fine:
        assert env_questions(ast.parse(source)) == [], source


def test_only_the_collectors_and_the_env_node_s_readers_ask_whether_there_is_an_env() -> None:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        relative = path.relative_to(SRC).as_posix()
        if relative in ALLOWED or relative.startswith("envs/"):
            continue
        found += [f"{relative}:{line}" for line in env_questions(ast.parse(path.read_text()))]
    assert not found, f"ask the run's collector instead (rollout.collectors): {found}"


def test_every_allowed_module_still_exists() -> None:
    assert all((SRC / relative).is_file() for relative in ALLOWED), ALLOWED
