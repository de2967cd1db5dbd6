"""Issue 33's families through the real ``train.py`` (its ``main``, in-process): 2-step GRPO and
PPO runs on a tiny random Qwen3 and a tiny Llama-3-style model directory exit 0 and resume
exactly, and a checkpoint astrai cannot compute exactly is refused at start in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from tests.constructed_rewards import ALTERNATING
from tests.helpers import compose_config
from tests.hf_models import save_tiny_hf_model
from tests.train_runs import QUICK, checkpoint_weights, run_train_in_process

from astrai.checkpoints.layout import MODEL_FILE, OPTIMIZER_FILE, VALUE_MODEL_FILE
from astrai.training.run import Run

# one step, stop, resume for the second: the straight 2-step run must be bitwise the same;
# rewards vary within every group by construction (a random model's answers may all score 0,
# and then only weight decay would move GRPO's policy)
RUN = [*QUICK, "logger.tensorboard=false", *ALTERNATING]


def _train(cwd: Path, run_dir: Path, args: list[str]) -> None:
    result = run_train_in_process([*args, f"hydra.run.dir={run_dir}"], cwd=cwd)
    assert result.returncode == 0, result.stderr[-3000:]


def _same(a: object, b: object, where: str) -> None:
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), where
        for key in a:
            _same(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, list | tuple):
        assert isinstance(b, list | tuple) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _same(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


@pytest.mark.slow  # 2 train.py runs and a Trainer, in-process, per case (~2-4 s each)
@pytest.mark.parametrize("family", ["qwen3", "llama3"])
@pytest.mark.parametrize("train_type", ["online_grpo", "online_ppo"])
def test_two_steps_run_and_resume_exactly(family: str, train_type: str, tmp_path: Path) -> None:
    model = save_tiny_hf_model(tmp_path / family, family)
    args = ["model=hf", f"model.path={model}", f"train_type={train_type}", *RUN]
    _train(tmp_path, tmp_path / "straight", args)
    # the first step of the split run stops as a signal would stop it (the same total_steps,
    # so the same schedules), then train.py resumes it (ckpt.resume=auto: from step_1)
    Run(compose_config(args), tmp_path / "split").fit(until=1)
    _train(tmp_path, tmp_path / "split", args)
    straight = tmp_path / "straight" / "checkpoints" / "step_2"
    resumed = tmp_path / "split" / "checkpoints" / "step_2"
    state = json.loads((resumed / "trainer_state.json").read_text())
    assert state["step"] == 2
    log = (tmp_path / "split" / "train.log").read_text()
    assert "resumed from " in log and "step_1 at step 1" in log  # not a fresh start
    _same(
        checkpoint_weights(straight / MODEL_FILE),
        checkpoint_weights(resumed / MODEL_FILE),
        "policy",
    )
    for name in [OPTIMIZER_FILE] + ([VALUE_MODEL_FILE] if train_type == "online_ppo" else []):
        states = [torch.load(path / name, weights_only=False) for path in (straight, resumed)]
        _same(*states, name)
    # the policy moved: a run that trained nothing would also "resume exactly"
    source = checkpoint_weights(model / "model.safetensors")
    trained = checkpoint_weights(straight / MODEL_FILE)
    assert max((trained[n] - source[n]).abs().max().item() for n in source) > 0
    rows = (tmp_path / "straight" / "metrics.jsonl").read_text().splitlines()
    assert all(json.loads(r)["advantages/std"] > 0 for r in rows[1:])  # a gradient each step
    # the checkpoint knows its family: export writes it in that family's layout
    config = json.loads((straight / "config.json").read_text())
    assert config["model_type"] == ("qwen3" if family == "qwen3" else "llama")
    assert (config["qk_norm"], config["rope_scaling"] is not None) == (
        family == "qwen3",
        family == "llama3",
    )


def _edit_config(directory: Path, **changes: object) -> None:
    path = directory / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


@pytest.mark.slow  # three refused starts through train.py's main, in-process
def test_unsupported_checkpoints_are_refused_in_one_line(tmp_path: Path) -> None:
    cases = {
        "mistral": ({"sliding_window": 16}, "sliding_window=16 is not supported"),
        "llama3": (
            {"rope_parameters": {"rope_type": "su", "rope_theta": 5e5}},
            "rope_type 'su' is not supported",
        ),
        "qwen3": ({"model_type": "gemma3"}, "model_type 'gemma3' is not supported"),
    }
    work = tmp_path / "work"
    work.mkdir()
    for family, (changes, needle) in cases.items():
        model = save_tiny_hf_model(tmp_path / family, family)
        _edit_config(model, **changes)
        result = run_train_in_process(["model=hf", f"model.path={model}"], cwd=work)
        assert result.returncode == 2, (family, result.stderr)
        assert result.stderr.strip().startswith("astrai: config error: model.path: ")
        assert needle in result.stderr and str(model / "config.json") in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
    assert list(work.iterdir()) == []  # nothing written
