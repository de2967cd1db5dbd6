"""Adding an algorithm is its module plus its YAML (issue 60: no registry, the ``train_type`` is
its ``_target_`` class), and ``training/`` has no import circle (issue 32: the Trainer's state is
one record; per-algorithm facts live on the Strategy).

The toy algorithm (``tests/training/toy_strategy.py``) is named by nothing but the
``_target_`` of its own ``conf/train_type/toy.yaml`` on Hydra's search path, and run by the real
``train.py`` main for one step: its knobs are checked against its constructor, its metrics are
its class's, its checkpoint lists its files."""

from __future__ import annotations

import json
from pathlib import Path

import grimp
import pytest
from tests.helpers import compose_config
from tests.train_runs import QUICK, REPO, run_train_in_process
from tests.training.toy_strategy import ToyStrategy

from astrai.algorithms.grpo import GRPOStrategy
from astrai.algorithms.ppo import PPOStrategy
from astrai.checkpoints.layout import COMMON_FILES
from astrai.config.errors import ConfigError
from astrai.metrics.names import METRICS, reward_term_names


def _toy_conf(root: Path) -> Path:
    """``conf/train_type/toy.yaml`` under ``root``: GRPO's file with the toy's target and knob in
    place of GRPO's schema and its own two knobs (a YAML outside ``conf/`` has no stored schema:
    validation checks it against the class's constructor)."""
    text = (REPO / "conf" / "train_type" / "online_grpo.yaml").read_text()
    text = text.replace("  - /schema/train_type/base_online_grpo@_here_\n", "")
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


def test_a_toy_strategy_named_by_its_target_runs_a_step_logs_its_metrics_and_checkpoints(
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
    # the schema derived from the constructor types the knob (after compose: validation), and
    # a key it does not take is refused, each one line naming the key
    bad = run_train_in_process([*args, "train_type.baseline_scale=lots"], cwd=tmp_path)
    assert bad.returncode != 0
    assert "train_type.baseline_scale" in bad.stderr and "\n" not in bad.stderr.strip()
    typo = run_train_in_process([*args, "+train_type.baseline_scal=0.5"], cwd=tmp_path)
    assert typo.returncode != 0
    assert (
        "train_type.baseline_scal is not a config key (did you mean train_type.baseline_scale?)"
        in typo.stderr
    )
    assert "\n" not in typo.stderr.strip()


def test_the_shipped_strategies_name_documented_metrics_roles_and_their_own_files() -> None:
    for cls in (GRPOStrategy, PPOStrategy):
        assert cls.metric_names <= set(METRICS), cls.name
        assert not set(cls.checkpoint_files) & set(COMMON_FILES), cls.name
    assert (GRPOStrategy.requires, PPOStrategy.requires) == (
        ("reference",),
        ("reference", "critic"),
    )
    assert PPOStrategy.checkpoint_files == (
        "value_model.pt",
        "value_optimizer.pt",
        "value_scheduler.pt",
    )


def test_a_train_type_target_that_is_no_strategy_is_one_line() -> None:
    with pytest.raises(ConfigError, match=r"^train_type._target_ 'torch.nn.Linear' is not an "):
        compose_config([*QUICK, "train_type._target_=torch.nn.Linear"])
    with pytest.raises(ConfigError, match=r"^train_type._target_ 'no_such_mod.Toy' cannot be "):
        compose_config([*QUICK, "train_type._target_=no_such_mod.Toy"])


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
