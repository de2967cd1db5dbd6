"""Exact resume: N steps in one go == k steps, stop, resume, N − k steps (bitwise on CPU)."""

from __future__ import annotations

import base64
import copy
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tests.constructed_rewards import ALTERNATING, ALTERNATING_ON_ODD_PROMPTS
from tests.episode_envs import TWO_TURNS
from tests.helpers import compose_config
from tests.train_runs import LAG_1

from astrai.algorithms.grpo import GRPOStrategy
from astrai.checkpoints import io
from astrai.checkpoints import io as checkpoint_io
from astrai.checkpoints.layout import CheckpointError
from astrai.training.resume import resolve_resume
from astrai.training.run import Run
from astrai.training.setup import capture_rng_state, restore_rng_state

QUICK = [
    "debug=quick",  # conf/debug/quick.yaml; the lines below differ from it
    "trainer.total_steps=6",
    "trainer.eval_every=2",
    "train_type.group_size=4",
    "train_type.minibatches=2",
    "train_type.ppo_epochs=2",
    "logger.samples_every=1",
    "ckpt.every_steps=0",
]
NOISY = ("time/", "perf/", "env/step_s")
# issue 19's options, several at once (docs/algorithms.md)
OPTIONS = [
    "train_type.advantage=rloo",
    "train_type.loss_agg=seq_mean_token_mean",
    "train_type.clip_eps_high=0.28",
    "train_type.clip_ratio_c=3",
    "train_type.filter_groups=true",
    "train_type.max_resample_rounds=2",
    "train_type.mask_truncated=true",
]  # wall-clock measurements differ between any two runs


def _trainer(run_dir: Path, train_type: str, *extra: str) -> Run:
    return Run(compose_config([f"train_type={train_type}", *QUICK, *extra]), run_dir)


def _records(run_dir: Path) -> list[dict[str, Any]]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [
        {k: v for k, v in json.loads(line).items() if not k.startswith(NOISY)} for line in lines
    ]


def _assert_same_tensors(a: Any, b: Any, where: str) -> None:
    """Recursive bitwise equality of (nested) state dicts."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for key in a:
            _assert_same_tensors(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _assert_same_tensors(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


def _addition_jsonl(directory: Path) -> list[str]:
    """``task=dataset`` on 10 addition rows (2 held out by the hash split): 4 prompts a step
    cross an epoch boundary every 2 steps, so the resume at step 3 lands inside an epoch."""
    rows = [{"prompt": f"{a}+{a + 1}=", "answer": str(2 * a + 1)} for a in range(10)]
    path = directory / "addition.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return ["task=dataset", f"task.train_path={path}", "task.eval_fraction=0.2"]


@pytest.fixture(
    scope="module",
    params=[
        "online_grpo",
        "online_ppo",
        "lag",
        pytest.param("lag_ppo", marks=pytest.mark.slow),  # the fast suite's budget
        pytest.param("dataset", marks=pytest.mark.slow),
        pytest.param("options", marks=pytest.mark.slow),
        # multi-turn episodes (env=...), GRPO at lag 0: slow for the fast suite's budget
        pytest.param("episodes", marks=pytest.mark.slow),
        pytest.param("episodes_lag_ppo", marks=pytest.mark.slow),  # PPO, episodes in flight
    ],
)
def straight_and_resumed(request, tmp_path_factory) -> tuple[Run, Run, Path, Path]:  # noqa: ANN001
    # GRPO's rows: rewards that vary within groups by construction (a random model's answers
    # may all score 0: then only weight decay would move the policy)
    train_type, extra = request.param, []
    if request.param == "online_grpo":
        extra = ALTERNATING
    if request.param == "dataset":
        train_type = "online_grpo"
        extra = [*_addition_jsonl(tmp_path_factory.mktemp("data")), *ALTERNATING]
    if request.param == "options":  # dynamic sampling draws a varying number of rounds
        # groups of odd-digit prompts vary, the others are constant: some are dropped
        train_type, extra = "online_grpo", [*OPTIONS, *ALTERNATING_ON_ODD_PROMPTS]
    if request.param == "episodes":
        train_type, extra = "online_grpo", TWO_TURNS
    if request.param == "episodes_lag_ppo":
        train_type, extra = "online_ppo", [*TWO_TURNS, *LAG_1]
    if request.param.startswith("lag"):
        train_type = "online_ppo" if request.param == "lag_ppo" else "online_grpo"
        # the checkpoint at step 3 holds step 4's rollout, sampled in update 3
        extra = [*LAG_1, *([] if request.param == "lag_ppo" else ALTERNATING)]
    straight_dir = tmp_path_factory.mktemp("straight")
    straight = _trainer(straight_dir, train_type, *extra)
    straight.fit()
    resumed_dir = tmp_path_factory.mktemp("resumed")
    first = _trainer(resumed_dir, train_type, *extra)
    first.fit(until=3)
    assert first.started.state.step == 3
    second = _trainer(resumed_dir, train_type, *extra)  # ckpt.resume=auto finds step_3
    assert second.started.state.resumed_from == resumed_dir / "checkpoints" / "step_3"
    assert second.started.state.step == 3
    second.fit()
    return straight, second, straight_dir, resumed_dir


def test_weights_and_optimizer_states_are_bitwise_equal(straight_and_resumed) -> None:  # noqa: ANN001
    straight, resumed, _, _ = straight_and_resumed
    assert resumed.started.state.step == straight.started.state.step == 6
    assert (
        resumed.started.state.policy_version == straight.started.state.policy_version == 6 * 2 * 2
    )
    _assert_same_tensors(
        straight.parts.policy.state_dict(), resumed.parts.policy.state_dict(), "policy"
    )
    _assert_same_tensors(
        straight.parts.optimizer.state_dict(), resumed.parts.optimizer.state_dict(), "optimizer"
    )
    assert straight.started.scheduler.state_dict() == resumed.started.scheduler.state_dict()
    if straight.parts.critic is not None:
        assert resumed.parts.critic is not None and resumed.parts.critic_optimizer is not None
        _assert_same_tensors(
            straight.parts.critic.state_dict(), resumed.parts.critic.state_dict(), "critic"
        )
        _assert_same_tensors(
            straight.parts.critic_optimizer.state_dict(),
            resumed.parts.critic_optimizer.state_dict(),
            "critic_optimizer",
        )
    # the policy moved: the equality above is not about untouched weights
    pairs = zip(
        straight.parts.policy.parameters(), straight.parts.reference.parameters(), strict=True
    )
    assert any(not torch.equal(p, r) for p, r in pairs)


def test_logged_metrics_are_identical(straight_and_resumed) -> None:  # noqa: ANN001
    _, _, straight_dir, resumed_dir = straight_and_resumed
    straight, resumed = _records(straight_dir), _records(resumed_dir)
    assert [r["step"] for r in resumed] == [0, 1, 2, 3, 4, 5, 6]
    assert resumed == straight
    summary = json.loads((resumed_dir / "summary.json").read_text())
    assert summary["initial/eval/accuracy"] == straight[0]["eval/accuracy"]
    # every update had advantages to follow: the equality is not of zero-gradient steps
    assert all(r["advantages/std"] > 0 for r in straight[1:]), straight
    rounds = [r["rollout/resample_rounds"] for r in straight if "rollout/resample_rounds" in r]
    if rounds:  # the options row: every step dropped groups, its extra rounds vary (1 or 2)
        assert all(r["rollout/filtered_groups"] > 0 for r in straight[1:])
        assert len(set(rounds)) > 1, rounds


def test_reference_after_resume_is_the_initial_policy(straight_and_resumed, tmp_path) -> None:  # noqa: ANN001
    straight, resumed, _, _ = straight_and_resumed
    fresh = Run(compose_config([f"train_type={straight.parts.strategy.name}", *QUICK]), tmp_path)
    _assert_same_tensors(
        fresh.parts.policy.state_dict(), resumed.parts.reference.state_dict(), "reference"
    )


def test_an_evaluation_a_signal_abandoned_runs_first_on_resume(
    straight_and_resumed,  # noqa: ANN001
    tmp_path: Path,
) -> None:
    """SIGTERM during step 2's evaluation: step 2's checkpoint says its evaluation is pending,
    and the resumed run evaluates step 2 before it samples step 3, so metrics.jsonl and
    TensorBoard read as the uninterrupted run's."""
    straight, _, straight_dir, _ = straight_and_resumed
    first = Run(copy.deepcopy(straight.parts.cfg), tmp_path)
    evaluate = first.trainer.evaluate

    def evaluate_after_a_signal():  # noqa: ANN202
        if (
            first.started.state.step == 2
        ):  # raises StopInterrupt inside ``eval_metrics``' interruptible
            os.kill(os.getpid(), signal.SIGTERM)
        return evaluate()

    first.trainer.evaluate = evaluate_after_a_signal  # type: ignore[method-assign]
    assert first.fit()["stopped"] == "SIGTERM" and first.started.state.step == 2
    state_file = tmp_path / "checkpoints" / "step_2" / "trainer_state.json"
    state = json.loads(state_file.read_text())
    assert state["eval_pending"] is True
    rows = _records(tmp_path)
    assert [r["step"] for r in rows] == [0, 1, 2] and "eval/accuracy" not in rows[2]

    state_file.write_text(json.dumps({**state, "eval_pending": "yes"}))
    before = (tmp_path / "metrics.jsonl").read_bytes()
    with pytest.raises(CheckpointError, match=r"trainer_state\.json: invalid 'eval_pending'"):
        Run(copy.deepcopy(straight.parts.cfg), tmp_path)
    assert (tmp_path / "metrics.jsonl").read_bytes() == before
    state_file.write_text(json.dumps(state))

    # a resume is a later process, its event file named after it (time, host, pid, then a
    # per-process counter); in this one process, the same second's counter can sort ".10"
    # before ".9", and TensorBoard reads the files in name order
    time.sleep(1.1)
    second = Run(copy.deepcopy(straight.parts.cfg), tmp_path)
    assert second.started.state.step == 2 and second.started.state.eval_pending
    second.fit()
    assert _records(tmp_path) == _records(straight_dir)
    assert "eval/accuracy" in _records(tmp_path)[2]
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    assert [e.step for e in events.Scalars("eval/accuracy")] == [0, 2, 4, 6]
    final = json.loads((tmp_path / "checkpoints" / "step_6" / "trainer_state.json").read_text())
    assert final["eval_pending"] is False


def _as_if_written_on_cuda(step_dir: Path) -> None:
    """Make ``step_dir`` read as a CUDA run's: its fingerprint's device, and a sampling
    generator state of a CUDA generator's size (16 bytes; a CPU one's is 5056)."""
    path = step_dir / "trainer_state.json"
    state = json.loads(path.read_text())
    state["fingerprint"]["device"] = "cuda"
    for rng in [state["rng"], *state["rng_per_rank"]]:
        rng["generators"]["sample"] = base64.b64encode(bytes(16)).decode("ascii")
    path.write_text(json.dumps(state))


def test_a_checkpoint_from_another_device_type_is_refused_unless_allowed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    first = _trainer(tmp_path, "online_grpo")
    first.fit(until=2)
    saved_shuffle = first.started.state.generators["shuffle"].get_state()
    _as_if_written_on_cuda(tmp_path / "checkpoints" / "step_2")
    with pytest.raises(CheckpointError) as err:
        _trainer(tmp_path, "online_grpo")
    assert 'device="cuda", this run "cpu"' in str(err.value)
    assert "ckpt.allow_changes=[device]" in str(err.value)

    resumed = _trainer(tmp_path, "online_grpo", "ckpt.allow_changes=[device]")
    assert resumed.started.state.step == 2
    assert "step_2 was written on cuda, this run is on cpu" in caplog.text
    # the sampling stream starts from the seed; the CPU shuffling stream is restored
    fresh = _trainer(tmp_path / "fresh", "online_grpo")
    assert torch.equal(
        resumed.started.state.generators["sample"].get_state(),
        fresh.started.state.generators["sample"].get_state(),
    )
    assert torch.equal(resumed.started.state.generators["shuffle"].get_state(), saved_shuffle)
    resumed.fit()
    assert resumed.started.state.step == 6


def test_global_cuda_states_of_gpus_this_process_cannot_see_are_left_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A checkpoint of a process that saw 2 GPUs, restored where 1 is visible (no GPU here:
    the CUDA calls are stood in for, the states are real CPU-encoded bytes)."""
    state = capture_rng_state({})
    state["torch_cuda"] = [base64.b64encode(bytes([i]) * 16).decode("ascii") for i in (1, 2)]
    restored: list[list[bytes]] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(
        torch.cuda, "set_rng_state_all", lambda states: restored.append([bytes(s) for s in states])
    )
    restore_rng_state(state, {})
    assert restored == [[bytes([1]) * 16]]


def test_rows_logged_after_the_checkpoint_are_replaced_on_resume(tmp_path: Path) -> None:
    """A run that crashed after its last checkpoint left rows for steps 3..4; the resumed run
    rewrites them, so metrics.jsonl reads as one run."""
    first = _trainer(tmp_path, "online_grpo", "ckpt.every_steps=2")
    first.fit(until=4)  # checkpoints at 2 and 4
    (tmp_path / "checkpoints" / "step_4").rename(tmp_path / "gone")  # as if 4 never saved
    second = _trainer(tmp_path, "online_grpo", "ckpt.every_steps=2")
    assert second.started.state.step == 2
    second.fit()
    steps = [r["step"] for r in _records(tmp_path)]
    assert steps == [0, 1, 2, 3, 4, 5, 6]


def test_ppo_refuses_a_checkpoint_without_the_critic_files(tmp_path: Path) -> None:
    grpo = _trainer(tmp_path / "grpo", "online_grpo")
    grpo.fit(until=2)
    step_dir = tmp_path / "grpo" / "checkpoints" / "step_2"
    before = sorted(p.name for p in (tmp_path / "grpo").rglob("*"))
    with pytest.raises(CheckpointError) as err:
        _trainer(tmp_path / "ppo", "online_ppo", f"ckpt.resume={step_dir}")
    message = str(err.value)
    assert "value_model.pt" in message and "value_optimizer.pt" in message
    assert str(step_dir) in message
    assert sorted(p.name for p in (tmp_path / "grpo").rglob("*")) == before
    assert not (tmp_path / "ppo").exists()  # nothing written for the refused run


def test_resume_null_starts_fresh_and_a_bad_path_is_named(tmp_path: Path) -> None:
    first = _trainer(tmp_path / "a", "online_grpo", "ckpt.resume=null")
    assert first.started.state.step == 0 and first.started.state.resumed_from is None
    first.fit(until=2)
    with pytest.raises(CheckpointError, match=r"ckpt.resume=null but .* step_2"):
        _trainer(tmp_path / "a", "online_grpo", "ckpt.resume=null")
    with pytest.raises(CheckpointError, match="ckpt.resume: no checkpoint directory at .*nope"):
        _trainer(tmp_path / "b", "online_grpo", f"ckpt.resume={tmp_path / 'nope'}")


def test_a_resume_path_that_is_a_symlink_loop_says_so(tmp_path: Path) -> None:
    loop = tmp_path / "step_3"
    loop.symlink_to(loop)  # issue 30, item 7: it said only "no checkpoint directory"
    with pytest.raises(
        CheckpointError, match=r"no checkpoint directory at .*step_3 is a symlink loop"
    ):
        resolve_resume(str(loop), tmp_path / "run", GRPOStrategy)
    with pytest.raises(CheckpointError, match=r"nope does not exist\)$"):
        resolve_resume(str(tmp_path / "nope"), tmp_path / "run", GRPOStrategy)


def test_corrupt_weights_are_named(tmp_path: Path) -> None:
    first = _trainer(tmp_path, "online_grpo")
    first.fit(until=2)
    model = tmp_path / "checkpoints" / "step_2" / "model.safetensors"
    model.write_bytes(model.read_bytes()[:100])  # truncated
    with pytest.raises(CheckpointError, match=r"model\.safetensors: unreadable"):
        _trainer(tmp_path, "online_grpo")


def test_a_failed_save_keeps_the_previous_checkpoint_usable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trainer = _trainer(tmp_path, "online_ppo", "ckpt.every_steps=2")
    trainer.fit(until=2)
    calls = []

    def fail_after_first_file(payload: object, path: Path) -> None:
        calls.append(path.name)
        if len(calls) > 1:
            raise OSError("no space left on device")
        torch.save(payload, path)

    monkeypatch.setattr(io, "save_torch", fail_after_first_file)
    trainer.started.state.step = 3  # pretend one more step ran; its save dies after optimizer.pt
    with pytest.raises(OSError, match="no space"):
        trainer.save_checkpoint()
    assert calls[0] == "optimizer.pt"
    monkeypatch.undo()
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == [
        "reference.safetensors",
        "step_2",
    ]
    resumed = _trainer(tmp_path, "online_ppo", "ckpt.every_steps=2")
    assert resumed.started.state.resumed_from == tmp_path / "checkpoints" / "step_2"
    _assert_same_tensors(
        trainer.parts.reference.state_dict(), resumed.parts.reference.state_dict(), "ref"
    )


def test_a_restart_before_the_first_checkpoint_logs_each_step_once(tmp_path: Path) -> None:
    # a run that logged steps 0-2 and died before any checkpoint (no checkpoints/ at all)
    crashed = _trainer(tmp_path, "online_grpo")
    for step in range(3):
        crashed.started.logger.log(step, {"rollout/reward_mean": 0.5, "eval/accuracy": 0.25})
    crashed.started.logger.close()
    assert not (tmp_path / "checkpoints").exists()

    restarted = _trainer(tmp_path, "online_grpo")  # ckpt.resume=auto: nothing to resume
    assert restarted.started.state.resumed_from is None and restarted.started.logger.latest == {}
    restarted.fit()
    steps = [json.loads(line)["step"] for line in (tmp_path / "metrics.jsonl").open()]
    assert steps == list(range(7))  # 0..6 once: the crashed run's rows are gone
    events = EventAccumulator(str(tmp_path / "tb"))
    events.Reload()
    assert [e.step for e in events.Scalars("eval/accuracy")] == [0, 2, 4, 6]
    assert [e.step for e in events.Scalars("rollout/reward_mean")] == [1, 2, 3, 4, 5, 6]


def test_a_resume_reads_its_checkpoint_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 60: the in-flight rollouts are loaded once (read and checked by ``resolve_resume``,
    then checked for this run's batch and restored from what was read), and
    ``trainer_state.json`` is parsed by the resume once beside the completeness check's
    header read; a resumed run then trains on them as the straight one would."""
    lag = ["train_type.max_policy_lag=1", "trainer.total_steps=3", "ckpt.every_steps=2"]
    _trainer(tmp_path, "online_grpo", *lag).fit(until=2)
    loads: list[str] = []
    load_json, load_torch = checkpoint_io.load_json, checkpoint_io.load_torch

    def counted(load: Any) -> Any:
        return lambda path, *a, **k: loads.append(Path(path).name) or load(path, *a, **k)

    monkeypatch.setattr(checkpoint_io, "load_json", counted(load_json))
    monkeypatch.setattr(checkpoint_io, "load_torch", counted(load_torch))
    resumed = _trainer(tmp_path, "online_grpo", *lag)
    assert resumed.started.state.resumed_from == tmp_path / "checkpoints" / "step_2"
    assert loads.count("in_flight.pt") == 1
    assert loads.count("trainer_state.json") == 1
    # the in-flight rollout was handed to the sampling thread: step 3 trains on it
    assert resumed.fit()["step"] == 3
