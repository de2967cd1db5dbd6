"""``astrai.policy_lag``: what ``auto`` chooses for π_old and the correction, by hand."""

from __future__ import annotations

import pytest

from astrai.policy_lag import engine_choices


@pytest.mark.parametrize(
    ("node", "lag", "chosen"),
    [
        ({"old_logprobs": "auto", "correction": "auto"}, 0, ("bypass", "none")),
        ({"old_logprobs": "auto", "correction": "auto"}, 1, ("recompute", "token_truncate")),
        ({"old_logprobs": "auto", "correction": "auto"}, 8, ("recompute", "token_truncate")),
        (None, 0, ("bypass", "none")),  # no engine node: engine=torch's defaults
        (None, 1, ("recompute", "token_truncate")),
        # explicit choices stay: contradictions are config.lag_checks' to refuse
        ({"old_logprobs": "bypass", "correction": "auto"}, 1, ("bypass", "none")),
        ({"old_logprobs": "recompute", "correction": "auto"}, 0, ("recompute", "none")),
        ({"old_logprobs": "auto", "correction": "icepop"}, 1, ("recompute", "icepop")),
        ({"old_logprobs": "recompute", "correction": "token_mask"}, 0, ("recompute", "token_mask")),
        # a lag validation will refuse by name counts as none here
        ({"old_logprobs": "auto", "correction": "auto"}, "x", ("bypass", "none")),
        ({"old_logprobs": "auto", "correction": "auto"}, True, ("bypass", "none")),
        ({"old_logprobs": "auto", "correction": "auto"}, -1, ("bypass", "none")),
    ],
)
def test_auto_resolves_for_the_lag_and_explicit_choices_stay(
    node: dict | None, lag: object, chosen: tuple[str, str]
) -> None:
    assert engine_choices(node, lag) == chosen


AUTO = {"old_logprobs": "auto", "correction": "auto"}


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
    assert engine_choices(node, lag, precision, updates) == chosen
