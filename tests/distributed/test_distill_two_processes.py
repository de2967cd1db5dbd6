"""On-policy distillation over 2 processes (gloo, CPU) equals one process over the same global
batch (issue 61's acceptance: "a 2-process run equals one process to 1e-6"): two RL steps of
``distill=opd``, each rank on half of each step's prompts, end with the one-process weights to
1e-6, and every metric (``distill/*``, ``loss/distill`` included: token means over every rank)
agrees to 1e-6. k1 under GRPO (the teacher's signal alone, the advantage), k1 under PPO (a token
reward through GAE and the critic), and the loss estimators k3 and forward top-k under PPO
(beside the task's reward, which the critic needs).

The global batches are pinned: the one-process run samples each step's rollout from its live
policy (the second from the weights after the first step) and the ranks take their halves of
the same rollouts (a 2-process ``train.py`` would sample other responses: each rank draws its
own share with its own stream)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp
from omegaconf import DictConfig, OmegaConf
from tests.distill_teacher import write_teacher
from tests.distributed.distill_worker import pinned_steps, take_pinned_step, weights
from tests.helpers import compose_config

from astrai.training.run import Run

WORLD = 2
STEPS = 2
# Plain SGD without gradient-norm clipping: the weights then move by the gradients themselves.
# Adam's first steps (m/sqrt(v)) are blind to a constant factor on the gradients, exactly what a
# rank's share counted twice or not at all would put there, and AdamW's eps = 1e-8 turns float32
# rounding noise in near-zero gradient entries into ~1e-6 weight differences.
SGD = ["{}._target_=torch.optim.SGD", "~{}.betas", "{}.lr=0.05", "{}.weight_decay=0"]
QUICK = [
    "debug=quick",  # conf/debug/quick.yaml; the lines below differ from it
    "infra.device=cpu",
    "train_type.prompts_per_step=8",  # 4 a rank
    "train_type.group_size=4",
    "train_type.ppo_epochs=1",
    "train_type.minibatches=1",  # the ranks' shuffles are of their own rows
    *(option.format("train_type.optimizer") for option in SGD),
    "trainer.max_grad_norm=1e6",
    "distill=opd",
]
PPO = ["train_type=online_ppo", *(option.format("critic.optimizer") for option in SGD)]
JOBS = {
    "grpo-k1": ["train_type=online_grpo", "distill.estimator=k1"],
    "ppo-k1": [*PPO, "distill.estimator=k1"],
    "ppo-k3": [*PPO, "distill.estimator=k3", "distill.use_task_reward=true"],
    "ppo-forward_topk": [
        *PPO,
        "distill.estimator=forward_topk",
        "distill.topk=8",  # of 48 ids: a tail bucket
        "distill.use_task_reward=true",
    ],
}
NOISY = ("time/", "perf/")


def _one_process(cfg: DictConfig, run_dir: Path) -> tuple[dict, list[Path]]:
    """``STEPS`` steps in one process, each on a rollout its live policy samples (saved before
    the step pins anything on it, for the ranks): the result as the worker's, the files."""
    run = Run(cfg, run_dir)
    steps, files = [], []
    for step in range(STEPS):
        rollout = run.trainer.rollout()
        files.append(run_dir / f"rollout_{step + 1}.pt")
        torch.save(rollout, files[-1])
        steps.append(take_pinned_step(run, rollout))
    return {"steps": steps, **weights(run)}, files


def _assert_same(result: dict, single: dict, name: str) -> None:
    """Weights (policy, critic) to 1e-6, every metric but timings to 1e-6 of its size (PPO's
    value loss is ~80: the ranks' sums round apart at ~1e-5)."""
    for model in ("policy", "critic"):
        if single[model] is None:
            assert result[model] is None, name
            continue
        assert result[model].keys() == single[model].keys(), name
        for key, value in single[model].items():
            torch.testing.assert_close(
                result[model][key], value, atol=1e-6, rtol=0, msg=f"{name}: {model}.{key}"
            )
    for step, (got, expected) in enumerate(zip(result["steps"], single["steps"], strict=True)):
        assert got.keys() == expected.keys(), (name, step)
        for key, value in expected.items():
            if not key.startswith(NOISY):
                close = pytest.approx(value, rel=1e-6, abs=1e-6, nan_ok=True)
                assert got[key] == close, (name, step, key)


@pytest.mark.slow  # ~15 s: one 2-process launch for the four runs of two steps
def test_two_processes_distill_as_one_over_the_same_global_batch(tmp_path: Path) -> None:
    teacher = write_teacher(["debug=quick"], tmp_path)
    jobs, expected, initial = {}, {}, {}
    for name, options in JOBS.items():
        cfg = compose_config([*QUICK, *options, f"teacher.path={teacher}"])
        initial[name] = weights(Run(cfg, tmp_path / "initial" / name))["policy"]
        expected[name], files = _one_process(cfg, tmp_path / "single" / name)
        jobs[name] = (OmegaConf.to_yaml(cfg, resolve=True), [str(f) for f in files])

    ranks = tmp_path / "ranks"
    ranks.mkdir()
    mp.spawn(pinned_steps, args=(WORLD, jobs, str(ranks)), nprocs=WORLD)
    results = torch.load(ranks / "steps.pt", weights_only=False)
    assert results.keys() == jobs.keys()
    for name, single in expected.items():
        estimator = name.split("-", 1)[1]
        # the teacher's signal in both steps: a teacher far from the student
        assert all(step["distill/reverse_kl"] > 0.5 for step in single["steps"]), name
        if estimator != "k1":  # a loss term of its own
            assert all(step["loss/distill"] > 0.1 for step in single["steps"]), name
        moved = max((single["policy"][k] - v).abs().max() for k, v in initial[name].items())
        assert moved > 1e-3, f"{name}: the update is trivially small ({moved})"
        _assert_same(results[name], single, name)
