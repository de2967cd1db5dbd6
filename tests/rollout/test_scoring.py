"""Tests for astrai.models.scoring."""

import math

import torch
from torch.testing import assert_close

from astrai.models.scoring import entropy_from_logits, score_in_parts


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


def test_score_in_parts_puts_each_part_back_in_its_rows_places():
    # rows 0-3: prompts of 2, 1, 2, 2 tokens (left-padded to 3), responses of 1, 3, 2, 1 (to 4);
    # the score of a part is its response ids + 100 × the part's own width (trimmed or not)
    prompt_mask = torch.tensor([[0, 1, 1], [0, 0, 1], [0, 1, 1], [0, 1, 1]]).bool()
    response_mask = torch.tensor([[1, 0, 0, 0], [1, 1, 1, 0], [1, 1, 0, 0], [1, 0, 0, 0]]).bool()
    response_ids = torch.arange(1, 17).view(4, 4)
    prompt_ids = torch.zeros(4, 3, dtype=torch.long)

    splits = []  # each call's ``split``: a cached pass runs its responses by length when True

    def score(p_ids, p_mask, r_ids, r_mask, split):
        splits.append(split)
        return (r_ids + 100 * r_ids.shape[1]).float()

    whole = score_in_parts(
        score, [torch.arange(4)], prompt_ids, prompt_mask, response_ids, response_mask
    )
    assert torch.equal(whole, (response_ids + 400).float())  # one part: the rows as they are
    assert splits == [False]
    parts = [torch.tensor([1, 2]), torch.tensor([3, 0])]
    scored = score_in_parts(score, parts, prompt_ids, prompt_mask, response_ids, response_mask)
    assert splits == [False, True, True]
    # rows 1, 2 trimmed to 3 response columns, rows 3, 0 to 1; zeros after each part's columns
    assert scored.tolist() == [
        [101.0, 0.0, 0.0, 0.0],
        [305.0, 306.0, 307.0, 0.0],
        [309.0, 310.0, 311.0, 0.0],
        [113.0, 0.0, 0.0, 0.0],
    ]
