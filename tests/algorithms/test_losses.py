"""Tests for astrai.algorithms.losses."""

import math
from collections.abc import Callable

import pytest
import torch
from torch import Tensor
from torch.testing import assert_close

from astrai.algorithms.losses import (
    clipped_policy_loss,
    clipped_value_loss,
    kl_penalty_loss,
)

# Six tokens covering both signs of the advantage inside and outside the clip range, eps = 0.2,
# plus a seventh masked-out token holding junk.
#   A    ratio  -A*ratio  -A*clip(ratio)  max    clipping active?
#   +1   1.1    -1.1      -1.1            -1.1   no  (inside the range)
#   +1   1.5    -1.5      -1.2            -1.2   yes (A > 0, ratio above 1 + eps)
#   -1   0.5     0.5       0.8             0.8   yes (A < 0, ratio below 1 - eps)
#   -1   1.5     1.5       1.2             1.5   no  (A < 0, ratio above: unclipped is larger)
#   +1   0.5    -0.5      -0.8            -0.5   no  (A > 0, ratio below: unclipped is larger)
#   -2   0.9     1.8       1.8             1.8   no  (inside the range)
# loss = (-1.1 - 1.2 + 0.8 + 1.5 - 0.5 + 1.8) / 6 = 1.3 / 6; clipfrac = 2 / 6;
# ratio_mean = (1.1 + 1.5 + 0.5 + 1.5 + 0.5 + 0.9) / 6 = 1.0
RATIOS = [1.1, 1.5, 0.5, 1.5, 0.5, 0.9, 40.0]
ADVANTAGES = torch.tensor([[1.0, 1.0, -1.0, -1.0, 1.0, -2.0, 1e4]], dtype=torch.float64)
MASK = torch.tensor([[True] * 6 + [False]])
OLD_LOGPROBS = torch.tensor([[-1.0, -2.0, -0.5, -3.0, -1.5, -0.7, -2.2]], dtype=torch.float64)


def _policy_inputs() -> tuple[Tensor, Tensor]:
    log_ratios = torch.tensor([RATIOS], dtype=torch.float64).log()
    return (OLD_LOGPROBS + log_ratios).requires_grad_(), OLD_LOGPROBS


def test_clipped_policy_loss_hand_values():
    logprobs, old_logprobs = _policy_inputs()
    loss, stats = clipped_policy_loss(logprobs, old_logprobs, ADVANTAGES, MASK, clip_eps=0.2)
    f64 = torch.float64
    assert_close(loss, torch.tensor(1.3 / 6, dtype=f64))
    assert_close(stats["clipfrac"], torch.tensor(2 / 6, dtype=f64))
    assert_close(stats["ratio_mean"], torch.tensor(1.0, dtype=f64))
    # approx_kl is the k2 estimate 1/2 (log ratio)^2 averaged over the 6 valid tokens
    approx_kl = sum(0.5 * math.log(r) ** 2 for r in RATIOS[:6]) / 6
    assert_close(stats["approx_kl"], torch.tensor(approx_kl, dtype=f64))
    assert set(stats) == {"clipfrac", "approx_kl", "ratio_mean"}
    assert all(not s.requires_grad and s.shape == () for s in stats.values())


def test_clipped_policy_loss_gradient_is_zero_for_clipped_tokens():
    # d/dlogp (-A * ratio) = -A * ratio on unclipped tokens, 0 on clipped and masked ones; /6
    logprobs, old_logprobs = _policy_inputs()
    loss, _ = clipped_policy_loss(logprobs, old_logprobs, ADVANTAGES, MASK, clip_eps=0.2)
    loss.backward()
    expected = torch.tensor([[-1.1, 0.0, 0.0, 1.5, -0.5, 1.8, 0.0]], dtype=torch.float64) / 6
    assert_close(logprobs.grad, expected)


def test_clipped_policy_loss_ignores_masked_tokens():
    logprobs, old_logprobs = _policy_inputs()
    loss, stats = clipped_policy_loss(logprobs, old_logprobs, ADVANTAGES, MASK, clip_eps=0.2)
    valid = slice(0, 6)
    loss_valid, stats_valid = clipped_policy_loss(
        logprobs[:, valid], old_logprobs[:, valid], ADVANTAGES[:, valid], MASK[:, valid], 0.2
    )
    assert_close(loss, loss_valid)
    for name in stats:
        assert_close(stats[name], stats_valid[name])


def test_kl_penalty_loss_value_and_gradient():
    # two valid tokens with r = pi_ref / pi = 2: k3 = 1 - log 2 each, mean 1 - log 2.
    # d k3 / d logprobs = d/dlogp (r - 1 - log r) with log r = ref - logp: -r + 1 = -1, /2 tokens
    logprobs = torch.tensor([math.log(0.25), math.log(0.25), -5.0], requires_grad=True)
    ref_logprobs = torch.tensor([math.log(0.5), math.log(0.5), 0.0])
    mask = torch.tensor([True, True, False])
    loss = kl_penalty_loss(logprobs, ref_logprobs, mask, "k3")
    assert_close(loss, torch.tensor(1.0 - math.log(2.0)))
    loss.backward()
    assert_close(logprobs.grad, torch.tensor([-0.5, -0.5, 0.0]))
    # k1 on the same tokens: -log r = -log 2
    assert_close(kl_penalty_loss(logprobs, ref_logprobs, mask, "k1"), torch.tensor(-math.log(2.0)))


# Four tokens, eps = 0.2, plus a masked junk token.
#   V_old  V    R    (V-R)^2  V_clip  (V_clip-R)^2  max   clipped term larger?
#   0      0.1  1    0.81     0.1     0.81          0.81  no (inside the range)
#   0      0.5  1    0.25     0.2     0.64          0.64  yes
#   0      0.5  0    0.25     0.2     0.04          0.25  no
#   1      0    -1   1        0.8     3.24          3.24  yes
# clipped:   loss = 1/2 * (0.81 + 0.64 + 0.25 + 3.24) / 4 = 0.6175, clipfrac 0.5
# unclipped: loss = 1/2 * (0.81 + 0.25 + 0.25 + 1) / 4 = 0.28875, clipfrac 0
VALUES = torch.tensor([0.1, 0.5, 0.5, 0.0, 1e3], dtype=torch.float64)
OLD_VALUES = torch.tensor([0.0, 0.0, 0.0, 1.0, -1e3], dtype=torch.float64)
RETURNS = torch.tensor([1.0, 1.0, 0.0, -1.0, 5e3], dtype=torch.float64)
VALUE_MASK = torch.tensor([True, True, True, True, False])


def test_clipped_value_loss_with_clipping():
    values = VALUES.clone().requires_grad_()
    loss, stats = clipped_value_loss(values, OLD_VALUES, RETURNS, VALUE_MASK, clip_eps=0.2)
    assert_close(loss, torch.tensor(0.6175, dtype=torch.float64))
    assert_close(stats["clipfrac"], torch.tensor(0.5, dtype=torch.float64))
    # gradient (V - R) / 4 on unclipped tokens, 0 where the clipped (constant) term won
    loss.backward()
    expected = torch.tensor([-0.9 / 4, 0.0, 0.5 / 4, 0.0, 0.0], dtype=torch.float64)
    assert_close(values.grad, expected)


def test_clipped_value_loss_without_clipping():
    loss, stats = clipped_value_loss(VALUES, OLD_VALUES, RETURNS, VALUE_MASK, clip_eps=None)
    assert_close(loss, torch.tensor(0.28875, dtype=torch.float64))
    assert_close(stats["clipfrac"], torch.tensor(0.0, dtype=torch.float64))


def _split_weighted(loss_fn: Callable[..., Tensor], tensors: list[Tensor], mask: Tensor) -> Tensor:
    """Loss of the whole batch rebuilt from its two halves, each weighted by its token count."""
    half = mask.shape[0] // 2
    total = torch.zeros((), dtype=torch.float64)
    for rows in (slice(0, half), slice(half, None)):
        part_mask = mask[rows]
        total = total + loss_fn(*[t[rows] for t in tensors], part_mask) * part_mask.sum()
    return total / mask.sum()


@pytest.mark.parametrize(
    "loss_fn",
    [
        lambda lp, old, adv, m: clipped_policy_loss(lp, old, adv, m, clip_eps=0.2)[0],
        lambda lp, ref, _, m: kl_penalty_loss(lp, ref, m, "k3"),
        lambda v, old, ret, m: clipped_value_loss(v, old, ret, m, clip_eps=0.2)[0],
    ],
    ids=["policy", "kl", "value"],
)
def test_losses_are_token_means_over_the_whole_minibatch(loss_fn):
    torch.manual_seed(0)
    # halves with very different token counts (rows 0-1 long, rows 2-3 short), so a mean of
    # per-row or per-half means would differ from the token mean
    lengths = torch.tensor([7, 6, 1, 2])
    mask = torch.arange(8)[None, :] < lengths[:, None]
    a, b, c = (torch.randn(4, 8, dtype=torch.float64) * 0.3 for _ in range(3))
    whole = loss_fn(a, b, c, mask)
    assert_close(whole, _split_weighted(loss_fn, [a, b, c], mask))
    # and it is not the mean of the two half losses
    halves = [loss_fn(a[r], b[r], c[r], mask[r]) for r in (slice(0, 2), slice(2, None))]
    assert not torch.isclose(whole, (halves[0] + halves[1]) / 2)
