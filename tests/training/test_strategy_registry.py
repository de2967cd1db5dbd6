"""Adding an algorithm is its module plus one registration line, and ``training/`` has no import
circle (issue 32: the Trainer's state is one record; per-algorithm facts live on the Strategy).

The toy algorithm (``tests/training/toy_strategy.py``) is registered with one line and run by
the real ``train.py`` main for one step with its own ``conf/train_type/toy.yaml`` on Hydra's
search path: its schema is derived from its constructor, its metrics are its class's, its
checkpoint lists its files."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import grimp
import pytest
from tests.train_runs import QUICK, REPO, run_train_in_process
from tests.training.toy_strategy import ToyStrategy

from astrai.algorithms.registry import STRATEGIES, register_strategy
from astrai.checkpoints.layout import COMMON_FILES
from astrai.metrics.names import METRICS, reward_term_names


@pytest.fixture
def toy_registered() -> Iterator[None]:
    register_strategy(ToyStrategy)  # the one line a new algorithm adds (algorithms/registry.py)
    yield
    del STRATEGIES[ToyStrategy.name]


def _toy_conf(root: Path) -> Path:
    """``conf/train_type/toy.yaml`` under ``root``: GRPO's file with the toy's target, schema and
    knob in place of GRPO's own two."""
    text = (REPO / "conf" / "train_type" / "online_grpo.yaml").read_text()
    text = text.replace("base_online_grpo", "base_toy")
    target = "tests.training.toy_strategy.ToyStrategy"
    text = text.replace("astrai.algorithms.grpo.GRPOStrategy", target)
    lines = [
        line
        for line in text.splitlines()
        if not line.startswith(("adv_eps:", "scale_rewards:", "advantage:", "   "))
    ]  # GRPO's knobs and their continuation comments go
    lines += ["advantage: batch_baseline", "baseline_scale: 0.5"]
    path = root / "conf" / "train_type" / "toy.yaml"
    path.parent.mkdir(parents=True)
    path.write_text("\n".join(lines) + "\n")
    return path.parent.parent


@pytest.mark.usefixtures("toy_registered")
def test_a_registered_toy_strategy_runs_a_step_logs_its_metrics_and_checkpoints(
    tmp_path: Path,
) -> None:
    conf, run = _toy_conf(tmp_path), tmp_path / "run"
    args = [*QUICK, "train_type=toy", f"hydra.searchpath=[file://{conf}]", f"hydra.run.dir={run}"]
    result = run_train_in_process([*args, "trainer.total_steps=1"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [0, 1]
    emitted = set(rows[1]) - {"step"}
    assert emitted - reward_term_names(emitted) == ToyStrategy.metric_names
    state = json.loads((run / "checkpoints" / "step_1" / "trainer_state.json").read_text())
    assert (state["train_type"], state["extra_files"]) == ("toy", [])
    saved = (run / "config.yaml").read_text()
    assert "baseline_scale: 0.5" in saved and "ToyStrategy" in saved
    # the schema derived from the constructor types the knob: a wrong type fails at compose
    bad = run_train_in_process([*args, "train_type.baseline_scale=lots"], cwd=tmp_path)
    assert bad.returncode != 0
    assert "train_type.baseline_scale" in bad.stderr and "\n" not in bad.stderr.strip()


def test_every_registered_strategy_names_documented_metrics_and_its_own_files() -> None:
    assert set(STRATEGIES) == {"online_grpo", "online_ppo"}
    for cls in STRATEGIES.values():
        assert cls.metric_names <= set(METRICS), cls.name
        assert not set(cls.checkpoint_files) & set(COMMON_FILES), cls.name
    assert STRATEGIES["online_ppo"].checkpoint_files == (
        "value_model.pt",
        "value_optimizer.pt",
        "value_scheduler.pt",
    )


def test_a_name_registered_twice_is_refused() -> None:
    class Impostor(ToyStrategy):
        name = "online_grpo"

    with pytest.raises(ValueError, match="'online_grpo' is already registered"):
        register_strategy(Impostor)


def _cycles(graph: grimp.ImportGraph, package: str) -> list[list[str]]:
    """Import cycles among ``package``'s modules (TYPE_CHECKING and lazy imports count)."""
    modules = sorted(m for m in graph.modules if m.startswith(package + "."))
    found: list[list[str]] = []
    for module in modules:
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            if imported in modules and module < imported:
                back = graph.find_shortest_chain(importer=imported, imported=module)
                if back is not None and all(step in modules for step in back):
                    found.append([module, *back])
    return found


def test_training_has_no_import_circle() -> None:
    graph = grimp.build_graph("astrai")
    assert _cycles(graph, "astrai.training") == []
    # the check can fail: the circle trainer and loop had (through a TYPE_CHECKING import)
    graph.add_import(importer="astrai.training.loop", imported="astrai.training.trainer")
    assert _cycles(graph, "astrai.training") == [
        ["astrai.training.loop", "astrai.training.trainer", "astrai.training.loop"]
    ]
