"""The strategies on a rollout of multi-turn episodes (``Rollout.sampled_mask``,
``token_scores``): advantages, GAE and values over the sampled tokens only, rewards on their
turns, the turn-level option; checked by hand and against the same episode without its
observation span."""

from __future__ import annotations

import torch
from tests.helpers import pass_plan
from torch.testing import assert_close

from astrai.algorithms.advantages import compute_gae
from astrai.algorithms.grpo import GRPOStrategy
from astrai.algorithms.ppo import PPOStrategy
from astrai.algorithms.rewards import episode_token_rewards
from astrai.algorithms.turn_credit import turns_of_runs
from astrai.models.llama import LlamaConfig, LlamaForCausalLM
from astrai.models.value_model import ValueModel
from astrai.rollout.engines.sampler import SamplingConfig
from astrai.rollout.rollout import Rollout

SHARED: dict[str, object] = dict(
    group_size=2, prompts_per_step=1, clip_eps=0.2, kl_coef=0.0, kl_estimator="k1",
    sampling=SamplingConfig(max_new_tokens=8), optimizer=torch.optim.SGD, scheduler=None,
    loss_agg="token_mean", clip_eps_low=None, clip_eps_high=None, clip_ratio_c=None,
    ratio_level="token", mask_truncated=False, filter_groups=False, max_resample_rounds=0,
)  # fmt: skip


def _ppo(gae_level: str = "token") -> PPOStrategy:
    return PPOStrategy(
        **SHARED, ppo_gamma=0.9, ppo_gae_lambda=0.8, ppo_vf_coef=0.5, value_clip=None,
        whiten_advantages=False, entropy_coef=0.0, advantage="gae", gae_level=gae_level,
    )  # fmt: skip


def test_turns_are_the_runs_of_sampled_tokens_and_scores_add_to_the_penalty() -> None:
    mask = torch.tensor([[True, True, False, False, True, False, True]])
    assert turns_of_runs(mask).tolist() == [[1, 1, 0, 0, 2, 0, 3]]
    kl = torch.full((1, 7), 2.0)
    scores = torch.tensor([[0.0, 0.5, 0.0, 0.0, 0.0, 0.0, 1.0]])
    # -0.1 * 2 on the sampled tokens, the scores where they lie
    expected = torch.tensor([[-0.2, 0.3, 0.0, 0.0, -0.2, 0.0, 0.8]])
    assert_close(episode_token_rewards(scores, kl, mask, 0.1), expected)


def _episode(observations: int) -> Rollout:
    """One prompt, two episodes of two turns (3 then 2 sampled tokens), ``observations``
    context tokens between the turns; rewards 0.5 on turn 1's last token, 1 / 0 at the end."""
    length = 5 + observations
    sampled = torch.zeros(2, length, dtype=torch.bool)
    sampled[:, :3] = True
    sampled[:, 3 + observations :] = True
    scores = torch.zeros(2, length)
    scores[:, 2] = 0.5
    scores[0, -1] = 1.0
    torch.manual_seed(0)
    ids = torch.randint(3, 40, (2, length))
    return Rollout(
        prompt_ids=torch.tensor([[5, 6, 7]]),
        prompt_mask=torch.ones(1, 3, dtype=torch.bool),
        response_ids=ids[None],
        response_mask=torch.ones(1, 2, length, dtype=torch.bool),
        logprobs=torch.zeros(1, 2, length),
        rewards=torch.tensor([[1.5, 0.5]]),
        policy_version=0,
        loss_mask=sampled[None],
        sampled_mask=sampled[None],
        token_scores=scores[None],
    )


def _critic() -> ValueModel:
    torch.manual_seed(0)
    config = LlamaConfig(num_hidden_layers=1, initializer_range=0.2)
    critic = ValueModel(config)
    critic.warm_start(LlamaForCausalLM(config))
    with torch.no_grad():
        critic.value_head.weight.normal_(0, 0.5)
    return critic


def test_grpo_gives_the_group_advantage_to_sampled_tokens_only() -> None:
    strategy = GRPOStrategy(**SHARED, adv_eps=1e-6, scale_rewards="none", advantage="grpo")
    rollout = _episode(observations=4)
    strategy.prepare(rollout, {"reference": None}, pass_plan())
    assert rollout.advantages is not None
    # rewards 1.5 and 0.5: ±0.5 on every sampled token, 0 on the observation span
    expected = torch.where(rollout.sampled_mask, torch.tensor([[[0.5], [-0.5]]]), 0.0)
    assert_close(rollout.advantages, expected)


def test_ppo_gae_runs_over_sampled_tokens_with_rewards_on_their_turns() -> None:
    critic = _critic()
    rollout = _episode(observations=4)
    _ppo().prepare(rollout, {"reference": None, "critic": critic}, pass_plan(trains_critic=True))
    assert rollout.values is not None and rollout.advantages is not None
    assert rollout.returns is not None
    sampled = rollout.sampled_mask[0]
    # the same recursion on the 5 sampled tokens alone, with the critic's values there
    rewards = rollout.token_scores[0][sampled].view(2, 5)
    values = rollout.values[0][sampled].view(2, 5)
    advantages, returns = compute_gae(rewards, values, torch.ones(2, 5, dtype=torch.bool), 0.9, 0.8)
    assert_close(rollout.advantages[0][sampled].view(2, 5), advantages)
    assert_close(rollout.returns[0][sampled].view(2, 5), returns)
    assert (rollout.advantages[0][~sampled] == 0).all()
    # by hand for the last token of episode 1: r = 1, no next value: A = 1 - V
    last = rollout.values[0, 0, -1]
    assert_close(rollout.advantages[0, 0, -1], 1.0 - last)


def test_ppo_turn_level_gives_each_turn_one_advantage() -> None:
    critic = _critic()
    rollout = _episode(observations=4)
    _ppo("turn").prepare(
        rollout, {"reference": None, "critic": critic}, pass_plan(trains_critic=True)
    )
    assert rollout.values is not None and rollout.advantages is not None
    v = rollout.values[0, 0]
    # turn 2 (last): r = 1, A_2 = 1 - V(first token of turn 2) = 1 - v[7]
    # turn 1: r = 0.5, A_1 = 0.5 + 0.9 V_2 - V_1 + 0.9 * 0.8 * A_2, V_1 = v[0]
    a2 = 1.0 - v[7]
    a1 = 0.5 + 0.9 * v[7] - v[0] + 0.9 * 0.8 * a2
    assert_close(rollout.advantages[0, 0, 7:], a2.expand(2))
    assert_close(rollout.advantages[0, 0, :3], a1.expand(3))
    assert (rollout.advantages[0, 0, 3:7] == 0).all()
