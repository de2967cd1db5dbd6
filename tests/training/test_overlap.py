"""Rollouts that overlap the update (``train_type.max_policy_lag``, ``training.sampling.overlap``):
the fixed schedule, the policy-lag metrics, in-flight rollouts in the checkpoint and the guard's
refusals. Bitwise resume with a rollout in flight: ``test_resume.py``'s ``lag`` rows."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from tests.helpers import compose_config

from astrai.checkpoints import io
from astrai.checkpoints.layout import IN_FLIGHT_FILE, CheckpointError
from astrai.config.compose import check_run_config
from astrai.config.errors import ConfigError
from astrai.rollout.staleness import StaleRolloutError, check_policy_lag, policy_lag
from astrai.training.run import Run
from astrai.training.sampling.overlap import RolloutPipeline, _load_weights, split_threads

QUICK = [
    "debug=quick",
    "trainer.total_steps=4",
    "trainer.eval_every=100",
    "ckpt.every_steps=0",
    "logger.tensorboard=false",
]
CORRECTED = ["engine.old_logprobs=recompute", "engine.correction=token_truncate"]


def _rows(run_dir: Path) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [row for row in map(json.loads, lines) if "rollout/policy_lag" in row]


def test_policy_lag_counts_updates_rounding_up() -> None:
    # 8 optimizer steps per update; the policy is at version 24 (3 updates)
    versions = torch.tensor([[24, 16], [8, 9]])
    # behind: 0, 8, 16, 15 optimizer steps -> 0, 1, 2, ceil(15/8) = 2 updates
    assert policy_lag(versions, 24, 8).tolist() == [[0, 1], [2, 2]]
    metrics = check_policy_lag(versions, 24, 8, max_policy_lag=2, step=4)
    assert metrics == {"rollout/policy_lag": 2.0, "rollout/policy_lag_min": 0.0}


def test_a_batch_older_than_the_bound_is_refused_naming_the_key() -> None:
    versions = torch.tensor([[8, 16]])  # 2 and 1 updates behind version 24
    with pytest.raises(
        StaleRolloutError,
        match=r"step 4's rollout is 2 update\(s\) behind.*"
        r"train_type.max_policy_lag=1, refused",
    ):
        check_policy_lag(versions, 24, 8, max_policy_lag=1, step=4)
    with pytest.raises(StaleRolloutError, match="ahead of the policy"):
        check_policy_lag(torch.tensor([[32]]), 24, 8, max_policy_lag=1, step=4)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["train_type.max_policy_lag=1", "engine.old_logprobs=bypass"],
            "it needs the correction, engine.old_logprobs=recompute",
        ),
        (
            ["train_type.max_policy_lag=1", "engine.correction=none"],
            "got engine.old_logprobs=auto, engine.correction=none",
        ),
        (["train_type.max_policy_lag=9", *CORRECTED], r"max_policy_lag must be in \[0, 8\]"),
        (
            [
                "train_type.max_policy_lag=1",
                *CORRECTED,
                "infra.nproc_per_node=2",
                "infra.parallel=fsdp",
            ],
            "infra.parallel=fsdp shards them",
        ),
        (
            [
                "train_type.max_policy_lag=1",
                *CORRECTED,
                "infra.nproc_per_node=2",
                "train_type.filter_groups=true",
            ],
            "dynamic sampling sums its counts over the ranks",
        ),
    ],
)
def test_an_uncorrected_or_unsupported_lag_is_refused_at_start(
    overrides: list[str], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        check_run_config(["debug=quick", *overrides])


def test_threads_are_split_between_the_two_sides() -> None:
    assert [split_threads(n) for n in (1, 2, 3, 16)] == [1, 1, 1, 8]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    """4-step runs at lag 0, 1 and 2 (the same seed)."""
    dirs = {}
    for lag in (0, 1, 2):
        run_dir = tmp_path_factory.mktemp(f"lag{lag}")
        extra = [f"train_type.max_policy_lag={lag}", *CORRECTED]
        trainer = Run(compose_config([*QUICK, *extra]), run_dir)
        trainer.fit()
        trainer.close()
        dirs[lag] = run_dir
    return dirs


def test_each_step_trains_a_rollout_the_bound_allows(runs: dict[int, Path]) -> None:
    # step s trains the rollout sampled on the weights after update max(0, s - 1 - L)
    for lag, expected in ((0, [0, 0, 0, 0]), (1, [0, 1, 1, 1]), (2, [0, 1, 2, 2])):
        rows = _rows(runs[lag])
        assert [r["rollout/policy_lag"] for r in rows] == expected
        assert [r["rollout/policy_lag_min"] for r in rows] == expected  # one policy per batch


def test_snapshots_sample_what_the_live_policy_samples(runs: dict[int, Path]) -> None:
    """Step 1 samples the initial weights at every lag (a snapshot at lag > 0) from the same
    stream; lag 2's step 2 is lag 1's step 2 (both on the initial weights); after that the
    weights differ, and so do the samples."""
    lag0, lag1, lag2 = (_rows(runs[lag]) for lag in (0, 1, 2))
    for key in ("rollout/reward_mean", "rollout/response_len", "policy/grad_norm"):
        assert lag0[0][key] == lag1[0][key] == lag2[0][key], key
    assert lag1[1]["rollout/reward_mean"] == lag2[1]["rollout/reward_mean"]
    assert lag1[1]["rollout/is_ratio_mean"] != 1.0  # stale by one update: the weights moved
    assert lag0[1]["rollout/is_ratio_mean"] == 1.0  # the synchronous loop: π_old = π_behav


def _checkpoint_with_a_rollout_in_flight(run_dir: Path) -> Path:
    trainer = Run(compose_config([*QUICK, "train_type.max_policy_lag=1", *CORRECTED]), run_dir)
    trainer.fit(until=2)
    trainer.close()
    return run_dir / "checkpoints" / "step_2"


def test_the_checkpoint_holds_the_next_steps_rollout(tmp_path: Path) -> None:
    path = _checkpoint_with_a_rollout_in_flight(tmp_path)
    state = json.loads((path / "trainer_state.json").read_text())
    assert state["in_flight"] == 1 and IN_FLIGHT_FILE in state["extra_files"]
    [batch] = io.load_torch(path / IN_FLIGHT_FILE)["per_rank"][0]  # one rank, one rollout
    assert batch["step"] == 3
    # sampled while update 2 ran, on the weights after update 1
    updates_per_step = state["policy_version"] // state["step"]
    assert batch["rollout"]["sample_versions"].unique().tolist() == [updates_per_step]


def test_a_resume_that_would_train_it_past_a_smaller_bound_is_refused(tmp_path: Path) -> None:
    path = _checkpoint_with_a_rollout_in_flight(tmp_path)
    cfg = compose_config([*QUICK, "train_type.max_policy_lag=0", *CORRECTED])
    with pytest.raises(
        CheckpointError,
        match=rf"{path}: an in-flight rollout: step 3's rollout "
        r"is 1 update\(s\) behind.*max_policy_lag=0, refused",
    ):
        Run(cfg, tmp_path)


def test_a_resume_with_two_rollouts_in_flight_equals_the_straight_run(
    runs: dict[int, Path], tmp_path: Path
) -> None:
    """``max_policy_lag=2``: the checkpoint at step 2 holds the rollouts of step 3 (sampled on
    the initial weights) and step 4 (on the weights after update 1); resumed, steps 3 and 4
    equal the straight run's, weights bitwise and metrics exactly."""
    cfg = compose_config([*QUICK, "train_type.max_policy_lag=2", *CORRECTED])
    first = Run(cfg, tmp_path)
    first.fit(until=2)
    first.close()
    state = json.loads((tmp_path / "checkpoints/step_2/trainer_state.json").read_text())
    assert state["in_flight"] == 2
    resumed = Run(cfg, tmp_path)
    resumed.fit()
    resumed.close()
    straight = io.load_tensors(runs[2] / "checkpoints/step_4/model.safetensors")
    again = io.load_tensors(tmp_path / "checkpoints/step_4/model.safetensors")
    assert straight.keys() == again.keys()
    assert all(torch.equal(straight[name], again[name]) for name in straight)

    def exact(rows: list[dict]) -> list[dict]:
        return [{k: v for k, v in r.items() if not k.startswith(("time/", "perf/"))} for r in rows]

    assert exact(_rows(tmp_path)) == exact(_rows(runs[2]))


def _held_bytes(snapshot: torch.nn.Module, policy: torch.nn.Module) -> int:
    """Bytes of ``snapshot``'s parameters and buffers that are not the policy's own tensors."""
    policy_tensors = {id(t) for t in policy.state_dict(keep_vars=True).values()}
    return sum(
        t.numel() * t.element_size()
        for t in snapshot.state_dict(keep_vars=True).values()
        if id(t) not in policy_tensors
    )


@pytest.mark.parametrize("lora", [True, False])
def test_a_lora_snapshot_holds_the_adapters_and_shares_the_frozen_base(
    tmp_path: Path, lora: bool
) -> None:
    """Issue 48: under ``model.lora`` and lag ≥ 1 each snapshot copied the whole frozen base
    (34× the adapters at SmolLM2's shapes); now ≤ 2× the adapters' bytes (the rest is RoPE's
    buffers), and a snapshot still samples the policy's weights after an update."""
    adapters = ["model.lora.rank=4", "model.lora.alpha=8"] if lora else []
    trainer = Run(compose_config([*QUICK, *adapters]), tmp_path)
    policy = trainer.parts.policy
    flags = {name: p.requires_grad for name, p in policy.named_parameters()}
    trainable = sum(p.numel() * p.element_size() for p in policy.parameters() if p.requires_grad)
    total = sum(t.numel() * t.element_size() for t in policy.state_dict().values())
    never = lambda *args: None  # noqa: E731  # nothing is submitted: the snapshots are built
    pipeline = RolloutPipeline(never, policy, lag=2, total_steps=4)  # type: ignore[arg-type]
    try:
        assert len(pipeline.copies) == 2
        for snapshot in pipeline.copies:
            held = _held_bytes(snapshot, policy)
            if lora:
                assert held <= 2 * trainable < total / 4, (held, trainable, total)
            else:
                assert held == total  # full fine-tuning: every weight changes, all copied
        with torch.no_grad():  # an update moves the trainable weights; a reload takes them
            for parameter in policy.parameters():
                if parameter.requires_grad:
                    parameter.add_(0.5)
        snapshot = pipeline.copies[0]
        _load_weights(snapshot, policy)
        for name, tensor in policy.state_dict().items():
            assert torch.equal(snapshot.state_dict()[name], tensor), name
        assert all(not p.requires_grad for p in snapshot.parameters())
        # the policy's own flags untouched by the snapshots' freezing
        assert {name: p.requires_grad for name, p in policy.named_parameters()} == flags
    finally:
        pipeline.close()
