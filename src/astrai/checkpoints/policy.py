"""Open a trained policy for inference or export: from a training checkpoint, a run dir (its
latest checkpoint) or a Hugging Face model directory.

A training checkpoint stores astrai's own ``config.json`` (``LlamaConfig`` fields), the policy
weights under Hugging Face names, the tokenizer file(s) and, for PPO, ``value_model.pt``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import yaml

from astrai.checkpoints import io
from astrai.checkpoints.completeness import latest_complete, scan_checkpoints
from astrai.checkpoints.identity import adapter_config_problem, check_same_base
from astrai.checkpoints.layout import (
    ADAPTER_MODEL_FILE,
    ADAPTERS_KEY,
    MODEL_CONFIG_FILE,
    MODEL_FILE,
    RUN_CONFIG_FILE,
    TRAINER_STATE_FILE,
    VALUE_MODEL_FILE,
    CheckpointError,
    parse_step,
)
from astrai.models.llama import LlamaConfig, LlamaForCausalLM
from astrai.models.lora import (
    LoraConfigError,
    LoraSettings,
    adapter_parameters,
    apply_lora,
    base_fingerprint,
    load_adapter_state_dict,
    merge_in_place,
    read_adapter_weights,
)
from astrai.models.pretrained import (
    check_tokenizer_fits,
    is_hf_model_dir,
    load_pretrained_policy,
    read_hf_config,
)
from astrai.models.saved_tokenizer import load_tokenizer
from astrai.models.tokenizer import Tokenizer
from astrai.models.value_model import ValueModel, build_value_model


@dataclass
class LoadedPolicy:
    """A policy ready to sample, with its tokenizer; ``critic`` only from PPO checkpoints."""

    policy: LlamaForCausalLM
    tokenizer: Tokenizer
    source: Path
    critic: ValueModel | None = None


def resolve_checkpoint(path: str | Path) -> Path:
    """A ``step_<N>`` directory as given (its loaders name any missing file), or the latest
    *complete* checkpoint of a run dir (``completeness``, as resume picks it)."""
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"no checkpoint or model directory at {path}")
    if (path / TRAINER_STATE_FILE).is_file() or parse_step(path.name) is not None:
        return path
    statuses = scan_checkpoints(path)
    latest = latest_complete(statuses)
    if latest is not None:
        return latest.path
    if statuses:
        newest = statuses[-1]
        raise CheckpointError(
            f"{path}: no complete checkpoint ({len(statuses)} incomplete; the newest, "
            f"{newest.info.path.name}: {newest.describe()})"
        )
    raise CheckpointError(
        f"{path}: neither a checkpoint (no {TRAINER_STATE_FILE}), a run dir with "
        f"checkpoints, nor a Hugging Face model directory (no config.json with model_type)"
    )


def _run_chat_template(checkpoint: Path) -> tuple[bool, dict]:
    """``model.chat_template`` and ``model.chat_template_kwargs`` of the run that wrote
    ``checkpoint`` (True and {} when unrecorded)."""
    try:
        model = yaml.safe_load((checkpoint / RUN_CONFIG_FILE).read_text())["model"]
        return bool(model.get("chat_template", True)), dict(model.get("chat_template_kwargs") or {})
    except (OSError, KeyError, TypeError, AttributeError, ValueError, yaml.YAMLError):
        return True, {}


def _checkpoint_config(checkpoint: Path) -> LlamaConfig:
    fields = io.load_json(checkpoint / MODEL_CONFIG_FILE)
    try:
        return LlamaConfig(**fields)
    except (TypeError, ValueError) as err:
        raise CheckpointError(f"{checkpoint / MODEL_CONFIG_FILE}: {err}") from err


def read_tokenizer_and_config(path: str | Path) -> tuple[Tokenizer, LlamaConfig]:
    """The tokenizer and model config of what ``load_policy`` would load, without its weights
    (a teacher is checked against the policy before anything is built)."""
    path = Path(path)
    if is_hf_model_dir(path):
        return load_tokenizer(path), read_hf_config(path)
    checkpoint = resolve_checkpoint(path)
    config = _checkpoint_config(checkpoint)
    try:
        return load_tokenizer(checkpoint), config
    except (OSError, ValueError) as err:
        raise CheckpointError(f"{checkpoint}: {err}") from err


def load_checkpoint_policy(path: str | Path, chat_template: bool | None = None) -> LoadedPolicy:
    """Policy, tokenizer and (PPO) critic of a training checkpoint or run dir.

    ``chat_template``: None follows the run's ``model.chat_template``; the run's
    ``model.chat_template_kwargs`` always apply where a template is used.
    """
    checkpoint = resolve_checkpoint(path)
    config = _checkpoint_config(checkpoint)
    state_file = checkpoint / TRAINER_STATE_FILE
    adapters = io.load_json(state_file).get(ADAPTERS_KEY) if state_file.is_file() else None
    critic = None
    if adapters is not None:  # a LoRA run's: its base, its adapters merged in
        problem = adapter_config_problem(checkpoint, io.load_json(state_file))
        if problem is not None:  # what PEFT would load the adapters by: not as trained
            raise CheckpointError(problem)
        policy, critic = load_adapter_checkpoint(checkpoint, config, adapters)
    else:
        policy = LlamaForCausalLM(config)
        io.load_module(policy, checkpoint / MODEL_FILE)
        if (checkpoint / VALUE_MODEL_FILE).is_file():
            critic = ValueModel(config)
            io.load_state_dict_into(critic, checkpoint / VALUE_MODEL_FILE)
    run_template, template_kwargs = _run_chat_template(checkpoint)
    chat_template = run_template if chat_template is None else chat_template
    try:
        tokenizer = load_tokenizer(checkpoint, chat_template, template_kwargs)
    except (OSError, ValueError) as err:
        raise CheckpointError(f"{checkpoint}: {err}") from err
    return LoadedPolicy(policy.eval(), tokenizer, checkpoint, critic.eval() if critic else None)


def _run_seed(checkpoint: Path) -> int:
    try:
        return int(yaml.safe_load((checkpoint / RUN_CONFIG_FILE).read_text())["seed"])
    except (OSError, KeyError, TypeError, ValueError, yaml.YAMLError) as err:
        raise CheckpointError(f"{checkpoint / RUN_CONFIG_FILE}: no seed ({err})") from err


def load_adapter_base(
    checkpoint: Path, config: LlamaConfig, base: dict[str, Any]
) -> LlamaForCausalLM:
    """The base model a LoRA checkpoint's adapters sit on: the Hugging Face directory it
    records, or for a model built from its config, the same build from the run's seed; its
    SHA-256 must be the recorded one (another base is refused in one line)."""
    path = base.get("path")
    if path is not None:
        if not is_hf_model_dir(path):
            raise CheckpointError(
                f"{checkpoint}: its adapters sit on the base model at {path}, which is not a "
                "Hugging Face model directory any more (a LoRA checkpoint holds the adapters only)"
            )
        try:
            model = load_pretrained_policy(str(path))
        except (ValueError, OSError) as err:  # ModelDirError and kin: one line, the base named
            raise CheckpointError(f"{checkpoint}: its base model at {path}: {err}") from err
    else:  # built as the trainer built it: torch's global stream seeded with the run's seed
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(_run_seed(checkpoint))
            model = LlamaForCausalLM(config)
    where = f"the base at {path}" if path is not None else "the base built from the seed"
    # the one refusal of resume, verify, export and generate (``identity.check_same_base``)
    check_same_base(
        checkpoint,
        {"base_sha256": base.get("sha256")},
        {"base_sha256": base_fingerprint(model)},
        where,
    )
    return model


def check_adapter_checkpoint(checkpoint: Path) -> None:
    """What a LoRA checkpoint's adapters need besides their files, as ``verify``, resume and
    ``export --adapter`` check it: ``adapter_config.json`` as trained
    (``identity.adapter_config_problem``) and the recorded base, loaded, with the recorded
    SHA-256 (``load_adapter_base``). Nothing for a full fine-tuning checkpoint."""
    state = io.load_json(checkpoint / TRAINER_STATE_FILE)
    adapters = state.get(ADAPTERS_KEY) if isinstance(state, dict) else None
    if adapters is None:
        return
    problem = adapter_config_problem(checkpoint, state)
    if problem is not None:
        raise CheckpointError(problem)
    if not isinstance(adapters, dict) or not isinstance(adapters.get("base"), dict):
        raise CheckpointError(f"{checkpoint / TRAINER_STATE_FILE}: bad 'adapters' record")
    fields = io.load_json(checkpoint / MODEL_CONFIG_FILE)
    try:
        config = LlamaConfig(**fields)
    except (TypeError, ValueError) as err:
        raise CheckpointError(f"{checkpoint / MODEL_CONFIG_FILE}: {err}") from err
    load_adapter_base(checkpoint, config, adapters["base"])


def load_adapter_checkpoint(
    checkpoint: Path, config: LlamaConfig, adapters: dict[str, Any]
) -> tuple[LlamaForCausalLM, ValueModel | None]:
    """A LoRA checkpoint's policy (and PPO critic) as plain models: the base, its adapters
    loaded and merged in (``models.lora.merge_in_place``), so they sample on every path."""
    try:
        settings = LoraSettings(**adapters["lora"])
        base_record = dict(adapters["base"])
    except (KeyError, TypeError, LoraConfigError) as err:
        raise CheckpointError(f"{checkpoint / TRAINER_STATE_FILE}: bad adapters ({err})") from err
    policy = load_adapter_base(checkpoint, config, base_record)
    critic = None
    if (checkpoint / VALUE_MODEL_FILE).is_file():  # its own adapters on the base's trunk
        critic = build_value_model(policy, warm_start=True)
        apply_lora(critic, settings)  # type: ignore[arg-type]  # the same trunk
        state = io.load_torch(checkpoint / VALUE_MODEL_FILE)
        result = critic.load_state_dict(state, strict=False)
        if result.unexpected_keys or set(state) != {
            name for name, _ in adapter_parameters(critic)
        } | {"value_head.weight", "value_head.bias"}:
            raise CheckpointError(
                f"{checkpoint / VALUE_MODEL_FILE}: does not match the critic's adapters"
            )
        merge_in_place(critic)
    apply_lora(policy, settings)
    file = checkpoint / ADAPTER_MODEL_FILE
    try:
        load_adapter_state_dict(policy, read_adapter_weights(io.load_tensors(file)))
    except LoraConfigError as err:
        raise CheckpointError(f"{file}: {err}") from err
    merge_in_place(policy)
    return policy, critic


def load_policy(path: str | Path, chat_template: bool | None = None) -> LoadedPolicy:
    """Any source a user points at: a Hugging Face model dir, a checkpoint, or a run dir."""
    path = Path(path)
    if is_hf_model_dir(path):
        # config and tokenizer first: a mismatch is refused before the weights are read
        config = read_hf_config(path)
        tokenizer = load_tokenizer(
            path, chat_template=True if chat_template is None else chat_template
        )
        check_tokenizer_fits(tokenizer, config, path)
        policy = load_pretrained_policy(str(path))
        return LoadedPolicy(policy.eval(), tokenizer, path)
    return load_checkpoint_policy(path, chat_template)
