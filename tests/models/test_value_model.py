"""The ValueModel critic: zero head, warm start from the policy trunk, trunk parity, the
policy's gradient checkpointing."""

from __future__ import annotations

import pytest
import torch

from astrai.models.llama import LlamaConfig, LlamaForCausalLM, build_llama
from astrai.models.value_model import ValueModel, build_value_model


def test_value_head_starts_at_zero_so_values_are_zero(tiny_model: LlamaForCausalLM) -> None:
    critic = build_value_model(tiny_model)
    assert torch.equal(critic.value_head.weight, torch.zeros(1, 64))
    assert torch.equal(critic.value_head.bias, torch.zeros(1))
    values = critic(torch.tensor([[1, 5, 6, 7]]))
    assert values.shape == (1, 4) and torch.equal(values, torch.zeros(1, 4))


def test_loading_the_policy_trunk_leaves_only_the_value_head_missing(
    tiny_model: LlamaForCausalLM,
) -> None:
    critic = ValueModel(tiny_model.config)
    trunk = {k: v for k, v in tiny_model.state_dict().items() if k.startswith("model.")}
    result = critic.load_state_dict(trunk, strict=False)
    assert sorted(result.missing_keys) == ["value_head.bias", "value_head.weight"]
    assert result.unexpected_keys == []
    # identical parameter names: the critic's trunk keys are exactly the policy's trunk keys
    assert {k for k in critic.state_dict() if not k.startswith("value_head.")} == set(trunk)


def test_warm_start_copies_the_trunk_and_leaves_the_policy_untouched(
    tiny_model: LlamaForCausalLM,
) -> None:
    before = {k: v.clone() for k, v in tiny_model.state_dict().items()}
    critic = build_value_model(tiny_model)
    for name, tensor in critic.state_dict().items():
        if name.startswith("model."):
            assert torch.equal(tensor, before[name])
            assert tensor.data_ptr() != tiny_model.state_dict()[name].data_ptr()  # a copy
    cold = build_value_model(tiny_model, warm_start=False)
    assert not torch.equal(
        cold.model.layers[0].mlp.up_proj.weight, before["model.layers.0.mlp.up_proj.weight"]
    )


def test_trunk_parity_with_unit_head_on_padded_input(tiny_model: LlamaForCausalLM) -> None:
    critic = build_value_model(tiny_model)
    with torch.no_grad():
        critic.value_head.weight.fill_(1.0)
        critic.value_head.bias.zero_()
    ids = torch.tensor([[0, 0, 1, 4, 9, 12], [1, 7, 8, 9, 10, 11]])
    mask = torch.tensor([[False, False, True, True, True, True], [True] * 6])
    values = critic(ids, attention_mask=mask)
    hidden = tiny_model(ids, attention_mask=mask).hidden_states
    torch.testing.assert_close(values, hidden.sum(-1), atol=1e-5, rtol=1e-5)


def test_critic_has_no_lm_head() -> None:
    critic = ValueModel(LlamaConfig())
    assert not any(k.startswith("lm_head") for k in critic.state_dict())


@pytest.mark.parametrize("enabled", [False, True])
def test_the_critic_recomputes_its_layers_exactly_when_the_policy_does(enabled: bool) -> None:
    # the user's path: model.gradient_checkpointing -> build_llama (model=<preset>'s target)
    # sets the policy's flag -> build_value_model, as the trainer calls it
    policy = build_llama(gradient_checkpointing=enabled, num_hidden_layers=2)
    critic = build_value_model(policy).train()
    assert critic.model.gradient_checkpointing is enabled
    with torch.no_grad():
        critic.value_head.weight.fill_(1.0)  # a gradient that is not zero everywhere
    forwards: list[int] = []  # a pre-hook: a recompute stops once it has what backward needs
    for index, layer in enumerate(critic.model.layers):
        layer.register_forward_pre_hook(lambda *_, i=index: forwards.append(i))
    layers = list(range(policy.config.num_hidden_layers))
    ids = torch.tensor([[1, 5, 6, 7, 8], [0, 0, 4, 9, 3]])
    mask = torch.tensor([[True] * 5, [False, False, True, True, True]])
    values = critic(ids, attention_mask=mask)
    assert forwards == layers
    values.sum().backward()
    # checkpointed: backward runs every layer's forward again (last layer's gradient first);
    # plain: the activations were kept, no layer runs again
    assert forwards == layers + (layers[::-1] if enabled else [])
    assert all(p.grad is not None for p in critic.model.layers.parameters())
