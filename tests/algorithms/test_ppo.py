"""PPO math pinned by hand: GAE cases, KL folded into rewards, the PPO loss and its gradients."""

from __future__ import annotations

import math

import torch

from astrai.algorithms.advantages import compute_gae
from astrai.algorithms.kl import kl_estimate
from astrai.algorithms.ppo import PPOStrategy
from astrai.algorithms.rewards import last_token_index, token_rewards
from astrai.models.llama import LlamaConfig, LlamaForCausalLM
from astrai.models.value_model import ValueModel
from astrai.rollout.engines.sampler import SamplingConfig
from astrai.rollout.minibatch import Minibatch


def _ppo(**kwargs: object) -> PPOStrategy:
    # every knob explicit (the strategy has no defaults): the values the hand-worked losses below
    # assume, not the shipped conf/train_type/online_ppo.yaml
    defaults: dict[str, object] = dict(
        group_size=2, prompts_per_step=2, clip_eps=0.2, kl_coef=0.1, kl_estimator="k3",
            sampling=SamplingConfig(max_new_tokens=8), optimizer=torch.optim.SGD, scheduler=None,
        ppo_gamma=1.0, ppo_gae_lambda=0.95,
        ppo_vf_coef=0.5, value_clip=None, whiten_advantages=True, entropy_coef=0.0,
        advantage="gae", loss_agg="token_mean", clip_eps_low=None, clip_eps_high=None,
        clip_ratio_c=None, ratio_level="token", mask_truncated=False, filter_groups=False,
        max_resample_rounds=0,
    )  # fmt: skip
    return PPOStrategy(**{**defaults, **kwargs})


def test_gae_gamma_lambda_one_zero_values_reward_one_at_end() -> None:
    # V ≡ 0, γ = λ = 1, reward 1 on the last valid token: every δ_t is 0 except the last (1), and
    # A_t = Σ δ = 1 at every valid token; returns = A + V = 1.
    mask = torch.tensor([[True, True, True, False], [True, False, False, False]])
    rewards = torch.tensor([[0.0, 0.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0]])
    advantages, returns = compute_gae(rewards, torch.zeros(2, 4), mask, 1.0, 1.0)
    expected = mask.float()
    torch.testing.assert_close(advantages, expected)
    torch.testing.assert_close(returns, expected)


def test_gae_lambda_zero_is_the_td_residual() -> None:
    # δ_t = r_t + γ V_{t+1} − V_t with γ = 0.5, V = [1, 2, 4], r = [0, 1, 2], V_3 = 0:
    # δ = [0 + 1 − 1, 1 + 2 − 2, 2 + 0 − 4] = [0, 1, −2]
    rewards = torch.tensor([[0.0, 1.0, 2.0]])
    values = torch.tensor([[1.0, 2.0, 4.0]])
    mask = torch.ones(1, 3, dtype=torch.bool)
    advantages, returns = compute_gae(rewards, values, mask, 0.5, 0.0)
    torch.testing.assert_close(advantages, torch.tensor([[0.0, 1.0, -2.0]]))
    torch.testing.assert_close(returns, torch.tensor([[1.0, 3.0, 2.0]]))


def test_gae_padded_row_with_garbage_gives_the_same_valid_outputs() -> None:
    rewards = torch.tensor([[0.1, -0.2, 1.0]])
    values = torch.tensor([[0.3, 0.5, 0.2]])
    mask = torch.ones(1, 3, dtype=torch.bool)
    clean_adv, clean_ret = compute_gae(rewards, values, mask, 0.9, 0.8)
    garbage_rewards = torch.cat([rewards, torch.tensor([[1e6, -3e5]])], dim=1)
    garbage_values = torch.cat([values, torch.tensor([[-7e4, 9e5]])], dim=1)
    padded_mask = torch.cat([mask, torch.zeros(1, 2, dtype=torch.bool)], dim=1)
    adv, ret = compute_gae(garbage_rewards, garbage_values, padded_mask, 0.9, 0.8)
    torch.testing.assert_close(adv[:, :3], clean_adv)
    torch.testing.assert_close(ret[:, :3], clean_ret)
    assert (adv[:, 3:] == 0).all() and (ret[:, 3:] == 0).all()


def test_kl_folded_into_rewards_k1_and_k3_worked_example() -> None:
    # log r = ref − logp = [−0.5, 1.0]; score 1 on the last token; kl_coef 0.1.
    logprobs = torch.tensor([[-1.0, -2.0]])
    ref_logprobs = torch.tensor([[-1.5, -1.0]])
    mask = torch.ones(1, 2, dtype=torch.bool)
    score = torch.tensor([1.0])
    # k1 = −log r = [0.5, −1.0] -> rewards [−0.05, 1 + 0.1] = [−0.05, 1.1]
    k1 = kl_estimate(logprobs, ref_logprobs, "k1")
    torch.testing.assert_close(token_rewards(score, k1, mask, 0.1), torch.tensor([[-0.05, 1.1]]))
    # k3 = r − 1 − log r: e^−0.5 − 1 + 0.5 = 0.1065307, e^1 − 1 − 1 = 0.7182818
    k3 = kl_estimate(logprobs, ref_logprobs, "k3")
    expected = torch.tensor([[-0.1 * (math.exp(-0.5) - 0.5), 1.0 - 0.1 * (math.e - 2.0)]])
    torch.testing.assert_close(token_rewards(score, k3, mask, 0.1), expected)
    torch.testing.assert_close(expected, torch.tensor([[-0.01065307, 0.92817182]]))


def test_score_lands_on_the_last_valid_token_and_empty_rows_get_zeros() -> None:
    mask = torch.tensor([[True, True, False], [False, False, False], [True, True, True]])
    assert last_token_index(mask).tolist() == [1, -1, 2]
    rewards = token_rewards(torch.tensor([0.5, 0.7, 1.0]), torch.zeros(3, 3), mask, 0.1)
    torch.testing.assert_close(
        rewards, torch.tensor([[0.0, 0.5, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    )


def _models() -> tuple[LlamaForCausalLM, ValueModel]:
    torch.manual_seed(0)
    config = LlamaConfig(num_hidden_layers=1, initializer_range=0.2)
    policy = LlamaForCausalLM(config)
    critic = ValueModel(config)
    critic.warm_start(policy)
    with torch.no_grad():
        critic.value_head.weight.normal_(0, 0.5)  # a critic with an opinion
    return policy, critic


def _batch(policy: LlamaForCausalLM, empty_row: bool = False) -> Minibatch:
    torch.manual_seed(1)
    n, p, r = 4, 3, 5
    prompt_ids = torch.randint(3, 48, (n, p))
    prompt_mask = torch.ones(n, p, dtype=torch.bool)
    prompt_mask[0, 0] = False  # one left-padded prompt
    response_ids = torch.randint(3, 48, (n, r))
    lengths = torch.tensor([5, 3, 1, 0 if empty_row else 4])
    response_mask = torch.arange(r)[None] < lengths[:, None]
    return Minibatch(
        prompt_ids=prompt_ids,
        prompt_mask=prompt_mask,
        response_ids=response_ids,
        response_mask=response_mask,
        old_logprobs=torch.randn(n, r) * 0.1 - 3.0,
        ref_logprobs=torch.zeros(n, r),
        advantages=torch.randn(n, r),
        values=torch.randn(n, r) * 0.1,
        returns=torch.randn(n, r),
    )


def test_zero_critic_zero_advantages_zero_returns_give_zero_loss() -> None:
    policy, critic = _models()
    with torch.no_grad():
        critic.value_head.weight.zero_()
        critic.value_head.bias.zero_()
    batch = _batch(policy)
    batch.advantages = torch.zeros_like(batch.advantages)
    batch.returns = torch.zeros_like(batch.returns)
    batch.values = torch.zeros_like(batch.values)
    loss, metrics = _ppo(value_clip=0.2).loss(policy, batch, critic)
    assert loss.item() == 0.0
    assert metrics["loss/value"].item() == 0.0


def test_empty_response_gives_a_finite_loss() -> None:
    policy, critic = _models()
    loss, _ = _ppo().loss(policy, _batch(policy, empty_row=True), critic)
    loss.backward()
    assert torch.isfinite(loss)
    assert all(torch.isfinite(p.grad).all() for p in critic.parameters() if p.grad is not None)


def test_loss_and_gradients_same_whole_or_as_two_micro_batches() -> None:
    ppo = _ppo(value_clip=0.3)
    policy, critic = _models()
    batch = _batch(policy)
    params = [*policy.parameters(), *critic.parameters()]

    loss, _ = ppo.loss(policy, batch, critic)
    whole = torch.autograd.grad(loss, params, allow_unused=True)

    # gradient accumulation: each micro-batch's token-mean loss weighted by its token share
    total_tokens = batch.num_tokens
    accumulated_loss = torch.zeros(())
    for rows in (torch.tensor([0, 2]), torch.tensor([1, 3])):
        part = batch.select(rows)
        part_loss, _ = ppo.loss(policy, part, critic)
        accumulated_loss = accumulated_loss + part_loss * part.num_tokens / total_tokens
    split = torch.autograd.grad(accumulated_loss, params, allow_unused=True)

    torch.testing.assert_close(accumulated_loss, loss, atol=1e-6, rtol=1e-5)
    for g_whole, g_split in zip(whole, split, strict=True):
        if g_whole is None:
            assert g_split is None
            continue
        torch.testing.assert_close(g_split, g_whole, atol=1e-6, rtol=1e-4)
    # the naive mean of the two micro-batch losses differs (uneven token counts): the test bites
    halves = [ppo.loss(policy, batch.select(r), critic)[0] for r in ([0, 2], [1, 3])]
    assert abs((halves[0] + halves[1]).item() / 2 - loss.item()) > 1e-4
