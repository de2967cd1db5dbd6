"""Every algorithm option (``train_type.loss_agg``, ``advantage``, ``scale_rewards``, the clip
options, ``ratio_level``) makes the same update whether the minibatch is one pass, split into
uneven micro-batches, or spread over 2 processes (gloo, CPU): its losses divide by the whole
minibatch's token and sequence counts (``algorithms.aggregation.Divisors``)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp
from omegaconf import DictConfig, OmegaConf
from tests.distributed.ddp_worker import many_updates
from tests.helpers import compose_config

from astrai.algorithms import pass_plan
from astrai.rollout.rollout import Rollout, ended_with_eos
from astrai.training.rollout_stats import rollout_metrics
from astrai.training.run import Run

WORLD = 2
# Plain SGD without gradient-norm clipping: the weights then move by the gradients themselves.
# Adam's first steps (m/sqrt(v)) and a clipped norm are blind to a constant factor on the
# gradients, exactly what a wrong divisor would put there, and AdamW's eps = 1e-8 turns
# float32 rounding noise in near-zero gradient entries into ~1e-6 weight differences
# (lr · g / (|g| + eps)) that say nothing about the loss path.
SGD = ["{}._target_=torch.optim.SGD", "~{}.betas", "{}.lr=0.2", "{}.weight_decay=0"]
QUICK = [
    "debug=quick",  # conf/debug/quick.yaml; the lines below differ from it
    "infra.device=cpu",
    "train_type.prompts_per_step=8",
    "train_type.group_size=4",
    "train_type.ppo_epochs=1",
    "train_type.minibatches=2",  # two optimizer steps: the second sees ratios off 1
    "train_type.sampling.max_new_tokens=8",  # cut to uneven lengths (pinned_rollout)
    *(option.format("train_type.optimizer") for option in SGD),
    "trainer.max_grad_norm=1e6",
]
GRPO = ["train_type=online_grpo"]
PPO = ["train_type=online_ppo", *(option.format("critic.optimizer") for option in SGD)]
OPTIONS = {
    "grpo": GRPO,
    "grpo-seq_mean_token_mean": [*GRPO, "train_type.loss_agg=seq_mean_token_mean"],
    "grpo-seq_mean_token_sum": [*GRPO, "train_type.loss_agg=seq_mean_token_sum"],
    "grpo-seq_mean_token_sum_norm": [*GRPO, "train_type.loss_agg=seq_mean_token_sum_norm"],
    "grpo-scale_batch": [*GRPO, "train_type.scale_rewards=batch"],  # a std over every rank
    "dr_grpo": [*GRPO, "train_type.advantage=dr_grpo"],
    "rloo": [*GRPO, "train_type.advantage=rloo", "train_type.loss_agg=seq_mean_token_mean"],
    "reinforce_pp": [*GRPO, "train_type.advantage=reinforce_pp"],  # whitened over every rank
    # sequences without a loss token count in neither divisor
    "grpo-mask_truncated": [
        *GRPO,
        "train_type.mask_truncated=true",
        "train_type.loss_agg=seq_mean_token_mean",
    ],
    "clip-sequence": [
        *GRPO,
        "train_type.clip_eps_high=0.28",
        "train_type.clip_ratio_c=3",
        "train_type.ratio_level=sequence",
        "train_type.loss_agg=seq_mean_token_sum",
    ],
    # bounds tight enough that the second minibatch's ratios hit them (clipfrac > 0)
    "clip-tight": [
        *GRPO,
        "train_type.clip_eps=0.005",
        "train_type.clip_eps_high=0.01",
        "train_type.clip_ratio_c=1.01",
    ],
    # the critic path: value loss and entropy bonus are aggregated by loss_agg too
    "ppo": PPO,
    "ppo-seq_mean_token_mean": [
        *PPO,
        "train_type.loss_agg=seq_mean_token_mean",
        "train_type.mask_truncated=true",
    ],
    "ppo-seq_mean_token_sum_norm": [
        *PPO,
        "train_type.loss_agg=seq_mean_token_sum_norm",
        "train_type.value_clip=0.01",
        "train_type.whiten_advantages=true",  # over every rank
    ],
}
NOISY = ("time/", "perf/")


def pinned_rollout(tmp_path: Path) -> Path:
    """One rollout of the initial policy (8 prompts × 4 responses; the options do not touch
    sampling), saved for every run to start from. A random initial policy rarely samples EOS
    or earns a reward, so the responses are cut to random lengths (a valid prefix of each) and
    given random rewards (the cut ones end with EOS): token and sequence counts then differ
    between minibatches, micro-batches and ranks, and so do the ranks' reward and return
    statistics."""
    trainer = Run(compose_config([*GRPO, *QUICK]), tmp_path / "sampler")
    rollout = trainer.trainer.rollout()
    generator = torch.Generator().manual_seed(0)
    width = rollout.response_ids.shape[-1]
    lengths = torch.randint(1, width + 1, rollout.rewards.shape, generator=generator)
    keep = rollout.response_mask & (torch.arange(width) < lengths[..., None])
    rollout.response_mask = keep
    # the cut responses end with EOS; the full ones hit the length limit (mask_truncated)
    last = (torch.arange(width) == (lengths - 1)[..., None]) & (lengths < width)[..., None]
    ids = torch.where(last, trainer.parts.tokenizer.eos_id, rollout.response_ids)
    rollout.response_ids = torch.where(keep, ids, trainer.parts.tokenizer.pad_id)
    rollout.logprobs = torch.where(keep, rollout.logprobs, 0.0)
    rollout.rewards = torch.rand(rollout.rewards.shape, generator=generator)
    rollout.rewards[0] = 0.5  # a group without signal: advantage exactly 0
    tokens, half = keep.sum(-1), rollout.num_prompts // WORLD
    assert tokens.unique().numel() > 4 and tokens[:half].sum() != tokens[half:].sum()
    # without a loss token under mask_truncated: a different number on each rank
    truncated = ~ended_with_eos(rollout.response_ids, keep, trainer.parts.tokenizer.eos_id)
    assert 0 < truncated[:half].sum() != truncated[half:].sum()
    path = tmp_path / "rollout.pt"
    torch.save(rollout, path)
    return path


def one_update(cfg: DictConfig, rollout_file: Path, run_dir: Path) -> dict:
    """In one process: a fresh trainer's update on the whole rollout (as the worker's)."""
    trainer = Run(cfg, run_dir)
    rollout: Rollout = torch.load(rollout_file, weights_only=False)
    metrics = trainer.trainer.prepare(rollout)
    metrics.update(trainer.trainer.update(rollout))
    metrics.update(
        rollout_metrics(
            rollout, trainer.parts.tokenizer.eos_id, trainer.parts.reward.accuracy_threshold
        )
    )
    critic = trainer.parts.critic.state_dict() if trainer.parts.critic is not None else None
    return {"policy": trainer.parts.policy.state_dict(), "critic": critic, "metrics": metrics}


def assert_same_update(result: dict, expected: dict, name: str) -> None:
    """Policy (and critic) weights and every metric but timings equal to 1e-6."""
    for model in ("policy", "critic"):
        if expected[model] is None:
            assert result[model] is None
            continue
        for key, value in expected[model].items():
            torch.testing.assert_close(
                result[model][key], value, atol=1e-6, rtol=0, msg=f"{name}: {model}.{key}"
            )
    assert result["metrics"].keys() == expected["metrics"].keys(), name
    for key, value in expected["metrics"].items():
        if not key.startswith(NOISY):
            got = result["metrics"][key]
            assert got == pytest.approx(value, abs=1e-6, nan_ok=True), f"{name}: {key}"


def assert_moved(result: dict, initial: dict[str, torch.Tensor], name: str) -> None:
    moved = max((result["policy"][k] - initial[k]).abs().max() for k in initial)
    assert moved > 1e-4, f"{name}: the update is trivially small ({moved})"


def micro_batched(cfg: DictConfig) -> DictConfig:
    """``cfg`` with ``train_type.micro_batch_size=3``: a minibatch of 16 rows (8 per rank) in
    uneven parts, 3+3+3+3+3+1 (3+3+2)."""
    cfg = copy.deepcopy(cfg)
    cfg.train_type.micro_batch_size = 3
    return cfg


def initial_weights(cfg: DictConfig, run_dir: Path) -> dict[str, torch.Tensor]:
    return copy.deepcopy(Run(cfg, run_dir).parts.policy.state_dict())


@pytest.mark.slow  # every option set, twice: ~5-13 s (moved from the fast lane in issue 34;
# tests/training/test_memory.py keeps a fast micro-batch equivalence per train type)
def test_micro_batches_make_the_same_update_as_the_whole_minibatch(tmp_path: Path) -> None:
    """(a) vs (b), in process, every option set: ``micro_batch_size=3`` splits each minibatch
    of 16 sequences into uneven parts 3+3+3+3+3+1."""
    rollout_file = pinned_rollout(tmp_path)
    initial = None
    for name, options in OPTIONS.items():
        cfg = compose_config([*options, *QUICK])
        initial = initial or initial_weights(cfg, tmp_path / "initial")
        whole = one_update(cfg, rollout_file, tmp_path / f"{name}-whole")
        micro = one_update(micro_batched(cfg), rollout_file, tmp_path / name)
        assert_moved(whole, initial, name)
        assert_same_update(micro, whole, name)
        if name == "clip-tight":
            assert whole["metrics"]["policy/clipfrac"] > 0
            assert whole["metrics"]["policy/dual_clipfrac"] > 0


def rankwise_minibatch_rows(
    rows: int, num_minibatches: int, generator: torch.Generator | None, device: torch.device
) -> list[torch.Tensor]:
    """The minibatches ``WORLD`` ranks make together, in one process: every rank shuffles its
    own share of the rows (its prompts' groups, contiguous in the flattened rollout) with the
    same shuffle stream (``TrainState.generators["shuffle"]``: ``seed + 2`` on every rank), and its
    k-th part joins the other ranks' k-th parts in minibatch k (one optimizer step)."""
    share = rows // WORLD
    order = torch.randperm(share, generator=generator)
    return [
        torch.cat([part + rank * share for rank in range(WORLD)]).to(device)
        for part in order.chunk(num_minibatches)
    ]


@pytest.mark.slow  # one 2-process launch for all 30 updates: ~25 s
def test_two_processes_make_the_same_update_as_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """(c) vs (a): 2 gloo processes, each with half the prompts, whole and micro-batched.

    With ``minibatches=2`` the ranks' shuffles do not add up to one process's shuffle of the
    whole rollout (each rank permutes its own 16 rows; one process permutes all 32), so the
    one-process reference draws its minibatches as the ranks do (``rankwise_minibatch_rows``)
    instead of falling back to ``minibatches=1``: the ranks then hold different token and
    sequence counts in each minibatch, which is what the global divisors are for."""
    rollout_file = pinned_rollout(tmp_path)
    jobs, expected = {}, {}
    with monkeypatch.context() as patch:
        patch.setattr(pass_plan, "minibatch_rows", rankwise_minibatch_rows)
        for name, options in OPTIONS.items():
            cfg = compose_config([*options, *QUICK])
            expected[name] = one_update(cfg, rollout_file, tmp_path / "single" / name)
            jobs[name] = OmegaConf.to_yaml(cfg, resolve=True)
            jobs[f"{name}-micro"] = OmegaConf.to_yaml(micro_batched(cfg), resolve=True)
    initial = initial_weights(cfg, tmp_path / "initial")

    mp.spawn(many_updates, args=(WORLD, jobs, str(rollout_file), str(tmp_path)), nprocs=WORLD)
    results = torch.load(tmp_path / "updates.pt", weights_only=False)
    assert results.keys() == jobs.keys()
    for name, single in expected.items():
        assert_moved(single, initial, name)
        for job in (name, f"{name}-micro"):
            assert results[job]["sharded"] is False
            assert_same_update(results[job], single, job)
