"""Tests for astrai.algorithms.aggregation, pinned by hand on a ragged minibatch.

Three sequences of lengths 1, 2 and 4 (``T = 7`` valid tokens, ``S = 3`` sequences); the
padding holds inf and nan, so any read of it would poison the result or its gradient.

    row  valid tokens   L_i  Σ_t l_it  Σ_t l_it / L_i
    0    2              1    2         2
    1    1, 3           2    4         2
    2    1, 2, 3, 6     4    12        3

- ``token_mean``:              (2 + 4 + 12) / 7 = 18/7
- ``seq_mean_token_mean``:     (2 + 2 + 3) / 3 = 7/3
- ``seq_mean_token_sum``:      (2 + 4 + 12) / 3 = 6
- ``seq_mean_token_sum_norm``: (2 + 4 + 12) / 4 / 3 = 1.5 (norm_len 4)

Gradients w.r.t. a valid token's loss: 1/7, 1/(3 L_i), 1/3 and 1/(4 * 3) = 1/12; 0 at padding.
"""

import math

import pytest
import torch
from torch import Tensor
from torch.testing import assert_close

from astrai.algorithms.aggregation import (
    LOSS_AGG_MODES,
    Divisors,
    aggregate_loss,
    count_divisors,
    whole_minibatch_divisors,
)

INF, NAN = math.inf, math.nan
NORM_LEN = 4.0

PER_TOKEN = [
    [2.0, INF, NAN, -INF],
    [1.0, 3.0, NAN, INF],
    [1.0, 2.0, 3.0, 6.0],
]
LENGTHS = [1, 2, 4]
EXPECTED = {
    "token_mean": 18 / 7,
    "seq_mean_token_mean": 7 / 3,
    "seq_mean_token_sum": 6.0,
    "seq_mean_token_sum_norm": 1.5,
}
# d loss / d l_it per row (rows of lengths 1, 2, 4)
EXPECTED_GRAD_PER_ROW = {
    "token_mean": [1 / 7, 1 / 7, 1 / 7],
    "seq_mean_token_mean": [1 / 3, 1 / 6, 1 / 12],
    "seq_mean_token_sum": [1 / 3, 1 / 3, 1 / 3],
    "seq_mean_token_sum_norm": [1 / 12, 1 / 12, 1 / 12],
}


def _ragged(extra_empty_row: bool = False) -> tuple[Tensor, Tensor]:
    rows = [list(r) for r in PER_TOKEN]
    lengths = list(LENGTHS)
    if extra_empty_row:  # a sequence with no valid token, holding junk
        rows.append([NAN, INF, -INF, NAN])
        lengths.append(0)
    per_token = torch.tensor(rows, dtype=torch.float64)
    mask = torch.arange(4)[None, :] < torch.tensor(lengths)[:, None]
    return per_token, mask


def _norm(mode: str) -> float | None:
    return NORM_LEN if mode == "seq_mean_token_sum_norm" else None


def _expected_grad(mode: str, mask: Tensor) -> Tensor:
    per_row = torch.zeros(mask.shape[0], dtype=torch.float64)
    per_row[: len(LENGTHS)] = torch.tensor(EXPECTED_GRAD_PER_ROW[mode], dtype=torch.float64)
    return torch.where(mask, per_row[:, None], torch.zeros((), dtype=torch.float64))


def test_modes_tuple_is_the_four_documented_modes():
    assert set(LOSS_AGG_MODES) == set(EXPECTED)


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_ragged_hand_values_and_gradients(mode):
    per_token, mask = _ragged()
    per_token.requires_grad_()
    loss = aggregate_loss(per_token, mask, mode, norm_len=_norm(mode))
    assert_close(loss, torch.tensor(EXPECTED[mode], dtype=torch.float64))
    loss.backward()
    assert torch.isfinite(per_token.grad).all()  # the inf/nan padding reached nothing
    assert_close(per_token.grad, _expected_grad(mode, mask))


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_sequence_without_valid_tokens_counts_in_no_divisor(mode):
    # a fourth, empty row changes neither T = 7 nor S = 3
    per_token, mask = _ragged(extra_empty_row=True)
    loss = aggregate_loss(per_token, mask, mode, norm_len=_norm(mode))
    assert_close(loss, torch.tensor(EXPECTED[mode], dtype=torch.float64))
    assert whole_minibatch_divisors(mask) == Divisors(tokens=7.0, sequences=3.0)
    tokens, sequences = count_divisors(mask)
    assert tokens.item() == 7.0 and sequences.item() == 3.0


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_nothing_valid_gives_zero(mode):
    per_token = torch.full((2, 3), NAN, dtype=torch.float64)
    mask = torch.zeros(2, 3, dtype=torch.bool)
    loss = aggregate_loss(per_token, mask, mode, norm_len=_norm(mode))
    assert loss.item() == 0.0
    assert whole_minibatch_divisors(mask) == Divisors(tokens=1.0, sequences=1.0)


@pytest.mark.parametrize("norm_len", [None, 0.0, -2.0])
def test_sum_norm_requires_a_positive_norm_len(norm_len):
    per_token, mask = _ragged()
    with pytest.raises(ValueError, match="norm_len"):
        aggregate_loss(per_token, mask, "seq_mean_token_sum_norm", norm_len=norm_len)


def test_unknown_mode_raises():
    per_token, mask = _ragged()
    with pytest.raises(ValueError, match="unknown loss aggregation"):
        aggregate_loss(per_token, mask, "seq_mean")


def test_norm_len_is_ignored_outside_sum_norm():
    per_token, mask = _ragged()
    loss = aggregate_loss(per_token, mask, "seq_mean_token_sum", norm_len=100.0)
    assert_close(loss, torch.tensor(6.0, dtype=torch.float64))


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_micro_batches_sum_to_the_whole_minibatch(mode):
    # rows split 1 + 2 (lengths [1] and [2, 4]): with the whole minibatch's divisors (T = 7,
    # S = 3) the parts' losses sum to the whole loss, and so do their gradients
    per_token, mask = _ragged()
    per_token.requires_grad_()
    whole = aggregate_loss(per_token, mask, mode, norm_len=_norm(mode))
    (whole_grad,) = torch.autograd.grad(whole, per_token)

    divisors = whole_minibatch_divisors(mask)
    assert divisors == Divisors(tokens=7.0, sequences=3.0)
    parts = [
        aggregate_loss(per_token[rows], mask[rows], mode, _norm(mode), divisors)
        for rows in (slice(0, 1), slice(1, 3))
    ]
    accumulated = parts[0] + parts[1]
    (split_grad,) = torch.autograd.grad(accumulated, per_token)

    assert_close(accumulated, whole, atol=1e-6, rtol=0)
    assert_close(split_grad, whole_grad, atol=1e-6, rtol=0)
    assert_close(split_grad, _expected_grad(mode, mask))
    # the test bites: each part dividing by its own counts gives something else
    own = [
        aggregate_loss(per_token[rows], mask[rows], mode, _norm(mode))
        for rows in (slice(0, 1), slice(1, 3))
    ]
    assert abs((own[0] + own[1]).item() - whole.item()) > 1e-3


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_two_ranks_with_half_the_global_divisors_average_to_the_whole(mode):
    # rank 0 holds rows 0-1, rank 1 row 2 and the empty row; each divides by the global counts
    # over the world size, Divisors(7/2, 3/2); the mean of their losses (and of their gradients,
    # as DDP averages them) is the whole minibatch's
    per_token, mask = _ragged(extra_empty_row=True)
    per_token.requires_grad_()
    whole = aggregate_loss(per_token, mask, mode, norm_len=_norm(mode))
    (whole_grad,) = torch.autograd.grad(whole, per_token)

    tokens, sequences = count_divisors(mask)  # what the ranks' all-reduce would sum to
    world = 2
    divisors = Divisors(tokens.item() / world, sequences.item() / world)
    assert divisors == Divisors(3.5, 1.5)
    rank_losses = [
        aggregate_loss(per_token[rows], mask[rows], mode, _norm(mode), divisors)
        for rows in (slice(0, 2), slice(2, 4))
    ]
    # rank 0: token_mean (2 + 4) / 3.5; rank 1: 12 / 3.5 -> mean 18/7 (and alike per mode)
    averaged = (rank_losses[0] + rank_losses[1]) / world
    (averaged_grad,) = torch.autograd.grad(averaged, per_token)
    assert_close(averaged, whole, atol=1e-6, rtol=0)
    assert_close(averaged, torch.tensor(EXPECTED[mode], dtype=torch.float64))
    assert_close(averaged_grad, whole_grad, atol=1e-6, rtol=0)


def test_token_mean_rank_losses_hand_values():
    # rank 0 (rows 0-1): (2 + 1 + 3) / 3.5 = 12/7; rank 1 (row 2): 12 / 3.5 = 24/7
    per_token, mask = _ragged()
    divisors = Divisors(3.5, 1.5)
    rank0 = aggregate_loss(per_token[:2], mask[:2], "token_mean", divisors=divisors)
    rank1 = aggregate_loss(per_token[2:], mask[2:], "token_mean", divisors=divisors)
    assert_close(rank0, torch.tensor(12 / 7, dtype=torch.float64))
    assert_close(rank1, torch.tensor(24 / 7, dtype=torch.float64))
