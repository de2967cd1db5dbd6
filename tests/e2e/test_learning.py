"""The acceptance runs: the embedded default (GRPO on addition) and PPO learn on a CPU.

Each run is the default job on its default schedule (1,200 steps of learning-rate schedule)
with ``trainer.stop_at`` at the bound it asserts: it ends at the first evaluation that reaches
held-out accuracy 0.9, which is the claim, instead of training on for the rest of the 1,200
steps (measured on an AMD EPYC, one thread, 2026-12-07 with issue 59's scoring: GRPO 0.923 at
step 250 in 46 s, PPO 1.0 at step 400 in 124 s; before it GRPO 0.923 at step 350, PPO 1.0 at
250). Slow: ``make test-slow``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tests.train_runs import LAG_1, run_train

TARGET = 0.9  # held-out greedy accuracy each run must reach
STOP_AT = f"trainer.stop_at={{eval/accuracy:{TARGET}}}"
# With rollouts one update behind, the held-out accuracy (13 problems: 0.9 is 12 of them) is
# reached late and at a step that varies with the CPU's roundings: PPO's lag-1 run with seeds
# 1-6 on an AMD EPYC (AVX-512) first reached 0.9 at steps 400-850, and the CI machine's run
# (2026-12-05) topped out at 0.846 (11 of 13) within its 1,200 steps. The claim is that lag 1
# still learns, from ≤ 0.2: 0.5 (7 of 13) is the bar. It was 0.8 until issue 59's CI cut; with
# issue 59's scoring (2026-12-07, AMD EPYC, one thread) seed 0's lag-1 GRPO read 0.154 at step
# 200, 0.538 at 250 and 0.923 at 350; PPO 0.308 at 100, 0.538 at 200, then 0.538-0.692 until
# 0.846 at step 550 (182 s of the slow lane's wall time where the 0.5 bar takes ~70)
LAG_TARGET = 0.5
LAG_STOP_AT = f"trainer.stop_at={{eval/accuracy:{LAG_TARGET}}}"


def _evals(run_dir: Path) -> list[tuple[int, float]]:
    """(step, eval/accuracy) of every evaluation the run logged."""
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r["eval/accuracy"]) for r in records if "eval/accuracy" in r]


def _assert_stopped_at_the_target(run_dir: Path, target: float = TARGET) -> int:
    """The run ended at its first evaluation at or above ``target`` (the only one), through
    ``trainer.stop_at``; returns that step."""
    evals = _evals(run_dir)
    assert evals[0][0] == 0 and evals[0][1] <= 0.2, evals  # it learned: it started near 0
    final_step, final_accuracy = evals[-1]
    assert final_accuracy >= target, evals
    assert all(accuracy < target for _, accuracy in evals[1:-1]), evals
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stopped"] == "stop_at" and summary["step"] == final_step < 1200, summary
    assert summary["stop_at"] == {"eval/accuracy": final_accuracy}
    return final_step


@dataclass(frozen=True)
class DefaultRun:
    """The default job's acceptance run (``train.py`` to ``STOP_AT``, one thread)."""

    run_dir: Path
    result: subprocess.CompletedProcess


BASE_STEP = 150  # the LoRA test's base: the default run's checkpoint here (0.538 measured)


@pytest.fixture(scope="module")
def default_run(tmp_path_factory: pytest.TempPathFactory) -> DefaultRun:
    """One default run for both tests of the ``default_run`` group (one worker: ``make
    test-slow``'s ``--dist loadgroup``): its checkpoint at ``BASE_STEP`` is the LoRA test's
    pretrained base. Checkpoints change nothing in a run (exact resume): the run is the default
    job's, as ``test_default_job_learns_addition`` asserts."""
    tmp_path = tmp_path_factory.mktemp("default")
    run_dir = tmp_path / "run"
    checkpoints = [f"ckpt.every_steps={BASE_STEP}", "ckpt.keep_last=100"]
    result = run_train(
        [f"hydra.run.dir={run_dir}", "trainer.progress_bar=false", STOP_AT, *checkpoints],
        cwd=tmp_path,
        timeout=1800,  # ~1 min alone; generous for a loaded CI machine
        # one thread: as fast as two at this size (docs/benchmarks.md), and the slow suite runs
        # on 2 workers: two threads each would contend for the 2 cores, several times slower
        threads=1,
    )
    return DefaultRun(run_dir, result)


@pytest.mark.slow
@pytest.mark.xdist_group("default_run")
def test_default_job_learns_addition(default_run: DefaultRun) -> None:
    run_dir, result = default_run.run_dir, default_run.result
    assert result.returncode == 0, result.stderr[-2000:]
    final_step = _assert_stopped_at_the_target(run_dir)
    evals = _evals(run_dir)
    final_accuracy = evals[-1][1]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["eval/accuracy"] == final_accuracy
    events = EventAccumulator(str(run_dir / "tb"))
    events.Reload()
    tb = {e.step: e.value for e in events.Scalars("eval/accuracy")}
    assert tb[0] == pytest.approx(evals[0][1]) and tb[final_step] == pytest.approx(final_accuracy)
    assert f"eval/accuracy {final_accuracy:.3f}" in result.stdout  # the final console line


@pytest.mark.slow
def test_ppo_learns_addition_with_a_critic_that_learns(tmp_path: Path) -> None:
    """`python train.py train_type=online_ppo` (the PPO acceptance run, ~1 min on 2 cores)."""
    run_dir = tmp_path / "run"
    result = run_train(
        [
            "train_type=online_ppo",
            f"hydra.run.dir={run_dir}",
            "trainer.progress_bar=false",
            STOP_AT,
        ],
        cwd=tmp_path,
        timeout=2400,
        threads=1,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    final_step = _assert_stopped_at_the_target(run_dir)
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    explained = [r["value/explained_variance"] for r in records if "value/explained_variance" in r]
    assert len(explained) == final_step  # logged every step
    assert max(v for v in explained if v is not None) > 0.5  # the critic learns


@pytest.mark.slow
@pytest.mark.xdist_group("default_run")
def test_lora_grpo_learns_addition_on_a_pretrained_base(
    default_run: DefaultRun, tmp_path: Path
) -> None:
    """LoRA as it is used: adapters on a pretrained base. The base is the default job's
    checkpoint at step ``BASE_STEP`` (held-out accuracy 0.538 measured), exported by
    ``astrai.export``; then GRPO with rank-16 adapters on every decoder linear (embeddings,
    norms and base frozen) at 3x the full run's learning rate takes it past 0.9 (on the
    1,200-step schedule, stopped there; measured 2026-12-07: 0.769 at step 100, 0.923 at step
    550). On the random-init tiny model itself adapters alone do not generalize (measured:
    held-out 0.69-0.77 at train reward 0.95 after 1,200 steps, docs/lora.md): its frozen random
    embeddings carry no structure of the digits. Until issue 59's CI cut the base was a run of
    its own (300 full steps on a 300-step schedule, ~50 s of the slow lane)."""
    base = tmp_path / "base-hf"
    checkpoint = default_run.run_dir / "checkpoints" / f"step_{BASE_STEP}"
    export = subprocess.run(
        [sys.executable, "-m", "astrai.export", str(checkpoint), str(base)],
        capture_output=True,
        text=True,
    )
    assert export.returncode == 0, export.stderr
    run_dir = tmp_path / "lora"
    lora = ["model=hf", f"model.path={base}", "model.lora.rank=16", "model.lora.alpha=32"]
    args = ["trainer.progress_bar=false", "ckpt.every_steps=0"]
    result = run_train(
        [*lora, "train_type.optimizer.lr=3e-3", *args, f"hydra.run.dir={run_dir}", STOP_AT],
        cwd=tmp_path,
        timeout=1800,
        threads=1,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    evals = _evals(run_dir)
    assert evals[0][0] == 0 and evals[0][1] <= 0.75, evals  # the base, before the adapters
    assert evals[-1][1] >= TARGET, evals
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stopped"] == "stop_at" and summary["step"] == evals[-1][0] < 1200, summary
    state = json.loads((Path(summary["checkpoint"]) / "trainer_state.json").read_text())
    assert state["adapters"]["lora"]["rank"] == 16  # adapters, not a full run
    assert state["adapters"]["base"]["path"] == str(base.resolve())


@pytest.mark.slow
@pytest.mark.parametrize("train_type", ["online_grpo", "online_ppo"])
def test_the_default_job_learns_with_rollouts_one_update_behind(
    tmp_path: Path, train_type: str
) -> None:
    """``train_type.max_policy_lag=1`` (docs/async.md): every step after the first trains a
    rollout sampled while the previous update ran, and the default job still learns (measured
    on an AMD EPYC: GRPO first 1.000 at step 350, PPO at step 450; both 1.000 at step 1,200;
    the runs stop at the first evaluation at or above ``LAG_TARGET``)."""
    run_dir = tmp_path / "run"
    overrides = [f"train_type={train_type}", *LAG_1, f"hydra.run.dir={run_dir}", LAG_STOP_AT]
    result = run_train(
        [*overrides, "trainer.progress_bar=false", "ckpt.every_steps=0"],
        cwd=tmp_path,
        timeout=2400,
        threads=1,  # each side one thread: the sampling thread is the second busy thread
    )
    assert result.returncode == 0, result.stderr[-2000:]
    final_step = _assert_stopped_at_the_target(run_dir, LAG_TARGET)
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if "rollout/policy_lag" in r]
    assert [r["step"] for r in steps] == list(range(1, final_step + 1))
    assert [r["rollout/policy_lag"] for r in steps] == [0.0] + [1.0] * (final_step - 1)
    assert [r["rollout/policy_lag_min"] for r in steps] == [0.0] + [1.0] * (final_step - 1)
    # stale by one update, the correction's weights move off 1 (and stay finite)
    ratios = [r["rollout/is_ratio_mean"] for r in steps[1:]]
    assert all(0.5 < ratio < 2.0 for ratio in ratios) and any(ratio != 1.0 for ratio in ratios)


@pytest.mark.slow
@pytest.mark.xdist_group("default_run")
@pytest.mark.parametrize("train_type", ["online_grpo", "online_ppo"])
def test_a_fresh_student_learns_addition_from_the_teacher_alone(
    default_run: DefaultRun, tmp_path: Path, train_type: str
) -> None:
    """On-policy distillation (docs/distillation.md): the teacher is the default run, stopped at
    held-out 0.9; a fresh student of another seed is trained by the teacher's k1 reward alone
    (``distill.use_task_reward=false``: the task's reward never reaches the advantages) and
    passes 0.9 too, GRPO-OPD and PPO-OPD (the reward through GAE and the critic). Measured
    side by side with GRPO on the task's reward in bench/distill_learning.py."""
    assert default_run.result.returncode == 0, default_run.result.stderr[-2000:]
    run_dir = tmp_path / "student"
    overrides = [
        f"train_type={train_type}",
        "distill=opd",
        f"teacher.path={default_run.run_dir}",
        "seed=1",
        f"hydra.run.dir={run_dir}",
        STOP_AT,
    ]
    result = run_train(
        [*overrides, "trainer.progress_bar=false", "ckpt.every_steps=0"],
        cwd=tmp_path,
        timeout=1800,
        threads=1,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    _assert_stopped_at_the_target(run_dir)
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    reverse_kl = [r["distill/reverse_kl"] for r in records if "distill/reverse_kl" in r]
    # the student closes on the teacher: its reverse KL on its own samples falls by half
    assert len(reverse_kl) >= 10 and max(reverse_kl[-5:]) < 0.5 * min(reverse_kl[:5]), reverse_kl
