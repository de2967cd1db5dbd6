"""The live policy's mode is the training thread's alone (issue 45): π_old, the reference and
the critic score with dropout off, the update runs in train mode, and sampling through an engine
with its own weights (vLLM) never flips the live policy another thread is updating."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

import pytest
import torch
from tests.helpers import compose_config
from tests.train_runs import LAG_1, QUICK

from astrai.models.llama import LlamaForCausalLM
from astrai.models.scoring import response_values
from astrai.models.tokenizer import CharTokenizer
from astrai.rewards.base import Reward, RewardTerm
from astrai.rewards.builtin import partial_credit
from astrai.rollout.collect import collect_rollout
from astrai.rollout.engines.sampler import Generation, SamplingConfig
from astrai.rollout.rollout import Rollout
from astrai.tasks import AdditionTask
from astrai.training.evaluation import evaluate
from astrai.training.run import Run

# LoRA adapters with heavy dropout: any forward left in train mode shows
DROPOUT = ["model.lora.rank=4", "model.lora.alpha=8", "model.lora.dropout=0.5"]
PARTIAL = Reward([RewardTerm("partial", 1.0, partial_credit)], accuracy_threshold=1.0)


def _record_modes(module: torch.nn.Module) -> list[tuple[bool, str]]:
    """Every ``train(mode)`` call on ``module`` itself (``eval()`` is ``train(False)``), with
    the calling thread's name; the module's own behaviour unchanged."""
    calls: list[tuple[bool, str]] = []
    original = module.train

    def train(mode: bool = True) -> torch.nn.Module:
        calls.append((mode, threading.current_thread().name))
        return original(mode)

    module.train = train  # type: ignore[method-assign]
    return calls


def _critic_values(trainer: Run, rollout: Rollout) -> torch.Tensor:
    assert trainer.parts.critic is not None
    prompt_ids, prompt_mask = rollout.flat_prompts()
    with torch.inference_mode():
        values = response_values(
            trainer.parts.critic,
            prompt_ids,
            prompt_mask,
            rollout.flat("response_ids"),
            rollout.flat("response_mask"),
        )
    return values.view_as(rollout.logprobs).clone()


def test_pi_old_and_critic_values_are_scored_without_dropout(tmp_path: Path) -> None:
    """A step after an update (which ran in train mode): π_old recomputed by ``prepare`` and
    the critic's values equal the deterministic eval-mode forward, bitwise; the same forward in
    train mode differs from itself (the dropout is real, so the test can fail)."""
    cfg = compose_config(
        [*QUICK, *DROPOUT, "train_type=online_ppo", "engine.old_logprobs=recompute",
         "logger.tensorboard=false", "trainer.total_steps=2"]
    )  # fmt: skip
    trainer = Run(cfg, tmp_path)
    trainer.train_step()  # an update: train mode while it ran
    rollout = trainer.trainer.rollout()
    trainer.trainer.prepare(rollout)
    policy, critic = trainer.parts.policy, trainer.parts.critic
    assert critic is not None and not policy.training and not critic.training
    # π_old is scored by the update's forward (whole sequences, no shared prompt cache)
    first = trainer.started.plan.passes.score_rollout(policy, rollout, share_prompts=False)
    again = trainer.started.plan.passes.score_rollout(policy, rollout, share_prompts=False)
    assert torch.equal(first, again)  # deterministic
    assert torch.equal(rollout.logprobs, first)  # π_old: the eval-mode forward
    assert rollout.values is not None
    assert torch.equal(rollout.values, _critic_values(trainer, rollout))
    # control: in train mode LoRA's dropout makes two forwards differ
    policy.train()
    critic.train()
    noisy = trainer.started.plan.passes.score_rollout(policy, rollout)
    assert not torch.equal(noisy, trainer.started.plan.passes.score_rollout(policy, rollout))
    assert not torch.equal(_critic_values(trainer, rollout), _critic_values(trainer, rollout))


def test_the_update_runs_in_train_mode_and_leaves_eval(tmp_path: Path) -> None:
    cfg = compose_config([*QUICK, *DROPOUT, "train_type=online_ppo", "logger.tensorboard=false"])
    trainer = Run(cfg, tmp_path)
    assert not trainer.parts.policy.training  # eval from the start: sampling sees no dropout
    seen: list[tuple[bool, bool]] = []
    loss = trainer.parts.strategy.loss

    def recording_loss(policy, batch, critic=None, divisors=None):  # type: ignore[no-untyped-def]
        seen.append((policy.training, critic.training))
        return loss(policy, batch, critic, divisors=divisors)

    trainer.parts.strategy.loss = recording_loss  # type: ignore[method-assign]
    trainer.train_step()
    assert seen and all(mode == (True, True) for mode in seen)
    assert trainer.parts.critic is not None
    assert not trainer.parts.policy.training and not trainer.parts.critic.training


def test_only_the_training_thread_changes_the_live_policy_mode(tmp_path: Path) -> None:
    """Lag 1 (the sampling thread beside the update): every mode change of the live policy is
    made on the main thread."""
    cfg = compose_config([*QUICK, *DROPOUT, *LAG_1, "trainer.total_steps=3"])
    trainer = Run(cfg, tmp_path)
    calls = _record_modes(trainer.parts.policy)
    try:
        trainer.fit()
    finally:
        trainer.close()
    main = threading.main_thread().name
    assert calls and {thread for _, thread in calls} == {main}


class OwnWeightsEngine:
    """An engine stand-in with its own weights (as vLLM): it samples fixed responses and never
    touches the policy it is handed."""

    name = "own-weights"
    samples_live_policy = False

    def __init__(self) -> None:
        self.calls = 0

    def sample(
        self,
        prompt_ids: torch.Tensor,
        prompt_mask: torch.Tensor,
        group_size: int,
        sampling: SamplingConfig,
        stop_ids: Sequence[int],
        generator: torch.Generator | None = None,
    ) -> Generation:
        del prompt_mask, sampling, generator
        self.calls += 1
        rows = prompt_ids.shape[0] * group_size
        ids = torch.tensor([[ord("8") % 64, stop_ids[0]]] * rows)
        return Generation(ids, torch.ones_like(ids, dtype=torch.bool), torch.zeros(ids.shape))


@pytest.mark.parametrize("training", [True, False])
def test_an_engine_with_its_own_weights_leaves_the_live_policy_mode_alone(
    tiny_model: LlamaForCausalLM, tokenizer: CharTokenizer, training: bool
) -> None:
    """``collect_rollout`` and ``evaluate`` through an engine that does not sample the policy:
    no ``train``/``eval`` call on it (the sampling thread would race the update's mode)."""
    tiny_model.train(training)
    calls = _record_modes(tiny_model)
    engine = OwnWeightsEngine()
    task = AdditionTask()
    problems = task.eval_problems(3)
    collect_rollout(
        tiny_model, tokenizer, problems, 2, SamplingConfig(max_new_tokens=2), PARTIAL, 0,
        engine=engine,
    )  # fmt: skip
    evaluate(tiny_model, tokenizer, PARTIAL, problems, max_new_tokens=2, engine=engine)
    assert engine.calls == 2
    assert calls == [] and tiny_model.training == training


def test_the_torch_sampler_samples_its_module_in_eval_mode(
    tiny_model: LlamaForCausalLM, tokenizer: CharTokenizer
) -> None:
    """The control: the torch sampler samples the module it is handed, in eval mode, and puts
    its mode back (the caller's thread owns that module)."""
    tiny_model.train()
    calls = _record_modes(tiny_model)
    problems = AdditionTask().eval_problems(2)
    collect_rollout(
        tiny_model, tokenizer, problems, 2, SamplingConfig(max_new_tokens=2), PARTIAL, 0
    )
    assert [mode for mode, _ in calls] == [False, True] and tiny_model.training
