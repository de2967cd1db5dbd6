"""GRPOStrategy's advantage options (issue 19) pinned by hand: grpo / dr_grpo / rloo broadcast
to the response tokens, REINFORCE++ with its KL in the reward instead of the loss, and the
option combinations that are refused."""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from astrai.algorithms.grpo import GRPOStrategy
from astrai.models.llama import LlamaForCausalLM
from astrai.rollout.engines.sampler import SamplingConfig
from astrai.rollout.minibatch import Minibatch
from astrai.rollout.rollout import Rollout

EPS = 1e-6


def _grpo(**kwargs: object) -> GRPOStrategy:
    # every knob explicit (the strategy has no defaults): the values the hand-worked numbers
    # below assume, not the shipped conf/train_type/online_grpo.yaml
    defaults: dict[str, object] = dict(
        group_size=4, prompts_per_step=2, clip_eps=0.2, kl_coef=0.1, kl_estimator="k1",
            sampling=SamplingConfig(max_new_tokens=8), optimizer=torch.optim.SGD, scheduler=None,
        adv_eps=EPS, scale_rewards="group", advantage="grpo", loss_agg="token_mean",
        clip_eps_low=None, clip_eps_high=None, clip_ratio_c=None, ratio_level="token",
        mask_truncated=False, filter_groups=False, max_resample_rounds=0,
    )  # fmt: skip
    return GRPOStrategy(**{**defaults, **kwargs})


# B = 2 prompts x G = 4 responses x R = 3 tokens; response lengths [3, 1, 2, 3] and [1, 2, 3, 2].
#   rewards row 0: [1, 0, 1, 2]  mean 1, centred [0, -1, 0, 1],   population std sqrt(1/2)
#   rewards row 1: [5, 5, 1, 1]  mean 3, centred [2, 2, -2, -2],  population std 2
#   all 8: mean 2, population var 26/8 = 3.25 (batch std sqrt(13)/2)
REWARDS = torch.tensor([[1.0, 0.0, 1.0, 2.0], [5.0, 5.0, 1.0, 1.0]])
LENGTHS = torch.tensor([[3, 1, 2, 3], [1, 2, 3, 2]])


def _rollout(rewards: torch.Tensor = REWARDS, lengths: torch.Tensor = LENGTHS) -> Rollout:
    b, g = rewards.shape
    r = 3
    torch.manual_seed(0)
    response_mask = torch.arange(r) < lengths[..., None]
    logprobs = -torch.rand(b, g, r) - 0.5
    return Rollout(
        prompt_ids=torch.randint(3, 48, (b, 2)),
        prompt_mask=torch.ones(b, 2, dtype=torch.bool),
        response_ids=torch.randint(3, 48, (b, g, r)),
        response_mask=response_mask,
        logprobs=logprobs,
        rewards=rewards,
        policy_version=0,
        ref_logprobs=logprobs - 0.1,
    )


def _per_response(values: list[list[float]]) -> torch.Tensor:
    """``[B, G]`` hand values broadcast to the rollout's valid tokens (0 at padding)."""
    mask = torch.arange(3) < LENGTHS[..., None]
    return torch.tensor(values)[..., None] * mask


def test_grpo_advantages_divide_by_the_group_std():
    a = 1.0 / (0.5**0.5 + EPS)  # ~ 1.41421
    b = 2.0 / (2.0 + EPS)  # ~ 1
    expected = _per_response([[0.0, -a, 0.0, a], [b, b, -b, -b]])
    advantages = _grpo().advantages(_rollout())
    assert_close(advantages, expected)
    # a response of length 1 has its advantage on its single token, padding stays 0
    assert advantages[0, 1].tolist() == pytest.approx([-a, 0.0, 0.0])


def test_grpo_batch_scale_divides_by_the_batch_std():
    s = 3.25**0.5 + EPS
    expected = _per_response([[0.0, -1 / s, 0.0, 1 / s], [2 / s, 2 / s, -2 / s, -2 / s]])
    assert_close(_grpo(scale_rewards="batch").advantages(_rollout()), expected)


@pytest.mark.parametrize(
    "options", [dict(advantage="dr_grpo"), dict(scale_rewards="none")], ids=["dr_grpo", "none"]
)
def test_dr_grpo_advantages_are_the_centred_rewards(options):
    expected = _per_response([[0.0, -1.0, 0.0, 1.0], [2.0, 2.0, -2.0, -2.0]])
    assert_close(_grpo(**options).advantages(_rollout()), expected)


def test_rloo_advantages_leave_one_out():
    # A_i = r_i - (sum - r_i) / 3: row 0 [0, -4/3, 0, 4/3], row 1 [8/3, 8/3, -8/3, -8/3]
    expected = _per_response([[0.0, -4 / 3, 0.0, 4 / 3], [8 / 3, 8 / 3, -8 / 3, -8 / 3]])
    assert_close(_grpo(advantage="rloo").advantages(_rollout()), expected)


@pytest.mark.parametrize("advantage", ["grpo", "dr_grpo", "rloo"])
def test_constant_group_gets_zero_advantages(advantage):
    rewards = torch.tensor([[0.1, 0.1, 0.1, 0.1], [5.0, 5.0, 1.0, 1.0]])
    advantages = _grpo(advantage=advantage).advantages(_rollout(rewards))
    assert torch.equal(advantages[0], torch.zeros(4, 3))
    assert (advantages[1][_rollout().response_mask[1]] != 0).all()


def test_reinforce_pp_advantages_hand_values():
    # One prompt, two responses: lengths 2 and 1, scores 1 and 0, kl_coef 0.1, k1.
    #   row 0: logp - ref = [-1 - (-1.5), -1 - (-1)] = [0.5, 0] -> rewards [-0.05, 0 + 1]
    #   row 1: logp - ref = [0]                      -> rewards [0 + 0]
    #   returns (reverse cumsum): [0.95, 1], [0]; mean 1.95 / 3 = 0.65
    #   deviations [0.3, 0.35], [-0.65]; var (0.09 + 0.1225 + 0.4225) / 3 = 0.635 / 3
    #   advantages = deviation / sqrt(0.635 / 3 + 1e-8); padding 0
    rollout = Rollout(
        prompt_ids=torch.tensor([[5, 6]]),
        prompt_mask=torch.ones(1, 2, dtype=torch.bool),
        response_ids=torch.tensor([[[7, 8], [9, 10]]]),
        response_mask=torch.tensor([[[True, True], [True, False]]]),
        logprobs=torch.tensor([[[-1.0, -1.0], [-2.0, float("nan")]]], dtype=torch.float64),
        rewards=torch.tensor([[1.0, 0.0]], dtype=torch.float64),
        policy_version=0,
        ref_logprobs=torch.tensor([[[-1.5, -1.0], [-2.0, 3.0]]], dtype=torch.float64),
    )
    advantages = _grpo(advantage="reinforce_pp", group_size=2).advantages(rollout)
    scale = (0.635 / 3 + 1e-8) ** 0.5
    expected = torch.tensor([[[0.3, 0.35], [-0.65, 0.0]]], dtype=torch.float64) / scale
    assert_close(advantages, expected)
    assert advantages[0, 1, 1].item() == 0.0


def _minibatch() -> Minibatch:
    torch.manual_seed(1)
    n, p, r = 4, 3, 5
    lengths = torch.tensor([5, 3, 1, 4])
    return Minibatch(
        prompt_ids=torch.randint(3, 48, (n, p)),
        prompt_mask=torch.ones(n, p, dtype=torch.bool),
        response_ids=torch.randint(3, 48, (n, r)),
        response_mask=torch.arange(r)[None] < lengths[:, None],
        old_logprobs=torch.randn(n, r) * 0.1 - 3.0,
        ref_logprobs=torch.zeros(n, r),  # far from the policy: the KL term is clearly nonzero
        advantages=torch.randn(n, r),
    )


def test_reinforce_pp_loss_has_no_kl_term_and_grpo_has_one(tiny_model: LlamaForCausalLM):
    batch = _minibatch()
    rpp = _grpo(advantage="reinforce_pp")
    grpo = _grpo(advantage="grpo")
    assert not rpp.kl_in_loss and grpo.kl_in_loss

    rpp_loss, rpp_metrics = rpp.loss(tiny_model, batch)
    grpo_loss, grpo_metrics = grpo.loss(tiny_model, batch)
    kl = grpo_metrics["loss/kl"]
    assert abs(kl.item()) > 1e-2  # the test bites: the two totals differ by 0.1 * kl

    # REINFORCE++: total = policy (the KL lives in the rewards); KL still reported
    assert torch.equal(rpp_metrics["loss/total"], rpp_metrics["loss/policy"])
    assert_close(rpp_loss.detach(), rpp_metrics["loss/policy"])
    assert_close(rpp_metrics["loss/kl"], kl)
    # GRPO: total = policy + kl_coef * kl
    assert_close(grpo_metrics["loss/total"], grpo_metrics["loss/policy"] + 0.1 * kl)
    assert_close(grpo_loss.detach(), grpo_metrics["loss/total"])
    # same surrogate in both
    assert_close(rpp_metrics["loss/policy"], grpo_metrics["loss/policy"])


def test_invalid_option_combinations_raise():
    with pytest.raises(ValueError, match="scale_rewards=batch applies to advantage=grpo"):
        _grpo(advantage="rloo", scale_rewards="batch")
    with pytest.raises(ValueError, match="scale_rewards=none applies to advantage=grpo"):
        _grpo(advantage="dr_grpo", scale_rewards="none")
    with pytest.raises(ValueError, match="scale_rewards"):
        _grpo(advantage="reinforce_pp", scale_rewards="batch")
    with pytest.raises(ValueError, match="scale_rewards must be one of"):
        _grpo(scale_rewards="global")
    with pytest.raises(ValueError, match="advantage must be one of"):
        _grpo(advantage="gae")
    with pytest.raises(ValueError, match="loss_agg must be one of"):
        _grpo(loss_agg="sum")
    with pytest.raises(ValueError, match="ratio_level must be one of"):
        _grpo(ratio_level="segment")
