"""The engine/trainer mismatch correction (``algorithms.correction``), against hand-computed
weights, metrics and losses."""

from __future__ import annotations

import math

import pytest
import torch

from astrai.algorithms.correction import (
    Correction,
    correct_mismatch,
    correction_for,
    correction_weights,
    mismatch_ratio,
)
from astrai.algorithms.losses import clipped_policy_loss
from astrai.policy_lag import lag_plan


def _logs(*probs: float) -> torch.Tensor:
    return torch.tensor(probs, dtype=torch.float32).log()


# row 0: π_old/π_behav = 1.6, 0.5, padding; row 1: 3, 1.5, 1/4 (none on a band's edge)
OLD = torch.stack([_logs(0.4, 0.2, 0.9), _logs(0.6, 0.3, 0.1)])
BEHAVIOUR = torch.stack([_logs(0.25, 0.4, 0.3), _logs(0.2, 0.2, 0.4)])
MASK = torch.tensor([[True, True, False], [True, True, True]])


def test_token_ratios_are_old_over_behaviour_and_one_at_padding() -> None:
    ratio = mismatch_ratio(OLD, BEHAVIOUR, MASK)
    torch.testing.assert_close(ratio, torch.tensor([[1.6, 0.5, 1.0], [3.0, 1.5, 0.25]]))


def test_sequence_ratios_are_the_response_product_on_every_token() -> None:
    ratio = mismatch_ratio(OLD, BEHAVIOUR, MASK, level="sequence")
    torch.testing.assert_close(ratio, torch.tensor([[0.8] * 3, [1.125] * 3]))


def test_log_ratios_are_clamped_before_exp_so_a_long_product_cannot_overflow() -> None:
    old = torch.zeros(1, 50)
    behaviour = torch.full((1, 50), -3.0)  # Σ log ratio = 150: exp overflows float32
    ratio = mismatch_ratio(old, behaviour, torch.ones(1, 50, dtype=torch.bool), "sequence")
    torch.testing.assert_close(ratio, torch.full((1, 50), math.exp(20.0)))


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("token_truncate", [2.0, 0.5, 1.5, 0.2]),  # [0, 2]: clamped at the top
        ("token_mask", [0.0, 0.5, 1.5, 0.2]),  # [0, 2]: zeroed above it, kept inside
        ("icepop", [3.0, 0.5, 1.5, 0.0]),  # [0.5, 5]: zeroed outside on both sides
    ],
)
def test_each_mode_bands_the_weights_as_published(mode: str, expected: list[float]) -> None:
    ratio = torch.tensor([3.0, 0.5, 1.5, 0.2])
    weights = correction_weights(ratio, Correction.from_config(mode, None, None))
    torch.testing.assert_close(weights, torch.tensor(expected))


def test_a_configured_band_replaces_the_published_one() -> None:
    correction = Correction.from_config("token_truncate", 0.5, 1.25)
    assert (correction.low, correction.high, correction.level) == (0.5, 1.25, "token")
    weights = correction_weights(torch.tensor([0.1, 1.0, 3.0]), correction)
    torch.testing.assert_close(weights, torch.tensor([0.5, 1.0, 1.25]))
    assert Correction.from_config("sequence_mask", None, None).level == "sequence"


def test_metrics_and_weights_of_one_rollout_by_hand() -> None:
    weights, metrics = correct_mismatch(
        OLD, BEHAVIOUR, MASK, Correction.from_config("token_mask", None, None)
    )
    assert weights is not None
    # ratios 1.6, 0.5 | 3, 1.5, 0.25 against [0, 2]: only the 3 leaves
    torch.testing.assert_close(weights, torch.tensor([[1.6, 0.5, 1.0], [0.0, 1.5, 0.25]]))
    logs = [math.log(r) for r in (1.6, 0.5, 3.0, 1.5, 0.25)]
    k3 = [math.exp(x) - 1 - x for x in logs]
    expected = {
        "rollout/logprob_diff_mean": sum(abs(x) for x in logs) / 5,
        "rollout/logprob_diff_max": math.log(4.0),
        "rollout/mismatch_kl": sum(k3) / 5,
        "rollout/is_ratio_min": 0.25,
        "rollout/is_ratio_mean": (1.6 + 0.5 + 3 + 1.5 + 0.25) / 5,
        "rollout/is_ratio_max": 3.0,
        "rollout/is_masked_frac": 1 / 5,
    }
    assert metrics == pytest.approx(expected, rel=1e-5)


def test_truncation_masks_nothing_and_none_leaves_the_weights_out() -> None:
    truncated, metrics = correct_mismatch(
        OLD, BEHAVIOUR, MASK, Correction.from_config("sequence_truncate", None, None)
    )
    assert truncated is not None and metrics["rollout/is_masked_frac"] == 0.0
    torch.testing.assert_close(truncated, torch.tensor([[0.8] * 3, [1.125] * 3]))
    assert metrics["rollout/is_ratio_max"] == pytest.approx(1.125)
    weights, metrics = correct_mismatch(OLD, BEHAVIOUR, MASK, Correction("none"))
    assert weights is None and metrics["rollout/is_ratio_max"] == pytest.approx(3.0)


def test_the_lag_plan_decides_whether_pi_old_is_recomputed() -> None:
    def correction(engine: dict | None, lag: int = 0) -> Correction | None:
        cfg = {"train_type": {"max_policy_lag": lag}}
        return correction_for(lag_plan(cfg if engine is None else {**cfg, "engine": engine}))

    assert correction(None) is None  # a config without an engine node: torch
    auto = {"old_logprobs": "auto", "correction": "auto", "correction_low": None}
    auto |= {"correction_high": None}
    assert correction(auto) is None  # in step with the policy: the sampler's
    # rollouts behind it: π_old recomputed, token weights truncated to the published [0, 2]
    assert correction(auto, 2) == Correction("token_truncate", 0.0, 2.0)
    assert correction(None, 1) == Correction("token_truncate", 0.0, 2.0)
    assert correction({"old_logprobs": "bypass", "correction": "none"}) is None
    node = {"old_logprobs": "recompute", "correction": "icepop"}
    node |= {"correction_low": None, "correction_high": 4.0}
    assert correction(node) == Correction("icepop", 0.5, 4.0)


def test_the_clipped_loss_weights_each_token_by_its_correction() -> None:
    logprobs = torch.zeros(1, 3)  # ratio π/π_old = 1: nothing clipped
    advantages = torch.tensor([[1.0, -1.0, 2.0]])
    mask = torch.ones(1, 3, dtype=torch.bool)
    weights = torch.tensor([[2.0, 0.5, 0.0]])
    loss, _ = clipped_policy_loss(logprobs, logprobs, advantages, mask, 0.2, is_weights=weights)
    # per token −A·ratio·w: −2, 0.5, 0 -> token mean (the masked token stays in the divisor)
    assert loss.item() == pytest.approx((-2.0 + 0.5 + 0.0) / 3)
    plain, _ = clipped_policy_loss(logprobs, logprobs, advantages, mask, 0.2)
    assert plain.item() == pytest.approx((-1.0 + 1.0 - 2.0) / 3)
