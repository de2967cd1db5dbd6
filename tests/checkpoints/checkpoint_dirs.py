"""Helpers for checkpoint tests: complete checkpoint directories written with the real writers
(``astrai.checkpoints.io``) from a tiny model, in milliseconds instead of a training run, and
the damage a copy, a restore or a kill leaves behind."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path
from typing import Any

import torch

from astrai.checkpoints import io
from astrai.models.llama import LlamaConfig, LlamaForCausalLM
from astrai.models.tokenizer import CharTokenizer
from astrai.training.setup import capture_rng_state

_CONFIG = LlamaConfig(
    hidden_size=8,
    intermediate_size=16,
    num_hidden_layers=1,
    num_attention_heads=2,
    num_key_value_heads=1,
)


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


def write_checkpoint(root: Path, step: int, train_type: str = "online_grpo") -> Path:
    """``root/step_<step>/``, complete for ``train_type``, and ``root/reference.safetensors``,
    with the files and the ``trainer_state.json`` fields the trainer writes."""
    torch.manual_seed(0)
    policy = LlamaForCausalLM(_CONFIG)
    optimizer = torch.optim.AdamW(policy.parameters())
    policy(torch.ones(1, 2, dtype=torch.long)).logits.sum().backward()
    optimizer.step()  # a real optimizer state, tensors and all
    root.mkdir(parents=True, exist_ok=True)
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
        "config.yaml": lambda p: p.write_text("trainer:\n  total_steps: 20\n"),
    }
    if train_type == "online_ppo":
        writers["value_model.pt"] = lambda p: io.save_torch(policy.state_dict(), p)
        writers["value_optimizer.pt"] = lambda p: io.save_torch(optimizer.state_dict(), p)
    writers["trainer_state.json"] = lambda p: io.save_json(state, p)
    return io.write_checkpoint(root, step, writers)


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
