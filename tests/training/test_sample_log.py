"""``training.sample_log``: which steps log rollout samples, and an episode run's samples as
the episodes the model saw (from step 1, the sampled tokens marked, one line each)."""

from __future__ import annotations

import torch
from omegaconf import OmegaConf

from astrai.models.tokenizer import CharTokenizer
from astrai.rollout.rollout import Rollout
from astrai.training.sample_log import logged_samples

CHAR = CharTokenizer()
LOGGER = OmegaConf.create({"samples_every": 10})


def _rollout(episodes: bool) -> Rollout:
    """Two prompts of two responses: ``<bos>1+1=`` / ``<bos>2+2=`` answered ``2``, ``4``
    (``sampled_mask`` on the answers' tokens when ``episodes``)."""
    prompts = torch.tensor([CHAR.encode("1+1="), CHAR.encode("2+2=")])
    answers = [[CHAR.encode(t, add_bos=False) + [CHAR.eos_id] for t in ("2", "3")],
               [CHAR.encode(t, add_bos=False) + [CHAR.eos_id] for t in ("4", "5")]]  # fmt: skip
    response_ids = torch.tensor(answers)
    mask = torch.ones_like(response_ids, dtype=torch.bool)
    return Rollout(
        prompt_ids=prompts,
        prompt_mask=torch.ones_like(prompts, dtype=torch.bool),
        response_ids=response_ids,
        response_mask=mask,
        logprobs=torch.zeros(response_ids.shape),
        rewards=torch.tensor([[1.0, 0.0], [0.5, 0.0]]),
        policy_version=0,
        prompts=["1+1=", "2+2="],
        responses=[["2", "3"], ["4", "5"]],
        sampled_mask=mask if episodes else None,
    )


def test_one_turn_rollouts_log_every_samples_every_steps_only() -> None:
    rollout = _rollout(episodes=False)
    assert [s for s in range(1, 31) if logged_samples(rollout, s, LOGGER, CHAR)] == [10, 20, 30]
    assert logged_samples(rollout, 10, LOGGER, CHAR) == [("1+1=", "2", 1.0), ("2+2=", "4", 0.5)]


def test_episode_rollouts_log_from_step_1_as_the_model_saw_them() -> None:
    rollout = _rollout(episodes=True)
    logged = [s for s in range(1, 31) if logged_samples(rollout, s, LOGGER, CHAR)]
    assert logged == [1, 10, 20, 30]
    assert logged_samples(rollout, 1, LOGGER, CHAR) == [
        ("1+1=", "<bos>1+1=[[2<eos>]]", 1.0),
        ("2+2=", "<bos>2+2=[[4<eos>]]", 0.5),
    ]
