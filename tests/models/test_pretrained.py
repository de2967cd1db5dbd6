"""Hugging Face checkpoints in and out, checked against ``transformers`` itself."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import transformers  # the hf extra; `make test` installs it
from tests.hf_models import CLASS_PREFIX, save_tiny_hf_model

from astrai.checkpoints.policy import load_policy
from astrai.models.pretrained import (
    ModelDirError,
    load_critic_dir,
    load_pretrained_policy,
    save_critic_dir,
    save_policy_dir,
)
from astrai.models.saved_tokenizer import load_tokenizer
from astrai.models.tokenizer import CharTokenizer
from astrai.models.value_model import build_value_model
from astrai.rollout.collect import left_pad
from astrai.rollout.engines.sampler import SamplingConfig, generate

PROMPTS = ["3+4=", "12+9=", "reverse: abc=", "7+7="]  # different lengths: left padding


# every supported family (issue 33): llama with and without Llama 3's RoPE scaling, qwen2,
# qwen3 (q/k norms, head_dim 24 != 64 / 4), mistral; one untied
FAMILIES = ["llama", "llama3", "qwen2", "qwen3", "mistral", "qwen3-untied"]
PARITY = 1e-5  # max |logit difference| in float32, logits of magnitude ~5


@pytest.fixture(scope="module", params=FAMILIES)
def hf_dir(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    family, _, untied = request.param.partition("-")
    return save_tiny_hf_model(tmp_path_factory.mktemp(request.param), family, tied=not untied)


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    return left_pad(CharTokenizer(), PROMPTS)


def _hf_logits(model: torch.nn.Module, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask.long()).logits


def test_loaded_model_matches_transformers_logits(hf_dir: Path) -> None:
    ours = load_pretrained_policy(str(hf_dir)).eval()
    theirs = transformers.AutoModelForCausalLM.from_pretrained(str(hf_dir)).eval()
    ids, mask = _batch()
    with torch.no_grad():
        logits = ours(ids, mask).logits
    reference = _hf_logits(theirs, ids, mask)
    assert reference[mask].abs().max() > 1.0  # far from zero: a wrong weight would show
    assert (logits[mask] - reference[mask]).abs().max() <= PARITY
    assert ours.config.model_type == json.loads((hf_dir / "config.json").read_text())["model_type"]


def test_biases_of_qwen2_are_loaded(tmp_path: Path) -> None:
    hf_dir = save_tiny_hf_model(tmp_path, "qwen2")
    ours = load_pretrained_policy(str(hf_dir))
    assert ours.config.attention_bias
    bias = ours.model.layers[1].self_attn.k_proj.bias
    assert bias is not None and bias.abs().max() > 0.1
    assert ours.model.layers[0].self_attn.o_proj.bias is None  # Qwen2 has none either


def test_greedy_generations_are_identical(hf_dir: Path) -> None:
    ours = load_pretrained_policy(str(hf_dir)).eval()
    theirs = transformers.AutoModelForCausalLM.from_pretrained(str(hf_dir)).eval()
    ids, mask = _batch()
    new = 12
    out = generate(ours, ids, mask, SamplingConfig(max_new_tokens=new, temperature=0.0), -1, 0)
    with torch.no_grad():
        reference = theirs.generate(
            input_ids=ids,
            attention_mask=mask.long(),
            max_new_tokens=new,
            min_new_tokens=new,
            do_sample=False,
            eos_token_id=None,
            pad_token_id=0,
        )
    assert out.response_ids.shape == (len(PROMPTS), new)
    assert torch.equal(out.response_ids, reference[:, ids.shape[1] :])


def test_export_loads_back_into_transformers(hf_dir: Path, tmp_path: Path) -> None:
    ours = load_pretrained_policy(str(hf_dir)).eval()
    with torch.no_grad():  # move away from the source weights: the export must carry ours
        ours.model.norm.weight.mul_(1.5)
    tokenizer = load_tokenizer(hf_dir)
    save_policy_dir(ours, tokenizer, tmp_path)
    theirs = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path)).eval()
    ids, mask = _batch()
    with torch.no_grad():
        logits = ours(ids, mask).logits
    assert (_hf_logits(theirs, ids, mask)[mask] - logits[mask]).abs().max() <= PARITY
    exported = json.loads((tmp_path / "config.json").read_text())
    source = json.loads((hf_dir / "config.json").read_text())
    for key in ("architectures", "model_type", "rope_parameters"):
        assert exported[key] == source[key], key
    assert exported["head_dim"] == source.get("head_dim", 64 // 4)
    assert type(theirs).__name__ == source["architectures"][0]
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    assert hf_tokenizer("12+9=").input_ids == CharTokenizer().encode("12+9=")
    assert hf_tokenizer.eos_token_id == 2 and hf_tokenizer.pad_token_id == 0
    # and astrai reads its own export: the same logits
    again = load_pretrained_policy(str(tmp_path)).eval()
    with torch.no_grad():
        assert torch.equal(again(ids, mask).logits, logits)


def _edit_json(path: Path, **changes: object) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_export_declares_only_the_tokenizers_special_tokens(family: str, tmp_path: Path) -> None:
    # Qwen2-style: no BOS and no pad token, only EOS
    src = save_tiny_hf_model(tmp_path / "src", family)
    _edit_json(src / "tokenizer_config.json", bos_token=None, pad_token=None)
    (src / "generation_config.json").unlink()  # nothing of the source's to keep
    tokenizer = load_tokenizer(src)
    assert (tokenizer.bos_id, tokenizer.eos_id, tokenizer.pad_id) == (2, 2, 2)  # fill values
    ours = load_pretrained_policy(str(src)).eval()
    out = tmp_path / "out"
    out.mkdir()
    save_policy_dir(ours, tokenizer, out)
    # null, as transformers writes it: a missing key would read as LlamaConfig's bos 1
    config = json.loads((out / "config.json").read_text())
    assert [config[f"{k}_token_id"] for k in ("bos", "eos", "pad")] == [None, 2, None]
    assert json.loads((out / "generation_config.json").read_text()) == {"eos_token_id": 2}
    theirs = transformers.AutoModelForCausalLM.from_pretrained(str(out)).eval()
    assert (theirs.config.bos_token_id, theirs.config.pad_token_id) == (None, None)
    assert theirs.generation_config.bos_token_id is None
    assert theirs.generation_config.eos_token_id == 2
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(str(out))
    assert (hf_tokenizer.bos_token_id, hf_tokenizer.eos_token_id) == (None, 2)
    again = load_policy(out)
    assert again.tokenizer.special_token_ids == tokenizer.special_token_ids
    ids, mask = _batch()
    with torch.no_grad():
        logits = ours(ids, mask).logits
        assert torch.equal(again.policy(ids, mask).logits, logits)
        assert torch.allclose(_hf_logits(theirs, ids, mask)[mask], logits[mask], atol=1e-4, rtol=0)


def test_export_keeps_the_source_generation_config(tmp_path: Path) -> None:
    src = save_tiny_hf_model(tmp_path / "src", "qwen2")
    source = {
        "bos_token_id": 1,
        "eos_token_id": [2, 0],
        "pad_token_id": 0,
        "do_sample": True,
        "temperature": 0.7,
        "top_p": 0.8,
    }
    (src / "generation_config.json").write_text(json.dumps(source))
    # through a checkpoint, as the export reads it: the tokenizer files carry the config
    checkpoint = tmp_path / "step_1"
    checkpoint.mkdir()
    load_tokenizer(src).save(checkpoint)
    out = tmp_path / "out"
    out.mkdir()
    save_policy_dir(load_pretrained_policy(str(src)), load_tokenizer(checkpoint), out)
    assert json.loads((out / "generation_config.json").read_text()) == source
    generation = transformers.GenerationConfig.from_pretrained(str(out))
    assert (generation.eos_token_id, generation.temperature, generation.top_p) == ([2, 0], 0.7, 0.8)


def test_export_in_bfloat16_halves_the_weights(tmp_path: Path) -> None:
    hf_dir = save_tiny_hf_model(tmp_path / "src")
    ours = load_pretrained_policy(str(hf_dir))
    for name in ("f32", "bf16"):
        (tmp_path / name).mkdir()
    save_policy_dir(ours, CharTokenizer(), tmp_path / "f32", "float32")
    save_policy_dir(ours, CharTokenizer(), tmp_path / "bf16", "bfloat16")
    f32 = (tmp_path / "f32" / "model.safetensors").stat().st_size
    bf16 = (tmp_path / "bf16" / "model.safetensors").stat().st_size
    assert bf16 < 0.55 * f32
    config = json.loads((tmp_path / "bf16" / "config.json").read_text())
    assert config["torch_dtype"] == "bfloat16"
    theirs = transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / "bf16"))
    assert theirs.model.embed_tokens.weight.dtype == torch.bfloat16


@pytest.mark.parametrize("family", ["llama", "qwen2", "qwen3", "mistral"])
def test_critic_export_round_trips(family: str, tmp_path: Path) -> None:
    policy = load_pretrained_policy(str(save_tiny_hf_model(tmp_path / "src", family)))
    critic = build_value_model(policy).eval()
    with torch.no_grad():  # a trained head: non-zero weight and bias
        critic.value_head.weight.normal_(0.0, 1.0)
        critic.value_head.bias.fill_(0.25)
    out = tmp_path / "critic"
    out.mkdir()
    save_critic_dir(critic, CharTokenizer(), out)
    ids, mask = _batch()
    with torch.no_grad():
        values = critic(ids, mask)
    theirs = transformers.AutoModelForTokenClassification.from_pretrained(str(out)).eval()
    assert type(theirs).__name__ == f"{CLASS_PREFIX[family]}ForTokenClassification"
    reference = _hf_logits(theirs, ids, mask)
    assert reference.shape == (*ids.shape, 1)
    assert (reference[..., 0][mask] - values[mask]).abs().max() <= PARITY
    again = load_critic_dir(out).eval()
    with torch.no_grad():
        assert torch.equal(again(ids, mask), values)


def test_a_config_the_weights_disagree_with_is_refused_before_building(tmp_path: Path) -> None:
    """``head_dim`` edited to 1000000: the policy (and a critic) would be built at 1.5e9
    parameters before the weights' shapes disagreed; the safetensors header is read first."""
    source = save_tiny_hf_model(tmp_path / "src", "llama")
    critic = build_value_model(load_pretrained_policy(str(source)))
    out = tmp_path / "critic"
    out.mkdir()
    save_critic_dir(critic, CharTokenizer(), out)
    for directory, load in ((source, load_pretrained_policy), (out, load_critic_dir)):
        _edit_config(directory, head_dim=1_000_000)
        message = f"{directory / 'model.safetensors'}: model.layers.0.self_attn.k_proj.weight"
        with pytest.raises(ModelDirError, match=f"^{message} has shape .* config.json says"):
            load(str(directory))


def _edit_config(directory: Path, **changes: object) -> None:
    path = directory / "config.json"
    config = json.loads(path.read_text())
    config.update(changes)
    path.write_text(json.dumps(config))


# a key astrai would otherwise ignore, or a value it cannot compute exactly (issue 33 item 5)
REFUSED = [
    ({"model_type": "gemma3"}, "model_type 'gemma3' is not supported"),
    ({"hidden_act": "gelu"}, "hidden_act='gelu' is not supported"),
    ({"attention_bias": True}, "attention_bias=true on a llama model"),
    ({"head_dim": 15}, r"model.head_dim \(15\) must be even"),
    ({"head_dim": 32}, r"model.layers.0.self_attn.[qk]_proj.weight has shape"),
    ({"rope_parameters": {"rope_type": "dynamic", "factor": 2.0}}, "rope_type 'dynamic'"),
    ({"rope_scaling": {"type": "longrope", "factor": 2.0}}, "rope_type 'longrope'"),
    ({"rope_parameters": {"rope_type": "llama3", "factor": 8.0}}, "needs 'low_freq_factor'"),
    ({"rope_parameters": {"rope_type": "linear", "factor": 2.0, "mscale": 1.0}}, "key 'mscale'"),
    ({"rope_parameters": {"rope_type": "linear", "factor": -2.0}}, "factor must be a number > 0"),
    ({"sliding_window": 16}, "sliding_window=16 is not supported"),
    (
        {"layer_types": ["full_attention", "sliding_attention"], "sliding_window": 8},
        r"layer_types=\['full_attention', 'sliding_attention'\] is not supported",
    ),
    ({"attention_dropout": 0.1}, "attention_dropout=0.1 is not supported"),
    ({"quantization_config": {"quant_method": "gptq"}}, "key 'quantization_config'"),
    ({"attn_logit_softcapping": 30.0}, "key 'attn_logit_softcapping'"),
    ({"partial_rotary_factor": 0.5}, "partial_rotary_factor=0.5 is not supported"),
    ({"intermediate_size": 96}, "model.layers.0.mlp.down_proj.weight has shape"),
]


@pytest.mark.parametrize(("changes", "needle"), REFUSED)
def test_unsupported_or_inconsistent_checkpoints_are_refused(
    tmp_path: Path, changes: dict[str, object], needle: str
) -> None:
    hf_dir = save_tiny_hf_model(tmp_path)
    _edit_config(hf_dir, **changes)
    with pytest.raises(ModelDirError, match=needle) as err:
        load_pretrained_policy(str(hf_dir))
    assert str(hf_dir) in str(err.value)


def test_missing_weights_name_the_file(tmp_path: Path) -> None:
    hf_dir = save_tiny_hf_model(tmp_path)
    (hf_dir / "model.safetensors").rename(hf_dir / "pytorch_model.bin")
    with pytest.raises(ModelDirError, match="model.safetensors: file is missing.*convert"):
        load_pretrained_policy(str(hf_dir))


def test_sharded_weights_load(tmp_path: Path) -> None:
    src = save_tiny_hf_model(tmp_path / "src")
    model = transformers.AutoModelForCausalLM.from_pretrained(str(src))
    model.save_pretrained(str(tmp_path / "sharded"), max_shard_size="60KB")
    assert (tmp_path / "sharded" / "model.safetensors.index.json").is_file()
    ours, reference = (
        load_pretrained_policy(str(src)),
        load_pretrained_policy(str(tmp_path / "sharded")),
    )
    for name, tensor in ours.state_dict().items():
        assert torch.equal(tensor, reference.state_dict()[name]), name
