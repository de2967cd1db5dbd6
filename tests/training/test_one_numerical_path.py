"""π_old, the reference and the update run one numerical path (issue 59, item 4): the same
whole-sequence forward over the same rows, in the same order and width, so in bf16 as in fp32
the policy the reference was made from reads a KL of exactly 0 against it, and each forward of
the update's first epoch reproduces π_old exactly (ratio 1), however the update splits its rows.

A hand-made model whose bf16 roundings show: one layer with an LM-like logit spread (weights
N(0, 0.2)), three prompts of 5 to 14 tokens (left-padded) × 4 responses of 1 to 12 tokens. In
bf16 on the CPU the shared-prompt cache and the whole-sequence forward round apart, and so do a
row run in one micro-batch and in another (its width, its neighbours): before, the reference
took the cache (``kl/k1`` 2.4e-4 here) and π_old its own scoring budget's split (2.2e-2 nats
from the update's forward at a 60-token update budget). Now both take the update's forwards
(``PassPlan.score_rollout``); the trainer's shuffled minibatches on SmolLM2's real weights are
``tests/e2e/test_smollm2_bf16_kl.py``.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import torch
from tests.helpers import compose_config, pass_plan

import astrai.algorithms.strategy as strategy_module
from astrai.algorithms.aggregation import Divisors
from astrai.algorithms.correction import Correction
from astrai.algorithms.grpo import GRPOStrategy
from astrai.algorithms.pass_plan import PassPlan
from astrai.models.llama import LlamaConfig, LlamaForCausalLM
from astrai.rollout.engines.sampler import SamplingConfig
from astrai.rollout.minibatch import Minibatch, flatten_rollout
from astrai.rollout.rollout import Rollout
from astrai.training.accumulation import accumulate_gradients
from astrai.training.run import Run

CONFIG = LlamaConfig(
    vocab_size=128,
    hidden_size=64,
    intermediate_size=256,
    num_hidden_layers=1,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=64,
)
PROMPT_LENGTHS, GROUP, RESPONSE_LENGTH = (9, 5, 14), 4, 12


def _policy() -> LlamaForCausalLM:
    torch.manual_seed(0)
    policy = LlamaForCausalLM(CONFIG).eval()
    with torch.no_grad():  # an LM-like logit spread, where bf16 rounds visibly
        for weight in policy.parameters():
            if weight.dim() > 1:
                weight.normal_(0.0, 0.2)
    return policy


def _rollout() -> Rollout:
    """``B = 3`` prompts, left-padded, ``G = 4`` random responses each, right-padded."""
    gen = torch.Generator().manual_seed(1)
    b, p = len(PROMPT_LENGTHS), max(PROMPT_LENGTHS)
    prompt_ids = torch.zeros(b, p, dtype=torch.long)
    prompt_mask = torch.zeros(b, p, dtype=torch.bool)
    for i, length in enumerate(PROMPT_LENGTHS):
        prompt_ids[i, p - length :] = torch.randint(1, CONFIG.vocab_size, (length,), generator=gen)
        prompt_mask[i, p - length :] = True
    shape = (b, GROUP, RESPONSE_LENGTH)
    kept = torch.randint(1, RESPONSE_LENGTH + 1, (b, GROUP, 1), generator=gen)
    response_mask = torch.arange(RESPONSE_LENGTH) < kept
    response_ids = torch.randint(1, CONFIG.vocab_size, shape, generator=gen) * response_mask
    rewards = torch.arange(b * GROUP, dtype=torch.float32).remainder(2).view(b, GROUP)
    return Rollout(
        prompt_ids, prompt_mask, response_ids, response_mask,
        logprobs=torch.zeros(shape), rewards=rewards, policy_version=0,
    )  # fmt: skip


def _grpo() -> GRPOStrategy:
    return GRPOStrategy(
        group_size=GROUP, prompts_per_step=len(PROMPT_LENGTHS), clip_eps=0.2, kl_coef=0.05,
        kl_estimator="k3", sampling=SamplingConfig(max_new_tokens=RESPONSE_LENGTH),
        optimizer=torch.optim.SGD, scheduler=None, adv_eps=1e-6, scale_rewards="group",
        advantage="grpo",
        loss_agg="token_mean", clip_eps_low=None, clip_eps_high=None, clip_ratio_c=None,
        ratio_level="token", mask_truncated=False, filter_groups=False, max_resample_rounds=0,
    )  # fmt: skip


def _passes(
    strategy: GRPOStrategy, micro_batch_size: int | None, update_tokens: int | None
) -> PassPlan:
    """One minibatch of every row, cut by ``micro_batch_size`` or ``update_tokens``."""
    temperature = strategy.sampling.temperature
    return pass_plan(micro_batch_size, None, update_tokens, temperature)


# the update's micro-batches of the 12 rows: all at once; by a 60-token budget (rows sorted by
# length, several parts, each trimmed); one row each (trimmed to its own columns)
@pytest.mark.parametrize(
    ("micro_batch_size", "update_tokens"), [(None, None), (None, 60), (1, None)]
)
def test_pi_old_the_reference_and_the_update_agree_bitwise_in_bf16(
    micro_batch_size: int | None, update_tokens: int | None
) -> None:
    policy, rollout = _policy(), _rollout()
    reference = copy.deepcopy(policy).requires_grad_(False)
    strategy = _grpo()
    passes = _passes(strategy, micro_batch_size, update_tokens)
    bf16 = torch.autocast("cpu", dtype=torch.bfloat16)
    with bf16:
        passes.recompute_old_logprobs(rollout, policy, Correction("none"))
        metrics = strategy.prepare(rollout, {"reference": reference}, passes)
    # the update's forwards (train mode, autograd on) of a minibatch of every row, in order
    minibatch = flatten_rollout(rollout)
    parts = passes.update_parts(policy, minibatch)
    assert (len(parts) == 1) == (micro_batch_size is None and update_tokens is None)
    micro_batches = (
        [minibatch] if len(parts) == 1 else [minibatch.select(p).trimmed() for p in parts]
    )
    policy.train()
    ratio_gap = 0.0  # the largest |log ratio| of the first update: 0 is a ratio of exactly 1
    for part in micro_batches:
        with bf16:
            logprobs, _ = strategy.policy_logprobs(policy, part)
        assert logprobs.requires_grad and part.old_logprobs is not None
        ratio_gap = max(ratio_gap, (logprobs.detach() - part.old_logprobs).abs().max().item())
    # the policy is the reference: KL exactly 0 (before: k1 2.4e-4, the cached reference pass);
    # the update's forwards are π_old's (before: 2.2e-2 nats apart at the 60-token budget)
    kl = [metrics[f"kl/{kind}"] for kind in ("k1", "k2", "k3")]
    assert (kl, ratio_gap) == ([0.0, 0.0, 0.0], 0.0)
    assert torch.equal(rollout.logprobs, rollout.ref_logprobs)


def test_at_one_update_a_step_the_update_measures_the_kl_of_its_own_forward() -> None:
    """One update a step under ``bypass``: π_old is the update's own forward (``old_logprobs``
    None), so the KL to the reference is measured there (``Strategy.kl_stats``), against the
    reference scored through the update's micro-batches: exactly 0, where ``prepare``'s
    measure of the engine's logprobs (here all 0, an engine far off) is not."""
    policy, rollout = _policy(), _rollout()
    reference = copy.deepcopy(policy).requires_grad_(False)
    strategy = _grpo()
    passes = _passes(strategy, None, 60)
    bf16 = torch.autocast("cpu", dtype=torch.bfloat16)
    with bf16:
        engine_kl = strategy.prepare(rollout, {"reference": reference}, passes)["kl/k1"]
    minibatch = flatten_rollout(rollout, old_from_update=True)
    parts = passes.update_parts(policy, minibatch)
    assert len(parts) > 1

    def loss(part: Minibatch, divisors: Divisors | None) -> tuple[torch.Tensor, dict]:
        with bf16:
            return strategy.loss(policy, part, divisors=divisors)

    metrics = accumulate_gradients(minibatch, parts, None, loss)
    assert engine_kl > 1.0  # the engine's logprobs of 0 against the reference's
    kl = {name: float(metrics[name]) for name in ("kl/k1", "kl/k2", "kl/k3", "loss/kl")}
    assert kl == dict.fromkeys(kl, 0.0)
    assert float(metrics["policy/approx_kl"]) == 0.0


def test_a_recomputed_pi_old_is_the_ratios_too_at_one_update(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """π_old recomputed at one update a step (``recompute`` and a correction) is what the ratio
    divides by, not the update's own forward: the mismatch weights and the ratio share one
    π_old, scored without dropout. With LoRA's dropout at 0.5 the update's train-mode forward
    is another (before: the ratio divided by it, while the weights came from the eval one)."""
    lora = ["model.lora.rank=4", "model.lora.alpha=8", "model.lora.dropout=0.5"]
    one_update = ["train_type.ppo_epochs=1", "train_type.minibatches=1"]
    recompute = ["engine.old_logprobs=recompute", "engine.correction=token_truncate"]
    cfg = compose_config(
        ["debug=quick", "logger.tensorboard=false", *lora, *one_update, *recompute]
    )
    trainer = Run(cfg, tmp_path)
    divided_by: list[torch.Tensor] = []
    clipped = strategy_module.clipped_policy_loss

    def recording(logprobs: torch.Tensor, old_logprobs: torch.Tensor, *args: Any, **kw: Any) -> Any:
        divided_by.append(old_logprobs.detach().clone())
        return clipped(logprobs, old_logprobs, *args, **kw)

    trainer.train_step()  # an update: the adapters' B leaves 0, so their dropout shows
    monkeypatch.setattr(strategy_module, "clipped_policy_loss", recording)
    rollout = trainer.trainer.rollout()
    trainer.trainer.prepare(rollout)
    assert rollout.is_weights is not None  # token_truncate's, from rollout.logprobs (π_old)
    shuffle = torch.Generator().set_state(trainer.started.state.generators["shuffle"].get_state())
    order = torch.randperm(rollout.rewards.numel(), generator=shuffle)  # the one minibatch
    trainer.trainer.update(rollout)
    (old,) = divided_by  # one minibatch run whole
    assert torch.equal(old, rollout.flat("logprobs")[order])
