"""Tests for astrai.rollout.scoring."""

import math

import torch
from torch.testing import assert_close

from astrai.rollout.scoring import entropy_from_logits, split_rows


def test_entropy_from_logits_hand_values():
    # uniform over 4: log 4; p = (1/2, 1/4, 1/4, 0): 1/2 log 2 + 2 * 1/4 log 4 = 3/2 log 2
    logits = torch.tensor(
        [[0.0, 0.0, 0.0, 0.0], [math.log(0.5), math.log(0.25), math.log(0.25), -math.inf]]
    )
    logits.requires_grad_()
    entropy = entropy_from_logits(logits)
    assert_close(entropy, torch.tensor([math.log(4.0), 1.5 * math.log(2.0)]))
    entropy.sum().backward()
    assert torch.isfinite(logits.grad).all()
    # shifting logits changes nothing, even by amounts that would overflow a naive exp
    assert_close(entropy_from_logits(logits.detach()[:1] + 1e4), torch.tensor([math.log(4.0)]))


def test_entropy_from_logits_keeps_leading_shape():
    assert entropy_from_logits(torch.randn(2, 3, 5)).shape == (2, 3)


def test_split_rows_covers_every_row_once_in_order():
    a, b = torch.arange(14).view(7, 2), torch.arange(7)
    parts = split_rows(3, a, b)
    assert [p[1].tolist() for p in parts] == [[0, 1, 2], [3, 4, 5], [6]]
    assert torch.equal(torch.cat([p[0] for p in parts]), a)
    assert split_rows(None, a, b) == [(a, b)] and split_rows(7, a, b) == [(a, b)]
