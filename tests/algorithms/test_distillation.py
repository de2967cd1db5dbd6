"""On-policy distillation's estimators (``algorithms.distillation``) against their definitions,
worked by hand on a 4-token vocabulary in float64, and the signal each algorithm takes from
them (GRPO's advantage, PPO's token rewards through GAE, the loss term)."""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from astrai.algorithms.advantages import compute_gae
from astrai.algorithms.distillation import (
    DistillSettings,
    forward_topk_terms,
    k1_rewards,
    k3_loss_terms,
    rewards_to_go,
)
from astrai.algorithms.grpo import GRPOStrategy
from astrai.algorithms.ppo import PPOStrategy
from astrai.models.llama import LlamaConfig, LlamaForCausalLM
from astrai.rollout.engines.sampler import SamplingConfig
from astrai.rollout.minibatch import Minibatch
from astrai.rollout.rollout import Rollout

# the student's logits θ and the teacher's over a 4-token vocabulary
THETA = torch.tensor([0.3, -1.2, 0.8, 0.1], dtype=torch.float64)
TEACHER = torch.tensor([1.5, 0.2, -0.7, 0.4], dtype=torch.float64)
EVERY_TOKEN = torch.arange(4)


def _grpo(**kwargs: object) -> GRPOStrategy:
    values: dict[str, object] = dict(
        group_size=4, prompts_per_step=2, clip_eps=0.2, kl_coef=0.1, kl_estimator="k1",
        sampling=SamplingConfig(max_new_tokens=8), optimizer=torch.optim.SGD, scheduler=None,
        adv_eps=1e-6, scale_rewards="group", advantage="grpo", loss_agg="token_mean",
        clip_eps_low=None, clip_eps_high=None, clip_ratio_c=None, ratio_level="token",
        mask_truncated=False, filter_groups=False, max_resample_rounds=0,
    )  # fmt: skip
    return GRPOStrategy(**{**values, **kwargs})  # type: ignore[arg-type]


def _rollout() -> Rollout:
    """B = 2 prompts × G = 4 responses × R = 3 tokens, responses of lengths 1 to 3."""
    torch.manual_seed(0)
    lengths = torch.tensor([[3, 1, 2, 3], [1, 2, 3, 2]])
    logprobs = -torch.rand(2, 4, 3) - 0.5
    return Rollout(
        prompt_ids=torch.randint(3, 48, (2, 2)),
        prompt_mask=torch.ones(2, 2, dtype=torch.bool),
        response_ids=torch.randint(3, 48, (2, 4, 3)),
        response_mask=torch.arange(3) < lengths[..., None],
        logprobs=logprobs,
        rewards=torch.tensor([[1.0, 0.0, 1.0, 2.0], [5.0, 5.0, 1.0, 1.0]]),
        policy_version=0,
        ref_logprobs=logprobs - 0.1,
    )


def _settings(**kwargs: object) -> DistillSettings:
    values: dict[str, object] = dict(
        estimator="k1", coef=1.0, topk=4, use_task_reward=False, discount=None,
        log_prob_min_clamp=None, loss_max_clamp=None,
    )  # fmt: skip
    return DistillSettings(**{**values, **kwargs})  # type: ignore[arg-type]


def _reverse_kl(theta: torch.Tensor) -> torch.Tensor:
    """KL(π_θ ‖ π_T) summed over the vocabulary: the definition."""
    p, q = theta.log_softmax(-1), TEACHER.log_softmax(-1)
    return (p.exp() * (p - q)).sum()


def _forward_kl(theta: torch.Tensor) -> torch.Tensor:
    """KL(π_T ‖ π_θ) summed over the vocabulary."""
    p, q = theta.log_softmax(-1), TEACHER.log_softmax(-1)
    return (q.exp() * (q - p)).sum()


def _grad(f, theta: torch.Tensor = THETA) -> torch.Tensor:  # noqa: ANN001
    theta = theta.clone().requires_grad_(True)
    f(theta).backward()
    assert theta.grad is not None
    return theta.grad


def test_k1_through_the_score_function_is_the_gradient_of_the_reverse_kl() -> None:
    """E_{y~π}[−r(y) ∇log π(y)] with r = −(log π − log π_T) detached: the policy gradient of the
    k1 reward, every token weighed by its probability."""

    def policy_gradient_loss(theta: torch.Tensor) -> torch.Tensor:
        logprobs = theta.log_softmax(-1)[EVERY_TOKEN]
        teacher = TEACHER.log_softmax(-1)[EVERY_TOKEN]
        mask = torch.ones(4, dtype=torch.bool)
        rewards = k1_rewards(logprobs.detach(), teacher, mask, coef=1.0)
        weights = logprobs.detach().exp()  # π(y): the expectation over the sampled token
        return -(weights * rewards * logprobs).sum()

    assert_close(_grad(policy_gradient_loss), _grad(_reverse_kl))
    assert _grad(_reverse_kl).abs().max() > 0.1  # a real gradient, not two zeros


def test_the_k3_loss_is_in_expectation_the_gradient_of_the_forward_kl() -> None:
    """∇k3 = (1 − π_T/π)∇log π, whose mean over y ~ π is −Σ π_T ∇log π = ∇ KL(π_T ‖ π): k3 as a
    direct loss minimises the forward KL in gradient (its value estimates the reverse one)."""

    def expected_k3(theta: torch.Tensor) -> torch.Tensor:
        logprobs = theta.log_softmax(-1)
        terms = k3_loss_terms(logprobs, TEACHER.log_softmax(-1))
        return (logprobs.detach().exp() * terms).sum()

    assert_close(_grad(expected_k3), _grad(_forward_kl))
    assert not torch.allclose(_grad(_forward_kl), _grad(_reverse_kl))  # two different targets
    # its value is the reverse KL's unbiased estimate: Σ π (ρ − 1 − log ρ) = KL(π ‖ π_T)
    logprobs = THETA.log_softmax(-1)
    value = (logprobs.exp() * k3_loss_terms(logprobs, TEACHER.log_softmax(-1))).sum()
    assert_close(value, _reverse_kl(THETA))


def test_forward_top_k_over_the_whole_vocabulary_is_the_full_forward_kl() -> None:
    teacher_top, top_ids = TEACHER.log_softmax(-1).topk(4)

    def top_k(theta: torch.Tensor) -> torch.Tensor:
        return forward_topk_terms(theta.log_softmax(-1)[top_ids], teacher_top)

    assert_close(top_k(THETA), _forward_kl(THETA))
    assert_close(_grad(top_k), _grad(_forward_kl))


def test_forward_top_k_puts_the_rest_of_the_vocabulary_in_one_tail_bucket() -> None:
    """q = [0.5, 0.3, 0.15, 0.05], p uniform, k = 2: 0.5 log 2 + 0.3 log 1.2 + 0.2 log 0.4."""
    q = torch.tensor([0.5, 0.3], dtype=torch.float64).log()
    p = torch.tensor([0.25, 0.25], dtype=torch.float64).log()
    expected = 0.5 * math.log(2) + 0.3 * math.log(1.2) + 0.2 * math.log(0.2 / 0.5)
    assert forward_topk_terms(p, q).item() == pytest.approx(expected, rel=1e-12)
    assert forward_topk_terms(p, q, loss_max=0.1).item() == pytest.approx(0.1)


def test_the_clamps_bound_the_signal() -> None:
    logprobs = torch.tensor([-1.0, -30.0], dtype=torch.float64)
    teacher = torch.tensor([-40.0, -1.0], dtype=torch.float64)
    mask = torch.ones(2, dtype=torch.bool)
    assert k1_rewards(logprobs, teacher, mask, 1.0).tolist() == [-39.0, 29.0]
    # floored at -10 both: [-1 vs -10] -> -9; [-10 vs -1] -> 9
    assert k1_rewards(logprobs, teacher, mask, 1.0, log_prob_min=-10.0).tolist() == [-9.0, 9.0]
    terms = k3_loss_terms(logprobs, teacher, loss_max=5.0)
    assert terms.max().item() == 5.0


def test_rewards_to_go_skip_the_observation_tokens() -> None:
    """rewards [1, 2, ·, 3] with token 2 an observation, γ = 0.5: 3; 2 + 0.5·3 = 3.5;
    1 + 0.5·3.5 = 2.75; the observation 0."""
    rewards = torch.tensor([[1.0, 2.0, 9.0, 3.0]])
    mask = torch.tensor([[True, True, False, True]])
    assert rewards_to_go(rewards, mask, 0.5).tolist() == [[2.75, 3.5, 0.0, 3.0]]
    assert rewards_to_go(rewards, mask, None).tolist() == [[1.0, 2.0, 0.0, 3.0]]


def _distilled(rollout: Rollout) -> Rollout:
    rollout.teacher_logprobs = rollout.logprobs + torch.linspace(-0.3, 0.4, 3)
    return rollout


def test_grpo_adds_the_k1_signal_to_the_advantage() -> None:
    """Distillation alone: the advantage is each sampled token's −(log π_old − log π_T), 0 at
    padding; with the task's reward: the group advantage plus that."""
    rollout = _distilled(_rollout())
    mask = rollout.response_mask
    k1 = torch.where(mask, rollout.teacher_logprobs - rollout.logprobs, torch.zeros(()))
    alone = _grpo()
    alone.distill = _settings()
    assert_close(alone.advantages(rollout), k1)
    both = _grpo()
    both.distill = _settings(use_task_reward=True, coef=0.5)
    assert_close(both.advantages(rollout), _grpo().advantages(rollout) + 0.5 * k1)
    discounted = _grpo()
    discounted.distill = _settings(discount=1.0)
    assert_close(discounted.advantages(rollout), rewards_to_go(k1, mask, 1.0))


def _ppo(**kwargs: object) -> PPOStrategy:
    values: dict[str, object] = dict(
        group_size=1, prompts_per_step=1, clip_eps=0.2, kl_coef=0.0, kl_estimator="k1",
        sampling=SamplingConfig(max_new_tokens=3), optimizer=torch.optim.SGD, scheduler=None,
        advantage="gae", loss_agg="token_mean", clip_eps_low=None, clip_eps_high=None,
        clip_ratio_c=None, ratio_level="token", mask_truncated=False, filter_groups=False,
        max_resample_rounds=0, ppo_gamma=1.0, ppo_gae_lambda=0.5, ppo_vf_coef=0.5,
        value_clip=None, whiten_advantages=False, entropy_coef=0.0,
    )  # fmt: skip
    return PPOStrategy(**{**values, **kwargs})  # type: ignore[arg-type]


def test_ppo_runs_the_distillation_reward_through_gae() -> None:
    """log π_old [-1, -2, -0.5], log π_T [-0.5, -1, -1.5]: rewards [0.5, 1, -1] (the task's
    reward 1 left out); values [0.2, 0.1, -0.3], γ 1, λ 0.5:
    δ2 = -1 + 0.3 = -0.7 = A2; δ1 = 1 - 0.3 - 0.1 = 0.6, A1 = 0.6 - 0.35 = 0.25;
    δ0 = 0.5 + 0.1 - 0.2 = 0.4, A0 = 0.4 + 0.125 = 0.525."""
    rollout = Rollout(
        prompt_ids=torch.tensor([[5]]),
        prompt_mask=torch.ones(1, 1, dtype=torch.bool),
        response_ids=torch.tensor([[[4, 6, 7]]]),
        response_mask=torch.ones(1, 1, 3, dtype=torch.bool),
        logprobs=torch.tensor([[[-1.0, -2.0, -0.5]]], dtype=torch.float64),
        rewards=torch.tensor([[1.0]], dtype=torch.float64),
        policy_version=0,
        teacher_logprobs=torch.tensor([[[-0.5, -1.0, -1.5]]], dtype=torch.float64),
    )
    ppo = _ppo()
    ppo.distill = _settings()
    rewards = ppo.token_rewards(rollout, rollout.action_mask())
    assert_close(rewards, torch.tensor([[[0.5, 1.0, -1.0]]], dtype=torch.float64))
    values = torch.tensor([[[0.2, 0.1, -0.3]]], dtype=torch.float64)
    advantages, returns = compute_gae(rewards, values, rollout.action_mask(), 1.0, 0.5)
    assert_close(advantages, torch.tensor([[[0.525, 0.25, -0.7]]], dtype=torch.float64))
    assert_close(returns, advantages + values)
    ppo.distill = _settings(use_task_reward=True)  # the task's 1 on the last token
    with_task = ppo.token_rewards(rollout, rollout.action_mask())
    assert_close(with_task, torch.tensor([[[0.5, 1.0, 0.0]]], dtype=torch.float64))


def test_the_k3_loss_term_is_coef_times_its_token_mean() -> None:
    grpo = _grpo(kl_coef=0.0)
    grpo.distill = _settings(estimator="k3", coef=0.5)
    logprobs = torch.tensor([[-1.0, -2.0, -0.5]])
    teacher = torch.tensor([[-0.5, -1.0, -1.5]])
    mask = torch.tensor([[True, True, False]])
    batch = Minibatch(
        prompt_ids=torch.tensor([[5]]), prompt_mask=torch.ones(1, 1, dtype=torch.bool),
        response_ids=torch.tensor([[4, 6, 7]]), response_mask=mask, old_logprobs=None,
        ref_logprobs=None, advantages=torch.zeros(1, 3), teacher_logprobs=teacher,
    )  # fmt: skip
    loss, metrics = grpo.distill_loss(logprobs, None, batch, None)
    # k3 of x = 0.5 and x = 1: (e^0.5 - 1.5 + e - 2) / 2 tokens
    expected = ((math.exp(0.5) - 1.5) + (math.e - 2.0)) / 2
    assert loss is not None and loss.item() == pytest.approx(0.5 * expected, rel=1e-6)
    assert metrics["loss/distill"].item() == pytest.approx(expected, rel=1e-6)
    grpo.distill = _settings()  # k1: a reward, no loss term
    assert grpo.distill_loss(logprobs, None, batch, None) == (None, {})


@pytest.mark.parametrize("advantage", ["grpo", "dr_grpo", "rloo", "reinforce_pp"])
def test_every_critic_free_estimator_adds_the_same_k1_signal(advantage: str) -> None:
    """GRPO, Dr. GRPO, RLOO and REINFORCE++: the advantage is the task's own estimate plus
    ``coef ×`` each sampled token's k1 reward (slime's ``Â_t = A_t − λ(log π − log π_T)``), and
    without the task's reward the task's estimate is exactly 0."""
    rollout = _distilled(_rollout())
    mask = rollout.response_mask
    k1 = torch.where(mask, rollout.teacher_logprobs - rollout.logprobs, torch.zeros(()))
    strategy = _grpo(advantage=advantage, kl_coef=0.0)
    strategy.distill = _settings(use_task_reward=True, coef=0.25)
    task = strategy.task_advantages(rollout)
    assert task.abs().max() > 0.1
    assert_close(strategy.advantages(rollout), task + 0.25 * k1)
    strategy.distill = _settings()
    assert strategy.task_advantages(rollout).abs().max() == 0.0
    assert_close(strategy.advantages(rollout), k1)


@pytest.mark.parametrize("estimator", ["k3", "forward_topk"])
def test_the_loss_terms_add_up_beside_the_kl_to_the_reference(estimator: str) -> None:
    """GRPO's loss with a loss estimator and ``kl_coef`` > 0 is the policy loss + ``kl_coef ×``
    the KL to the reference + ``coef ×`` the distillation term: none of them drops another."""
    torch.manual_seed(0)
    policy = LlamaForCausalLM(LlamaConfig(num_hidden_layers=1, initializer_range=0.2))
    n, r, k = 3, 4, 5
    response_mask = torch.arange(r)[None] < torch.tensor([4, 2, 3])[:, None]
    batch = Minibatch(
        prompt_ids=torch.randint(3, 48, (n, 2)), prompt_mask=torch.ones(n, 2, dtype=torch.bool),
        response_ids=torch.randint(3, 48, (n, r)), response_mask=response_mask,
        old_logprobs=None, ref_logprobs=-torch.rand(n, r) - 1.0, advantages=torch.randn(n, r),
        teacher_logprobs=-torch.rand(n, r) - 1.0,
        teacher_topk_ids=torch.randint(3, 48, (n, r, k)),
        teacher_topk_logprobs=(torch.rand(n, r, k) / k).log(),
    )  # fmt: skip
    grpo = _grpo(kl_coef=0.1)
    grpo.distill = _settings(estimator=estimator, coef=0.5, topk=k)
    loss, metrics = grpo.loss(policy, batch)
    expected = metrics["loss/policy"] + 0.1 * metrics["loss/kl"] + 0.5 * metrics["loss/distill"]
    assert metrics["loss/distill"] > 0.01 and metrics["loss/kl"].abs() > 0.01
    assert_close(loss.detach(), expected)
    assert_close(metrics["loss/total"], expected)
