"""The prepared GPU check (``make gpu-check``): every CUDA path of a training run, in minutes.

On a CUDA machine it runs, one PASS/FAIL/SKIP line each (what each checks: docs/gpu.md):

- ``grpo-learns``, ``ppo-learns``: single-GPU GRPO and PPO on the tiny model; the mean reward of
  the last 5 steps beats that of the first 3 by a margin;
- ``bf16``: the same GRPO run under ``infra.precision=bf16`` (bf16 logits, fp32 weights);
- ``micro-batching``: two RL steps with and without ``train_type.micro_batch_size``, GRPO and
  PPO: the same parameters (1e-5), and the peak GPU memory of each;
- ``resume``: k steps, stop, resume, N − k steps == N steps straight (GRPO and PPO);
- ``smollm2-fp32``, ``smollm2-bf16``: a timed SmolLM2-135M step (tokens/s, step time, peak
  memory), skipped with a line saying so when ``models/smollm2`` has not been converted;
- ``lora``: LoRA (rank 16) GRPO and PPO resume as ``resume`` checks it, and a timed bf16
  SmolLM2-135M step with adapters (its peak memory beside ``smollm2-bf16``'s);
- ``async``: ``train_type.max_policy_lag=1`` GRPO resume with a rollout in flight as ``resume``
  checks it, and ``bench/async.py``'s wall time per step of the default job, lag 1 vs 0;
- ``episodes``: the calculator environment's multi-turn episodes: GRPO and PPO (lag 1) resume
  as ``resume`` checks it, and 3 bf16 steps;
- ``first-ratio-bf16``, ``scale-memory``, ``causal-attention``: issue 48's checks (docs/gpu.md);
- ``2-process-ddp``, ``2-process-fsdp``: ``python train.py`` on two GPUs, when two are visible.

- ``mfu``: ``bench/mfu.py``'s update MFU at Qwen3-0.6B, Qwen3-1.7B and Qwen2.5-1.5B (bf16,
  full shapes) against the card's datasheet peak.

It exits 1 if any check fails, prints the markdown table of the results, and writes a JSON
summary and that table (``.md`` beside it) to ``--summary``, ``$ASTRAI_GPU_CHECK_SUMMARY`` or
``outputs/gpu-check/summary.json``. Without CUDA every check is a SKIP line of the table, by
name, and it exits 0 (CI runs it so, in ``make bench-quick``).

    .venv/bin/python bench/gpu_check.py [--summary PATH]

Hidden, for testing the checks on a CPU: ``--device cpu`` runs them on the CPU and ``--quick``
shortens them (``tests/e2e/test_gpu_check.py``).
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch

import astrai.algorithms.strategy as strategy_module
from astrai.config.compose import compose_train_config as compose_config
from astrai.paths import REPO_ROOT
from astrai.training.run import Run

# bench/'s modules beside this script, also where it is loaded as a module (the tests)
sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_check_engine import engine_checks  # noqa: E402

SUMMARY_ENV = "ASTRAI_GPU_CHECK_SUMMARY"
DEFAULT_SUMMARY = REPO_ROOT / "outputs" / "gpu-check" / "summary.json"
SMOLLM2_DIR = REPO_ROOT / "models" / "smollm2"
NOISY = ("time/", "perf/", "env/step_s")  # wall-clock metrics differ between any two runs
LEARN_MARGIN = 0.05  # reward: mean of the last 5 steps minus mean of the first 3
EXACT_TOL = 1e-5  # micro-batching: the unit test's tolerance (tests/training/test_memory.py)
RESUME_SHAPE = [  # tests/training/test_resume.py's run: 6 steps, checkpoint at 3
    "debug=quick",
    "trainer.total_steps=6",
    "trainer.eval_every=2",
    "train_type.group_size=4",
    "train_type.minibatches=2",
    "train_type.ppo_epochs=2",
    "ckpt.every_steps=0",
]


@dataclass
class Result:
    """One check's outcome: ``status`` is PASS, FAIL or SKIP; ``numbers`` go to the summary."""

    name: str
    status: str
    detail: str
    numbers: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0


@dataclass
class Context:
    device: str  # "cuda" or "cpu" (the hidden test mode)
    quick: bool
    workdir: Path
    smollm2_prompts: int = 64  # prompts of the timed SmolLM2 step on CUDA (× 8 responses)
    smollm2_dir: Path = SMOLLM2_DIR  # or SmolLM2-shaped random weights (bench/smollm2_shaped.py)

    @property
    def learn_steps(self) -> int:
        return 20 if self.quick else 50

    def base(self) -> list[str]:
        return [f"infra.device={self.device}", "trainer.progress_bar=false"]

    def run_dir(self, name: str) -> Path:
        return Path(tempfile.mkdtemp(prefix=f"{name}-", dir=self.workdir))


def read_records(run_dir: Path) -> list[dict[str, Any]]:
    """``metrics.jsonl`` without the wall-clock metrics."""
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    return [{k: v for k, v in r.items() if not k.startswith(NOISY)} for r in records]


def finite_losses(records: list[dict[str, Any]]) -> bool:
    values = [v for r in records for k, v in r.items() if k.startswith("loss/")]
    return bool(values) and all(v is not None and math.isfinite(v) for v in values)


def peak_memory_mb(device: torch.device) -> float | None:
    """The CUDA allocator's peak since the last reset, MB; None on the CPU."""
    if device.type != "cuda":
        return None
    return torch.cuda.max_memory_allocated(device) / 1e6


def reset_peak_memory(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)


# --- the checks -------------------------------------------------------------------------------


def learning_run(ctx: Context, name: str, overrides: list[str]) -> tuple[Result, Run]:
    """``learn_steps`` steps of the default job on the tiny model; the reward must rise."""
    steps = ctx.learn_steps
    run_dir = ctx.run_dir(name)
    # a constant learning rate: the first steps of the default run, not a cosine squeezed
    # into a few steps
    constant = "scheduler@train_type.scheduler=warmup_constant"
    cfg = compose_config(
        [*ctx.base(), f"trainer.total_steps={steps}", f"trainer.eval_every={steps}", constant]
        + overrides
    )
    trainer = Run(cfg, run_dir)
    summary = trainer.fit()
    records = read_records(run_dir)
    rewards = [r["rollout/reward_mean"] for r in records if "rollout/reward_mean" in r]
    first, last = sum(rewards[:3]) / 3, sum(rewards[-5:]) / 5
    numbers = {
        "steps": steps,
        "reward_first3": first,
        "reward_last5": last,
        "eval_accuracy_start": summary.get("initial/eval/accuracy"),
        "eval_accuracy_end": summary.get("eval/accuracy"),
        "s_per_step": float(summary["wall_time_s"]) / steps,  # type: ignore[arg-type]
    }
    ok = len(rewards) == steps and finite_losses(records) and last - first >= LEARN_MARGIN
    detail = (
        f"reward {first:.3f} -> {last:.3f} (+{last - first:.3f}, need +{LEARN_MARGIN}) in "
        f"{steps} steps, eval/accuracy {numbers['eval_accuracy_start']:.2f} -> "
        f"{numbers['eval_accuracy_end']:.2f}, {numbers['s_per_step']:.3f} s/step"
    )
    return Result(name, "PASS" if ok else "FAIL", detail, numbers), trainer


def check_grpo(ctx: Context) -> Result:
    return learning_run(ctx, "grpo-learns", ["train_type=online_grpo"])[0]


def check_ppo(ctx: Context) -> Result:
    return learning_run(ctx, "ppo-learns", ["train_type=online_ppo"])[0]


def check_bf16(ctx: Context) -> Result:
    """GRPO under bf16 autocast learns; logits are bf16, weights and Adam moments fp32."""
    result, trainer = learning_run(ctx, "bf16", ["train_type=online_grpo", "infra.precision=bf16"])
    ids = torch.tensor([[5, 6, 7]], device=trainer.parts.device)
    with trainer.trainer.autocast():
        logits_dtype = trainer.parts.policy(ids, attention_mask=ids > 0).logits.dtype
    weights = {p.dtype for p in trainer.parts.policy.parameters()}
    moments = {s["exp_avg"].dtype for s in trainer.parts.optimizer.state.values()}
    dtypes_ok = logits_dtype == torch.bfloat16 and weights == moments == {torch.float32}
    names = ",".join(sorted(str(t).removeprefix("torch.") for t in weights | moments))
    result.detail += f"; logits {str(logits_dtype).removeprefix('torch.')}, weights+Adam {names}"
    if not dtypes_ok:
        result.status = "FAIL"
    return result


def max_state_diff(a: Any, b: Any) -> float:
    """Largest absolute difference between two (nested) state dicts; inf if they differ in
    structure. 0.0 means bitwise equal."""
    if isinstance(a, torch.Tensor):
        if not isinstance(b, torch.Tensor) or a.shape != b.shape or a.dtype != b.dtype:
            return math.inf
        if torch.equal(a, b):
            return 0.0
        return (a.double() - b.double()).abs().max().item()
    if isinstance(a, dict):
        if not isinstance(b, dict) or a.keys() != b.keys():
            return math.inf
        return max((max_state_diff(a[k], b[k]) for k in a), default=0.0)
    if isinstance(a, list | tuple):
        if not isinstance(b, list | tuple) or len(a) != len(b):
            return math.inf
        return max((max_state_diff(x, y) for x, y in zip(a, b, strict=True)), default=0.0)
    if isinstance(a, float) and isinstance(b, float):
        if a == b or (math.isnan(a) and math.isnan(b)):
            return 0.0
        return abs(a - b) if math.isfinite(a - b) else math.inf
    return 0.0 if a == b else math.inf


def trainer_state(trainer: Run) -> dict[str, Any]:
    state: dict[str, Any] = {
        "policy": trainer.parts.policy.state_dict(),
        "optimizer": trainer.parts.optimizer.state_dict(),
    }
    if trainer.parts.critic is not None and trainer.parts.critic_optimizer is not None:
        state["critic"] = trainer.parts.critic.state_dict()
        state["critic_optimizer"] = trainer.parts.critic_optimizer.state_dict()
    return state


# Adam's first steps move a weight by about ±lr whatever its gradient's size: a near-zero gradient
# whose sign the order of a sum flips moves it 2·lr the other way (seen on an AMD CPU). An eps above
# the small gradients keeps the update proportional to them (tests/training/test_memory.py).
STEADY_ADAM = {
    "online_grpo": ["+train_type.optimizer.eps=1e-2"],
    "online_ppo": ["+train_type.optimizer.eps=1e-2", "+critic.optimizer.eps=1e-2"],
}


def check_micro_batching(ctx: Context) -> Result:
    """2 RL steps, 64-sequence minibatches whole vs in micro-batches of 24 (24 + 24 + 16)."""
    shape = ["train_type.prompts_per_step=16", "train_type.minibatches=2", "trainer.total_steps=2"]
    numbers: dict[str, Any] = {"tolerance": EXACT_TOL}
    parts = []
    for train_type in ("online_grpo", "online_ppo"):
        states = {}
        for micro in ("null", "24"):
            overrides = [*ctx.base(), f"train_type={train_type}", *shape, *STEADY_ADAM[train_type]]
            overrides.append(f"train_type.micro_batch_size={micro}")
            trainer = Run(compose_config(overrides), ctx.run_dir("micro"))
            reset_peak_memory(trainer.parts.device)
            for _ in range(2):
                trainer.train_step()
            states[micro] = trainer_state(trainer)
            numbers[f"{train_type}_peak_mb_micro_{micro}"] = peak_memory_mb(trainer.parts.device)
        moved = max_state_diff(trainer.parts.reference.state_dict(), states["null"]["policy"])
        diff = max(
            max_state_diff(states["null"][k], states["24"][k])
            for k in ("policy", "critic")
            if k in states["null"]
        )
        numbers[f"{train_type}_max_diff"] = diff
        parts.append((train_type, diff, moved))
    ok = all(diff <= EXACT_TOL and moved > 1e-4 for _, diff, moved in parts)
    detail = ", ".join(f"{t} max param diff {d:.1e}" for t, d, _ in parts)
    detail += f" (tolerance {EXACT_TOL:.0e})"
    peaks = [numbers[k] for k in numbers if "_peak_mb_" in k]
    if all(p is not None for p in peaks):
        detail += ", peak MB GRPO whole/micro {:.0f}/{:.0f}, PPO {:.0f}/{:.0f}".format(*peaks)
    return Result("micro-batching", "PASS" if ok else "FAIL", detail, numbers)


def resume_runs(
    ctx: Context, train_type: str, extra: tuple[str, ...] = ()
) -> tuple[float, float, bool]:
    """(max difference resumed vs straight, straight vs a repeat of it, metrics equal)."""
    overrides = [*ctx.base(), f"train_type={train_type}", *RESUME_SHAPE, *extra]
    runs = {}
    for name in ("straight", "repeat"):
        run_dir = ctx.run_dir(f"resume-{name}")
        trainer = Run(compose_config(overrides), run_dir)
        trainer.fit()
        runs[name] = (trainer_state(trainer), read_records(run_dir))
    run_dir = ctx.run_dir("resume-resumed")
    Run(compose_config(overrides), run_dir).fit(until=3)
    resumed = Run(compose_config(overrides), run_dir)  # ckpt.resume=auto: step_3
    if resumed.started.state.step != 3:
        raise RuntimeError(f"resumed at step {resumed.started.state.step}, expected 3")
    resumed.fit()
    straight_state, straight_records = runs["straight"]
    diff = max(
        max_state_diff(straight_state, trainer_state(resumed)),
        max_state_diff(straight_records, read_records(run_dir)),
    )
    noise = max(
        max_state_diff(straight_state, runs["repeat"][0]),
        max_state_diff(straight_records, runs["repeat"][1]),
    )
    return diff, noise, straight_records == read_records(run_dir)


def check_resume(ctx: Context) -> Result:
    """6 steps straight == 3 steps, checkpoint, a new trainer resuming, 3 more. Bitwise when
    two straight runs are bitwise equal; otherwise (nondeterministic kernels) the resumed run
    may differ from the straight one by at most 10x what two straight runs differ by."""
    numbers: dict[str, Any] = {}
    parts = []
    for train_type in ("online_grpo", "online_ppo"):
        diff, noise, same_metrics = resume_runs(ctx, train_type)
        numbers[f"{train_type}_max_diff"] = diff
        numbers[f"{train_type}_repeat_diff"] = noise
        numbers[f"{train_type}_bitwise"] = diff == 0.0 and same_metrics
        ok = diff <= 10 * noise
        text = "bitwise" if diff == 0.0 else f"max diff {diff:.1e} (repeat run: {noise:.1e})"
        parts.append((train_type, ok, text))
    detail = ", ".join(f"{t} {text}" for t, _, text in parts)
    detail += ": weights, optimizer states and logged metrics after 3 + 3 vs 6 steps"
    return Result("resume", "PASS" if all(ok for _, ok, _ in parts) else "FAIL", detail, numbers)


def smollm2_step(
    ctx: Context, precision: str, name: str | None = None, extra: tuple[str, ...] = ()
) -> Result:
    """A warm-up step, then one timed step of GRPO on SmolLM2-135M (``extra``: more overrides,
    e.g. LoRA's)."""
    name = name or f"smollm2-{precision}"
    if not (ctx.smollm2_dir / "config.json").exists():
        return Result(name, "SKIP", f"{ctx.smollm2_dir} not found: run `make smollm2` first")
    if ctx.device == "cuda":  # the default update shape; 64 × 8 responses of up to 64 tokens
        shape = [
            f"train_type.prompts_per_step={ctx.smollm2_prompts}",
            "train_type.sampling.max_new_tokens=64",
        ]
    else:  # the CPU test mode: the code path, not a measurement
        shape = [
            "train_type.prompts_per_step=2",
            "train_type.group_size=2",
            "train_type.minibatches=1",
            "train_type.ppo_epochs=1",
        ]
    overrides = [*ctx.base(), "model=smollm2", f"model.path={ctx.smollm2_dir}", *shape]
    overrides += [f"infra.precision={precision}", "trainer.total_steps=2", *extra]
    trainer = Run(compose_config(overrides), ctx.run_dir(name))
    trainer.train_step()  # warm-up: CUDA context, kernels, allocator
    reset_peak_memory(trainer.parts.device)
    metrics = trainer.train_step()
    peak = peak_memory_mb(trainer.parts.device)
    numbers = {
        "sequences": trainer.parts.strategy.prompts_per_step * trainer.parts.strategy.group_size,
        "tokens_per_s": metrics["perf/tokens_per_s"],
        "step_s": metrics["perf/step_s"],
        "rollout_s": metrics["time/rollout_s"],
        "update_s": metrics["time/update_s"],
        "response_len": metrics["rollout/response_len"],
        "peak_gpu_mb": peak,
    }
    ok = math.isfinite(metrics["loss/total"]) and metrics["perf/tokens_per_s"] > 0
    peak_text = f"{peak:,.0f} MB" if peak is not None else "n/a (CPU)"
    detail = (
        f"{numbers['sequences']} sequences, {numbers['tokens_per_s']:,.0f} sampled tokens/s, "
        f"step {numbers['step_s']:.2f} s (rollout {numbers['rollout_s']:.2f} s, update "
        f"{numbers['update_s']:.2f} s), peak GPU memory {peak_text}"
    )
    return Result(name, "PASS" if ok else "FAIL", detail, numbers)


def check_smollm2_fp32(ctx: Context) -> Result:
    return smollm2_step(ctx, "fp32")


def check_smollm2_bf16(ctx: Context) -> Result:
    return smollm2_step(ctx, "bf16")


def check_first_ratio_bf16(ctx: Context) -> Result:
    """Issue 48, part 4 on the device: SmolLM2-135M in bf16, 1 epoch × 2 minibatches,
    ``engine=torch``'s defaults (π_old recomputed through the update's forward): each step's
    first minibatch has ``policy/approx_kl`` ≤ 1e-6 and ``policy/clipfrac`` 0. On the CPU both
    read exactly 0 (tests/e2e/test_bf16_first_ratio.py); on a GPU the scoring parts and the
    update's micro-batches may take other kernels, which this measures."""
    name = "first-ratio-bf16"
    if not (ctx.smollm2_dir / "config.json").exists():
        return Result(name, "SKIP", f"{ctx.smollm2_dir} not found: run `make smollm2` first")
    firsts: list[tuple[float, float]] = []
    seen: list[tuple[float, float]] = []
    original = strategy_module.clipped_policy_loss

    def recording(*args: Any, **kwargs: Any) -> Any:
        loss, stats = original(*args, **kwargs)
        seen.append((float(stats["approx_kl"]), float(stats["clipfrac"])))
        return loss, stats

    prompts = min(ctx.smollm2_prompts, 16) if ctx.device == "cuda" else 2
    overrides = [*ctx.base(), "model=smollm2", f"model.path={ctx.smollm2_dir}"]
    overrides += [
        "infra.precision=bf16",
        f"train_type.prompts_per_step={prompts}",
        "train_type.group_size=4",
        "train_type.ppo_epochs=1",
        "train_type.minibatches=2",
        "train_type.sampling.max_new_tokens=32",
        "trainer.total_steps=2",
    ]
    trainer = Run(compose_config(overrides), ctx.run_dir(name))
    strategy_module.clipped_policy_loss = recording  # type: ignore[assignment]
    try:
        for _ in range(2):
            seen.clear()
            trainer.train_step()
            firsts.append(seen[0])
    finally:
        strategy_module.clipped_policy_loss = original  # type: ignore[assignment]
    worst = max(kl for kl, _ in firsts)
    clipped = max(clipfrac for _, clipfrac in firsts)
    ok = worst <= 1e-6 and clipped == 0.0
    numbers = {"first_approx_kl_max": worst, "first_clipfrac_max": clipped}
    detail = (
        f"{prompts} prompts × 4, 2 steps: the first minibatch's approx_kl at most {worst:.1e}, "
        f"clipfrac {clipped} (π_old: {trainer.started.plan.old_logprobs})"
    )
    return Result(name, "PASS" if ok else "FAIL", detail, numbers)


LORA = ("model.lora.rank=16", "model.lora.alpha=32", "train_type.optimizer.lr=5.0e-3")


def check_lora(ctx: Context) -> Result:
    """LoRA adapters (rank 16, all-linear): resume of GRPO and PPO as ``resume`` checks it, then
    (CUDA) a timed bf16 SmolLM2-135M step with adapters (its peak memory beside
    smollm2-bf16's)."""
    numbers: dict[str, Any] = {}
    parts = []
    for train_type in ("online_grpo", "online_ppo"):
        diff, noise, _ = resume_runs(ctx, train_type, LORA)
        numbers[f"{train_type}_max_diff"] = diff
        parts.append((train_type, diff <= 10 * noise, "bitwise" if diff == 0.0 else f"{diff:.1e}"))
    detail = ", ".join(f"{t} resume {text}" for t, _, text in parts)
    ok = all(ok for _, ok, _ in parts)
    if ctx.device == "cuda":  # a bf16 SmolLM2 update on the CPU takes minutes: CUDA only
        step = smollm2_step(ctx, "bf16", "lora", LORA)
        numbers.update({f"smollm2_{k}": v for k, v in step.numbers.items()})
        ok = ok and step.status in ("PASS", "SKIP")
        detail += f"; SmolLM2 bf16 step with adapters: {step.detail}"
    return Result("lora", "PASS" if ok else "FAIL", detail, numbers)


LAG_1 = (
    "train_type.max_policy_lag=1",
    "engine.old_logprobs=recompute",
    "engine.correction=token_truncate",
)


def check_async(ctx: Context) -> Result:
    """Rollouts that overlap the update (``train_type.max_policy_lag=1``): resume with a rollout
    in flight as ``resume`` checks it, then (CUDA) ``bench/async.py``'s side-by-side wall time
    per step of the default job, lag 1 vs 0 (the CPU's is ``make bench-quick``'s)."""
    diff, noise, _ = resume_runs(ctx, "online_grpo", LAG_1)
    ok = diff <= 10 * noise
    detail = "resume with a rollout in flight " + ("bitwise" if diff == 0.0 else f"{diff:.1e}")
    numbers: dict[str, Any] = {"resume_max_diff": diff, "resume_repeat_diff": noise}
    if ctx.device == "cuda":
        spec = importlib.util.spec_from_file_location("bench_async", REPO_ROOT / "bench/async.py")
        assert spec is not None and spec.loader is not None
        bench = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(bench)
        rounds, steps = (2, 3) if ctx.quick else (6, 5)
        pairs, shares = bench.compare(list(ctx.base()), rounds, steps)
        ratio = statistics.median(lag / sync for sync, lag in pairs)
        numbers.update({"lag_ratio": ratio, **shares})
        detail += (
            f"; default job s/step lag 0 {statistics.median(p[0] for p in pairs):.3f}, lag 1 "
            f"{statistics.median(p[1] for p in pairs):.3f}: ratio {ratio:.3f} (sampling "
            f"{shares['sample_s']:.3f} s of the lag-0 step)"
        )
    return Result("async", "PASS" if ok else "FAIL", detail, numbers)


# the embedded tool task (experiment=calculator's env and task) in the resume shape: every
# rollout is a batch of episodes, their prompts, observations and credit on the device
EPISODES = (
    "env=calculator",
    "task=products",
    "task.min_operand=32",
    "train_type.sampling.max_new_tokens=8",
)
EPISODES_PPO_LAG = (*EPISODES, *LAG_1, "train_type.gae_level=turn")


def check_episodes(ctx: Context) -> Result:
    """Multi-turn, tool-using episodes (issue 50, docs/environments.md) on the device: GRPO at
    lag 0 and PPO (turn-level GAE) at lag 1, each resumed as ``resume`` checks it (at lag 1
    with an episode rollout in flight at the checkpoint), and 3 GRPO steps in bf16."""
    numbers: dict[str, Any] = {}
    parts = []
    for name, train_type, extra in (
        ("grpo", "online_grpo", EPISODES),
        ("ppo_lag1", "online_ppo", EPISODES_PPO_LAG),
    ):
        diff, noise, _ = resume_runs(ctx, train_type, extra)
        numbers[f"{name}_max_diff"], numbers[f"{name}_repeat_diff"] = diff, noise
        text = "bitwise" if diff == 0.0 else f"max diff {diff:.1e} (repeat run: {noise:.1e})"
        parts.append((name, diff <= 10 * noise, text))
    run_dir = ctx.run_dir("episodes-bf16")
    overrides = [*ctx.base(), *RESUME_SHAPE, *EPISODES, "infra.precision=bf16"]
    Run(compose_config(overrides), run_dir).fit(until=3)
    records = [r for r in read_records(run_dir) if "env/turns" in r]
    bf16_ok = len(records) == 3 and finite_losses(records)
    numbers["bf16_turns"] = [r["env/turns"] for r in records]
    numbers["bf16_tool_calls"] = [r["env/tool_calls"] for r in records]
    parts.append(("bf16", bf16_ok, "3 steps, losses finite" if bf16_ok else "losses not finite"))
    detail = ", ".join(f"{n} {text}" for n, _, text in parts)
    detail += " (resume: weights, optimizer states and metrics after 3 + 3 vs 6 steps)"
    return Result("episodes", "PASS" if all(ok for _, ok, _ in parts) else "FAIL", detail, numbers)


def two_process_run(ctx: Context, parallel: str) -> Result:
    """``python train.py`` with two processes (two GPUs; gloo on the CPU): exit 0, 3 steps."""
    name = f"2-process-{parallel}"
    if ctx.device == "cuda" and torch.cuda.device_count() < 2:
        return Result(name, "SKIP", f"{torch.cuda.device_count()} GPU visible, needs 2")
    if ctx.device == "cpu" and ctx.quick:
        return Result(name, "SKIP", "--quick")
    run_dir = ctx.run_dir(name)
    command = [sys.executable, str(REPO_ROOT / "train.py"), *ctx.base(), "debug=quick"]
    command += ["trainer.total_steps=3", "infra.nproc_per_node=2", f"infra.parallel={parallel}"]
    command += [f"hydra.run.dir={run_dir}"]
    if ctx.device == "cuda":
        command.append("infra.gpu.devices=[0,1]")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    start = time.perf_counter()
    result = subprocess.run(
        command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    seconds = time.perf_counter() - start
    summary_path = run_dir / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    reward = summary.get("rollout/reward_mean")
    ok = result.returncode == 0 and summary.get("step") == 3 and summary.get("stopped") is None
    ok = ok and reward is not None and math.isfinite(reward)
    detail = f"exit {result.returncode}, {summary.get('step')} steps in {seconds:.1f} s"
    if not ok:
        detail += f"; stderr: {result.stderr.strip().splitlines()[-1:]}"
    numbers = {"exit": result.returncode, "steps": summary.get("step"), "wall_s": seconds}
    return Result(name, "PASS" if ok else "FAIL", detail, numbers)


def check_ddp(ctx: Context) -> Result:
    return two_process_run(ctx, "ddp")


def check_fsdp(ctx: Context) -> Result:
    return two_process_run(ctx, "fsdp")


def check_scale_memory(ctx: Context) -> Result:
    """``bench/scale_memory.py``'s estimates (fake tensors) beside the same phases run for real:
    on CUDA every phase of GRPO full fine-tuning and of PPO under LoRA rank 16 at Qwen3-0.6B's
    published shape and a small job, ``max_memory_allocated`` (within 25%); on the CPU the
    GRPO scoring pass and the PPO + LoRA update at 2 layers, peak RSS (within 10%)."""
    import scale_memory  # bench/, beside this script

    if ctx.device == "cuda":
        shape = scale_memory.Shape(8, 4, 256, 256, 8, None, 4)
        jobs = [scale_memory.Job(), scale_memory.Job("ppo", 16)]
        names, measure, tolerance = scale_memory.PHASES, scale_memory.cuda_peak, 0.25
    else:  # the spot check of issue 48: a real run of the same code
        shape = scale_memory.Shape(1, 4, 32, 32, 4, None, 2, layers=2)
        jobs = [scale_memory.Job(), scale_memory.Job("ppo", 16)]
        # a full fine-tuning update is not among them: its embedding gradient is zero-filled
        # and only the batch's rows are written, so RSS misses untouched pages (docs/memory.md)
        names, measure, tolerance = ("score", "update"), scale_memory.measured_on_cpu, 0.10
    numbers: dict[str, Any] = {}
    parts = []
    for job in jobs:
        for phase in scale_memory.phases(shape, torch.device("cpu"), job):
            if phase.name not in names or (phase.name == "update") != (job.lora is not None):
                continue
            fake = scale_memory.fake_peak("qwen3-0.6b", shape, phase.name, job)
            real = measure("qwen3-0.6b", shape, phase.name, job)
            ratio = fake / max(real, 1)
            key = f"{job.algo}{'' if job.lora is None else f'-lora{job.lora}'}/{phase.name}"
            numbers[key] = {"fake_bytes": fake, "measured_bytes": real, "ratio": ratio}
            parts.append(f"{key} {fake / 2**20:,.0f}/{real / 2**20:,.0f} MiB ({ratio:.3f})")
    ok = all(abs(n["ratio"] - 1) <= tolerance for n in numbers.values())
    detail = f"estimate/measured: {', '.join(parts)} (within {tolerance:.0%})"
    return Result("scale-memory", "PASS" if ok else "FAIL", detail, numbers)


def check_mfu(ctx: Context) -> Result:
    """``bench/mfu.py``: the update's MFU at Qwen3-0.6B, Qwen3-1.7B and Qwen2.5-1.5B's full
    shapes in bf16, 4 × 2048 tokens a step, against the card's datasheet peak (on the CPU, one
    layer of Qwen3-0.6B at 1 × 16 tokens in fp32, against a measured matmul)."""
    import mfu  # bench/, beside this script

    device = torch.device(ctx.device)
    if ctx.device == "cuda":
        rows = [mfu.measure(name, None, 4, 2048, device, "bf16") for name in mfu.SHAPES]
    else:
        rows = [mfu.measure("qwen3-0.6b", 1, 1, 16, device, "fp32", steps=1)]
    numbers = {
        row.model: {"mfu": row.mfu, "tokens_per_s": row.tokens_per_s, "seconds": row.seconds,
                    "peak_tflops": row.peak_flops / 1e12, "peak_source": row.peak_source}
        for row in rows
    }  # fmt: skip
    print("\n".join([mfu.HEADER, *(row.markdown() for row in rows)]), flush=True)
    # a datasheet peak bounds the rate; a measured matmul's does not (a larger one runs faster)
    bound = 1.0 if ctx.device == "cuda" else math.inf
    ok = all(0 < row.mfu <= bound and math.isfinite(row.mfu) for row in rows)
    detail = ", ".join(f"{row.model} {100 * row.mfu:.1f}% ({row.tokens_per_s:,.0f} tok/s)"
                       for row in rows)  # fmt: skip
    return Result("mfu", "PASS" if ok else "FAIL", f"MFU {detail}", numbers)


def check_causal_attention(ctx: Context) -> Result:
    """Issue 48, part 3: on CUDA a forward without a cache over right-padded rows runs
    ``is_causal`` with no mask (``models.attention_mask``: FlashAttention may run). Qwen3-0.6B's
    widths at 2 layers, rows of varied lengths: the logits at every valid position as the dense
    mask's (fp32 within 1e-3, bf16 within 0.1), and the forward's time with each, side by side.
    On the CPU the mask is kept, so the check forces ``is_causal`` to compare the same."""
    import scale_memory  # bench/, beside this script

    import astrai.models.llama as llama
    from astrai.models.attention_mask import attention_mask_for, causal_padding_mask
    from astrai.models.precision import autocast

    device = torch.device(ctx.device)
    rows, width = (2, 16) if ctx.quick else (8, 2048)
    torch.manual_seed(0)
    with device:
        model = scale_memory.build_model("qwen3-0.6b", 2).eval()
        ids = torch.randint(0, model.config.vocab_size, (rows, width))
        lengths = torch.linspace(width // 4, width, rows).long()
        mask = torch.arange(width)[None, :] < lengths[:, None]
    causal_taken = attention_mask_for(mask, width) is None  # True on CUDA

    def forced_causal(attention_mask: torch.Tensor, t: int) -> torch.Tensor | None:
        return None

    numbers: dict[str, Any] = {"causal_taken": causal_taken}
    found = llama.attention_mask_for
    try:
        for precision, bound in (("fp32", 1e-3), ("bf16", 0.1)):
            outputs, seconds = {}, {}
            for kind, choose in (("dense", causal_padding_mask), ("causal", forced_causal)):
                llama.attention_mask_for = choose  # type: ignore[assignment]
                with torch.no_grad(), autocast(device, precision):
                    model(ids, attention_mask=mask)  # warm-up
                    _synchronize(ctx)
                    start = time.perf_counter()
                    outputs[kind] = model(ids, attention_mask=mask).logits.float()
                    _synchronize(ctx)
                seconds[kind] = time.perf_counter() - start
            diff = (outputs["causal"] - outputs["dense"])[mask].abs().max().item()
            numbers[precision] = {"max_abs_diff": diff, "bound": bound, **seconds}
    finally:
        llama.attention_mask_for = found  # type: ignore[assignment]
    ok = all(numbers[p]["max_abs_diff"] <= numbers[p]["bound"] for p in ("fp32", "bf16"))
    ok = ok and causal_taken == (ctx.device == "cuda")
    detail = ", ".join(
        f"{p}: max |Δlogit| {numbers[p]['max_abs_diff']:.2e}, forward "
        f"{numbers[p]['causal'] * 1e3:.1f} ms causal vs {numbers[p]['dense'] * 1e3:.1f} ms mask"
        for p in ("fp32", "bf16")
    )
    detail += f"; {rows} rows × {width}; is_causal taken by default: {causal_taken}"
    return Result("causal-attention", "PASS" if ok else "FAIL", detail, numbers)


def _synchronize(ctx: Context) -> None:
    if ctx.device == "cuda":
        torch.cuda.synchronize()


CHECKS: list[tuple[str, Callable[[Context], Result]]] = [
    ("grpo-learns", check_grpo),
    ("ppo-learns", check_ppo),
    ("bf16", check_bf16),
    ("micro-batching", check_micro_batching),
    ("resume", check_resume),
    ("smollm2-fp32", check_smollm2_fp32),
    ("smollm2-bf16", check_smollm2_bf16),
    ("first-ratio-bf16", check_first_ratio_bf16),
    ("lora", check_lora),
    ("async", check_async),
    ("episodes", check_episodes),
    ("scale-memory", check_scale_memory),
    ("causal-attention", check_causal_attention),
    ("mfu", check_mfu),
    # engine=vllm on CUDA (issue 49; bench/gpu_check_engine.py): --only engine runs them all
    *engine_checks(Context, Result, learning_run),
    ("2-process-ddp", check_ddp),
    ("2-process-fsdp", check_fsdp),
]


# --- running them -----------------------------------------------------------------------------


def run_check(name: str, check: Callable[[Context], Result], ctx: Context) -> Result:
    """One check; an exception is its FAIL line (traceback to stderr)."""
    start = time.perf_counter()
    try:
        result = check(ctx)
    except Exception as err:  # every failure is a FAIL line; the other checks still run
        traceback.print_exc()
        result = Result(name, "FAIL", f"{type(err).__name__}: {err}".splitlines()[0])
    result.seconds = time.perf_counter() - start
    print(f"{result.status} {name}: {result.detail} [{result.seconds:.1f} s]", flush=True)
    gc.collect()  # the check's trainers, before the next one allocates
    if ctx.device == "cuda":
        torch.cuda.empty_cache()
    return result


def no_cuda_reason() -> tuple[str, int] | None:
    """None when CUDA is usable; else (the one line to print, the exit code): 0 on a machine
    without a GPU, 1 where a GPU is there but this torch cannot use it."""
    if torch.cuda.is_available():
        return None
    gpu_present = Path("/dev/nvidiactl").exists() or shutil.which("nvidia-smi") is not None
    if not gpu_present:
        machine = f"no CUDA device on this machine (torch {torch.__version__})"
        return f"gpu-check: {machine}: every check skipped", 0
    if torch.version.cuda is None:
        problem = f"torch {torch.__version__} is a CPU-only build"
    else:
        problem = f"torch {torch.__version__} (CUDA {torch.version.cuda}) cannot use it"
    return f"gpu-check: an NVIDIA GPU is present but {problem}; see docs/gpu.md", 1


def machine_info(device: str) -> dict[str, Any]:
    info: dict[str, Any] = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": sys.version.split()[0],
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
    }
    if device == "cuda":
        info["gpu"] = torch.cuda.get_device_name(0)
        info["gpus_visible"] = torch.cuda.device_count()
    else:
        info["gpu"] = f"none (CPU test mode, {torch.get_num_threads()} threads)"
    return info


def write_summary(path: Path, info: dict[str, Any], results: list[Result], quick: bool) -> None:
    """``path`` (JSON) and the same as a markdown table beside it (``.md``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        **info,
        "quick": quick,
        "passed": all(r.status != "FAIL" for r in results),
        "checks": [asdict(r) for r in results],
    }
    path.write_text(json.dumps(payload, indent=2) + "\n")
    lines = [
        f"gpu-check on {info['gpu']}, torch {info['torch']}, CUDA {info['cuda']}, {info['date']}",
        "",
        "| check | result | numbers | seconds |",
        "|---|---|---|---|",
        *(
            f"| `{r.name}` | {r.status} | {r.detail.replace('|', '/')} | {r.seconds:.1f} |"
            for r in results
        ),
    ]
    path.with_suffix(".md").write_text("\n".join(lines) + "\n")


def expand_groups(only: list[str] | None, names: list[str]) -> list[str] | None:
    """``--only``'s names, a group (``engine``: every ``engine-*`` check) given as its checks;
    an unknown name kept (``parse_args`` names it)."""
    if not only:
        return only
    expanded = []
    for wanted in only:
        members = [name for name in names if name == wanted or name.startswith(f"{wanted}-")]
        expanded += members or [wanted]
    return expanded


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--summary", type=Path, help=f"JSON summary path (or ${SUMMARY_ENV})")
    parser.add_argument("--only", nargs="+", help="run only these checks (names as printed)")
    parser.add_argument(
        "--smollm2-prompts",
        type=int,
        default=64,
        help="prompts (x 8 responses) of the timed SmolLM2 step; fewer on a small GPU",
    )
    parser.add_argument(
        "--smollm2-dir",
        type=Path,
        default=SMOLLM2_DIR,
        help="the SmolLM2 model directory (default models/smollm2, written by make smollm2)",
    )
    parser.add_argument("--device", choices=("auto", "cpu"), default="auto", help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, help=argparse.SUPPRESS)  # torch intra-op threads
    args = parser.parse_args()
    args.only = expand_groups(args.only, [name for name, _ in CHECKS])
    unknown = sorted(set(args.only or []) - {name for name, _ in CHECKS})
    if unknown:
        parser.error(f"unknown checks {unknown}; the checks: {[name for name, _ in CHECKS]}")
    return args


def main() -> int:
    args = parse_args()
    reason = None if args.device == "cpu" else no_cuda_reason()
    if reason is not None and reason[1] != 0:  # a GPU this torch cannot use: nothing to skip to
        print(reason[0])
        return reason[1]
    device = "cpu" if args.device == "cpu" or reason is not None else "cuda"
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    summary = args.summary or Path(os.environ.get(SUMMARY_ENV) or DEFAULT_SUMMARY)
    info = machine_info(device)
    if reason is not None:  # no CUDA: nothing runs, not even the CPU test mode
        info["gpu"] = "none (no CUDA device)"
    print(f"gpu-check on {info['gpu']}: torch {info['torch']}, CUDA {info['cuda']}", flush=True)
    checks = [(n, c) for n, c in CHECKS if not args.only or n in args.only]
    if reason is not None:  # no CUDA here: every check named, none run (the table still prints)
        print(reason[0], flush=True)
        results = [Result(name, "SKIP", "no CUDA device on this machine") for name, _ in checks]
    else:
        with tempfile.TemporaryDirectory(prefix="astrai-gpu-check-") as workdir:
            ctx = Context(
                device, args.quick, Path(workdir), args.smollm2_prompts, args.smollm2_dir.resolve()
            )
            results = [run_check(name, check, ctx) for name, check in checks]
    write_summary(summary, info, results, args.quick)
    print(summary.with_suffix(".md").read_text(), end="", flush=True)
    counts = {s: sum(r.status == s for r in results) for s in ("PASS", "FAIL", "SKIP")}
    print(
        f"gpu-check: {counts['PASS']} passed, {counts['FAIL']} failed, {counts['SKIP']} skipped;"
        f" summary {summary} (+ .md)"
    )
    return 1 if counts["FAIL"] else 0


if __name__ == "__main__":
    sys.exit(main())
