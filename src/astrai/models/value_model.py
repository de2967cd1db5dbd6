"""The PPO critic: the policy's trunk plus a scalar value head.

Self-contained: the policy class is untouched. The trunk has the policy's parameter names
(``model.embed_tokens``, ``model.layers.N...``, ``model.norm``), so the policy's trunk weights
load into it directly (warm start); ``value_head`` is zero-initialised, so V ≡ 0 at the start and
the first advantages are the discounted rewards themselves. The trunk recomputes its activations
in backward exactly when the policy's does (``model.gradient_checkpointing``).
"""

from __future__ import annotations

from functools import partial

import torch
from torch import Tensor, nn

from astrai.models.kv_cache import KVCache
from astrai.models.llama import (
    LlamaConfig,
    LlamaForCausalLM,
    LlamaModel,
    init_weights,
    new_cache,
    set_gradient_checkpointing,
)

TRUNK_PREFIX = "model."


class ValueModel(nn.Module):
    """``V(prefix)`` for every position: trunk -> final norm -> ``Linear(hidden, 1)``."""

    def __init__(self, config: LlamaConfig) -> None:
        super().__init__()
        self.config = config
        self.model = LlamaModel(config)
        self.model.apply(partial(init_weights, std=config.initializer_range))
        self.value_head = nn.Linear(config.hidden_size, 1)
        nn.init.zeros_(self.value_head.weight)
        nn.init.zeros_(self.value_head.bias)

    def forward(
        self, input_ids: Tensor, attention_mask: Tensor | None = None, cache: KVCache | None = None
    ) -> Tensor:
        """``input_ids [N, T]``, ``attention_mask [N, past + T]`` bool (every token when
        omitted) -> values ``[N, T]``; ``cache`` (past tokens, ``new_cache``) is filled with the
        new keys/values when given."""
        hidden = self.model(input_ids, attention_mask, cache=cache)
        return self.value_head(hidden).squeeze(-1)

    def new_cache(
        self, batch_size: int, max_length: int, dtype: torch.dtype | None = None
    ) -> KVCache:
        """An empty KV cache for ``batch_size`` rows of up to ``max_length`` tokens (in
        ``dtype``; None: the weights')."""
        weights = self.model.embed_tokens.weight
        return new_cache(self.config, weights, batch_size, max_length, dtype)

    def warm_start(self, policy: LlamaForCausalLM) -> None:
        """Copy the policy's trunk weights (its ``lm_head`` is not part of the trunk)."""
        trunk = {k: v for k, v in policy.state_dict().items() if k.startswith(TRUNK_PREFIX)}
        result = self.load_state_dict(trunk, strict=False)
        unexpected = list(result.unexpected_keys)
        missing = [k for k in result.missing_keys if not k.startswith("value_head.")]
        if unexpected or missing:
            raise ValueError(f"policy trunk does not fit the critic: {missing=} {unexpected=}")


def build_value_model(policy: LlamaForCausalLM, warm_start: bool = True) -> ValueModel:
    """A critic with the policy's architecture, trunk copied from it when ``warm_start``, and
    the policy's gradient checkpointing (the flag lives on the trunk, not in ``LlamaConfig``, so
    a fresh trunk would not inherit it: the critic's activations are as large as the policy's)."""
    critic = ValueModel(policy.config).to(policy.lm_head.weight.device)
    set_gradient_checkpointing(critic, policy.model.gradient_checkpointing)
    if warm_start:
        critic.warm_start(policy)
    return critic
