"""``make gpu-check``'s engine checks (issue 49): what settles ``engine=vllm`` on CUDA the first
time a GPU is at hand. ``--only engine`` runs them all; on the CPU (``--device cpu``, vLLM's
CPU build in ``.venv-vllm``) the ones that can run do, and the CUDA-only ones are skipped by
name. Without vLLM each is skipped with the install command.

- ``engine-vllm-speed`` (CUDA): sampled tokens/s of ``engine=vllm`` beside ``engine=torch`` at
  SmolLM2-135M's and Qwen3-0.6B's shapes (random weights, ``bench/engine.py``'s workload);
- ``engine-vllm-sync``: the weight sync's seconds and its correctness: after 3 synced updates
  the engine's greedy continuations equal the torch sampler's on the same weights;
- ``engine-vllm-sleep`` (CUDA): the device memory freed by sleep mode (``release``) and taken
  back by the next sync;
- ``engine-vllm-learns`` (CUDA): 50 GRPO steps of the default job sampled by vLLM, the reward
  rising as ``grpo-learns``' must;
- ``engine-vllm-lora``: LoRA (rank 8) with ``engine=vllm``: 3 steps (20 on CUDA), the
  engine/trainer logprob mismatch within the vLLM tests' bound on every step;
- ``engine-lag-stream`` (CUDA): ``max_policy_lag`` 1 vs 0 wall time per step with the sampling
  thread on its own CUDA stream (``training.sampling.cuda_streams``).
"""

from __future__ import annotations

import importlib.util
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

CUDA_ONLY = "CUDA only (the vLLM lane's CPU runs cover the CPU)"
VLLM_BOUND = 5e-5  # |log π_old − log π_behav| in fp32 (tests/engine/test_vllm_training.py)
# model=tiny with 2 heads of 32: vLLM's CPU attention has no kernel for the preset's 16
HEADS = ["model.num_attention_heads=2", "model.num_key_value_heads=1"]


def engine_checks(ctx_type: Any, result_type: Any, learning_run: Callable) -> list:
    """The checks as ``(name, check)`` pairs for ``bench/gpu_check.py``'s table (its
    ``Context``, ``Result`` and ``learning_run`` passed in: no import circle)."""
    Result = result_type  # noqa: N806 (a class)

    def skip(name: str, ctx: Any, cuda_only: bool) -> Any:
        if cuda_only and ctx.device != "cuda":
            return Result(name, "SKIP", CUDA_ONLY)
        if importlib.util.find_spec("vllm") is None:
            return Result(
                name, "SKIP", "vLLM not installed: make install-vllm, or pip install vllm"
            )
        return None

    def speed(ctx: Any) -> Any:
        return skip("engine-vllm-speed", ctx, True) or _speed(ctx, Result)

    def sync(ctx: Any) -> Any:
        return skip("engine-vllm-sync", ctx, False) or _sync(ctx, Result)

    def sleep(ctx: Any) -> Any:
        return skip("engine-vllm-sleep", ctx, True) or _sleep(ctx, Result)

    def learns(ctx: Any) -> Any:
        if (skipped := skip("engine-vllm-learns", ctx, True)) is not None:
            return skipped
        overrides = ["train_type=online_grpo", "engine=vllm", *HEADS]
        result = learning_run(ctx, "engine-vllm-learns", overrides)[0]
        result.name = "engine-vllm-learns"
        return result

    def lora(ctx: Any) -> Any:
        return skip("engine-vllm-lora", ctx, False) or _lora(ctx, Result)

    def lag(ctx: Any) -> Any:
        return skip("engine-lag-stream", ctx, True) or _lag(ctx, Result)

    return [
        ("engine-vllm-speed", speed),
        ("engine-vllm-sync", sync),
        ("engine-vllm-sleep", sleep),
        ("engine-vllm-learns", learns),
        ("engine-vllm-lora", lora),
        ("engine-lag-stream", lag),
    ]


def _policy(shape: str, device: str) -> Any:
    from astrai.models.llama import LlamaConfig, LlamaForCausalLM
    from engine import shape_config  # bench/engine.py

    if shape == "qwen3-0.6b":
        from model_shapes import MODELS  # bench/model_shapes.py's published shapes

        from astrai.models.hf_config import llama_config_from_hf

        config: LlamaConfig = llama_config_from_hf(dict(MODELS["qwen3-0.6b"]))
    else:
        config = shape_config(shape)
    torch.manual_seed(0)
    return LlamaForCausalLM(config).to(device).eval()


def _vllm(policy: Any, precision: str = "fp32") -> Any:
    from astrai.models.tokenizer import CharTokenizer
    from astrai.rollout.engines.seeded_vllm import SeededVLLM
    from astrai.rollout.engines.vllm_settings import VLLMEngineConfig

    return SeededVLLM(VLLMEngineConfig(), policy, CharTokenizer(), precision)


def _speed(ctx: Any, Result: Any) -> Any:  # noqa: N803 (a class)
    from astrai.models.tokenizer import CharTokenizer
    from astrai.rollout.engines.engine import torch_engine
    from astrai.rollout.engines.sampler import SamplingConfig
    from engine import NO_STOP, Workload, best_tokens_per_second, make_prompts

    work = Workload(prompts=8 if ctx.quick else 64, group=8, new_tokens=64, max_prompt=64)
    sampling = SamplingConfig(max_new_tokens=work.new_tokens, temperature=1.0)
    device = torch.device(ctx.device)
    numbers: dict[str, Any] = {}
    for shape in ("smollm2", "qwen3-0.6b"):
        policy = _policy(shape, ctx.device)
        vocab = policy.config.vocab_size

        def runner(engine: Any, vocab: int = vocab) -> Callable[[int], Any]:
            def run(seed: int) -> Any:  # the prompts of ``seed``, as a rollout samples them
                ids, mask = make_prompts(work, vocab, seed)
                stream = torch.Generator(device=device).manual_seed(seed)
                return engine.sample(ids.to(device), mask.to(device), work.group, sampling,
                                     NO_STOP, generator=stream)  # fmt: skip

            return run

        vllm = _vllm(policy, "bf16")
        try:
            engines = {"torch": torch_engine(policy, CharTokenizer(), "bf16"), "vllm": vllm}
            runners = {name: runner(engine) for name, engine in engines.items()}
            numbers[shape] = best_tokens_per_second(runners, work, 2 if ctx.quick else 3)
        finally:
            vllm.close()
    detail = ", ".join(
        f"{shape}: vllm {n['vllm']:,.0f} tok/s, torch {n['torch']:,.0f} "
        f"({n['vllm'] / n['torch']:.2f}x)"
        for shape, n in numbers.items()
    )
    return Result("engine-vllm-speed", "PASS", f"bf16, {work}: {detail}", numbers)


def _sync(ctx: Any, Result: Any) -> Any:  # noqa: N803 (a class)
    from astrai.models.merged_weights import engine_weights
    from astrai.models.tokenizer import CharTokenizer
    from astrai.rollout.collect import left_pad
    from astrai.rollout.engines.engine import torch_engine
    from astrai.rollout.engines.sampler import SamplingConfig

    shape = "tiny" if ctx.device != "cuda" or ctx.quick else "smollm2"
    policy = _policy(shape, ctx.device)
    tokenizer = CharTokenizer()
    vllm = _vllm(policy)
    greedy = SamplingConfig(max_new_tokens=12, temperature=0.0)
    ids, mask = left_pad(tokenizer, ["1+2=", "13+4=", "99+1=", "7+7="])
    ids, mask = ids.to(ctx.device), mask.to(ctx.device)
    seconds, equal = [], []
    try:
        for update in range(3):
            with torch.no_grad():  # an "update": every weight moves
                for param in policy.parameters():
                    param.mul_(1.0 + 0.01 * (update + 1))
            seconds.append(vllm.sync_weights(engine_weights(policy)))
            ours = vllm.sample(ids, mask, 1, greedy, tokenizer.stop_ids)
            reference = torch_engine(policy, tokenizer).sample(ids, mask, 1, greedy,
                                                               tokenizer.stop_ids)  # fmt: skip
            equal.append(bool(torch.equal(ours.response_ids.cpu(), reference.response_ids.cpu())))
    finally:
        vllm.close()
    numbers = {"shape": shape, "sync_s": seconds, "greedy_equal": equal}
    detail = (
        f"{shape}: sync {statistics.median(seconds) * 1e3:.0f} ms (median of 3); greedy "
        f"continuations after each update equal the torch sampler's: {equal}"
    )
    return Result("engine-vllm-sync", "PASS" if all(equal) else "FAIL", detail, numbers)


def _sleep(ctx: Any, Result: Any) -> Any:  # noqa: N803 (a class)
    from astrai.models.merged_weights import engine_weights

    policy = _policy("qwen3-0.6b", ctx.device)
    vllm = _vllm(policy, "bf16")
    try:
        torch.cuda.synchronize()
        awake = torch.cuda.mem_get_info()[0]
        vllm.before_update()
        asleep = torch.cuda.mem_get_info()[0]
        seconds = vllm.sync_weights(engine_weights(policy))
        woken = torch.cuda.mem_get_info()[0]
    finally:
        vllm.close()
    freed, taken = (asleep - awake) / 2**30, (asleep - woken) / 2**30
    numbers = {"freed_gib": freed, "taken_back_gib": taken, "wake_and_sync_s": seconds}
    ok = freed > 0.5 and taken > 0.5
    detail = (
        f"Qwen3-0.6B bf16: sleep freed {freed:.2f} GiB, the wake + sync took back {taken:.2f} "
        f"GiB in {seconds:.2f} s"
    )
    return Result("engine-vllm-sleep", "PASS" if ok else "FAIL", detail, numbers)


def _lora(ctx: Any, Result: Any) -> Any:  # noqa: N803 (a class)
    from astrai.config.compose import compose_train_config
    from astrai.training.run import Run

    steps = 3 if ctx.device != "cuda" or ctx.quick else 20
    run_dir = ctx.run_dir("engine-vllm-lora")
    overrides = [
        *ctx.base(), "engine=vllm", *HEADS, "model.lora.rank=8", "model.lora.alpha=16",
        "train_type.optimizer.lr=5e-3", f"trainer.total_steps={steps}",
        f"trainer.eval_every={steps}", "logger.tensorboard=false", "ckpt.every_steps=0",
    ]  # fmt: skip
    trainer = Run(compose_train_config(overrides), run_dir)
    try:
        trainer.fit()
    finally:
        trainer.close()
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    diffs = [r["rollout/logprob_diff_max"] for r in rows if "rollout/logprob_diff_max" in r]
    syncs = [r["perf/weight_sync_s"] for r in rows if "perf/weight_sync_s" in r]
    ok = len(diffs) == steps and max(diffs) < VLLM_BOUND
    numbers = {"steps": steps, "logprob_diff_max": diffs, "sync_s": syncs}
    detail = (
        f"{steps} steps, rank 8: logprob mismatch at most {max(diffs, default=float('nan')):.1e} "
        f"(bound {VLLM_BOUND:g}); merged sync {statistics.median(syncs) * 1e3:.0f} ms (median)"
    )
    return Result("engine-vllm-lora", "PASS" if ok else "FAIL", detail, numbers)


def _lag(ctx: Any, Result: Any) -> Any:  # noqa: N803 (a class)
    from astrai.config.compose import compose_train_config
    from astrai.training.run import Run

    steps = 4 if ctx.quick else 10
    per_step = {}
    for lag in (0, 1):
        overrides = [
            *ctx.base(), f"train_type.max_policy_lag={lag}", f"trainer.total_steps={steps}",
            f"trainer.eval_every={steps}", "logger.tensorboard=false", "ckpt.every_steps=0",
        ]  # fmt: skip
        trainer = Run(compose_train_config(overrides), ctx.run_dir(f"lag{lag}"))
        try:
            trainer.train_step()  # warm-up
            start = time.perf_counter()
            for _ in range(steps - 1):
                trainer.train_step()
            per_step[lag] = (time.perf_counter() - start) / (steps - 1)
        finally:
            trainer.close()
    ratio = per_step[1] / per_step[0]
    numbers = {"s_per_step_lag0": per_step[0], "s_per_step_lag1": per_step[1], "ratio": ratio}
    detail = (
        f"default job, s/step lag 0 {per_step[0]:.3f}, lag 1 {per_step[1]:.3f}: ratio "
        f"{ratio:.3f} (the sampling thread on its own stream)"
    )
    return Result("engine-lag-stream", "PASS", detail, numbers)
