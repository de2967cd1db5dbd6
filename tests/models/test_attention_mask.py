"""``models.attention_mask``: the dense mask, and where ``is_causal`` computes the same."""

from __future__ import annotations

import pytest
import torch

import astrai.models.llama as llama
from astrai.models.attention_mask import (
    attention_mask_for,
    causal_padding_mask,
    causal_suffices,
    right_padded,
)
from astrai.models.llama import LlamaForCausalLM


def _mask(rows: list[str]) -> torch.Tensor:
    return torch.tensor([[c == "1" for c in row] for row in rows])


def test_right_padded_rows_are_a_prefix_of_valid_tokens() -> None:
    assert right_padded(_mask(["1110", "1000", "1111"]))
    assert not right_padded(_mask(["1110", "0111"]))  # a left-padded prompt
    assert not right_padded(_mask(["1101"]))  # a gap
    assert causal_suffices(_mask(["1100"]), 4)
    assert not causal_suffices(_mask(["1100"]), 1)  # a cached step: keys before the queries


def test_the_dense_mask_is_causal_over_valid_keys_and_each_query_sees_itself() -> None:
    mask = causal_padding_mask(_mask(["0111"]), 2)  # the last 2 of 4 positions query
    assert mask.shape == (1, 1, 2, 4)
    assert mask[0, 0].int().tolist() == [[0, 1, 1, 0], [0, 1, 1, 1]]
    pad_query = causal_padding_mask(_mask(["1100"]), 4)[0, 0, 3]
    assert pad_query.int().tolist() == [1, 1, 0, 1]  # a pad query sees itself: never all-masked
    # on the CPU a mask always (its kernels round otherwise; the recorded digests ran with one)
    assert attention_mask_for(_mask(["1100"]), 4) is not None


def test_is_causal_scores_right_padded_rows_as_the_mask_does(
    tiny_model: LlamaForCausalLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CUDA path (no mask, ``is_causal``) run on the CPU: every valid position's logits as
    the dense mask's, to float rounding (another kernel)."""
    torch.manual_seed(0)
    ids = torch.randint(0, tiny_model.config.vocab_size, (3, 7))
    mask = _mask(["1111111", "1111000", "1100000"])
    with torch.no_grad():
        dense = tiny_model(ids, attention_mask=mask).logits
        used = []

        def causal(attention_mask: torch.Tensor, t: int) -> torch.Tensor | None:
            used.append(causal_suffices(attention_mask, t))
            return None if used[-1] else causal_padding_mask(attention_mask, t)

        monkeypatch.setattr(llama, "attention_mask_for", causal)
        plain = tiny_model(ids, attention_mask=mask).logits
    assert used == [True]
    torch.testing.assert_close(plain[mask], dense[mask], atol=1e-5, rtol=0)
