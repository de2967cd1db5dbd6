"""``astrai.policy_lag.lag_plan``: what ``auto`` chooses for π_old and the correction, by hand."""

from __future__ import annotations

import pytest

from astrai.policy_lag import LagSettings, lag_plan

AUTO = {"old_logprobs": "auto", "correction": "auto"}


def _config(
    node: dict | None, lag: object, precision: str = "fp32", updates: object = 1
) -> dict[str, object]:
    """A config of these settings: ``updates`` as ``ppo_epochs`` (× 1 minibatch)."""
    cfg: dict[str, object] = {
        "train_type": {"max_policy_lag": lag, "ppo_epochs": updates, "minibatches": 1},
        "infra": {"precision": precision},
    }
    if node is not None:
        cfg["engine"] = node
    return cfg


def _chosen(cfg: dict[str, object]) -> tuple[str, str]:
    plan = lag_plan(cfg)
    return plan.old_logprobs, plan.correction


@pytest.mark.parametrize(
    ("node", "lag", "chosen"),
    [
        (AUTO, 0, ("bypass", "none")),
        (AUTO, 1, ("recompute", "token_truncate")),
        (AUTO, 8, ("recompute", "token_truncate")),
        (None, 0, ("bypass", "none")),  # no engine node: engine=torch's defaults
        (None, 1, ("recompute", "token_truncate")),
        # explicit choices stay: contradictions are config.lag_checks' to refuse
        ({"old_logprobs": "bypass", "correction": "auto"}, 1, ("bypass", "none")),
        ({"old_logprobs": "recompute", "correction": "auto"}, 0, ("recompute", "none")),
        ({"old_logprobs": "auto", "correction": "icepop"}, 1, ("recompute", "icepop")),
        ({"old_logprobs": "recompute", "correction": "token_mask"}, 0, ("recompute", "token_mask")),
        # a lag validation will refuse by name counts as none here
        (AUTO, "x", ("bypass", "none")),
        (AUTO, True, ("bypass", "none")),
        (AUTO, -1, ("bypass", "none")),
    ],
)
def test_auto_resolves_for_the_lag_and_explicit_choices_stay(
    node: dict | None, lag: object, chosen: tuple[str, str]
) -> None:
    assert _chosen(_config(node, lag)) == chosen


@pytest.mark.parametrize(
    ("node", "lag", "precision", "updates", "chosen"),
    [
        # bf16 and several updates a step: π_old through the update's forward, nothing to weight
        (AUTO, 0, "bf16", 8, ("recompute", "none")),
        (None, 0, "bf16", 2, ("recompute", "none")),
        # one update: the update's own forward is π_old (StepPlan.old_from_update)
        (AUTO, 0, "bf16", 1, ("bypass", "none")),
        (AUTO, 0, "fp32", 8, ("bypass", "none")),  # fp32 rounds alike (< 1e-6 measured)
        (AUTO, 1, "bf16", 8, ("recompute", "token_truncate")),  # the lag decides
        ({"old_logprobs": "bypass", "correction": "auto"}, 0, "bf16", 8, ("bypass", "none")),
        (AUTO, 0, "bf16", "x", ("bypass", "none")),  # validation refuses a bad count by name
    ],
)
def test_auto_recomputes_pi_old_in_bf16_where_a_step_updates_more_than_once(
    node: dict | None, lag: int, precision: str, updates: object, chosen: tuple[str, str]
) -> None:
    assert _chosen(_config(node, lag, precision, updates)) == chosen


def test_the_plan_keeps_what_was_written_and_resolving_it_again_changes_nothing() -> None:
    node = {**AUTO, "correction_low": None, "correction_high": 4}
    plan = lag_plan(_config(node, 2, "bf16", 3))
    assert (plan.max_policy_lag, plan.updates_per_step) == (2, 3)
    assert (plan.correction_low, plan.correction_high) == (None, 4.0)
    assert plan.configured == LagSettings(2, "auto", "auto", None, 4)
    recorded = {**node, "old_logprobs": plan.old_logprobs, "correction": plan.correction}
    again = lag_plan(_config(recorded, 2, "bf16", 3))
    assert (again.old_logprobs, again.correction) == (plan.old_logprobs, plan.correction)
    assert again.configured.old_logprobs == "recompute"  # what the config now says
    assert lag_plan({}).max_policy_lag == 0 and not lag_plan({}).recomputes
