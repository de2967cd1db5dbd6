"""The policy-lag guard: how many updates behind the policy a rollout's samples are, and the
refusal of a batch older than ``train_type.max_policy_lag`` (the seed's version check).

Versions count policy optimizer steps (``TrainState.policy_version``); a lag counts updates
(RL steps of ``ppo_epochs × minibatches`` optimizer steps each), the unit of the bound.
"""

from __future__ import annotations

from torch import Tensor


class StaleRolloutError(RuntimeError):
    """A batch drawn by a policy more updates behind than ``train_type.max_policy_lag``."""


def policy_lag(sample_versions: Tensor, policy_version: int, updates_per_step: int) -> Tensor:
    """``[B, G]`` updates between each sample's policy and ``policy_version`` (the policy about
    to train on it): ``ceil((policy_version - version) / updates_per_step)``.

    Args:
        sample_versions: ``[B, G]`` the optimizer steps of the policy that drew each response.
        policy_version: the optimizer steps the training policy has taken.
        updates_per_step: optimizer steps per RL step (``ppo_epochs × minibatches``).
    """
    behind = policy_version - sample_versions
    return -((-behind) // updates_per_step)  # ceil for an integer tensor


def check_policy_lag(
    sample_versions: Tensor,
    policy_version: int,
    updates_per_step: int,
    max_policy_lag: int,
    step: int,
) -> dict[str, float]:
    """The ``rollout/policy_lag`` (max) and ``rollout/policy_lag_min`` metrics of a batch about
    to be trained at ``step``; ``StaleRolloutError`` naming the key when any sample is more
    than ``max_policy_lag`` updates behind (or drawn by a policy newer than the trainer's)."""
    lag = policy_lag(sample_versions, policy_version, updates_per_step)
    newest, oldest = int(lag.min()), int(lag.max())
    if newest < 0:
        raise StaleRolloutError(
            f"step {step}'s rollout was drawn by policy version {int(sample_versions.max())}, "
            f"ahead of the policy training on it (version {policy_version})"
        )
    if oldest > max_policy_lag:
        raise StaleRolloutError(
            f"step {step}'s rollout is {oldest} update(s) behind the policy (drawn at version "
            f"{int(sample_versions.min())}, training at {policy_version}): over "
            f"train_type.max_policy_lag={max_policy_lag}, refused (resume with "
            f"train_type.max_policy_lag={oldest} to train it)"
        )
    return {"rollout/policy_lag": float(oldest), "rollout/policy_lag_min": float(newest)}
