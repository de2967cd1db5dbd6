"""Hugging Face model directories in and out, without ``transformers``.

A model directory holds ``config.json``, ``model.safetensors`` (or shards listed in
``model.safetensors.index.json``) and the tokenizer files. astrai's parameter names are Hugging
Face's, so weights map one to one; a tied ``lm_head.weight`` is not stored (as
``save_pretrained`` does). Everything is read from local disk; a missing file is an error that
names it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from types import MappingProxyType
from typing import Any, cast

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from astrai.files import naming_write_errors
from astrai.models.exported_tokenizer import (
    generation_config_for,
    save_tokenizer_files,
    special_token_ids,
)
from astrai.models.hf_config import (
    UnsupportedModelError,
    hf_config_from_llama,
    llama_config_from_hf,
)
from astrai.models.hf_tokenizer import GENERATION_CONFIG_FILE, HFTokenizer
from astrai.models.llama import LlamaConfig, LlamaForCausalLM, set_gradient_checkpointing
from astrai.models.precision import DTYPES
from astrai.models.tokenizer import TOKENIZER_FILE, CharTokenizer, Tokenizer
from astrai.models.value_model import ValueModel
from astrai.models.weights import stored_names
from astrai.paths import REPO_ROOT, missing_reason

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
WEIGHTS_INDEX_FILE = "model.safetensors.index.json"
VALUE_HEAD_PREFIX = "value_head."
SCORE_PREFIX = "score."  # transformers' *ForTokenClassification head
# where `make smollm2` writes SmolLM2-135M-Instruct (the Makefile's SMOLLM2_DIR), under the repo
SMOLLM2_DIR = Path("models/smollm2")
# buffers some older checkpoints store; recomputed from the config here
_IGNORED_SUFFIXES = (".rotary_emb.inv_freq",)


class ModelDirError(ValueError):
    """A model directory that cannot be loaded; the message names the directory or file."""


def missing_dir_hint(directory: Path) -> str:
    """The fix for a model directory that does not exist: the command that writes it, if any."""
    written = REPO_ROOT / SMOLLM2_DIR
    if directory.parts[-2:] != SMOLLM2_DIR.parts:
        return (
            "point at an existing Hugging Face model directory (config.json, model.safetensors, "
            "tokenizer.json)"
        )
    if directory.resolve() == written:
        return "run `make smollm2` to convert SmolLM2-135M-Instruct into it"
    return f"run `make smollm2` (in {REPO_ROOT}; it writes {written}) and give that path"


def is_hf_model_dir(path: str | Path) -> bool:
    """True when ``path/config.json`` is a Hugging Face config: it has a ``model_type`` and keys
    beyond ``LlamaConfig``'s fields (a training checkpoint's own ``config.json`` holds only
    those, ``model_type`` among them since issue 33)."""
    config = Path(path) / CONFIG_FILE
    try:
        payload = json.loads(config.read_text()) if config.is_file() else None
    except (OSError, ValueError):
        return False
    if not isinstance(payload, dict) or "model_type" not in payload:
        return False
    return not set(payload) <= {field.name for field in fields(LlamaConfig)}


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise ModelDirError(f"{path}: file is missing")
    try:
        payload = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise ModelDirError(f"{path}: unreadable JSON ({err})") from err
    if not isinstance(payload, dict):
        raise ModelDirError(f"{path}: expected a JSON object")
    return payload


def read_hf_config(path: str | Path) -> LlamaConfig:
    """``<path>/config.json`` -> ``LlamaConfig``; refuses what astrai cannot compute exactly."""
    directory = Path(path)
    if not directory.is_dir():
        reason = missing_reason(directory)
        if reason != "does not exist":  # a symlink loop, a broken link
            raise ModelDirError(f"{directory} {reason}")
        raise ModelDirError(f"no model directory at {directory}: {missing_dir_hint(directory)}")
    config_path = directory / CONFIG_FILE
    try:
        return llama_config_from_hf(_read_json(config_path))
    except (UnsupportedModelError, ValueError) as err:
        if isinstance(err, ModelDirError):
            raise
        raise ModelDirError(f"{config_path}: {err}") from err


def check_tokenizer_fits(tokenizer: Tokenizer, config: LlamaConfig, directory: Path) -> None:
    """``ModelDirError`` when the tokenizer can produce ids the embedding has no row for (a
    token added without resizing the model): such an id would otherwise fail deep inside
    ``torch.embedding`` (a device-side assert on CUDA), only once a prompt contains it."""
    if tokenizer.vocab_size > config.vocab_size:
        raise ModelDirError(
            f"{directory / TOKENIZER_FILE}: the tokenizer has {tokenizer.vocab_size} ids but "
            f"{CONFIG_FILE}'s vocab_size is {config.vocab_size} (the model's embedding rows); "
            "resize the model's embeddings or remove the added tokens"
        )


def check_safetensors_size(file: Path) -> dict[str, Any]:
    """``ModelDirError`` naming ``file`` unless its header is readable and the file is as long
    as the header says (a truncated download or copy): read before any weights are loaded, so
    the config check at start-up already refuses it. Returns the header."""
    try:
        with open(file, "rb") as handle:
            prefix = handle.read(8)
            length = int.from_bytes(prefix, "little") if len(prefix) == 8 else -1
            size = os.fstat(handle.fileno()).st_size
            raw = handle.read(length) if 0 < length <= size - 8 else None
    except OSError as err:
        raise ModelDirError(f"{file}: unreadable ({err.strerror or err})") from err
    if raw is None:
        raise ModelDirError(f"{file}: not a safetensors file, or truncated ({size} bytes)")
    try:
        header = json.loads(raw)
    except ValueError as err:  # JSON (and UTF-8) errors
        raise ModelDirError(f"{file}: unreadable safetensors header ({err})") from err
    if not isinstance(header, dict):
        raise ModelDirError(f"{file}: unreadable safetensors header (not a JSON object)")
    try:
        ends = [
            int(entry["data_offsets"][1])
            for name, entry in header.items()
            if name != "__metadata__" and isinstance(entry, dict) and "data_offsets" in entry
        ]
    except (TypeError, ValueError, IndexError) as err:
        raise ModelDirError(f"{file}: unreadable safetensors header ({err})") from err
    expected = 8 + length + max(ends, default=0)
    if size < expected:
        raise ModelDirError(
            f"{file}: truncated safetensors file ({size} of {expected} bytes): download or "
            "copy it again"
        )
    return header


def _stored_head_name(name: str) -> str:
    """A critic's ``value_head.*`` under the name its directory stores (``score.*``)."""
    if name.startswith(VALUE_HEAD_PREFIX):
        return SCORE_PREFIX + name[len(VALUE_HEAD_PREFIX) :]
    return name


def check_weight_shapes(files: list[Path], config: LlamaConfig, critic: bool = False) -> None:
    """``ModelDirError`` naming the file and tensor when the safetensors headers' names and
    shapes are not the ones ``config`` builds (a ``head_dim`` or size edited in
    ``config.json``): read from the headers and a meta-device model, before any memory is
    allocated for the weights, so a config that disagrees with its weights fails at the
    pre-run check, not after building a model of the config's size. ``critic``: a value model
    (``save_critic_dir``'s layout: the head stored as ``score``)."""
    with torch.device("meta"):
        skeleton: nn.Module = ValueModel(config) if critic else LlamaForCausalLM(config)
    # ``stored_names`` tells tied tensors by their storage, which meta tensors do not have
    expected = {
        _stored_head_name(name): tuple(tensor.shape)
        for name, tensor in skeleton.state_dict().items()
        if critic or not (config.tie_word_embeddings and name == "lm_head.weight")
    }
    found: dict[str, tuple[tuple[int, ...], Path]] = {}
    for file in files:
        for name, entry in check_safetensors_size(file).items():
            if (
                name != "__metadata__"
                and isinstance(entry, dict)
                and not name.endswith(_IGNORED_SUFFIXES)
            ):
                found[name] = (tuple(entry.get("shape") or ()), file)
    if "lm_head.weight" in found and "lm_head.weight" not in expected:
        found.pop("lm_head.weight")  # tied: embed_tokens is the one stored
    source = files[0] if len(files) == 1 else files[0].parent
    missing = sorted(set(expected) - set(found))
    unexpected = sorted(set(found) - set(expected))
    if missing or unexpected:
        raise ModelDirError(
            f"{source}: weights do not match {CONFIG_FILE} (missing {missing[:8]}, "
            f"unexpected {unexpected[:8]})"
        )
    for name in sorted(expected):
        shape, file = found[name]
        if shape != expected[name]:
            raise ModelDirError(
                f"{file}: {name} has shape {shape}, {CONFIG_FILE} says {expected[name]}"
            )


def weight_files(path: str | Path) -> list[Path]:
    """The safetensors file(s) of a model directory (one file, or the shards of the index),
    each checked to be complete (``check_safetensors_size``)."""
    directory = Path(path)
    single = directory / WEIGHTS_FILE
    if single.is_file():
        check_safetensors_size(single)
        return [single]
    index = directory / WEIGHTS_INDEX_FILE
    if index.is_file():
        weight_map = _read_json(index).get("weight_map")
        if not isinstance(weight_map, dict):
            raise ModelDirError(f"{index}: no weight_map")
        shards = [directory / name for name in sorted(set(weight_map.values()))]
        for shard in shards:
            if not shard.is_file():
                raise ModelDirError(f"{shard}: file is missing (listed in {index.name})")
            check_safetensors_size(shard)
        return shards
    hint = " (PyTorch .bin weights are not read: convert them to safetensors)"
    has_bin = any(directory.glob("pytorch_model*.bin"))
    raise ModelDirError(f"{single}: file is missing{hint if has_bin else ''}")


def read_tensors(files: list[Path]) -> dict[str, torch.Tensor]:
    tensors: dict[str, torch.Tensor] = {}
    for file in files:
        try:
            tensors.update(load_file(str(file)))
        except Exception as err:
            raise ModelDirError(f"{file}: unreadable safetensors file ({err})") from err
    return tensors


def load_weights(module: nn.Module, tensors: dict[str, torch.Tensor], source: Path) -> None:
    """Copy ``tensors`` (Hugging Face names) into ``module``: names must match exactly, except a
    tied ``lm_head.weight`` (dropped) and recomputed RoPE buffers; dtypes are cast."""
    names = set(stored_names(module))
    tensors = {k: v for k, v in tensors.items() if not k.endswith(_IGNORED_SUFFIXES)}
    if "lm_head.weight" in tensors and "lm_head.weight" not in names:
        tensors.pop("lm_head.weight")  # tied: embed_tokens is the one stored
    missing, unexpected = sorted(names - set(tensors)), sorted(set(tensors) - names)
    if missing or unexpected:
        raise ModelDirError(
            f"{source}: weights do not match the config (missing {missing[:8]}, "
            f"unexpected {unexpected[:8]})"
        )
    state = module.state_dict()
    for name, tensor in tensors.items():
        if tuple(tensor.shape) != tuple(state[name].shape):
            raise ModelDirError(
                f"{source}: {name} has shape {tuple(tensor.shape)}, the config says "
                f"{tuple(state[name].shape)}"
            )
    with torch.no_grad():
        for name, tensor in tensors.items():
            state[name].copy_(tensor)


def load_pretrained_policy(
    path: str,
    chat_template: bool = True,
    gradient_checkpointing: bool = False,
    chat_template_kwargs: Mapping[str, Any] = MappingProxyType({}),  # an immutable {}
) -> LlamaForCausalLM:
    """Hydra target of ``model=hf``: the policy of a Hugging Face model directory, in float32,
    recomputing its layers' activations in backward when ``gradient_checkpointing``.

    ``chat_template`` and ``chat_template_kwargs`` belong to the tokenizer (see
    ``tokenizer_for``); accepted here because Hydra passes every ``model.*`` key.
    """
    del chat_template, chat_template_kwargs
    directory = Path(path)
    config = read_hf_config(directory)
    files = weight_files(directory)
    check_weight_shapes(files, config)  # before a model of the config's size is built
    model = LlamaForCausalLM(config)
    load_weights(model, read_tensors(files), files[0] if len(files) == 1 else directory)
    set_gradient_checkpointing(model, gradient_checkpointing)
    model.source_dir = str(directory.resolve())
    return model


def tokenizer_for(model_cfg: Any) -> Tokenizer:
    """The tokenizer of a ``model`` config: the model directory's, or the character tokenizer
    of the random-init presets."""
    path = model_cfg.get("path") if hasattr(model_cfg, "get") else None
    if path is None:
        return CharTokenizer()
    return HFTokenizer.load(
        path,
        chat_template=bool(model_cfg.get("chat_template", True)),
        template_kwargs=template_kwargs_of(model_cfg),
    )


def template_kwargs_of(model_cfg: Any) -> dict[str, Any]:
    """``model.chat_template_kwargs`` as a plain dict ({} when absent: a config or run written
    before the key existed)."""
    from omegaconf import DictConfig, OmegaConf

    kwargs = model_cfg.get("chat_template_kwargs") if hasattr(model_cfg, "get") else None
    if isinstance(kwargs, DictConfig):
        # a DictConfig's container is a dict (the declared return type also covers ListConfig's)
        kwargs = cast(dict[str, Any], OmegaConf.to_container(kwargs, resolve=True))
    return dict(kwargs or {})


# --- writing ----------------------------------------------------------------------------------


def _cast(tensors: dict[str, torch.Tensor], dtype: str) -> dict[str, torch.Tensor]:
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)} (got {dtype!r})")
    return {k: v.detach().to("cpu", DTYPES[dtype]).contiguous() for k, v in tensors.items()}


def save_policy_dir(
    model: LlamaForCausalLM, tokenizer: Tokenizer, directory: Path, dtype: str = "float32"
) -> None:
    """Write ``model`` + ``tokenizer`` as a Hugging Face directory into (existing) ``directory``."""
    state = model.state_dict()
    tensors = _cast({name: state[name] for name in stored_names(model)}, dtype)
    with naming_write_errors(directory / WEIGHTS_FILE):
        save_file(tensors, str(directory / WEIGHTS_FILE), metadata={"format": "pt"})
    # tokenizer files first: they may include the source's generation_config.json, which
    # the merged one below replaces
    save_tokenizer_files(tokenizer, directory)
    config = hf_config_from_llama(model.config, "causal_lm", dtype, special_token_ids(tokenizer))
    _write_json(directory / CONFIG_FILE, config)
    _write_json(directory / GENERATION_CONFIG_FILE, generation_config_for(tokenizer))


def save_critic_dir(
    critic: ValueModel, tokenizer: Tokenizer, directory: Path, dtype: str = "float32"
) -> None:
    """Write the critic as ``*ForTokenClassification`` (one label): ``value_head`` -> ``score``."""
    tensors = {
        (SCORE_PREFIX + k[len(VALUE_HEAD_PREFIX) :] if k.startswith(VALUE_HEAD_PREFIX) else k): v
        for k, v in critic.state_dict().items()
    }
    with naming_write_errors(directory / WEIGHTS_FILE):
        save_file(_cast(tensors, dtype), str(directory / WEIGHTS_FILE), metadata={"format": "pt"})
    config = hf_config_from_llama(critic.config, "value", dtype, special_token_ids(tokenizer))
    _write_json(directory / CONFIG_FILE, config)
    save_tokenizer_files(tokenizer, directory)
    # the source's generation defaults travel with the tokenizer files; a critic generates nothing
    (directory / GENERATION_CONFIG_FILE).unlink(missing_ok=True)


def load_critic_dir(path: str | Path) -> ValueModel:
    """A critic exported by ``save_critic_dir`` (or any one-label Llama/Qwen2 token classifier)."""
    directory = Path(path)
    hf = _read_json(directory / CONFIG_FILE)
    labels = hf.get("id2label") or {}
    if len(labels) != 1:
        raise ModelDirError(f"{directory / CONFIG_FILE}: a value model has 1 label (got {labels})")
    config = read_hf_config(directory)
    files = weight_files(directory)
    check_weight_shapes(files, config, critic=True)  # before a model of the config's size
    critic = ValueModel(config)
    tensors = {
        (VALUE_HEAD_PREFIX + k[len(SCORE_PREFIX) :] if k.startswith(SCORE_PREFIX) else k): v
        for k, v in read_tensors(files).items()
    }
    load_weights(critic, tensors, files[0])
    return critic


def _write_json(path: Path, payload: dict[str, Any]) -> None:
    with naming_write_errors(path):
        path.write_text(json.dumps(payload, indent=2) + "\n")
