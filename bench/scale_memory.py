"""Memory of each phase of an RL step at the shapes researchers bring, measured without a GPU.

astrai's own code of each phase runs under PyTorch's ``FakeTensorMode`` (shapes and dtypes, no
storage) at the published ``config.json`` shapes of Qwen3-0.6B, Llama-3.2-1B and Qwen2.5-1.5B
(written here; nothing is downloaded), and every tensor storage made and still alive is
counted at the phase's peak (``LiveMemory``). Phases (GRPO, full fine-tuning,
``infra.precision=bf16``: float32 weights under bfloat16 autocast):

- ``sample``: the rollout's prompt pass into the KV cache (``shared_prefix._prefill``, each
  distinct prompt once: the group's grouping is given, as ``distinct_prompts`` would find it)
  and one decode step; the cache is allocated for prompt + response at once, so the first step
  is the phase's peak.
- ``evaluate``: the same for ``trainer.eval_prompts`` held-out prompts, one response each.
- ``score``: one scoring pass (reference, π_old) over ``--score-rows`` sequences
  (``train_type.micro_batch_size: null`` scores all of them at once): ``response_logprobs``.
- ``update``: one micro-batch of ``--micro-batch`` sequences, forward (the logprobs and the
  entropy metric, as the loss computes them) and backward, gradient checkpointing on.

Each phase's peak is printed as what it adds (activations, caches, logits) and as the device's
peak with the run's persistent state counted: the policy's float32 weights, their gradients
(the update) and AdamW's two moments, and the frozen reference (a float32 copy).

    .venv/bin/python bench/scale_memory.py                  # the three models, default shape
    .venv/bin/python bench/scale_memory.py --model qwen3-0.6b --score-rows 64
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
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from memory import status_kb  # bench/memory.py's reading of /proc/self/status
from torch import Tensor
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map_only
from torch.utils.weak import WeakIdKeyDictionary

import astrai.models.shared_prefix as shared_prefix
from astrai.models.decode import Decoder
from astrai.models.hf_config import llama_config_from_hf
from astrai.models.llama import LlamaForCausalLM, set_gradient_checkpointing
from astrai.models.pass_memory import (
    AUTO,
    kv_bytes_per_token,
    rows_per_pass,
    scoring_bytes_per_token,
    token_budget,
    update_bytes_per_token,
)
from astrai.models.precision import autocast, compute_dtype
from astrai.rollout.scoring import response_logprobs

GIB = 1024**3
PHASES = ("sample", "evaluate", "score", "update")
PRECISION = "bf16"
_COMMON = {"attention_dropout": 0.0, "hidden_act": "silu", "tie_word_embeddings": True}
MODELS: dict[str, dict[str, Any]] = {  # the published config.json values astrai reads
    "qwen3-0.6b": {
        **_COMMON,
        "model_type": "qwen3",
        "vocab_size": 151936,
        "hidden_size": 1024,
        "intermediate_size": 3072,
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "max_position_embeddings": 40960,
        "rms_norm_eps": 1e-06,
        "rope_theta": 1000000,
        "attention_bias": False,
    },
    "llama-3.2-1b": {
        **_COMMON,
        "model_type": "llama",
        "vocab_size": 128256,
        "hidden_size": 2048,
        "intermediate_size": 8192,
        "num_hidden_layers": 16,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 64,
        "max_position_embeddings": 131072,
        "rms_norm_eps": 1e-05,
        "rope_theta": 500000.0,
        "rope_scaling": {
            "factor": 32.0,
            "high_freq_factor": 4.0,
            "low_freq_factor": 1.0,
            "original_max_position_embeddings": 8192,
            "rope_type": "llama3",
        },
        "attention_bias": False,
        "mlp_bias": False,
    },
    "qwen2.5-1.5b": {
        **_COMMON,
        "model_type": "qwen2",
        "vocab_size": 151936,
        "hidden_size": 1536,
        "intermediate_size": 8960,
        "num_hidden_layers": 28,
        "num_attention_heads": 12,
        "num_key_value_heads": 2,
        "max_position_embeddings": 131072,
        "rms_norm_eps": 1e-06,
        "rope_theta": 1000000.0,
        "use_sliding_window": False,
    },
}


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
class Phase:
    name: str
    rows: int
    tokens: int
    run: Callable[[LlamaForCausalLM], None]
    grads: bool = False  # the phase holds the weights' gradients


def build_model(name: str, layers: int | None) -> LlamaForCausalLM:
    """The model ``name`` at its published shape (random init: the values do not matter)."""
    hf = dict(MODELS[name])
    if layers is not None:
        hf["num_hidden_layers"] = layers
    return LlamaForCausalLM(llama_config_from_hf(hf))


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


def scoring_part(model: LlamaForCausalLM, shape: Shape) -> int:
    """The rows of one scoring pass: ``--score-rows``, else the default ``score_tokens: auto``
    on a device of ``shape.device_gib`` (``rollout.scoring.scoring_part_rows``' arithmetic)."""
    if shape.score_rows is not None:
        return shape.score_rows
    per_token = scoring_bytes_per_token(model.config, torch.bfloat16, with_logits=True)
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


def _score(model: LlamaForCausalLM, shape: Shape, device: torch.device) -> None:
    rows = scoring_part(model, shape)
    groups = max(rows // shape.group, 1)
    vocab = model.config.vocab_size
    prompt_ids, prompt_mask = _ids(rows, shape.prompt_len, vocab, device)
    response_ids, response_mask = _ids(rows, shape.response_len, vocab, device)
    with torch.no_grad(), autocast(device, PRECISION), known_grouping(groups, shape.group):
        response_logprobs(model, prompt_ids, prompt_mask, response_ids, response_mask)


def update_micro_batch(model: LlamaForCausalLM, shape: Shape) -> int:
    """The rows of one update micro-batch: ``--micro-batch``, else the default
    ``update_tokens: auto`` on a device of ``shape.device_gib``
    (``rollout.scoring.update_token_budget``'s arithmetic; GRPO: no critic)."""
    if shape.micro_batch is not None:
        return shape.micro_batch
    per_token = update_bytes_per_token(model.config, torch.bfloat16, shape.checkpointing, False)
    budget = token_budget(AUTO, per_token, torch.device("cpu"), int(shape.device_gib * GIB))
    minibatch = shape.rows // 4  # train_type.minibatches: 4
    return rows_per_pass(budget, shape.prompt_len + shape.response_len, minibatch)


def _update(model: LlamaForCausalLM, shape: Shape, device: torch.device) -> None:
    vocab = model.config.vocab_size
    rows = update_micro_batch(model, shape)
    prompt_ids, prompt_mask = _ids(rows, shape.prompt_len, vocab, device)
    response_ids, response_mask = _ids(rows, shape.response_len, vocab, device)
    set_gradient_checkpointing(model, shape.checkpointing)
    try:
        with autocast(device, PRECISION), prompts_of_one_length():
            logprobs, _ = response_logprobs(
                model, prompt_ids, prompt_mask, response_ids, response_mask,
                with_entropy=True, entropy_grad=False,
            )  # fmt: skip
        logprobs.mean().backward()
    finally:
        set_gradient_checkpointing(model, False)


def phases(shape: Shape, device: torch.device) -> list[Phase]:
    tokens = shape.prompt_len + shape.response_len
    return [
        Phase(
            "sample",
            shape.rows,
            tokens,
            lambda m: _decode_first_step(m, shape.prompts, shape.group, shape, device),
        ),
        Phase(
            "evaluate",
            shape.eval_prompts,
            tokens,
            lambda m: _decode_first_step(m, shape.eval_prompts, 1, shape, device),
        ),
        Phase("score", shape.score_rows or shape.rows, tokens, lambda m: _score(m, shape, device)),
        Phase("update", shape.rows // 4, tokens, lambda m: _update(m, shape, device), True),
    ]


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


def fake_peak(model_name: str, shape: Shape, phase_index: int) -> int:
    """Bytes the phase adds at its peak (everything but the weights), under fake tensors."""
    with FakeTensorMode():
        model = build_model(model_name, shape.layers)
        phase = phases(shape, torch.device("cpu"))[phase_index]
        with LiveMemory() as memory:
            phase.run(model)
    return memory.peak


def cuda_peak(model_name: str, shape: Shape, phase_index: int) -> int:
    """Bytes the phase adds at its peak on the GPU: ``max_memory_allocated`` above the memory
    held before it (the weights)."""
    device = torch.device("cuda")
    model = build_model(model_name, shape.layers).to(device)
    phase = phases(shape, device)[phase_index]
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    phase.run(model)
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - before
    del model
    gc.collect()
    torch.cuda.empty_cache()
    return peak


def cpu_peak(model_name: str, shape: Shape, phase_index: int) -> int:
    """Bytes the phase adds at its peak for real on this CPU, in this process (``--measure``:
    a fresh one): the peak RSS above the RSS before it. Writing 5 to ``/proc/self/clear_refs``
    resets the high-water mark; the phase runs once first at one row (kernels and libraries
    loaded, not counted); ``MALLOC_MMAP_THRESHOLD_`` (set by the parent) makes RSS follow what
    is alive."""
    torch.manual_seed(0)
    model = build_model(model_name, shape.layers)
    small = replace(shape, prompts=1, group=min(shape.group, 2), eval_prompts=1, score_rows=None,
                    micro_batch=1)  # fmt: skip
    phases(small, torch.device("cpu"))[phase_index].run(model)
    model.zero_grad(set_to_none=True)
    gc.collect()
    before = status_kb("VmRSS") * 1024
    Path("/proc/self/clear_refs").write_text("5")
    phases(shape, torch.device("cpu"))[phase_index].run(model)
    return status_kb("VmHWM") * 1024 - before


def measured_on_cpu(model_name: str, shape: Shape, phase_index: int) -> int:
    """``cpu_peak`` in a fresh process (nothing freed before it is reused inside the phase)."""
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}
    arguments = [
        "--measure", str(phase_index), "--model", model_name, "--prompts", str(shape.prompts),
        "--group", str(shape.group), "--prompt-len", str(shape.prompt_len),
        "--response-len", str(shape.response_len), "--eval-prompts", str(shape.eval_prompts),
        "--micro-batch", str(shape.micro_batch or 0), "--layers", str(shape.layers or 0),
        *(["--checkpointing"] if shape.checkpointing else []),
        "--device-gib", str(shape.device_gib),
        *(["--score-rows", str(shape.score_rows)] if shape.score_rows else []),
    ]  # fmt: skip
    done = subprocess.run(
        [sys.executable, __file__, *arguments], env=env, capture_output=True, text=True,
        check=True,
    )  # fmt: skip
    return int(done.stdout.split()[-1])


def parameter_count(model_name: str, layers: int | None) -> int:
    with FakeTensorMode():
        return sum(p.numel() for p in build_model(model_name, layers).parameters())


def persistent_bytes(parameters: int, grads: bool) -> int:
    """The run's state at every phase: float32 weights, AdamW's two moments and the float32
    reference; the gradients too in the update."""
    copies = 4 + (1 if grads else 0)  # weights, 2 moments, reference (+ gradients)
    return parameters * 4 * copies


def pass_rows(model_name: str, shape: Shape) -> dict[str, int]:
    """The rows one pass of each phase holds at the default budgets."""
    with FakeTensorMode():
        model = build_model(model_name, shape.layers)
        return {
            "sample": sampling_chunk_rows(model, shape.rows, shape.group, shape),
            "evaluate": sampling_chunk_rows(model, shape.eval_prompts, 1, shape),
            "score": scoring_part(model, shape),
            "update": update_micro_batch(model, shape),
        }


def report(model_name: str, shape: Shape, device: str, only: list[str] | None = None) -> list[str]:
    lines = [f"{model_name} ({PRECISION}, GRPO full fine-tuning)"]
    header = f"  {'phase':<9}{'pass rows of all':>18} x tokens{'adds GiB':>11}{'peak GiB':>11}"
    measuring = device in ("cuda", "cpu-real")
    parameters = parameter_count(model_name, shape.layers)
    rows = pass_rows(model_name, shape)
    lines.append(header + ("   measured adds GiB (fake/measured)" if measuring else ""))
    for index, phase in enumerate(phases(shape, torch.device("cpu"))):
        if only and phase.name not in only:
            continue
        start = time.perf_counter()
        adds = fake_peak(model_name, shape, index)
        peak = adds + persistent_bytes(parameters, phase.grads)
        row = f"  {phase.name:<9}{f'{rows[phase.name]} of {phase.rows}':>18} x {phase.tokens:<6}"
        row += f"{adds / GIB:>11.2f}{peak / GIB:>11.2f}"
        if measuring:
            measure = cuda_peak if device == "cuda" else measured_on_cpu
            measured = measure(model_name, shape, index)
            row += f"   {measured / GIB:.3f} ({adds / max(measured, 1):.3f})"
        lines.append(row + f"   [{time.perf_counter() - start:.1f} s]")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", choices=[*MODELS, "all"], default="all")
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
    parser.add_argument("--quick", action="store_true", help="a small shape, one model (CI)")
    parser.add_argument("--measure", type=int, help=argparse.SUPPRESS)  # cpu_peak's child
    args = parser.parse_args(argv)
    shape = Shape(
        args.prompts, args.group, args.prompt_len, args.response_len, args.eval_prompts,
        args.score_rows, args.micro_batch or None, layers=args.layers or None,
        checkpointing=args.checkpointing, device_gib=args.device_gib,
    )  # fmt: skip
    if args.measure is not None:
        print(cpu_peak(args.model, shape, args.measure))
        return 0
    names = list(MODELS) if args.model == "all" else [args.model]
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
    for name in names:
        print("\n".join(report(name, shape, args.device, args.phases)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
