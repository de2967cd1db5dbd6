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
