"""Helpers for checkpoint tests: complete checkpoint directories written with the real writers
(``astrai.checkpoints.io``) from a tiny model, in milliseconds instead of a training run, and
the damage a copy, a restore or a kill leaves behind."""

from __future__ import annotations

import dataclasses
import json
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch

from astrai.algorithms.grpo import GRPOStrategy
from astrai.algorithms.ppo import PPOStrategy
from astrai.algorithms.strategy import Strategy
from astrai.checkpoints import io
from astrai.files import FileWriter
from astrai.models.llama import LlamaConfig, LlamaForCausalLM
from astrai.models.lora import base_fingerprint
from astrai.models.pretrained import save_policy_dir
from astrai.models.tokenizer import CharTokenizer
from astrai.rollout.rollout import Rollout
from astrai.training.sampling.in_flight import SampledBatch, batch_record
from astrai.training.setup import capture_rng_state

_CONFIG = LlamaConfig(
    hidden_size=8,
    intermediate_size=16,
    num_hidden_layers=1,
    num_attention_heads=2,
    num_key_value_heads=1,
)


def strategy_named(train_type: str) -> type[Strategy]:
    """The shipped strategy whose checkpoints record ``train_type`` (``Strategy.name``)."""
    return {cls.name: cls for cls in (GRPOStrategy, PPOStrategy)}[train_type]


def fingerprint(train_type: str) -> dict[str, Any]:
    return {
        "train_type": train_type,
        "model": dataclasses.asdict(_CONFIG),
        "task": {"_target_": "astrai.tasks.arithmetic.AdditionTask"},
        "seed": 0,
        "world_size": 1,
        "parallel": "ddp",
        "device": "cpu",
    }


def write_checkpoint(
    root: Path,
    step: int,
    train_type: str = "online_grpo",
    extra: Mapping[str, FileWriter] | None = None,
    state_changes: Mapping[str, Any] | None = None,
    adapters: bool = False,
) -> Path:
    """``root/step_<step>/``, complete for ``train_type``, and ``root/reference.safetensors``,
    with the files and the ``trainer_state.json`` fields the trainer writes; ``extra`` files
    and ``state_changes`` on top; ``adapters``: a LoRA run's (no ``model.safetensors``, no
    reference file)."""
    torch.manual_seed(0)
    policy = LlamaForCausalLM(_CONFIG)
    optimizer = torch.optim.AdamW(policy.parameters())
    policy(torch.ones(1, 2, dtype=torch.long)).logits.sum().backward()
    optimizer.step()  # a real optimizer state, tensors and all
    root.mkdir(parents=True, exist_ok=True)
    if not adapters:
        io.save_module(policy, root / "reference.safetensors")
    rng = capture_rng_state({})
    state = {
        "format_version": 1,
        "train_type": train_type,
        "step": step,
        "total_steps": 20,
        "fingerprint": fingerprint(train_type),
        "data_position": step,
        "samples_seen": step * 4,
        "policy_version": step,
        "initial_metrics": {"eval/accuracy": 0.0},
        "eval_pending": False,
        "world_size": 1,
        "parallel": "ddp",
        "rng": rng,
        "rng_per_rank": [rng],
    }
    writers = {
        "model.safetensors": lambda p: io.save_module(policy, p),
        "config.json": lambda p: io.save_json(dataclasses.asdict(_CONFIG), p),
        "tokenizer.json": lambda p: CharTokenizer().save(p.parent),
        "optimizer.pt": lambda p: io.save_torch(optimizer.state_dict(), p),
        "scheduler.pt": lambda p: io.save_torch({"last_epoch": step}, p),
        "config.yaml": lambda p: p.write_text(RUN_CONFIG),
    }
    if train_type == "online_ppo":
        writers["value_model.pt"] = lambda p: io.save_torch(policy.state_dict(), p)
        writers["value_optimizer.pt"] = lambda p: io.save_torch(optimizer.state_dict(), p)
    writers.update(extra or {})
    if adapters:
        del writers["model.safetensors"]
    state.update(state_changes or {})
    writers["trainer_state.json"] = lambda p: io.save_json(state, p)
    return io.write_checkpoint(root, step, writers)


# --- checkpoints with in-flight rollouts and LoRA adapters (issue 45) ------------------------

RUN_CONFIG = "trainer:\n  total_steps: 20\ntrain_type:\n  prompts_per_step: 2\n  group_size: 2\n"
PROMPTS, GROUP, PROMPT_LEN, RESPONSE_LEN = 2, 2, 3, 4  # RUN_CONFIG's batch: B, G; P, R


def in_flight_rollout(version: int) -> Rollout:
    """A sampled, scored rollout of ``RUN_CONFIG``'s shape, as the sampling thread leaves it."""
    torch.manual_seed(1)
    bg, bgr = (PROMPTS, GROUP), (PROMPTS, GROUP, RESPONSE_LEN)
    response_mask = torch.ones(bgr, dtype=torch.bool)
    response_mask[..., -1] = False  # right padding
    return Rollout(
        prompt_ids=torch.randint(3, 40, (PROMPTS, PROMPT_LEN)),
        prompt_mask=torch.ones(PROMPTS, PROMPT_LEN, dtype=torch.bool),
        response_ids=torch.randint(3, 40, bgr),
        response_mask=response_mask,
        logprobs=-torch.rand(bgr).masked_fill(~response_mask, 0.0),
        rewards=torch.rand(bg),
        policy_version=version,
        prompts=["1+1=", "2+2="],
        responses=[["2", "3"], ["4", "5"]],
        reward_terms={"correct": torch.rand(bg)},
        sample_versions=torch.full(bg, version, dtype=torch.long),
    )


def write_lag_checkpoint(root: Path, step: int) -> Path:
    """A checkpoint of a ``max_policy_lag=1`` run: step ``step + 1``'s rollout in flight."""
    record = batch_record(SampledBatch(step + 1, in_flight_rollout(step), {"x": 1.0}, 0.5))
    return write_checkpoint(
        root,
        step,
        extra={"in_flight.pt": lambda p: io.save_torch({"per_rank": [[record]]}, p)},
        state_changes={"in_flight": 1, "extra_files": ["in_flight.pt"], "format_version": 2},
    )


LORA = {
    "rank": 4,
    "alpha": 8.0,
    "dropout": 0.0,
    "target_modules": "all-linear",
    "use_rslora": False,
    "use_dora": False,
}


def write_base(directory: Path, seed: int) -> str:
    """A tiny Hugging Face model directory at ``directory`` (replacing one there); returns
    its weights' SHA-256 (``base_fingerprint``)."""
    torch.manual_seed(seed)
    model = LlamaForCausalLM(_CONFIG)
    if directory.exists():
        shutil.rmtree(directory)
    directory.mkdir(parents=True)
    save_policy_dir(model, CharTokenizer(), directory)
    return base_fingerprint(model)


def write_lora_checkpoint(root: Path, step: int, base: Path) -> Path:
    """A LoRA run's checkpoint of adapters on the base model at ``base`` (written here)."""
    sha = write_base(base, seed=0)
    adapter_config = {
        "r": LORA["rank"],
        "lora_alpha": LORA["alpha"],
        "lora_dropout": LORA["dropout"],
        "use_rslora": False,
        "use_dora": False,
        "target_modules": ["down_proj", "gate_proj", "k_proj", "o_proj", "q_proj", "up_proj"],
        "base_model_name_or_path": str(base),
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
    }
    name = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"
    tensors = {name: torch.zeros(LORA["rank"], _CONFIG.hidden_size)}
    record = {"lora": LORA, "base": {"path": str(base), "sha256": sha}}
    return write_checkpoint(
        root,
        step,
        extra={
            "adapter_config.json": lambda p: io.save_json(adapter_config, p),
            "adapter_model.safetensors": lambda p: io.save_tensors(tensors, p),
        },
        state_changes={
            "format_version": 2,
            "adapters": record,
            "fingerprint": {
                **fingerprint("online_grpo"),
                "adapters": {"lora": LORA, "base_sha256": sha},
            },
            "extra_files": ["adapter_config.json", "adapter_model.safetensors"],
        },
        adapters=True,
    )


def copy_run(template: Path, run_dir: Path) -> Path:
    """A copy of the run dir ``template``; returns its ``checkpoints/`` folder."""
    shutil.copytree(template, run_dir)
    return run_dir / "checkpoints"


def edit_state(step_dir: Path, **changes: Any) -> None:
    """Rewrite ``trainer_state.json``: set each key of ``changes`` (``...`` deletes it)."""
    path = step_dir / "trainer_state.json"
    state = json.loads(path.read_text())
    for key, value in changes.items():
        if value is ...:
            del state[key]
        else:
            state[key] = value
    path.write_text(json.dumps(state))


def truncate(path: Path, keep: float = 0.5) -> None:
    """Cut ``path`` to ``keep`` of its bytes, as an interrupted copy leaves it."""
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


def edit_in_flight(step_dir: Path, edit: Callable[[Any], Any]) -> None:
    """Rewrite ``in_flight.pt``: ``edit(loaded)`` changes the loaded object in place or returns
    the object to save instead (None: the edited one)."""
    path = step_dir / "in_flight.pt"
    loaded = io.load_torch(path)
    replaced = edit(loaded)
    io.save_torch(loaded if replaced is None else replaced, path)


def edit_rollout(step_dir: Path, edit: Callable[[dict[str, Any]], Any]) -> None:
    """``edit`` the first in-flight record of rank 0 (``{"step", "rollout", ...}``) in place."""

    def edit_first(loaded: Any) -> None:
        edit(loaded["per_rank"][0][0])

    edit_in_flight(step_dir, edit_first)


def edit_json(path: Path, **changes: Any) -> None:
    """Rewrite the JSON object at ``path``: set each key of ``changes``."""
    payload = json.loads(path.read_text())
    payload.update(changes)
    path.write_text(json.dumps(payload))
