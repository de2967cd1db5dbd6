"""``training.plan.step_plan``: where π_old comes from, decided once per run from the config."""

from __future__ import annotations

import pytest
from tests.helpers import compose_config

from astrai.config.train_type_checks import build_strategy
from astrai.training.plan import step_plan

ONE_UPDATE = ["train_type.ppo_epochs=1", "train_type.minibatches=1"]
TWO_UPDATES = ["train_type.ppo_epochs=1", "train_type.minibatches=2"]


@pytest.mark.parametrize(
    ("overrides", "old_logprobs", "old_from_update"),
    [
        ([], "bypass", False),  # the default job: 2 epochs × 4 minibatches, the sampler's π_old
        (ONE_UPDATE, "bypass", True),  # the torch sampler drew from these very weights
        ([*ONE_UPDATE, "engine.old_logprobs=recompute"], "recompute", True),
        ([*ONE_UPDATE, "train_type.max_policy_lag=1"], "recompute", True),
        ([*TWO_UPDATES, "infra.precision=bf16"], "recompute", False),
        ([*TWO_UPDATES, "infra.precision=bf16", "engine.old_logprobs=bypass"], "bypass", False),
    ],
)
def test_pi_old_is_the_updates_own_forward_only_at_one_update_on_the_same_weights(
    overrides: list[str], old_logprobs: str, old_from_update: bool
) -> None:
    cfg = compose_config(["debug=quick", "infra.device=cpu", *overrides])
    plan = step_plan(cfg, build_strategy(cfg.train_type))
    assert (plan.old_logprobs, plan.old_from_update) == (old_logprobs, old_from_update)
    assert plan.updates_per_step == cfg.train_type.ppo_epochs * cfg.train_type.minibatches
