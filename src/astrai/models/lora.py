"""LoRA adapters on astrai's own policy, through PEFT (Hu et al. 2021, "LoRA: Low-Rank
Adaptation of Large Language Models"; rsLoRA: Kalajdzievski 2023; DoRA: Liu et al. 2024).

``apply_lora`` injects PEFT's LoRA layers into a ``LlamaForCausalLM`` in place
(``peft.inject_adapter_in_model``): each targeted ``nn.Linear`` becomes a ``peft`` LoRA layer
that computes ``W x + (alpha / r) B A x`` (``alpha / sqrt(r)`` with rsLoRA), with ``A [r, in]``
and ``B [out, r]``; every base weight is frozen. astrai's module names are Hugging Face's
(``model.layers.N.self_attn.q_proj``), so the adapter PEFT sees here is the adapter it would
build on the transformers model: ``save_peft_adapter`` writes the directory
``peft.PeftModel.from_pretrained`` loads onto the transformers base, and ``merged_model`` folds
the adapters into a plain ``LlamaForCausalLM`` for a merged Hugging Face export.

``adapters_disabled`` gives the base model's outputs from the same weights: the RL reference
without a second copy of the policy (TRL's ``ref_model=None`` with PEFT, verl's
``ref_in_actor``).

No adapter math lives here: PEFT owns it. ``peft`` is an optional extra (``astrai[lora]``),
imported inside the functions that need it so importing astrai never needs it.

Training builds them from ``model.lora`` (``config.lora_checks``, ``training.adapters``). The
CPU fast decode path (``models.decode``) reads weights directly, so it is not taken for a
model with adapters.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import torch
from safetensors.torch import save_file
from torch import Tensor, nn

from astrai.files import naming_write_errors
from astrai.models.llama import LlamaForCausalLM
from astrai.models.weights import stored_names

ALL_LINEAR = "all-linear"  # PEFT's shorthand: every nn.Linear of the decoder layers
ADAPTER_NAME = "default"  # PEFT's default adapter name; one adapter per model here
INSTALL_HINT = "pip install 'astrai[lora]' (or make install-dev)"
ADAPTER_CONFIG_FILE = "adapter_config.json"
ADAPTER_WEIGHTS_FILE = "adapter_model.safetensors"
# a PeftModel's own state dict names the base model through two wrappers (PeftModel.base_model,
# a LoraModel, whose .model is the base); its adapter files carry that prefix
PEFT_FILE_PREFIX = "base_model.model."
# ``lora.alpha``'s ceiling: published settings stay in the hundreds (alpha = 2 × rank at rank
# 1024 is 2048); a scale far beyond that only overflows the update into NaN probabilities
MAX_ALPHA = 100_000.0


class LoraConfigError(ValueError):
    """A LoRA setting (or the environment it needs) is unusable; the message is one line."""


@dataclass
class LoraSettings:
    """What PEFT's ``LoraConfig`` is built from.

    Args:
        rank: ``r``, the inner dimension of ``B [out, r] @ A [r, in]``.
        alpha: the update is scaled by ``alpha / rank`` (``alpha / sqrt(rank)`` with rsLoRA).
        dropout: dropout on the adapter's input, in ``[0, 1)``.
        target_modules: names of the decoder layers' linear modules (``q_proj``, ...; a dotted
            suffix like ``self_attn.q_proj`` works too, matched as PEFT does) or ``"all-linear"``
            (all of them; never ``lm_head``, as in PEFT).
        use_rslora: scale by ``alpha / sqrt(rank)`` (rank-stabilized LoRA).
        use_dora: weight-decomposed LoRA (a learned magnitude per output row).
    """

    rank: int = 8
    alpha: float = 16.0
    dropout: float = 0.0
    target_modules: list[str] | str = ALL_LINEAR
    use_rslora: bool = False
    use_dora: bool = False

    def __post_init__(self) -> None:
        rank = self.rank
        if not isinstance(rank, int) or isinstance(rank, bool) or rank <= 0:
            raise LoraConfigError(f"lora.rank must be a positive integer (got {rank!r})")
        alpha = self.alpha
        # NaN fails the comparison (it compares False both ways), inf the ceiling: an infinite
        # scale turned the first update into NaN probabilities
        number = isinstance(alpha, int | float) and not isinstance(alpha, bool)
        if not (number and 0 < alpha <= MAX_ALPHA):
            raise LoraConfigError(
                f"lora.alpha must be in (0, {MAX_ALPHA:g}] (a finite number, got {alpha!r})"
            )
        dropout = self.dropout
        number = isinstance(dropout, int | float) and not isinstance(dropout, bool)
        if not (number and 0 <= dropout < 1):
            raise LoraConfigError(f"lora.dropout must be in [0, 1) (got {dropout!r})")
        targets = self.target_modules
        if isinstance(targets, str):
            if targets != ALL_LINEAR:
                raise LoraConfigError(
                    f"lora.target_modules must be a list of module names or {ALL_LINEAR!r} "
                    f"(got {targets!r})"
                )
        elif not targets or not all(isinstance(t, str) and t for t in targets):
            raise LoraConfigError(
                f"lora.target_modules must be a non-empty list of module names or "
                f"{ALL_LINEAR!r} (got {targets!r})"
            )
        for key in ("use_rslora", "use_dora"):
            if not isinstance(getattr(self, key), bool):
                raise LoraConfigError(
                    f"lora.{key} must be true or false (got {getattr(self, key)!r})"
                )


def _peft() -> Any:
    """The ``peft`` module, or a one-line error naming the install command."""
    try:
        import peft
    except ImportError as err:
        raise LoraConfigError(f"LoRA needs peft, which is not installed: {INSTALL_HINT}") from err
    return peft


def linear_module_names(model: LlamaForCausalLM) -> list[str]:
    """Full names of the decoder layers' ``nn.Linear`` modules (``model.layers.0.mlp.up_proj``,
    ...): what a target may name. ``lm_head`` is not one: it is usually tied to the input
    embeddings, and PEFT's ``all-linear`` leaves a model's output layer out too."""
    return [
        f"model.layers.{name}"
        for name, module in model.model.layers.named_modules()
        if isinstance(module, nn.Linear)
    ]


def target_widths(model: LlamaForCausalLM, targets: list[str] | str) -> list[tuple[int, int]]:
    """``(in_features, out_features)`` of every linear module ``targets`` adapts (a list checked
    by ``resolve_target_modules``; ``all-linear``: every decoder linear)."""
    names = resolve_target_modules(model, targets)
    return [
        (module.in_features, module.out_features)
        for full_name, module in model.model.layers.named_modules(prefix="model.layers")
        if isinstance(module, nn.Linear)
        and any(full_name == t or full_name.endswith("." + t) for t in names)
    ]


def adapter_parameter_count(widths: list[tuple[int, int]], rank: int, dora: bool) -> int:
    """Parameters of rank-``rank`` adapters on linears of ``widths``: ``A [r, in]`` and
    ``B [out, r]`` each, plus DoRA's magnitude (one per output row)."""
    return sum(rank * (fan_in + fan_out) + (fan_out if dora else 0) for fan_in, fan_out in widths)


def resolve_target_modules(model: LlamaForCausalLM, targets: list[str] | str) -> list[str]:
    """``targets`` checked against the model: ``all-linear`` -> the sorted last names of every
    decoder linear (``down_proj``, ..., ``v_proj``); a list is returned as given, each name
    matching some linear module exactly or as a dotted suffix (PEFT's rule)."""
    full_names = linear_module_names(model)
    if targets == ALL_LINEAR:
        return sorted({name.rsplit(".", 1)[-1] for name in full_names})
    for target in targets:
        if not any(name == target or name.endswith("." + target) for name in full_names):
            known = sorted({name.rsplit(".", 1)[-1] for name in full_names})
            raise LoraConfigError(
                f"lora.target_modules: no linear module named {target!r} in the model's decoder "
                f"layers (its linear modules: {', '.join(known)}; or {ALL_LINEAR!r})"
            )
    return list(targets)


def _lora_layers(model: nn.Module) -> list[Any]:
    """The PEFT adapter layers inside ``model`` (empty if it has none)."""
    if not hasattr(model, "peft_config"):  # set by inject_adapter_in_model; avoids importing
        return []
    from peft.tuners.tuners_utils import BaseTunerLayer

    return [m for m in model.modules() if isinstance(m, BaseTunerLayer)]


def has_adapters(model: nn.Module) -> bool:
    return bool(_lora_layers(model))


def apply_lora(model: LlamaForCausalLM, settings: LoraSettings) -> None:
    """Inject LoRA adapters (PEFT's, freshly initialized: ``A`` random, ``B`` zero, so the model's
    outputs are unchanged) into ``model`` in place; afterwards only adapter parameters have
    ``requires_grad``."""
    peft = _peft()
    if has_adapters(model):
        raise LoraConfigError("lora: the model already has adapters")
    targets = resolve_target_modules(model, settings.target_modules)
    config = peft.LoraConfig(
        r=settings.rank,
        lora_alpha=settings.alpha,
        lora_dropout=settings.dropout,
        target_modules=targets,
        use_rslora=settings.use_rslora,
        use_dora=settings.use_dora,
        bias="none",
        task_type="CAUSAL_LM",  # what PeftModel.from_pretrained builds from the export
    )
    peft.inject_adapter_in_model(config, model, adapter_name=ADAPTER_NAME)
    # explicit rather than relying on PEFT's defaults: the optimizer must see adapters only
    adapters = {id(p) for _, p in adapter_parameters(model)}
    for param in model.parameters():
        param.requires_grad_(id(param) in adapters)


def adapter_parameters(model: nn.Module) -> list[tuple[str, nn.Parameter]]:
    """``(name, parameter)`` of every adapter weight (``lora_A``, ``lora_B``, DoRA's
    ``lora_magnitude_vector``): what the optimizer trains."""
    adapters: set[int] = set()
    for layer in _lora_layers(model):
        for attribute in layer.adapter_layer_names:
            adapters.update(id(p) for p in getattr(layer, attribute).parameters())
    return [(name, p) for name, p in model.named_parameters() if id(p) in adapters]


@contextmanager
def adapters_disabled(model: nn.Module) -> Iterator[None]:
    """Within the block, ``model`` computes the base model's outputs (adapters bypassed, not
    removed); every parameter's ``requires_grad`` is restored on exit (PEFT's toggle changes
    them)."""
    layers = _lora_layers(model)
    if not layers:
        raise LoraConfigError("adapters_disabled: the model has no adapters")
    flags = [(p, p.requires_grad) for p in model.parameters()]
    for layer in layers:
        layer.enable_adapters(False)
    try:
        yield
    finally:
        for layer in layers:
            layer.enable_adapters(True)
        for param, flag in flags:
            param.requires_grad_(flag)


def adapter_state_dict(model: nn.Module) -> dict[str, Tensor]:
    """The adapter weights under PEFT's names without the adapter name
    (``model.layers.0.self_attn.q_proj.lora_A.weight``: ``[r, in]``; ``lora_B``: ``[out, r]``)."""
    if not has_adapters(model):
        raise LoraConfigError("adapter_state_dict: the model has no adapters")
    return dict(_peft().get_peft_model_state_dict(model, adapter_name=ADAPTER_NAME))


def adapter_module_names(model: nn.Module) -> dict[str, str]:
    """``adapter_state_dict``'s names -> the model's own state-dict names of the same tensors
    (PEFT's names drop the adapter name: ``...q_proj.lora_A.default.weight`` is
    ``...q_proj.lora_A.weight``): for loading adapters with torch's and FSDP's state-dict
    calls."""
    names = {}
    for name, _ in adapter_parameters(model):
        peft_name = ".".join(part for part in name.split(".") if part != ADAPTER_NAME)
        # DoRA's magnitude is a bare vector under PEFT's name (no ``.weight``)
        peft_name = peft_name.replace("lora_magnitude_vector.weight", "lora_magnitude_vector")
        names[peft_name] = name
    return names


def load_adapter_state_dict(model: nn.Module, state: dict[str, Tensor]) -> None:
    """Copy ``state`` (``adapter_state_dict``'s names) into ``model``'s adapters: every adapter
    weight must be given, and nothing else."""
    if not has_adapters(model):
        raise LoraConfigError("load_adapter_state_dict: the model has no adapters")
    expected = set(adapter_state_dict(model))
    missing, unexpected = sorted(expected - set(state)), sorted(set(state) - expected)
    if missing or unexpected:
        raise LoraConfigError(
            f"adapter weights do not match the model's adapters (missing {missing[:4]}, "
            f"unexpected {unexpected[:4]})"
        )
    _peft().set_peft_model_state_dict(model, state, adapter_name=ADAPTER_NAME)


def adapter_config(model: nn.Module, base_model_name_or_path: str | None) -> dict[str, Any]:
    """What ``adapter_config.json`` holds for ``model``'s adapter: the ``LoraConfig``
    ``inject_adapter_in_model`` left on the model (target modules resolved), as
    ``LoraConfig.save_pretrained`` writes it (sets as lists, sorted here so the file is
    deterministic). ``base_model_name_or_path``: PEFT's field for where the base is."""
    if not has_adapters(model):
        raise LoraConfigError("adapter_config: the model has no adapters")
    config = copy.deepcopy(cast(Any, model).peft_config[ADAPTER_NAME])
    config.base_model_name_or_path = base_model_name_or_path
    config.inference_mode = True  # as PeftModel.save_pretrained writes it
    fields: dict[str, Any] = config.to_dict()
    return {k: sorted(v) if isinstance(v, set) else v for k, v in fields.items()}


def write_adapter_config(config: dict[str, Any], path: Path) -> None:
    """``adapter_config(...)`` into the file ``path`` (PEFT's layout: indent 2, sorted keys)."""
    with naming_write_errors(Path(path)):
        Path(path).write_text(json.dumps(config, indent=2, sort_keys=True))


def write_adapter_weights(state: dict[str, Tensor], path: Path) -> None:
    """``adapter_state_dict``'s tensors into the file ``path`` as PEFT stores them (names with
    ``PEFT_FILE_PREFIX``, CPU, contiguous)."""
    tensors = {
        PEFT_FILE_PREFIX + name: tensor.detach().to("cpu").contiguous()
        for name, tensor in state.items()
    }
    with naming_write_errors(Path(path)):
        save_file(tensors, str(path), metadata={"format": "pt"})


def read_adapter_weights(tensors: dict[str, Tensor]) -> dict[str, Tensor]:
    """An ``adapter_model.safetensors``' tensors -> ``adapter_state_dict``'s names."""
    return {name.removeprefix(PEFT_FILE_PREFIX): tensor for name, tensor in tensors.items()}


def save_peft_adapter(model: nn.Module, directory: Path, base_model_name_or_path: str) -> None:
    """Write ``model``'s adapter in PEFT's format into (existing) ``directory``:
    ``adapter_config.json`` and ``adapter_model.safetensors``, what
    ``peft.PeftModel.from_pretrained(<transformers base>, directory)`` loads."""
    directory = Path(directory)
    config = adapter_config(model, str(base_model_name_or_path))
    write_adapter_config(config, directory / ADAPTER_CONFIG_FILE)
    write_adapter_weights(adapter_state_dict(model), directory / ADAPTER_WEIGHTS_FILE)


def read_adapter_config(directory: Path) -> dict[str, Any]:
    """The ``adapter_config.json`` of a PEFT adapter directory, as a dict."""
    result: dict[str, Any] = json.loads((Path(directory) / ADAPTER_CONFIG_FILE).read_text())
    return result


def merged_model(model: LlamaForCausalLM) -> LlamaForCausalLM:
    """A plain ``LlamaForCausalLM`` (no adapters) whose weights are ``model``'s with every adapter
    merged in (``W + scale * B @ A``; DoRA's rescaled form): its logits are the adapter
    model's, and ``save_policy_dir`` exports it as a Hugging Face directory. ``model`` is not
    changed: each adapted layer is merged in a copy of that one layer, so beyond the new model
    the extra memory is one layer's."""
    layers = _lora_layers(model)
    if not layers:
        raise LoraConfigError("merged_model: the model has no adapters")
    like = model.lm_head.weight  # never adapted: the model's device and dtype
    plain = LlamaForCausalLM(model.config).to(like.device, like.dtype)
    state, target = model.state_dict(), plain.state_dict()
    with torch.no_grad():
        for name in stored_names(plain):
            # a LoRA layer's frozen base weight and bias sit under ``<module>.base_layer``
            module, leaf = name.rsplit(".", 1)
            source = state.get(name, state.get(f"{module}.base_layer.{leaf}"))
            if source is None:
                raise KeyError(f"merged_model: no weight for {name}")  # a bug, not bad input
            target[name].copy_(source)
        names = {id(m): n for n, m in model.named_modules()}
        for layer in layers:
            one = copy.deepcopy(layer)
            one.merge(adapter_names=[ADAPTER_NAME])  # PEFT's own merge, DoRA's included
            target[f"{names[id(layer)]}.weight"].copy_(one.get_base_layer().weight)
    return plain


def merge_in_place(model: nn.Module) -> nn.Module:
    """Fold every adapter into its base layer (PEFT's ``merge``, DoRA's included) and put the
    plain layer back in its place: ``model`` (a policy or a critic) then has no adapters and
    computes what it computed with them. Returns ``model``."""
    layers = _lora_layers(model)
    if not layers:
        raise LoraConfigError("merge_in_place: the model has no adapters")
    names = {id(m): n for n, m in model.named_modules()}
    for layer in layers:
        layer.merge(adapter_names=[ADAPTER_NAME])
        parent_name, _, child = names[id(layer)].rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, layer.get_base_layer())
    del cast(Any, model).peft_config
    return model


def base_fingerprint(model: nn.Module) -> str:
    """SHA-256 (hex) over ``model``'s stored weights in name order: name, dtype, shape, bytes.
    Called on the base model before adapters are injected (any device; tensors are hashed on
    the CPU one at a time)."""
    digest = hashlib.sha256()
    state = model.state_dict()
    for name in sorted(stored_names(model)):
        tensor = state[name].detach()
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        digest.update(tensor.to("cpu").contiguous().view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()
