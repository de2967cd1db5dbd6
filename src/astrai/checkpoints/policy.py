"""Open a trained policy for inference or export: from a training checkpoint, a run dir (its
latest checkpoint) or a Hugging Face model directory.

A training checkpoint stores astrai's own ``config.json`` (``LlamaConfig`` fields), the policy
weights under Hugging Face names, the tokenizer file(s) and, for PPO, ``value_model.pt``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

from astrai.checkpoints import io
from astrai.checkpoints.completeness import latest_complete, scan_checkpoints
from astrai.checkpoints.layout import (
    MODEL_CONFIG_FILE,
    MODEL_FILE,
    RUN_CONFIG_FILE,
    TRAINER_STATE_FILE,
    VALUE_MODEL_FILE,
    CheckpointError,
    parse_step,
)
from astrai.models.llama import LlamaConfig, LlamaForCausalLM
from astrai.models.pretrained import (
    check_tokenizer_fits,
    is_hf_model_dir,
    load_pretrained_policy,
    read_hf_config,
)
from astrai.models.tokenizer import Tokenizer, load_tokenizer
from astrai.models.value_model import ValueModel


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


def load_checkpoint_policy(path: str | Path, chat_template: bool | None = None) -> LoadedPolicy:
    """Policy, tokenizer and (PPO) critic of a training checkpoint or run dir.

    ``chat_template``: None follows the run's ``model.chat_template``; the run's
    ``model.chat_template_kwargs`` always apply where a template is used.
    """
    checkpoint = resolve_checkpoint(path)
    fields = io.load_json(checkpoint / MODEL_CONFIG_FILE)
    try:
        config = LlamaConfig(**fields)
    except (TypeError, ValueError) as err:
        raise CheckpointError(f"{checkpoint / MODEL_CONFIG_FILE}: {err}") from err
    policy = LlamaForCausalLM(config)
    io.load_module(policy, checkpoint / MODEL_FILE)
    run_template, template_kwargs = _run_chat_template(checkpoint)
    chat_template = run_template if chat_template is None else chat_template
    try:
        tokenizer = load_tokenizer(checkpoint, chat_template, template_kwargs)
    except (OSError, ValueError) as err:
        raise CheckpointError(f"{checkpoint}: {err}") from err
    critic = None
    if (checkpoint / VALUE_MODEL_FILE).is_file():
        critic = ValueModel(config)
        io.load_state_dict_into(critic, checkpoint / VALUE_MODEL_FILE)
    return LoadedPolicy(policy.eval(), tokenizer, checkpoint, critic.eval() if critic else None)


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
