"""``models.merged_weights.engine_weights``: what an engine with its own weights takes, under LoRA
the adapters merged in (issue 49: ``engine=vllm`` with ``model.lora``)."""

from __future__ import annotations

import torch

from astrai.models.llama import LlamaConfig, LlamaForCausalLM
from astrai.models.lora import LoraSettings, apply_lora, merged_model
from astrai.models.merged_weights import engine_weights
from astrai.models.weights import named_weights


def test_without_adapters_the_weights_as_they_lie() -> None:
    model = LlamaForCausalLM(LlamaConfig(num_hidden_layers=1))
    ours, plain = list(engine_weights(model)), list(named_weights(model))
    assert [n for n, _ in ours] == [n for n, _ in plain]
    assert all(a.data_ptr() == b.data_ptr() for (_, a), (_, b) in zip(ours, plain, strict=True))


def test_adapters_merged_under_the_plain_names_and_the_policy_untouched() -> None:
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(num_hidden_layers=2, initializer_range=0.2))
    apply_lora(model, LoraSettings(rank=4, alpha=8.0, target_modules=["q_proj", "down_proj"]))
    for name, param in model.named_parameters():
        if "lora_B" in name:  # B = 0 at init would make the merge a no-op
            torch.nn.init.normal_(param)
    before = {n: t.clone() for n, t in model.state_dict().items()}
    got = dict(engine_weights(model))
    expected = dict(named_weights(merged_model(model)))
    assert list(got) == list(expected)  # the plain model's names, in its order
    for name, tensor in expected.items():
        assert torch.equal(got[name], tensor), name
    # a merged layer differs from its base by scale * B @ A; an unadapted one is the base
    layer = model.model.layers[0].self_attn.q_proj
    delta = 2.0 * layer.lora_B["default"].weight @ layer.lora_A["default"].weight
    torch.testing.assert_close(
        got["model.layers.0.self_attn.q_proj.weight"], layer.base_layer.weight + delta
    )
    assert got["model.layers.0.self_attn.k_proj.weight"] is not None
    assert all(torch.equal(before[n], t) for n, t in model.state_dict().items())
