"""On-policy distillation on multi-turn episodes (issue 61's acceptance: "a test shows
observation tokens contribute nothing"): ``env=calculator`` with the tiny model, ``distill=opd``
and a teacher of other weights. An episode's response holds its observations (the tool's
``e``/``=…`` replies: ``response_mask`` True, ``sampled_mask`` False); the teacher scores every
response token, observations included, but the distillation signal is the sampled tokens' only:

- GRPO's advantages (k1, ``use_task_reward=false``) are exactly 0 at the observations and the
  hand k1 reward ``−(log π_old − log π_T)`` at the sampled tokens;
- junk written over the teacher's scores at the observations changes neither GRPO's
  advantages, nor PPO's token rewards and GAE targets, nor the k3 or forward top-k loss and
  its gradient, bitwise.

A random tiny model rarely opens a turn with ``c`` (a call), so its episodes would have no
observations: the student's logits get +4 on ``c`` (a forward hook on ``lm_head``, there for
the sampler and the trainer's forwards alike), and about half its turns call the tool."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import pytest
import torch
from tests.distill_teacher import write_teacher
from tests.helpers import compose_config, pass_plan

from astrai.rollout.minibatch import flatten_rollout
from astrai.rollout.rollout import Rollout
from astrai.training.run import Run

JOB = [
    "debug=quick",
    "experiment=calculator",  # task=products env=calculator, 8 new tokens a turn
    "env.workers=thread",  # no worker processes: the episodes are played in this one
    "train_type.prompts_per_step=8",
    "train_type.group_size=4",
    "ckpt.every_steps=0",
]
DISTILL = ["distill=opd", "distill.estimator=k1", "distill.use_task_reward=false"]
CALL_BIAS = 4.0  # the student's extra logit on "c": p(c) ≈ e⁴/(e⁴ + 47) ≈ 0.54 at a turn's start
JUNK = 123.0  # what the junk teacher logprobs add: far from any real logprob


@dataclasses.dataclass
class Step:
    """One step's episodes through the trainer's prepare, and what the tests read of them."""

    run: Run  # online_grpo, distill=opd (k1)
    rollout: Rollout  # one step's episodes, prepared by the trainer (teacher scored)
    metrics: dict[str, float]
    observations: torch.Tensor  # [B, G, R] response tokens the policy did not sample


def _calling(run: Run) -> None:
    """The run's policy opens about half its turns with ``c`` (``CALL_BIAS``)."""
    call = run.parts.tokenizer.encode("c", add_bos=False)[0]

    def bias(module: torch.nn.Module, inputs: object, logits: torch.Tensor) -> torch.Tensor:
        return logits + CALL_BIAS * torch.nn.functional.one_hot(
            torch.tensor(call), logits.shape[-1]
        ).to(logits.dtype)

    run.parts.policy.lm_head.register_forward_hook(bias)


@pytest.fixture(scope="module")
def step(tmp_path_factory: pytest.TempPathFactory) -> Step:
    root = tmp_path_factory.mktemp("distill_episodes")
    teacher = write_teacher(JOB, root)
    run = Run(compose_config([*JOB, *DISTILL, f"teacher.path={teacher}"]), root / "grpo")
    _calling(run)
    rollout = run.trainer.rollout()
    metrics = run.trainer.prepare(rollout)
    observations = rollout.response_mask & ~rollout.action_mask()
    return Step(run, rollout, metrics, observations)


def _with_junk(rollout: Rollout, where: torch.Tensor) -> Rollout:
    """A copy of ``rollout`` whose teacher scores at ``where`` are junk: its logprobs, and its
    top-k ids and logprobs where pinned."""
    junk = copy.deepcopy(rollout)
    assert junk.teacher_logprobs is not None
    junk.teacher_logprobs = torch.where(where, junk.teacher_logprobs + JUNK, junk.teacher_logprobs)
    if junk.teacher_topk_ids is not None and junk.teacher_topk_logprobs is not None:
        at = where[..., None]
        ids, values = junk.teacher_topk_ids, junk.teacher_topk_logprobs
        junk.teacher_topk_ids = torch.where(at, ids.flip(-1), ids)
        junk.teacher_topk_logprobs = torch.where(at, values - JUNK, values)
    return junk


def test_the_episodes_hold_observations_the_teacher_scored(step: Step) -> None:
    rollout = step.rollout
    assert rollout.sampled_mask is not None and rollout.teacher_logprobs is not None
    assert rollout.valid is not None and bool(rollout.valid.all())  # no failed episode
    assert int(step.observations.sum()) > 0
    # the teacher scored them (a real logprob, not a 0 left in place): the mask below bites
    assert bool((rollout.teacher_logprobs[step.observations] < 0).all())
    assert int(rollout.action_mask().sum()) > int(step.observations.sum())


def test_grpo_k1_advantages_are_0_at_observations_and_the_hand_k1_at_sampled_tokens(
    step: Step,
) -> None:
    rollout, sampled, observations = step.rollout, step.rollout.action_mask(), step.observations
    assert rollout.advantages is not None and rollout.teacher_logprobs is not None
    hand_k1 = -(rollout.logprobs - rollout.teacher_logprobs)  # coef 1, no clamp, no discount
    assert bool((hand_k1[observations] != 0).all())  # what an unmasked signal would put there
    assert torch.equal(rollout.advantages[observations], torch.zeros_like(hand_k1[observations]))
    assert torch.equal(rollout.advantages[sampled], hand_k1[sampled])
    assert float(hand_k1[sampled].abs().max()) > 0.1  # a teacher far from the student
    # distill/reverse_kl is the token mean over the sampled tokens alone
    expected = (-hand_k1[sampled]).double().mean().item()
    assert step.metrics["distill/reverse_kl"] == pytest.approx(expected, rel=1e-5)  # a float32 sum


@pytest.mark.parametrize("discount", [None, 0.9])
def test_junk_teacher_logprobs_at_observations_leave_grpo_advantages_bitwise(
    step: Step, discount: float | None
) -> None:
    """Each token its own k1 reward, and (``distill.discount``) its reward-to-go, which sums
    over the later sampled tokens, across the observations between turns."""
    strategy, rollout = copy.copy(step.run.parts.strategy), step.rollout
    assert strategy.distill is not None
    strategy.distill = dataclasses.replace(strategy.distill, discount=discount)
    clean = strategy.advantages(rollout)
    if discount is None:  # the trainer's prepare pinned these
        assert rollout.advantages is not None and torch.equal(clean, rollout.advantages)
    assert torch.equal(strategy.advantages(_with_junk(rollout, step.observations)), clean)
    # the same junk on one sampled token moves its advantage: the check can fail
    one = torch.zeros_like(step.observations)
    one[tuple(rollout.action_mask().nonzero()[0])] = True
    assert not torch.equal(strategy.advantages(_with_junk(rollout, one)), clean)


def test_junk_teacher_logprobs_at_observations_leave_ppo_targets_bitwise(
    step: Step, tmp_path: Path
) -> None:
    """PPO (k1 through GAE): the token rewards, and the advantages and returns its prepare pins
    with the critic, are bitwise those of the clean teacher logprobs."""
    teacher = f"teacher.path={step.run.parts.cfg.teacher.path}"
    ppo = Run(compose_config([*JOB, "train_type=online_ppo", *DISTILL, teacher]), tmp_path / "p")
    strategy, models = ppo.parts.strategy, ppo.parts.models
    assert strategy.distill is not None and strategy.distill.estimator == "k1"
    targets = []
    for rollout in (copy.deepcopy(step.rollout), _with_junk(step.rollout, step.observations)):
        rewards = strategy.token_rewards(rollout, rollout.action_mask())
        strategy.prepare(rollout, models, pass_plan(trains_critic=True))
        targets.append((rewards, rollout.advantages, rollout.returns))
    (rewards, advantages, returns), junk = targets
    assert torch.equal(junk[0], rewards)
    assert torch.equal(junk[1], advantages) and torch.equal(junk[2], returns)
    # the distillation reward is the sampled tokens' only (no task reward, kl_coef 0)
    assert torch.equal(rewards[step.observations], torch.zeros_like(rewards[step.observations]))
    sampled = step.rollout.action_mask()
    assert step.rollout.teacher_logprobs is not None
    hand_k1 = -(step.rollout.logprobs - step.rollout.teacher_logprobs)
    assert torch.equal(rewards[sampled], hand_k1[sampled])


def _with_topk(step: Step, k: int) -> Rollout:
    """A copy of the step's rollout with the teacher's top-``k`` ids and logprobs pinned too
    (the run's distiller, its estimator ``forward_topk``)."""
    distiller = step.run.parts.distiller
    assert distiller is not None
    settings = dataclasses.replace(distiller.settings, estimator="forward_topk", topk=k)
    rollout = copy.deepcopy(step.rollout)
    dataclasses.replace(distiller, settings=settings).score(rollout, pass_plan())
    assert rollout.teacher_logprobs is not None and step.rollout.teacher_logprobs is not None
    assert torch.equal(rollout.teacher_logprobs, step.rollout.teacher_logprobs)
    return rollout


def _loss_and_grads(
    step: Step, rollout: Rollout, estimator: str
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The ``estimator``'s distillation loss of the whole rollout as one minibatch
    (``loss_mask``: the sampled tokens) and its gradient in every policy parameter."""
    strategy = copy.copy(step.run.parts.strategy)
    assert strategy.distill is not None
    strategy.distill = dataclasses.replace(strategy.distill, estimator=estimator)
    policy = step.run.parts.policy
    policy.zero_grad(set_to_none=True)
    batch = flatten_rollout(rollout)
    logprobs, _, at_topk = strategy.policy_forward(policy, batch)
    assert (at_topk is not None) == (estimator == "forward_topk")
    loss, metrics = strategy.distill_loss(logprobs, at_topk, batch, divisors=None)
    assert loss is not None and torch.equal(metrics["loss/distill"], loss.detach())
    loss.backward()
    grads = [p.grad.clone() for p in policy.parameters() if p.grad is not None]
    policy.zero_grad(set_to_none=True)
    return loss.detach(), grads


@pytest.mark.parametrize("estimator", ["k3", "forward_topk"])
def test_junk_teacher_scores_at_observations_leave_the_loss_and_its_gradient_bitwise(
    step: Step, estimator: str
) -> None:
    rollout = _with_topk(step, 8) if estimator == "forward_topk" else step.rollout
    loss, grads = _loss_and_grads(step, rollout, estimator)
    assert float(loss) > 0.1 and any(bool(g.abs().sum() > 0) for g in grads)
    junk_loss, junk_grads = _loss_and_grads(step, _with_junk(rollout, step.observations), estimator)
    assert torch.equal(junk_loss, loss)
    assert len(junk_grads) == len(grads)
    assert all(torch.equal(a, b) for a, b in zip(junk_grads, grads, strict=True))
    # junk at the sampled tokens moves it: the check can fail
    moved, _ = _loss_and_grads(step, _with_junk(rollout, rollout.action_mask()), estimator)
    assert not torch.equal(moved, loss)
