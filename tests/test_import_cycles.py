"""No import circle among astrai's modules or the launcher's: every import statement counts,
also one inside a function or under ``TYPE_CHECKING`` (a lazy import that closes a circle still
ties the two modules into one). import-linter's layers cover the packages; this covers the
modules inside them (issue 47: the tokenizer pair, the reward trio, the launcher trio)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.train_runs import REPO

ROOTS = (REPO / "src", REPO / "launchers")


def module_files() -> dict[str, Path]:
    """Dotted module name -> file, for every module under ``ROOTS`` (build/ left out)."""
    found = {}
    for root in ROOTS:
        for path in root.rglob("*.py"):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if "build" in parts:
                continue
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def imported_modules(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of ``known`` that ``path`` (module ``name``) imports anywhere in it."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            targets.add(base)
            targets.update(f"{base}.{alias.name}" for alias in node.names)
    return {t for t in targets if t in known and t != name}


def import_cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))
    return cycles


def test_the_finder_finds_a_circle() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert import_cycles(edges) == [["a", "b", "c"]]
    assert import_cycles({"a": {"b"}, "b": set()}) == []


def test_no_module_of_astrai_or_the_launcher_imports_itself_round_a_circle() -> None:
    known = module_files()
    assert "astrai.train" in known and "hydra_plugins.astrai_docker_launcher._core" in known
    edges = {name: imported_modules(name, path, known) for name, path in known.items()}
    assert "astrai.models.tokenizer" in edges["astrai.models.hf_tokenizer"]  # edges are read
    assert import_cycles(edges) == []
