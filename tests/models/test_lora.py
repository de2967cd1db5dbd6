"""LoRA adapters through PEFT on astrai's own model, checked against PEFT itself: the exported
adapter loaded by ``peft.PeftModel.from_pretrained`` onto the transformers base gives astrai's
logits."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import peft  # the lora extra; `make install-dev` installs it
import pytest
import torch
import transformers  # the hf extra
from safetensors.torch import load_file
from tests.hf_models import save_tiny_hf_model

import astrai.models.lora as lora_module
from astrai.models.llama import LlamaConfig, LlamaForCausalLM
from astrai.models.lora import (
    ADAPTER_WEIGHTS_FILE,
    LoraConfigError,
    LoraSettings,
    adapter_parameters,
    adapter_state_dict,
    adapters_disabled,
    apply_lora,
    load_adapter_state_dict,
    merged_model,
    read_adapter_config,
    save_peft_adapter,
)
from astrai.models.pretrained import load_pretrained_policy, save_policy_dir
from astrai.models.saved_tokenizer import load_tokenizer
from astrai.models.tokenizer import CharTokenizer
from astrai.rollout.collect import left_pad

PROMPTS = ["3+4=", "12+9=", "reverse: abc="]  # different lengths: left padding
PARITY = 1e-5  # max |logit difference| in float32, logits of magnitude ~5
LINEARS = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
NUM_LAYERS = 2  # tests.hf_models.TINY


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Tiny random transformers checkpoints; qwen2's q/k/v projections have biases."""
    return {
        family: save_tiny_hf_model(tmp_path_factory.mktemp(family), family)
        for family in ("llama", "qwen2")
    }


@pytest.fixture(scope="module")
def llama_dir(model_dirs: dict[str, Path]) -> Path:
    return model_dirs["llama"]


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    return left_pad(CharTokenizer(), PROMPTS)


def _logits(model: torch.nn.Module, hf: bool = False) -> torch.Tensor:
    """``[rows, T, V]`` logits of ``PROMPTS``; ``hf``: a transformers (or PEFT) model."""
    ids, mask = _batch()
    with torch.no_grad():
        if hf:
            return model(input_ids=ids, attention_mask=mask.long()).logits
        return model(ids, mask).logits


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """Max |a - b| over real (not padding) tokens."""
    _, mask = _batch()
    return (a[mask] - b[mask]).abs().max().item()


def _adapted(directory: Path, settings: LoraSettings, seed: int = 0) -> LlamaForCausalLM:
    """The model of ``directory`` with adapters whose every weight matters: ``B`` (zero at
    init, which would make any adapter look right) and DoRA's magnitudes drawn away from init."""
    model = load_pretrained_policy(str(directory)).eval()
    torch.manual_seed(seed)
    apply_lora(model, settings)
    with torch.no_grad():
        for name, param in adapter_parameters(model):
            if "lora_B" in name:
                param.normal_(0.0, 0.03)
            elif "lora_magnitude_vector" in name:
                param.mul_(torch.empty_like(param).uniform_(0.8, 1.2))
    return model


VARIANTS = {"lora": {}, "rslora": {"use_rslora": True}, "dora": {"use_dora": True}}


@pytest.mark.parametrize(
    ("family", "variant"),
    [("llama", "lora"), ("llama", "rslora"), ("llama", "dora"), ("qwen2", "lora")],
)
def test_peft_loads_the_export_with_equal_logits(
    model_dirs: dict[str, Path], family: str, variant: str, tmp_path: Path
) -> None:
    hf_dir, options = model_dirs[family], VARIANTS[variant]
    ours = _adapted(hf_dir, LoraSettings(rank=4, alpha=8.0, **options))
    save_peft_adapter(ours, tmp_path, str(hf_dir))
    base = transformers.AutoModelForCausalLM.from_pretrained(str(hf_dir)).eval()
    base_logits = _logits(base, hf=True)
    theirs = peft.PeftModel.from_pretrained(base, str(tmp_path)).eval()
    logits = _logits(ours)
    assert _max_diff(logits, base_logits) > 0.5  # the adapters change the outputs
    assert _max_diff(_logits(theirs, hf=True), logits) <= PARITY
    config = read_adapter_config(tmp_path)
    assert set(config["target_modules"]) == LINEARS  # all-linear: never lm_head
    assert (config["r"], config["lora_alpha"]) == (4, 8.0)
    assert config["use_rslora"] == options.get("use_rslora", False)
    assert config["use_dora"] == options.get("use_dora", False)
    assert config["base_model_name_or_path"] == str(hf_dir)
    assert config["task_type"] == "CAUSAL_LM"
    per_layer = 3 if options.get("use_dora") else 2  # A, B (and DoRA's magnitude)
    assert len(load_file(tmp_path / ADAPTER_WEIGHTS_FILE)) == per_layer * 7 * NUM_LAYERS


def test_a_fresh_adapter_leaves_the_outputs_and_trains_alone(llama_dir: Path) -> None:
    model = load_pretrained_policy(str(llama_dir)).eval()
    before = _logits(model)
    apply_lora(model, LoraSettings(rank=2, alpha=4.0))
    assert torch.equal(_logits(model), before)  # B = 0 at init: W x + 0
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    assert trainable == {name for name, _ in adapter_parameters(model)}
    assert len(trainable) == 2 * 7 * NUM_LAYERS
    assert all(".lora_A." in name or ".lora_B." in name for name in trainable)
    shapes = dict(model.named_parameters())
    q_a = shapes["model.layers.0.self_attn.q_proj.lora_A.default.weight"]
    q_b = shapes["model.layers.0.self_attn.q_proj.lora_B.default.weight"]
    assert (q_a.shape, q_b.shape) == ((2, 64), (64, 2))  # A [r, in], B [out, r]


def test_adapters_disabled_gives_exactly_the_base_logits(llama_dir: Path) -> None:
    base_logits = _logits(load_pretrained_policy(str(llama_dir)).eval())
    model = _adapted(llama_dir, LoraSettings(rank=4, alpha=8.0, use_dora=True))
    adapted = _logits(model)
    flags = [p.requires_grad for p in model.parameters()]
    with adapters_disabled(model):
        assert torch.equal(_logits(model), base_logits)
    assert torch.equal(_logits(model), adapted)  # back on afterwards
    assert [p.requires_grad for p in model.parameters()] == flags
    assert _max_diff(adapted, base_logits) > 0.5


@pytest.mark.parametrize("family", ["llama", "qwen2"])
@pytest.mark.parametrize("variant", ["lora", "dora"])
def test_merged_weights_give_the_adapter_logits(
    model_dirs: dict[str, Path], family: str, variant: str
) -> None:
    settings = LoraSettings(rank=4, alpha=8.0, **VARIANTS[variant])
    model = _adapted(model_dirs[family], settings).double()
    merged = merged_model(model).eval()
    assert type(merged) is LlamaForCausalLM
    assert not any("lora" in name for name in merged.state_dict())
    # float64, where a merge is exact up to rounding (measured 0: astrai's RMSNorm rounds its
    # input to float32); in float32, re-association alone moves logits by ~1e-5
    assert _max_diff(_logits(merged), _logits(model)) <= 1e-9
    assert "lora" in "".join(name for name, _ in model.named_parameters())  # model unchanged


def test_the_merged_export_loads_into_transformers(llama_dir: Path, tmp_path: Path) -> None:
    model = _adapted(llama_dir, LoraSettings(rank=4, alpha=8.0))
    merged = merged_model(model).eval()
    save_policy_dir(merged, load_tokenizer(llama_dir), tmp_path)
    theirs = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path)).eval()
    assert _max_diff(_logits(theirs, hf=True), _logits(merged)) <= PARITY
    assert _max_diff(_logits(theirs, hf=True), _logits(model)) <= 1e-4  # fp32 merge rounding


def test_adapter_state_round_trips(llama_dir: Path) -> None:
    settings = LoraSettings(rank=4, alpha=8.0)
    source, other = _adapted(llama_dir, settings, seed=0), _adapted(llama_dir, settings, seed=1)
    state = adapter_state_dict(source)
    assert len(state) == 2 * 7 * NUM_LAYERS
    assert "model.layers.0.self_attn.q_proj.lora_A.weight" in state  # no adapter name
    assert not torch.equal(_logits(other), _logits(source))
    load_adapter_state_dict(other, state)
    assert torch.equal(_logits(other), _logits(source))
    state.pop("model.layers.0.self_attn.q_proj.lora_A.weight")
    with pytest.raises(LoraConfigError, match=r"missing \['model.layers.0.self_attn.q_proj"):
        load_adapter_state_dict(other, state)


def test_named_targets_adapt_only_those_modules(llama_dir: Path) -> None:
    model = load_pretrained_policy(str(llama_dir))
    apply_lora(model, LoraSettings(rank=2, target_modules=["q_proj", "mlp.down_proj"]))
    adapted = {name.split(".lora_")[0] for name, _ in adapter_parameters(model)}
    assert adapted == {
        f"model.layers.{i}.{module}"
        for i in range(NUM_LAYERS)
        for module in ("self_attn.q_proj", "mlp.down_proj")
    }


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rank": 0}, "lora.rank must be a positive integer (got 0)"),
        ({"rank": 2.5}, "lora.rank must be a positive integer (got 2.5)"),
        ({"alpha": 0}, "lora.alpha must be in (0, 100000] (a finite number, got 0)"),
        ({"alpha": float("nan")}, "lora.alpha must be in (0, 100000] (a finite number, got nan)"),
        # an infinite scale passed, then the first update sampled from NaN probabilities
        ({"alpha": float("inf")}, "lora.alpha must be in (0, 100000] (a finite number, got inf)"),
        ({"alpha": 1e300}, "lora.alpha must be in (0, 100000] (a finite number, got 1e+300)"),
        ({"dropout": 1.0}, "lora.dropout must be in [0, 1) (got 1.0)"),
        ({"dropout": -0.1}, "lora.dropout must be in [0, 1) (got -0.1)"),
        ({"target_modules": "all_linear"}, "lora.target_modules must be a list of module names"),
        ({"target_modules": []}, "lora.target_modules must be a non-empty list"),
        ({"use_dora": "yes"}, "lora.use_dora must be true or false (got 'yes')"),
    ],
)
def test_bad_settings_are_one_line(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(LoraConfigError) as caught:
        LoraSettings(**kwargs)  # type: ignore[arg-type]
    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("target", ["qproj", "lm_head", "embed_tokens"])
def test_an_unknown_target_names_it_and_the_linear_modules(target: str) -> None:
    model = LlamaForCausalLM(LlamaConfig())
    with pytest.raises(LoraConfigError) as caught:
        apply_lora(model, LoraSettings(target_modules=["q_proj", target]))
    message = str(caught.value)
    assert f"no linear module named {target!r}" in message and "\n" not in message
    assert "down_proj, gate_proj, k_proj, o_proj, q_proj, up_proj, v_proj" in message
    assert not any(p.requires_grad is False for p in model.parameters())  # nothing injected


def test_adapters_are_applied_once_and_needed_where_used() -> None:
    model = LlamaForCausalLM(LlamaConfig())
    for use in (adapter_state_dict, merged_model):
        with pytest.raises(LoraConfigError, match="the model has no adapters"):
            use(model)
    with pytest.raises(LoraConfigError, match="the model has no adapters"):
        with adapters_disabled(model):
            pass
    apply_lora(model, LoraSettings(rank=2))
    with pytest.raises(LoraConfigError, match="^lora: the model already has adapters$"):
        apply_lora(model, LoraSettings(rank=2))


def test_missing_peft_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "peft", None)  # `import peft` raises ImportError
    model = LlamaForCausalLM(LlamaConfig())
    with pytest.raises(LoraConfigError) as caught:
        apply_lora(model, LoraSettings(rank=2))
    assert str(caught.value) == (
        "LoRA needs peft, which is not installed: pip install 'astrai[lora]' (or make install-dev)"
    )


def test_the_module_imports_without_peft(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "peft", None)
    # a fresh copy of the module under another name: the real one stays as the tests use it
    spec = importlib.util.spec_from_file_location("lora_without_peft", lora_module.__file__)
    assert spec is not None and spec.loader is not None
    fresh = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "lora_without_peft", fresh)  # dataclasses look it up
    spec.loader.exec_module(fresh)
    assert fresh.LoraSettings(rank=2).rank == 2


def test_the_export_config_is_json_peft_reads(llama_dir: Path, tmp_path: Path) -> None:
    model = _adapted(llama_dir, LoraSettings(rank=2, alpha=2.0, dropout=0.1))
    save_peft_adapter(model, tmp_path, "some/base")
    config = peft.PeftConfig.from_pretrained(str(tmp_path))
    assert isinstance(config, peft.LoraConfig)
    assert (config.r, config.lora_alpha, config.lora_dropout) == (2, 2.0, 0.1)
    assert json.loads((tmp_path / "adapter_config.json").read_text())["inference_mode"] is True
