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
    importance_log_ratio,
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


def _inputs(ratios: list[list[float]], old: float = -1.0) -> tuple[Tensor, Tensor]:
    """Leaf logprobs with ``exp(logprobs - old_logprobs) = ratios`` (old logprobs ``old``)."""
    old_logprobs = torch.full((len(ratios), len(ratios[0])), old, dtype=torch.float64)
    log_ratios = torch.tensor(ratios, dtype=torch.float64).log()
    return (old_logprobs + log_ratios).requires_grad_(), old_logprobs


# Clip-higher (DAPO), clip_eps = 0.2, clip_eps_high = 0.28: ratios clamp to [0.8, 1.28].
#   A    ratio  -A*ratio  -A*clip   max     clipped > unclipped?  (symmetric 0.2: max)
#   +1   0.7    -0.7      -0.8      -0.7    no                    -0.7
#   +1   0.9    -0.9      -0.9      -0.9    no                    -0.9
#   +1   1.1    -1.1      -1.1      -1.1    no                    -1.1
#   +1   1.25   -1.25     -1.25     -1.25   no (inside 1.28)      -1.2  (clipped)
#   +1   1.4    -1.4      -1.28     -1.28   yes                   -1.2  (clipped)
#   -1   0.7     0.7       0.8       0.8    yes                    0.8  (clipped)
#   -1   0.9     0.9       0.9       0.9    no                     0.9
#   -1   1.1     1.1       1.1       1.1    no                     1.1
#   -1   1.25    1.25      1.25      1.25   no                     1.25
#   -1   1.4     1.4       1.28      1.4    no                     1.4
# clip-higher: loss = (-5.23 + 5.45) / 10 = 0.022, clipfrac 2/10
# symmetric:   loss = (-5.1 + 5.45) / 10 = 0.035, clipfrac 3/10
CLIP_HIGHER_RATIOS = [[0.7, 0.9, 1.1, 1.25, 1.4], [0.7, 0.9, 1.1, 1.25, 1.4]]
CLIP_HIGHER_ADV = torch.tensor([[1.0] * 5, [-1.0] * 5], dtype=torch.float64)
FULL_MASK = torch.ones(2, 5, dtype=torch.bool)


def test_clip_higher_ratio_table():
    logprobs, old = _inputs(CLIP_HIGHER_RATIOS)
    loss, stats = clipped_policy_loss(
        logprobs, old, CLIP_HIGHER_ADV, FULL_MASK, clip_eps=0.2, clip_eps_high=0.28
    )
    f64 = torch.float64
    assert_close(loss, torch.tensor(0.022, dtype=f64))
    assert_close(stats["clipfrac"], torch.tensor(0.2, dtype=f64))
    assert "dual_clipfrac" not in stats
    # gradient -A * ratio / 10 on the unclipped tokens, 0 on the two clipped ones
    loss.backward()
    expected = (
        torch.tensor([[-0.7, -0.9, -1.1, -1.25, 0.0], [0.0, 0.9, 1.1, 1.25, 1.4]], dtype=f64) / 10
    )
    assert_close(logprobs.grad, expected)


def test_symmetric_clip_on_the_same_table_differs():
    logprobs, old = _inputs(CLIP_HIGHER_RATIOS)
    loss, stats = clipped_policy_loss(logprobs, old, CLIP_HIGHER_ADV, FULL_MASK, clip_eps=0.2)
    assert_close(loss, torch.tensor(0.035, dtype=torch.float64))
    assert_close(stats["clipfrac"], torch.tensor(0.3, dtype=torch.float64))


# Dual-clip, clip_eps = 0.2, clip_ratio_c = 3 (bound -A * 3 on A < 0 only), plus a masked junk
# token:
#   A    ratio  -A*ratio  -A*clip  max    bound -A*3  final  dual active?  clipped > unclipped?
#   -1   2       2         1.2      2      3           2      no            no
#   -1   5       5         1.2      5      3           3      yes           no
#   +1   5      -5        -1.2     -1.2   (-3)        -1.2    no (A > 0)    yes
#   -1   0.5     0.5       0.8      0.8    3           0.8    no            yes
#   -2   4       8         2.4      8      6           6      yes           no
# loss = (2 + 3 - 1.2 + 0.8 + 6) / 5 = 2.12; dual_clipfrac 2/5; clipfrac 2/5.
# Gradient: -A * ratio / 5 = 2/5 on the first token; 0 where a clip or the bound is active.
DUAL_RATIOS = [[2.0, 5.0, 5.0, 0.5, 4.0, 50.0]]
DUAL_ADV = torch.tensor([[-1.0, -1.0, 1.0, -1.0, -2.0, -1e4]], dtype=torch.float64)
DUAL_MASK = torch.tensor([[True] * 5 + [False]])


def test_dual_clip_ratio_table():
    logprobs, old = _inputs(DUAL_RATIOS)
    loss, stats = clipped_policy_loss(
        logprobs, old, DUAL_ADV, DUAL_MASK, clip_eps=0.2, clip_ratio_c=3.0
    )
    f64 = torch.float64
    assert_close(loss, torch.tensor(2.12, dtype=f64))
    assert_close(stats["dual_clipfrac"], torch.tensor(0.4, dtype=f64))
    assert_close(stats["clipfrac"], torch.tensor(0.4, dtype=f64))
    assert not stats["dual_clipfrac"].requires_grad


def test_dual_clip_gradient_is_zero_where_the_bound_is_active():
    logprobs, old = _inputs(DUAL_RATIOS)
    loss, _ = clipped_policy_loss(
        logprobs, old, DUAL_ADV, DUAL_MASK, clip_eps=0.2, clip_ratio_c=3.0
    )
    loss.backward()
    expected = torch.tensor([[0.4, 0.0, 0.0, 0.0, 0.0, 0.0]], dtype=torch.float64)
    assert_close(logprobs.grad, expected)


def test_dual_clip_leaves_positive_advantages_untouched():
    # A > 0 only: the same loss with and without dual-clip (the bound -A * c would be -3 at the
    # ratio-5 token, below its -1.2), and no token counts as dual-clipped
    logprobs, old = _inputs([[5.0, 1.1, 0.5]])
    adv = torch.tensor([[1.0, 2.0, 0.5]], dtype=torch.float64)
    mask = torch.ones(1, 3, dtype=torch.bool)
    plain, _ = clipped_policy_loss(logprobs, old, adv, mask, clip_eps=0.2)
    dual, stats = clipped_policy_loss(logprobs, old, adv, mask, clip_eps=0.2, clip_ratio_c=3.0)
    # (-1.2 - 2.2 - 0.5 * 0.5) / 3 = -3.65 / 3
    assert_close(dual, torch.tensor(-3.65 / 3, dtype=torch.float64))
    assert torch.equal(dual, plain)
    assert stats["dual_clipfrac"].item() == 0.0


# GSPO (ratio_level="sequence"): the ratio is exp of the mean token log-ratio of the row.
#   row 0 (L = 3): log-ratios [0.3, -0.1, -0.05], mean 0.05 -> r0 = e^0.05 ~ 1.05127, A = +1
#   row 1 (L = 2): log-ratios [0.2, -0.4, junk], mean -0.1 -> r1 = e^-0.1 ~ 0.90484, A = -2
# Both inside [0.8, 1.2]: unclipped. Per token: -r0 at row 0's 3 tokens, 2 r1 at row 1's 2.
# token_mean over 5 tokens: (-3.1538133 + 3.6193497) / 5 ~ 0.0931073
# Gradient: d r_i / d logp_t = r_i / L_i at each of row i's tokens, so the row's loss
# L_i * (-A_i r_i) / 5 gives each of its tokens -A_i r_i / 5: -r0/5 at row 0, 2 r1/5 at row 1.
GSPO_LOG_RATIOS = torch.tensor([[0.3, -0.1, -0.05], [0.2, -0.4, 7.0]], dtype=torch.float64)
GSPO_ADV = torch.tensor([[1.0, 1.0, 1.0], [-2.0, -2.0, 1e3]], dtype=torch.float64)
GSPO_MASK = torch.tensor([[True, True, True], [True, True, False]])
GSPO_OLD = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -1.5, -2.0]], dtype=torch.float64)


def test_sequence_level_log_ratio_is_the_row_mean_at_every_token():
    log_ratio = importance_log_ratio(GSPO_OLD + GSPO_LOG_RATIOS, GSPO_OLD, GSPO_MASK, "sequence")
    f64 = torch.float64
    assert_close(log_ratio[0], torch.tensor([0.05] * 3, dtype=f64))
    assert_close(log_ratio[1, :2], torch.tensor([-0.1] * 2, dtype=f64))
    token = importance_log_ratio(GSPO_OLD + GSPO_LOG_RATIOS, GSPO_OLD, GSPO_MASK)
    assert_close(token, GSPO_LOG_RATIOS)


def test_unknown_ratio_level_raises():
    with pytest.raises(ValueError, match="unknown ratio level"):
        importance_log_ratio(GSPO_OLD, GSPO_OLD, GSPO_MASK, "segment")


def test_gspo_sequence_ratio_loss_and_gradient():
    logprobs = (GSPO_OLD + GSPO_LOG_RATIOS).requires_grad_()
    loss, stats = clipped_policy_loss(
        logprobs, GSPO_OLD, GSPO_ADV, GSPO_MASK, clip_eps=0.2, ratio_level="sequence"
    )
    r0, r1 = math.exp(0.05), math.exp(-0.1)
    f64 = torch.float64
    assert_close(loss, torch.tensor((-3 * r0 + 4 * r1) / 5, dtype=f64))
    assert_close(loss, torch.tensor(0.0931073, dtype=f64), atol=1e-6, rtol=0)
    assert_close(stats["ratio_mean"], torch.tensor((3 * r0 + 2 * r1) / 5, dtype=f64))
    assert stats["clipfrac"].item() == 0.0
    loss.backward()
    expected = torch.tensor([[-r0 / 5, -r0 / 5, -r0 / 5], [2 * r1 / 5, 2 * r1 / 5, 0.0]], dtype=f64)
    assert_close(logprobs.grad, expected)


def test_gspo_with_sequence_mean_aggregation():
    # seq_mean_token_mean: (-r0 + 2 r1) / 2; each token of row i gets -A_i r_i / (2 L_i)
    logprobs = (GSPO_OLD + GSPO_LOG_RATIOS).requires_grad_()
    loss, _ = clipped_policy_loss(
        logprobs,
        GSPO_OLD,
        GSPO_ADV,
        GSPO_MASK,
        clip_eps=0.2,
        ratio_level="sequence",
        loss_agg="seq_mean_token_mean",
    )
    r0, r1 = math.exp(0.05), math.exp(-0.1)
    assert_close(loss, torch.tensor((-r0 + 2 * r1) / 2, dtype=torch.float64))
    loss.backward()
    expected = torch.tensor(
        [[-r0 / 6, -r0 / 6, -r0 / 6], [r1 / 2, r1 / 2, 0.0]], dtype=torch.float64
    )
    assert_close(logprobs.grad, expected)


def test_new_options_at_their_defaults_give_exactly_the_old_loss():
    logprobs, old_logprobs = _policy_inputs()
    old_loss, old_stats = clipped_policy_loss(logprobs, old_logprobs, ADVANTAGES, MASK, 0.2)
    new_loss, new_stats = clipped_policy_loss(
        logprobs,
        old_logprobs,
        ADVANTAGES,
        MASK,
        0.2,
        None,
        clip_eps_high=None,
        clip_ratio_c=None,
        ratio_level="token",
        loss_agg="token_mean",
        norm_len=None,
    )
    assert torch.equal(new_loss, old_loss)
    assert set(new_stats) == set(old_stats)
    for name in old_stats:
        assert torch.equal(new_stats[name], old_stats[name])
    # clip_eps_high equal to clip_eps is the symmetric clip too
    same, _ = clipped_policy_loss(logprobs, old_logprobs, ADVANTAGES, MASK, 0.2, clip_eps_high=0.2)
    assert torch.equal(same, old_loss)
