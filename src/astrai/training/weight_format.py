"""What a run's checkpoints hold of its policy, chosen once per run: the full weights, or a LoRA
run's adapters (``model.lora``). Each format is one class with its files, its saved tensors,
its writers and its restore, so checkpointing reads as one path and another adapter kind is
one more class.

- ``FullWeights``: ``model.safetensors`` (tied parameters once, under the reference's names)
  and, once per run, the frozen reference as ``checkpoints/reference.safetensors``.
- ``AdapterWeights``: the adapters in PEFT's format (``adapter_model.safetensors``,
  ``adapter_config.json``), never the base; the reference is the base with its adapters off,
  so no reference file; the record names the base (path, SHA-256), compared on resume.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

from torch import nn

from astrai.checkpoints import io
from astrai.checkpoints.layout import (
    ADAPTER_CONFIG_FILE,
    ADAPTER_FILES,
    ADAPTER_MODEL_FILE,
    ADAPTERS_KEY,
    MODEL_FILE,
    REFERENCE_FILE,
    CheckpointError,
)
from astrai.files import FileWriter, write_file_atomic
from astrai.models.llama import LlamaForCausalLM
from astrai.models.lora import (
    LoraSettings,
    adapter_config,
    adapter_module_names,
    adapter_state_dict,
    read_adapter_weights,
    write_adapter_config,
    write_adapter_weights,
)
from astrai.models.weights import stored_names
from astrai.training.adapters import BaseIdentity, TrainableState
from astrai.training.parallel import full_model_state, load_model_state

Tensors = dict[str, Any]


class WeightFormat(ABC):
    """How one run saves and restores its policy's trained weights (``policy`` sharded over
    the ranks when ``sharded``)."""

    files: tuple[str, ...]  # the files it adds to a checkpoint's listed extra files

    @abstractmethod
    def policy_state(self, policy: LlamaForCausalLM, sharded: bool) -> Tensors:
        """The tensors to save; sharded: a collective every rank joins (rank 0 gets them)."""

    @abstractmethod
    def write_reference(self, reference: nn.Module, checkpoints: Path) -> None:
        """The frozen reference, once per run, beside the step dirs (if this format has one)."""

    @abstractmethod
    def writers(
        self, policy: LlamaForCausalLM, reference: nn.Module, tensors: Tensors
    ) -> dict[str, FileWriter]:
        """File name -> writer of the saved ``tensors`` (``policy_state``'s), on rank 0."""

    @abstractmethod
    def record(self) -> dict[str, Any]:
        """What ``trainer_state.json`` says of it ({} for full weights)."""

    @abstractmethod
    def fingerprint(self) -> dict[str, Any]:
        """What of it must not change across a resume ({} for full weights)."""

    @abstractmethod
    def restore(
        self, policy: LlamaForCausalLM, reference: nn.Module, path: Path, sharded: bool
    ) -> None:
        """Load the saved weights of the checkpoint at ``path`` into ``policy`` (and the
        reference) in place; raises ``CheckpointError`` naming the file."""

    @abstractmethod
    def critic_state(self, critic: nn.Module) -> Any:
        """What a checkpoint saves of the PPO critic (a ``state_dict`` holder)."""


class FullWeights(WeightFormat):
    """Full fine-tuning: every policy weight, and the reference as a file of its own."""

    files = ()

    def policy_state(self, policy: LlamaForCausalLM, sharded: bool) -> Tensors:
        return full_model_state(policy, sharded)

    def write_reference(self, reference: nn.Module, checkpoints: Path) -> None:
        file = checkpoints / REFERENCE_FILE
        if not file.is_file():
            write_file_atomic(file, lambda p: io.save_module(reference, p))

    def writers(
        self, policy: LlamaForCausalLM, reference: nn.Module, tensors: Tensors
    ) -> dict[str, FileWriter]:
        # tied parameters once, named as the (unsharded) reference names them
        kept = set(stored_names(reference))
        tensors = {k: v for k, v in tensors.items() if k in kept}
        return {MODEL_FILE: lambda p: io.save_tensors(tensors, p)}

    def record(self) -> dict[str, Any]:
        return {}

    def fingerprint(self) -> dict[str, Any]:
        return {}

    def restore(
        self, policy: LlamaForCausalLM, reference: nn.Module, path: Path, sharded: bool
    ) -> None:
        io.load_module(reference, path.parent / REFERENCE_FILE)
        if not sharded:
            io.load_module(policy, path / MODEL_FILE)
            return
        tensors = io.load_tensors(path / MODEL_FILE)
        io.check_names(tensors, reference, path / MODEL_FILE)
        load_model_state(policy, tensors, sharded=True)

    def critic_state(self, critic: nn.Module) -> Any:
        return critic


@dataclasses.dataclass(frozen=True)
class AdapterWeights(WeightFormat):
    """A LoRA run: its adapters in PEFT's format, on the base ``base`` (``settings``: the
    adapters' rank, alpha, targets, ...)."""

    settings: LoraSettings
    base: BaseIdentity
    files = ADAPTER_FILES

    def policy_state(self, policy: LlamaForCausalLM, sharded: bool) -> Tensors:
        """Under PEFT's names (``adapter_state_dict``'s)."""
        if not sharded:
            return {k: v.detach().cpu() for k, v in adapter_state_dict(policy).items()}
        names = adapter_module_names(policy)
        full = full_model_state(policy, sharded=True)
        return {peft: full[own] for peft, own in names.items() if own in full}

    def write_reference(self, reference: nn.Module, checkpoints: Path) -> None:
        """None: the reference is the base, with the adapters off."""

    def writers(
        self, policy: LlamaForCausalLM, reference: nn.Module, tensors: Tensors
    ) -> dict[str, FileWriter]:
        config = adapter_config(policy, self.base.path)
        return {
            ADAPTER_CONFIG_FILE: lambda p: write_adapter_config(config, p),
            ADAPTER_MODEL_FILE: lambda p: write_adapter_weights(tensors, p),
        }

    def record(self) -> dict[str, Any]:
        lora = {"lora": dataclasses.asdict(self.settings), "base": self.base.record()}
        return {ADAPTERS_KEY: lora}

    def fingerprint(self) -> dict[str, Any]:
        """Its settings and the base's SHA-256 (another base is refused; its path may move)."""
        lora = dataclasses.asdict(self.settings)
        return {"adapters": {"lora": lora, "base_sha256": self.base.sha256}}

    def restore(
        self, policy: LlamaForCausalLM, reference: nn.Module, path: Path, sharded: bool
    ) -> None:
        """Every adapter of the policy from ``adapter_model.safetensors``, nothing else."""
        file = path / ADAPTER_MODEL_FILE
        tensors = read_adapter_weights(io.load_tensors(file))
        names = adapter_module_names(policy)
        missing, unexpected = sorted(set(names) - set(tensors)), sorted(set(tensors) - set(names))
        if missing or unexpected:
            raise CheckpointError(
                f"{file}: adapters do not match this run's model.lora (missing {missing[:3]}, "
                f"unexpected {unexpected[:3]})"
            )
        own = {names[peft]: tensor for peft, tensor in tensors.items()}
        try:
            load_model_state(policy, own, sharded=sharded)
        except RuntimeError as err:
            raise CheckpointError(f"{file}: adapters do not match the model ({err})") from err

    def critic_state(self, critic: nn.Module) -> Any:
        """Its adapters and value head; the frozen trunk is the base model's."""
        return TrainableState(critic)


def weight_format(settings: LoraSettings | None, base: BaseIdentity | None) -> WeightFormat:
    """The run's format: adapters when ``model.lora`` is set, else the full weights."""
    if settings is None or base is None:
        return FullWeights()
    return AdapterWeights(settings, base)
