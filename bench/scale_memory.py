"""Memory of each phase of an RL step at the shapes researchers bring, measured without a GPU.

astrai's own code of each phase runs under PyTorch's ``FakeTensorMode`` (shapes and dtypes, no
storage) at the published ``config.json`` shapes of Qwen3-0.6B, Llama-3.2-1B and Qwen2.5-1.5B
(written here; nothing is downloaded), and every tensor storage made and still alive is
counted at the phase's peak (``LiveMemory``). Jobs (``Job``): GRPO or PPO, full fine-tuning or
LoRA, ``infra.precision=bf16`` (float32 weights under bfloat16 autocast), the models built by
the trainer's own ``build_reference_and_critic``. Phases:

- ``sample``: the rollout's prompt pass into the KV cache (``shared_prefix._prefill``, each
  distinct prompt once: the group's grouping is given, as ``distinct_prompts`` would find it)
  and one decode step; the cache is allocated for prompt + response at once, so the first step
  is the phase's peak.
- ``evaluate``: the same for ``trainer.eval_prompts`` held-out prompts, one response each.
- ``score``: one scoring pass (reference, π_old) over ``--score-rows`` sequences
  (``train_type.micro_batch_size: null`` scores all of them at once): ``response_logprobs``.
- ``critic`` (PPO): one scoring pass of the critic's values.
- ``update``: one micro-batch, forward (the logprobs and the entropy metric, as the loss
  computes them; PPO: the critic's values too) and backward.

Each phase's peak is printed as what it adds (activations, caches, logits, the update's
gradients) and as the device's peak with the run's persistent state counted
(``persistent_bytes``: weights, AdamW's moments, the reference). The default run prints each
model as GRPO full fine-tuning and as PPO under LoRA rank 16, and exits 1 if a job of
``TARGET_GIB`` (issue 48's acceptance) misses its target.

    .venv/bin/python bench/scale_memory.py                  # the three models, default shape
    .venv/bin/python bench/scale_memory.py --model qwen3-0.6b --algo ppo --lora 0
    .venv/bin/python bench/scale_memory.py --quick          # seconds: checks the script (CI)
    python bench/scale_memory.py --device cuda --quick      # fake vs measured, on a GPU

``--device cuda`` runs each phase twice at the chosen shape: under fake tensors, then for real
on the GPU (random weights), and prints the fake estimate beside ``torch.cuda``'s peak
allocated bytes above the memory held before the phase: the calibration of this bench.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import subprocess
import sys
import time
import warnings
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from types import SimpleNamespace

import torch
from memory import status_kb  # bench/memory.py's reading of /proc/self/status
from model_shapes import MODELS  # bench/model_shapes.py: the published shapes
from torch import Tensor, nn
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map_only
from torch.utils.weak import WeakIdKeyDictionary

import astrai.models.shared_prefix as shared_prefix
from astrai.models.decode import Decoder
from astrai.models.hf_config import llama_config_from_hf
from astrai.models.llama import LlamaForCausalLM, set_gradient_checkpointing
from astrai.models.lora import LoraSettings
from astrai.models.pass_memory import (
    AUTO,
    kv_bytes_per_token,
    rows_per_pass,
    scoring_bytes_per_token,
    token_budget,
    update_bytes_per_token,
)
from astrai.models.precision import autocast, compute_dtype
from astrai.models.scoring import response_logprobs, response_values
from astrai.models.value_model import ValueModel
from astrai.training.adapters import build_reference_and_critic

GIB = 1024**3
MEMORY_MODELS = ("qwen3-0.6b", "llama-3.2-1b", "qwen2.5-1.5b")  # the shapes sized here
PHASES = ("sample", "evaluate", "score", "critic", "update")  # critic: PPO's alone
PRECISION = "bf16"


@dataclass(frozen=True)
class Shape:
    """One job's sizes: ``prompts`` × ``group`` responses of ``response_len`` tokens after
    prompts of ``prompt_len``; the rows one scoring pass and one update micro-batch hold."""

    prompts: int = 64
    group: int = 8
    prompt_len: int = 1024
    response_len: int = 1024
    eval_prompts: int = 200
    score_rows: int | None = None  # None: as train_type.score_tokens: auto allows
    micro_batch: int | None = None  # None: as train_type.update_tokens: auto allows
    checkpointing: bool = False  # model.gradient_checkpointing (off by default)
    layers: int | None = None  # fewer decoder layers than published (--quick)
    device_gib: float = 80.0  # the device memory the auto budgets read (an 80 GB GPU)

    @property
    def rows(self) -> int:
        return self.prompts * self.group


@dataclass(frozen=True)
class Job:
    """What is trained: ``algo`` ``grpo`` (no critic) or ``ppo`` (``critic=value_model``: its
    scoring pass, its trunk beside the policy's in the update); ``lora``: the adapters' rank on
    every linear layer (``model.lora.rank``; the reference is the base, the critic's trunk the
    policy's), None for full fine-tuning."""

    algo: str = "grpo"
    lora: int | None = None

    @property
    def label(self) -> str:
        tuning = "full fine-tuning" if self.lora is None else f"LoRA rank {self.lora}"
        return f"{self.algo.upper()} {tuning}"


@dataclass
class Models:
    """A job's trained models as ``training.adapters.build_reference_and_critic`` builds them:
    the policy (with adapters under LoRA) and the PPO critic (None for GRPO)."""

    policy: LlamaForCausalLM
    critic: ValueModel | None


@dataclass(frozen=True)
class Phase:
    name: str
    rows: int
    tokens: int
    run: Callable[[Models], None]


def build_model(name: str, layers: int | None) -> LlamaForCausalLM:
    """The model ``name`` at its published shape (random init: the values do not matter)."""
    hf = dict(MODELS[name])
    if layers is not None:
        hf["num_hidden_layers"] = layers
    return LlamaForCausalLM(llama_config_from_hf(hf))


@contextlib.contextmanager
def modules_stay_put() -> Iterator[None]:
    """``nn.Module.to`` returns the module as it is while the adapters and the critic are built:
    under ``FakeTensorMode`` torch cannot swap a fake parameter for its moved copy (a weakref is
    held), and PEFT moves every new adapter to its base layer's device and dtype, which every
    module here already has (the CPU, float32)."""
    moved = nn.Module.to
    nn.Module.to = lambda self, *args, **kwargs: self  # type: ignore[method-assign]
    try:
        yield
    finally:
        nn.Module.to = moved  # type: ignore[method-assign]


def build_models(name: str, job: Job, layers: int | None) -> Models:
    """The job's policy and critic at ``name``'s published shape (random init), through the
    trainer's own ``build_reference_and_critic`` (the reference is not kept: its scoring pass
    has the policy's shapes, and its bytes are counted in ``persistent_bytes``)."""
    policy = build_model(name, layers)
    if job.algo == "grpo" and job.lora is None:
        return Models(policy, None)
    critic_node = SimpleNamespace(name="value_model" if job.algo == "ppo" else "none",
                                  warm_start=True)  # fmt: skip
    lora = None if job.lora is None else LoraSettings(rank=job.lora)
    fake = isinstance(policy.lm_head.weight, torch._subclasses.fake_tensor.FakeTensor)
    with modules_stay_put() if fake else contextlib.nullcontext(), warnings.catch_warnings():
        # deepcopy (a full run's reference) asks a fake tensor for its data pointer: a warning
        warnings.filterwarnings("ignore", "Accessing the data pointer of FakeTensor")
        _, critic = build_reference_and_critic(policy, lora, critic_node, False, False)
    return Models(policy, critic)


def _ids(rows: int, length: int, vocab: int, device: torch.device) -> tuple[Tensor, Tensor]:
    ids = torch.randint(0, vocab, (rows, length), device=device)
    return ids, torch.ones(rows, length, dtype=torch.bool, device=device)


@contextlib.contextmanager
def known_grouping(groups: int, group: int) -> Iterator[None]:
    """``distinct_prompts`` answers with the group structure (rows ``g × group .. + group`` share
    a prompt) instead of finding it: ``torch.unique`` has no fake-tensor shape."""
    found = shared_prefix.distinct_prompts

    def grouped(ids: Tensor, mask: Tensor) -> shared_prefix.DistinctPrompts | None:
        if group < 2:
            return None
        inverse = torch.arange(groups, device=ids.device).repeat_interleave(group)
        return shared_prefix.DistinctPrompts(ids[::group], mask[::group], inverse)

    shared_prefix.distinct_prompts = grouped  # type: ignore[assignment]
    try:
        yield
    finally:
        shared_prefix.distinct_prompts = found  # type: ignore[assignment]


@contextlib.contextmanager
def prompts_of_one_length() -> Iterator[None]:
    """``prompts_differ`` answers False (every prompt here is ``prompt_len`` tokens) instead of
    reading the mask, which fake tensors do not hold."""
    found = shared_prefix.prompts_differ
    shared_prefix.prompts_differ = lambda prompt_mask: False  # type: ignore[assignment]
    try:
        yield
    finally:
        shared_prefix.prompts_differ = found  # type: ignore[assignment]


def sampling_chunk_rows(model: LlamaForCausalLM, rows: int, group: int, shape: Shape) -> int:
    """The rows of one sampling chunk at the default ``max_cache_tokens: auto`` on a device of
    ``shape.device_gib`` (``TorchEngine.chunk_rows``' arithmetic)."""
    dtype = compute_dtype(PRECISION, model.lm_head.weight.dtype)
    per_token = kv_bytes_per_token(model.config, dtype)
    budget = token_budget(AUTO, per_token, torch.device("cpu"), int(shape.device_gib * GIB))
    return rows_per_pass(budget, shape.prompt_len + shape.response_len, rows, group)


def scoring_part(model: LlamaForCausalLM, shape: Shape, logits: bool = True) -> int:
    """The rows of one scoring pass (``logits``: a causal LM's; False: the critic's values):
    ``--score-rows``, else the default ``score_tokens: auto`` on a device of
    ``shape.device_gib`` (``models.scoring.scoring_part_rows``' arithmetic)."""
    if shape.score_rows is not None:
        return shape.score_rows
    per_token = scoring_bytes_per_token(model.config, torch.bfloat16, with_logits=logits)
    budget = token_budget(AUTO, per_token, torch.device("cpu"), int(shape.device_gib * GIB))
    return rows_per_pass(budget, shape.prompt_len + shape.response_len, shape.rows, shape.group)


def _decode_first_step(
    model: LlamaForCausalLM, prompts: int, group: int, shape: Shape, device: torch.device
) -> None:
    """One sampling chunk (the rows ``max_cache_tokens: auto`` allows): its prompt pass into a
    cache of prompt + response, then its first step."""
    vocab = model.config.vocab_size
    rows = sampling_chunk_rows(model, prompts * group, group, shape)
    prompts = max(rows // group, 1)
    group = min(group, rows)
    ids, mask = _ids(prompts * group, shape.prompt_len, vocab, device)
    length = shape.prompt_len + shape.response_len
    dtype = compute_dtype(PRECISION, model.lm_head.weight.dtype)
    attention = torch.zeros(ids.shape[0], length, dtype=torch.bool, device=device)
    attention[:, : shape.prompt_len] = mask
    with torch.inference_mode(), autocast(device, PRECISION), known_grouping(prompts, group):
        shared = shared_prefix.distinct_prompts(ids, mask)
        cache, logits = shared_prefix._prefill(model, ids, mask, length, shared, dtype)
        token = logits.float().argmax(-1, keepdim=True)
        attention[:, shape.prompt_len] = True
        if Decoder.applies(model, cache, PRECISION):
            Decoder(model, cache, attention).step(token)
        else:
            model(token, attention_mask=attention[:, : shape.prompt_len + 1], cache=cache)


def _rows(rows: int, shape: Shape, vocab: int, device: torch.device) -> tuple[Tensor, ...]:
    """``rows`` sequences: prompt ids and mask, response ids and mask."""
    return (*_ids(rows, shape.prompt_len, vocab, device),
            *_ids(rows, shape.response_len, vocab, device))  # fmt: skip


def _score(models: Models, shape: Shape, device: torch.device) -> None:
    """One scoring pass of the policy (π_old; the reference's has its shapes)."""
    model = models.policy
    rows = scoring_part(model, shape)
    groups = max(rows // shape.group, 1)
    with torch.no_grad(), autocast(device, PRECISION), known_grouping(groups, shape.group):
        response_logprobs(model, *_rows(rows, shape, model.config.vocab_size, device))


def _critic_score(models: Models, shape: Shape, device: torch.device) -> None:
    """One scoring pass of the PPO critic (the values GAE reads)."""
    assert models.critic is not None
    rows = scoring_part(models.policy, shape, logits=False)
    groups = max(rows // shape.group, 1)
    vocab = models.policy.config.vocab_size
    with torch.no_grad(), autocast(device, PRECISION), known_grouping(groups, shape.group):
        response_values(models.critic, *_rows(rows, shape, vocab, device))


def update_micro_batch(model: LlamaForCausalLM, shape: Shape, critic: bool = False) -> int:
    """The rows of one update micro-batch: ``--micro-batch``, else the default
    ``update_tokens: auto`` on a device of ``shape.device_gib``
    (``models.scoring.update_token_budget``'s arithmetic; ``critic``: PPO's trunk too)."""
    if shape.micro_batch is not None:
        return shape.micro_batch
    per_token = update_bytes_per_token(model.config, torch.bfloat16, shape.checkpointing, critic)
    budget = token_budget(AUTO, per_token, torch.device("cpu"), int(shape.device_gib * GIB))
    minibatch = shape.rows // 4  # train_type.minibatches: 4
    return rows_per_pass(budget, shape.prompt_len + shape.response_len, minibatch)


def _update(models: Models, shape: Shape, device: torch.device) -> None:
    """One update micro-batch: the policy's logprobs and entropy metric (as the loss computes
    them), PPO's critic values, and the backward of both."""
    policy, critic = models.policy, models.critic
    rows = update_micro_batch(policy, shape, critic is not None)
    batch = _rows(rows, shape, policy.config.vocab_size, device)
    trained = [m for m in (policy, critic) if m is not None]
    for model in trained:
        set_gradient_checkpointing(model, shape.checkpointing)
    try:
        with autocast(device, PRECISION), prompts_of_one_length():
            logprobs, _ = response_logprobs(policy, *batch, with_entropy=True, entropy_grad=False)
            loss = logprobs.mean()
            if critic is not None:
                loss = loss + response_values(critic, *batch).mean()
        loss.backward()
    finally:
        for model in trained:
            set_gradient_checkpointing(model, False)


def phases(shape: Shape, device: torch.device, job: Job = Job()) -> list[Phase]:
    """The job's phases in ``PHASES``' order (``critic`` for PPO only)."""
    tokens = shape.prompt_len + shape.response_len
    score_rows = shape.score_rows or shape.rows
    found = [
        Phase(
            "sample",
            shape.rows,
            tokens,
            lambda m: _decode_first_step(m.policy, shape.prompts, shape.group, shape, device),
        ),
        Phase(
            "evaluate",
            shape.eval_prompts,
            tokens,
            lambda m: _decode_first_step(m.policy, shape.eval_prompts, 1, shape, device),
        ),
        Phase("score", score_rows, tokens, lambda m: _score(m, shape, device)),
        Phase("critic", score_rows, tokens, lambda m: _critic_score(m, shape, device)),
        Phase("update", shape.rows // 4, tokens, lambda m: _update(m, shape, device)),
    ]
    return [phase for phase in found if phase.name != "critic" or job.algo == "ppo"]


class LiveMemory(TorchDispatchMode):
    """The bytes of every tensor storage made while it is on and still alive, and their peak:
    what a phase adds above what existed before (the weights). Under fake tensors a storage has
    its size and no memory; a view or an in-place result is the storage it came from. (torch's
    ``MemTracker`` counts the same but refuses a module called twice and a backward.)"""

    def __init__(self) -> None:
        super().__init__()
        self.live = 0
        self.peak = 0
        self._known: WeakIdKeyDictionary = WeakIdKeyDictionary()

    def _free(self, size: int) -> None:
        self.live -= size

    def _track(self, tensor: Tensor) -> None:
        storage = tensor.untyped_storage()
        if storage in self._known:
            return
        size = storage.nbytes()
        self._known[storage] = size
        weakref.finalize(storage, self._free, size)
        self.live += size
        self.peak = max(self.peak, self.live)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        out = func(*args, **(kwargs or {}))
        tree_map_only(Tensor, self._track, out)
        return out


def _phase(shape: Shape, device: torch.device, job: Job, name: str) -> Phase:
    (phase,) = [p for p in phases(shape, device, job) if p.name == name]
    return phase


def fake_peak(model_name: str, shape: Shape, phase: str, job: Job = Job()) -> int:
    """Bytes ``phase`` adds at its peak (everything but the models), under fake tensors."""
    with FakeTensorMode():
        models = build_models(model_name, job, shape.layers)
        run = _phase(shape, torch.device("cpu"), job, phase).run
        with LiveMemory() as memory:
            run(models)
    return memory.peak


def cuda_peak(model_name: str, shape: Shape, phase: str, job: Job = Job()) -> int:
    """Bytes ``phase`` adds at its peak on the GPU: ``max_memory_allocated`` above the memory
    held before it (the models)."""
    device = torch.device("cuda")
    with device:
        models = build_models(model_name, job, shape.layers)
    run = _phase(shape, device, job, phase).run
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    run(models)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - before
    del models, run
    gc.collect()
    torch.cuda.empty_cache()
    return peak


def cpu_peak(model_name: str, shape: Shape, phase: str, job: Job = Job()) -> int:
    """Bytes ``phase`` adds at its peak for real on this CPU, in this process (``--measure``:
    a fresh one): the peak RSS above the RSS before it. Writing 5 to ``/proc/self/clear_refs``
    resets the high-water mark; the phase runs once first at one row (kernels and libraries
    loaded, not counted); ``MALLOC_MMAP_THRESHOLD_`` (set by the parent) makes RSS follow what
    is alive."""
    torch.manual_seed(0)
    models = build_models(model_name, job, shape.layers)
    small = replace(shape, prompts=1, group=min(shape.group, 2), eval_prompts=1, score_rows=None,
                    micro_batch=1)  # fmt: skip
    cpu = torch.device("cpu")
    _phase(small, cpu, job, phase).run(models)
    for model in (models.policy, models.critic):
        if model is not None:
            model.zero_grad(set_to_none=True)
    gc.collect()
    before = status_kb("VmRSS") * 1024
    Path("/proc/self/clear_refs").write_text("5")
    _phase(shape, cpu, job, phase).run(models)
    return status_kb("VmHWM") * 1024 - before


def measured_on_cpu(model_name: str, shape: Shape, phase: str, job: Job = Job()) -> int:
    """``cpu_peak`` in a fresh process (nothing freed before it is reused inside the phase)."""
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
    arguments = [
        "--measure", phase, "--model", model_name, "--prompts", str(shape.prompts),
        "--group", str(shape.group), "--prompt-len", str(shape.prompt_len),
        "--response-len", str(shape.response_len), "--eval-prompts", str(shape.eval_prompts),
        "--micro-batch", str(shape.micro_batch or 0), "--layers", str(shape.layers or 0),
        *(["--checkpointing"] if shape.checkpointing else []),
        "--device-gib", str(shape.device_gib), "--algo", job.algo, "--lora", str(job.lora or 0),
        *(["--score-rows", str(shape.score_rows)] if shape.score_rows else []),
    ]  # fmt: skip
    done = subprocess.run(
        [sys.executable, __file__, *arguments], env=env, capture_output=True, text=True,
        check=True,
    )  # fmt: skip
    return int(done.stdout.split()[-1])


def persistent_bytes(model_name: str, job: Job, layers: int | None) -> int:
    """The run's state at every phase: the policy's and the critic's weights (a LoRA critic's
    trunk is the policy's: counted once), AdamW's two moments of what is trained, and the
    reference, a float32 copy of the policy under full fine-tuning (under LoRA the base with the
    adapters off: nothing more). The gradients are made by the update's backward, so its
    ``fake_peak`` counts them (float32, as ``.grad`` holds them)."""
    with FakeTensorMode():
        models = build_models(model_name, job, layers)
        trained = [m for m in (models.policy, models.critic) if m is not None]
        unique = {id(p): p for model in trained for p in model.parameters()}
        weights = sum(p.numel() * p.element_size() for p in unique.values())
        trained_bytes = sum(
            p.numel() * p.element_size() for p in unique.values() if p.requires_grad
        )
        policy = sum(p.numel() * p.element_size() for p in models.policy.parameters())
    reference = policy if job.lora is None else 0
    return weights + 2 * trained_bytes + reference


def pass_rows(model_name: str, shape: Shape, job: Job) -> dict[str, int]:
    """The rows one pass of each phase holds at the default budgets."""
    with FakeTensorMode():
        model = build_model(model_name, shape.layers)
        return {
            "sample": sampling_chunk_rows(model, shape.rows, shape.group, shape),
            "evaluate": sampling_chunk_rows(model, shape.eval_prompts, 1, shape),
            "score": scoring_part(model, shape),
            "critic": scoring_part(model, shape, logits=False),
            "update": update_micro_batch(model, shape, job.algo == "ppo"),
        }


# the acceptance of issue 48: each job's peak with its state, on an 80 GB GPU
TARGET_GIB = {
    ("qwen3-0.6b", Job()): 40,
    ("llama-3.2-1b", Job()): 60,
    ("qwen2.5-1.5b", Job("ppo", 16)): 40,
}


def report(
    model_name: str, shape: Shape, device: str, job: Job, only: list[str] | None = None
) -> tuple[list[str], float]:
    """The job's table, and its highest peak in GiB (the state counted)."""
    lines = [f"{model_name} ({PRECISION}, {job.label})"]
    header = f"  {'phase':<9}{'pass rows of all':>18} x tokens{'adds GiB':>11}{'peak GiB':>11}"
    measuring = device in ("cuda", "cpu-real")
    state = persistent_bytes(model_name, job, shape.layers)
    rows = pass_rows(model_name, shape, job)
    lines.append(header + ("   measured adds GiB (fake/measured)" if measuring else ""))
    highest = 0.0
    for phase in phases(shape, torch.device("cpu"), job):
        if only and phase.name not in only:
            continue
        start = time.perf_counter()
        adds = fake_peak(model_name, shape, phase.name, job)
        peak = adds + state
        highest = max(highest, peak / GIB)
        row = f"  {phase.name:<9}{f'{rows[phase.name]} of {phase.rows}':>18} x {phase.tokens:<6}"
        row += f"{adds / GIB:>11.2f}{peak / GIB:>11.2f}"
        if measuring:
            measure = cuda_peak if device == "cuda" else measured_on_cpu
            measured = measure(model_name, shape, phase.name, job)
            row += f"   {measured / GIB:.3f} ({adds / max(measured, 1):.3f})"
        lines.append(row + f"   [{time.perf_counter() - start:.1f} s]")
    target = TARGET_GIB.get((model_name, job))
    if target is not None and shape == Shape():
        verdict = "within" if highest <= target else "OVER"
        lines.append(f"  highest peak {highest:.2f} GiB: {verdict} the {target} GiB target")
    return lines, highest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", choices=[*MEMORY_MODELS, "all"], default="all")
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--prompt-len", type=int, default=1024)
    parser.add_argument("--response-len", type=int, default=1024)
    parser.add_argument("--eval-prompts", type=int, default=200)
    parser.add_argument("--score-rows", type=int, help="sequences per scoring pass (all)")
    parser.add_argument(
        "--micro-batch", type=int, default=0, help="update rows (0: as update_tokens: auto)"
    )
    parser.add_argument("--checkpointing", action="store_true", help="gradient checkpointing")
    parser.add_argument("--layers", type=int, default=0, help="decoder layers (0: published)")
    parser.add_argument(
        "--device-gib", type=float, default=80.0, help="the memory auto budgets read (GiB)"
    )
    parser.add_argument("--phases", nargs="+", choices=PHASES, help="only these phases")
    parser.add_argument(
        "--device", choices=("cpu", "cuda", "cpu-real"), default="cpu",
        help="cuda / cpu-real: each phase also for real, its measured peak beside the estimate",
    )  # fmt: skip
    parser.add_argument("--algo", choices=("grpo", "ppo"), help="only this algorithm")
    parser.add_argument("--lora", type=int, help="only this LoRA rank (0: full fine-tuning)")
    parser.add_argument("--quick", action="store_true", help="a small shape, one model (CI)")
    parser.add_argument("--measure", choices=PHASES, help=argparse.SUPPRESS)  # cpu_peak's child
    args = parser.parse_args(argv)
    shape = Shape(
        args.prompts, args.group, args.prompt_len, args.response_len, args.eval_prompts,
        args.score_rows, args.micro_batch or None, layers=args.layers or None,
        checkpointing=args.checkpointing, device_gib=args.device_gib,
    )  # fmt: skip
    if args.measure is not None:
        print(cpu_peak(args.model, shape, args.measure, Job(args.algo, args.lora or None)))
        return 0
    names = list(MEMORY_MODELS) if args.model == "all" else [args.model]
    # default: each model as GRPO full fine-tuning and as PPO with its critic under LoRA rank 16
    jobs = [Job(), Job("ppo", 16)]
    if args.algo is not None or args.lora is not None:
        jobs = [Job(args.algo or "grpo", args.lora or None)]
    if args.quick:  # published widths and vocabulary, 2 layers, a small job
        shape = Shape(
            8, 4, 64, 64, 8, None, 4, layers=None if args.device == "cuda" else 2,
            device_gib=args.device_gib,
        )  # fmt: skip
        names = names[:1]
    if args.device == "cuda" and not torch.cuda.is_available():
        print("scale_memory: --device cuda needs a CUDA device", file=sys.stderr)
        return 2
    print(
        f"{shape.prompts} prompts x {shape.group} x ({shape.prompt_len} + {shape.response_len}) "
        f"tokens; evaluation {shape.eval_prompts} prompts; scoring "
        f"{shape.score_rows or 'score_tokens: auto'} rows a pass; update micro-batch "
        f"{shape.micro_batch or 'update_tokens: auto'}"
        f"{', gradient checkpointing' if shape.checkpointing else ''}; auto budgets for a "
        f"{shape.device_gib:g} GiB device"
    )
    over = []
    for name in names:
        for job in jobs:
            lines, highest = report(name, shape, args.device, job, args.phases)
            print("\n".join(lines), flush=True)
            target = TARGET_GIB.get((name, job))
            if target is not None and shape == Shape() and highest > target:
                over.append(f"{name} {job.label}")
    if over:
        print(f"scale_memory: over the target: {', '.join(over)}", file=sys.stderr)
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
