"""Group statistics over the valid members only (issue 58): a failed episode (``Rollout.valid``
False) leaves every group and batch statistic and gets advantage 0, pinned by hand for each
estimator; ``valid=None`` is bitwise an all-True ``valid``."""

from __future__ import annotations

import pytest
import torch
from tests.helpers import pass_plan
from torch.testing import assert_close

from astrai.algorithms.advantages import alike_groups, group_advantages, rloo_advantages
from astrai.algorithms.grpo import GRPOStrategy
from astrai.algorithms.ppo import PPOStrategy
from astrai.models.llama import LlamaConfig
from astrai.models.value_model import ValueModel
from astrai.rollout.engines.sampler import SamplingConfig
from astrai.rollout.rollout import Rollout

EPS = 1e-6

# Seven successes and one failed episode (a tool timeout: reward 0, not the policy's).
#   today's code: mean 7/8, population std sqrt(7/64) = 0.3307 -> each success +0.378
#   over the valid members: seven equal rewards -> no signal, every advantage exactly 0
TIMEOUT_REWARDS = torch.tensor([[1.0] * 7 + [0.0]])
TIMEOUT_VALID = torch.tensor([[True] * 7 + [False]])

# Row 0: [1, 0, 2, 5] with the 5 invalid -> valid 1, 0, 2: mean 1, centred [0, -1, 1],
#        population var 2/3 (std sqrt(2/3)); leave-one-out baselines 1, 1.5, 0.5.
# Row 1: [3, 1, 3, 1] all valid: mean 2, centred [1, -1, 1, -1], std 1; leave-one-out
#        baselines 5/3, 7/3, 5/3, 7/3.
# Batch: the 7 valid rewards 1, 0, 2, 3, 1, 3, 1: sum 11, squares 25,
#        var 25/7 - (11/7)² = 54/49 (std sqrt(54)/7).
MIXED_REWARDS = torch.tensor([[1.0, 0.0, 2.0, 5.0], [3.0, 1.0, 3.0, 1.0]])
MIXED_VALID = torch.tensor([[True, True, True, False], [True, True, True, True]])


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_a_failed_episode_pushes_no_success(scale: str) -> None:
    before = group_advantages(TIMEOUT_REWARDS, eps=EPS, scale="group")
    assert before[0, 0].item() == pytest.approx(0.378, abs=1e-3)  # the fault's push, unmasked
    advantages = group_advantages(TIMEOUT_REWARDS, eps=EPS, scale=scale, valid=TIMEOUT_VALID)
    assert torch.equal(advantages, torch.zeros(1, 8))
    assert torch.equal(rloo_advantages(TIMEOUT_REWARDS, TIMEOUT_VALID), torch.zeros(1, 8))


def test_grpo_mixed_groups_over_the_valid_members() -> None:
    a = 1.0 / ((2 / 3) ** 0.5 + EPS)
    b = 1.0 / (1.0 + EPS)
    expected = torch.tensor([[0.0, -a, a, 0.0], [b, -b, b, -b]])
    assert_close(group_advantages(MIXED_REWARDS, eps=EPS, valid=MIXED_VALID), expected)


def test_dr_grpo_mixed_groups_are_centred_on_the_valid_mean() -> None:
    expected = torch.tensor([[0.0, -1.0, 1.0, 0.0], [1.0, -1.0, 1.0, -1.0]])
    advantages = group_advantages(MIXED_REWARDS, scale="none", valid=MIXED_VALID)
    assert_close(advantages, expected)


def test_batch_scale_divides_by_the_std_of_the_valid_rewards() -> None:
    s = 54**0.5 / 7 + EPS
    expected = torch.tensor([[0.0, -1.0, 1.0, 0.0], [1.0, -1.0, 1.0, -1.0]]) / s
    advantages = group_advantages(MIXED_REWARDS, eps=EPS, scale="batch", valid=MIXED_VALID)
    assert_close(advantages, expected)


def test_rloo_leaves_out_the_invalid_members_of_the_baseline() -> None:
    # A_i = r_i - mean of the other valid rewards: row 0 [1 - 1, 0 - 1.5, 2 - 0.5, 0],
    # row 1 [3 - 5/3, 1 - 7/3, 3 - 5/3, 1 - 7/3]
    expected = torch.tensor([[0.0, -1.5, 1.5, 0.0], [4 / 3, -4 / 3, 4 / 3, -4 / 3]])
    assert_close(rloo_advantages(MIXED_REWARDS, MIXED_VALID), expected)


@pytest.mark.parametrize("estimator", ["group", "batch", "none", "rloo"])
def test_fewer_than_two_valid_members_give_zeros(estimator: str) -> None:
    rewards = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [2.0, 0.0, 0.5]])
    valid = torch.tensor([[True, False, False], [False, False, False], [True, True, True]])

    def advantages(v: torch.Tensor) -> torch.Tensor:
        if estimator == "rloo":
            return rloo_advantages(rewards, v)
        return group_advantages(rewards, eps=EPS, scale=estimator, valid=v)

    result = advantages(valid)
    assert torch.equal(result[:2], torch.zeros(2, 3))
    assert (result[2] != 0).all()  # the full group still learns
    assert alike_groups(rewards, valid).tolist() == [True, True, False]


@pytest.mark.parametrize("estimator", ["group", "batch", "none", "rloo"])
def test_valid_none_is_bitwise_an_all_true_valid(estimator: str) -> None:
    generator = torch.Generator().manual_seed(3)
    rewards = torch.rand(6, 5, generator=generator).round(decimals=1)  # ties, some groups alike
    rewards[2] = 0.7
    everything = torch.ones(6, 5, dtype=torch.bool)
    if estimator == "rloo":
        pair = rloo_advantages(rewards), rloo_advantages(rewards, everything)
    else:
        pair = (
            group_advantages(rewards, scale=estimator),
            group_advantages(rewards, scale=estimator, valid=everything),
        )
    assert torch.equal(*pair)
    assert (pair[0] != 0).any()


def _grpo(**kwargs: object) -> GRPOStrategy:
    # every knob explicit (the strategy has no defaults)
    defaults: dict[str, object] = dict(
        group_size=4, prompts_per_step=2, clip_eps=0.2, kl_coef=0.1, kl_estimator="k1",
            sampling=SamplingConfig(max_new_tokens=8), optimizer=torch.optim.SGD, scheduler=None,
        adv_eps=EPS, scale_rewards="group", advantage="grpo", loss_agg="token_mean",
        clip_eps_low=None, clip_eps_high=None, clip_ratio_c=None, ratio_level="token",
        mask_truncated=False, filter_groups=False, max_resample_rounds=0,
    )  # fmt: skip
    return GRPOStrategy(**{**defaults, **kwargs})


def _rollout(
    rewards: torch.Tensor, valid: torch.Tensor | None, tokens: int = 2, vocab: int = 48
) -> Rollout:
    """Every response ``tokens`` long; logprobs 0.5 above the reference's on the first token."""
    b, g = rewards.shape
    logprobs = torch.full((b, g, tokens), -1.0, dtype=rewards.dtype)
    ref_logprobs = logprobs.clone()
    ref_logprobs[..., 0] = -1.5
    return Rollout(
        prompt_ids=torch.randint(3, vocab, (b, 2), generator=torch.Generator().manual_seed(0)),
        prompt_mask=torch.ones(b, 2, dtype=torch.bool),
        response_ids=torch.full((b, g, tokens), 7),
        response_mask=torch.ones(b, g, tokens, dtype=torch.bool),
        logprobs=logprobs,
        rewards=rewards,
        policy_version=0,
        ref_logprobs=ref_logprobs,
        valid=valid,
    )


@pytest.mark.parametrize(
    ("options", "per_response"),
    [
        (dict(advantage="grpo"), group_advantages(MIXED_REWARDS, eps=EPS, valid=MIXED_VALID)),
        (dict(advantage="dr_grpo"), torch.tensor([[0.0, -1, 1, 0], [1, -1, 1, -1]])),
        (
            dict(advantage="rloo"),
            torch.tensor([[0.0, -1.5, 1.5, 0], [4 / 3, -4 / 3, 4 / 3, -4 / 3]]),
        ),
    ],
    ids=["grpo", "dr_grpo", "rloo"],
)
def test_strategy_passes_the_rollouts_valid(options: dict, per_response: torch.Tensor) -> None:
    advantages = _grpo(**options).advantages(_rollout(MIXED_REWARDS, MIXED_VALID))
    assert_close(advantages, per_response[..., None].expand(2, 4, 2))


def test_reinforce_pp_whitens_over_the_valid_responses_only() -> None:
    # kl_coef 0.1, k1: logp - ref = [0.5, 0] on every response -> KL rewards [-0.05, 0].
    # Valid: scores 1 and 0 -> token rewards [-0.05, 1] and [-0.05, 0]; returns [0.95, 1],
    #   [-0.05, 0]; mean 1.9 / 4 = 0.475, deviations [0.475, 0.525], [-0.525, -0.475],
    #   var (2 · 0.475² + 2 · 0.525²) / 4 = 0.25 + 0.025² = 0.250625.
    # The failed third (score 9) is left out and gets 0.
    rewards = torch.tensor([[1.0, 0.0, 9.0]], dtype=torch.float64)
    valid = torch.tensor([[True, True, False]])
    advantages = _grpo(advantage="reinforce_pp", group_size=3).advantages(_rollout(rewards, valid))
    expected = torch.tensor([[[0.475, 0.525], [-0.525, -0.475], [0.0, 0.0]]], dtype=torch.float64)
    assert_close(advantages, expected / (0.250625 + 1e-8) ** 0.5)


def _ppo(whiten: bool) -> PPOStrategy:
    defaults: dict[str, object] = dict(
        group_size=3, prompts_per_step=1, clip_eps=0.2, kl_coef=0.0, kl_estimator="k3",
            sampling=SamplingConfig(max_new_tokens=8), optimizer=torch.optim.SGD, scheduler=None,
        ppo_gamma=1.0, ppo_gae_lambda=1.0, ppo_vf_coef=0.5, value_clip=None,
        whiten_advantages=whiten, entropy_coef=0.0, advantage="gae", loss_agg="token_mean",
        clip_eps_low=None, clip_eps_high=None, clip_ratio_c=None, ratio_level="token",
        mask_truncated=False, filter_groups=False, max_resample_rounds=0,
    )  # fmt: skip
    return PPOStrategy(**defaults)


@pytest.mark.parametrize("whiten", [True, False], ids=["whitened", "raw"])
def test_ppo_whitening_counts_the_valid_responses_only(whiten: bool) -> None:
    # A fresh ValueModel's head is zero: V = 0. γ = λ = 1, kl_coef 0: each token's advantage
    # is its response's score: [1, 1], [0, 0], and [3, 3] for the failed third.
    # Whitened over the valid tokens {1, 1, 0, 0}: mean 0.5, var 0.25 -> ±0.5 / sqrt(0.25 + 1e-8)
    # (over all six the mean would be 4/3). The failed response gets 0 either way.
    config = LlamaConfig(num_hidden_layers=1)
    critic = ValueModel(config)
    rewards = torch.tensor([[1.0, 0.0, 3.0]])
    rollout = _rollout(rewards, torch.tensor([[True, True, False]]), vocab=config.vocab_size)
    metrics = _ppo(whiten).prepare(
        rollout, {"reference": None, "critic": critic}, pass_plan(trains_critic=True)
    )
    if whiten:
        a = 0.5 / (0.25 + 1e-8) ** 0.5
        expected = torch.tensor([[[a, a], [-a, -a], [0.0, 0.0]]])
    else:
        expected = torch.tensor([[[1.0, 1.0], [0.0, 0.0], [0.0, 0.0]]])
    assert_close(rollout.advantages, expected)
    assert metrics["returns/mean"] == pytest.approx(0.5)  # (1 + 1 + 0 + 0) / 4, not 8/6
