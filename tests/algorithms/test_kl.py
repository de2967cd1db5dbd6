"""Tests for astrai.algorithms.kl."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.testing import assert_close

from astrai.algorithms.kl import KL_ESTIMATORS, kl_estimate

LOG2 = math.log(2.0)


def test_estimators_listed():
    assert KL_ESTIMATORS == ("k1", "k2", "k3")


@pytest.mark.parametrize(
    ("ratio", "kind", "expected"),
    [
        # r = pi_ref / pi = 2, log r = log 2
        (2.0, "k1", -LOG2),  # -log r
        (2.0, "k2", 0.5 * LOG2**2),  # 1/2 log^2 r
        (2.0, "k3", 1.0 - LOG2),  # r - 1 - log r = 2 - 1 - log 2
        # r = 1/2, log r = -log 2
        (0.5, "k1", LOG2),
        (0.5, "k2", 0.5 * LOG2**2),
        (0.5, "k3", LOG2 - 0.5),  # 1/2 - 1 + log 2
        # r = 1: every estimator is 0
        (1.0, "k1", 0.0),
        (1.0, "k2", 0.0),
        (1.0, "k3", 0.0),
    ],
)
def test_known_ratio(ratio, kind, expected):
    logprobs = torch.full((2, 3), math.log(0.25), dtype=torch.float64)
    ref_logprobs = logprobs + math.log(ratio)
    kl = kl_estimate(logprobs, ref_logprobs, kind)
    assert kl.shape == (2, 3)
    assert_close(kl, torch.full((2, 3), expected, dtype=torch.float64))


def test_default_kind_is_k3():
    logprobs = torch.tensor([math.log(0.25)])
    ref_logprobs = torch.tensor([math.log(0.5)])
    assert_close(kl_estimate(logprobs, ref_logprobs), torch.tensor([1.0 - LOG2]))


@pytest.mark.parametrize("kind", ["k1", "k3"])
def test_unbiased_estimators_average_to_exact_kl(kind):
    # For x ~ p, E_p[k1] = sum p log(p/q) = KL(p||q) and E_p[k3] = sum q - 1 + KL = KL(p||q):
    # weighting each outcome's estimate by p(x) recovers the exact KL.
    p = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    q = torch.tensor([0.2, 0.2, 0.6], dtype=torch.float64)
    exact = (p * (p / q).log()).sum()
    expectation = (p * kl_estimate(p.log(), q.log(), kind)).sum()
    assert_close(expectation, exact)


def test_k3_clamps_log_ratio_and_stays_finite():
    # log r = -1000 and +1000 are clamped to -20 and 20: k3 = e^{-20} + 19 and e^{20} - 21
    logprobs = torch.tensor([0.0, -1000.0], dtype=torch.float64)
    ref_logprobs = torch.tensor([-1000.0, 0.0], dtype=torch.float64)
    kl = kl_estimate(logprobs, ref_logprobs, "k3")
    expected = torch.tensor([math.exp(-20) + 19, math.exp(20) - 21], dtype=torch.float64)
    assert_close(kl, expected)


def test_unknown_kind_raises_naming_it_and_the_allowed_ones():
    x = torch.zeros(3)
    with pytest.raises(ValueError, match=r"'k4'.*k1.*k2.*k3"):
        kl_estimate(x, x, "k4")


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.floats(-1e4, 1e4, allow_nan=False, allow_infinity=False),
            st.floats(-1e4, 1e4, allow_nan=False, allow_infinity=False),
        ),
        min_size=1,
        max_size=16,
    )
)
def test_k3_is_nonnegative_and_finite(pairs):
    logprobs = torch.tensor([a for a, _ in pairs])
    ref_logprobs = torch.tensor([b for _, b in pairs])
    kl = kl_estimate(logprobs, ref_logprobs, "k3")
    assert torch.isfinite(kl).all()
    assert (kl >= 0).all()


def _reward_gradient(kind: str, logits: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """The exact score-function gradient of ``E_{x~π}[k(x)]`` with ``k`` held constant (a reward,
    as PPO pins it): ``Σ_x π(x) k(x) ∇log π(x)``, over a one-token vocabulary."""
    logits = logits.clone().requires_grad_(True)
    logprobs = torch.log_softmax(logits, dim=-1)
    estimate = kl_estimate(logprobs.detach(), ref_logprobs, kind)
    surrogate = (logprobs.detach().exp() * estimate * logprobs).sum()
    (grad,) = torch.autograd.grad(surrogate, logits)
    return grad


def test_k1_as_a_reward_has_the_gradient_of_the_kl_and_k3_does_not():
    """PPO's in-reward KL default (k1, issue 48): with the estimator as a pinned reward,
    ``E_π[k1 ∇log π] = ∇KL(π‖π_ref)`` exactly (``E_π[∇log π] = 0``); k3 adds
    ``−∇KL(π_ref‖π)`` (docs/ppo.md, "Why kl_coef is 0")."""
    logits = torch.tensor([2.0, 0.5, -1.0, 0.0], dtype=torch.float64)
    ref_logprobs = torch.log_softmax(torch.tensor([0.0, 1.0, 0.5, -0.5], dtype=torch.float64), -1)
    theta = logits.clone().requires_grad_(True)
    logprobs = torch.log_softmax(theta, dim=-1)
    kl = (logprobs.exp() * (logprobs - ref_logprobs)).sum()  # KL(π‖π_ref), exact
    (kl_grad,) = torch.autograd.grad(kl, theta)

    k1 = _reward_gradient("k1", logits, ref_logprobs)
    assert_close(k1, kl_grad)  # the same vector, not only the same direction
    k3 = _reward_gradient("k3", logits, ref_logprobs)
    cosine = torch.nn.functional.cosine_similarity(k3, kl_grad, dim=0).item()
    assert cosine < 0.99  # a different direction: k3's extra −∇KL(π_ref‖π) term
