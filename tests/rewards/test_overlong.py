"""DAPO's soft overlong penalty: the formula at its boundaries, its config keys (validation,
kept out of the reward's keyword arguments, composed), and ``collect_rollout`` with and
without it."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from omegaconf import OmegaConf
from tests.helpers import compose_config

from astrai.algorithms.rewards import OverlongPenalty, overlong_penalty
from astrai.config.errors import ConfigError
from astrai.models.llama import LlamaForCausalLM
from astrai.models.tokenizer import CharTokenizer
from astrai.rewards.base import Reward, RewardConfigError, RewardTerm
from astrai.rewards.build import build_reward
from astrai.rewards.builtin import partial_credit
from astrai.rewards.config import overlong_from_config, reward_node
from astrai.rollout.collect import collect_rollout
from astrai.rollout.engines.sampler import SamplingConfig
from astrai.tasks import AdditionTask
from astrai.tasks.base import Problem
from astrai.training.rollout_stats import rollout_metrics

PARTIAL = Reward([RewardTerm("partial", 1.0, partial_credit)], accuracy_threshold=1.0)


# --- the formula ---------------------------------------------------------------------------


def test_penalty_at_the_boundaries() -> None:
    # L_max 16, B 4, factor 1: 0 up to L = 12; -(L - 12) / 4 after, -1 at L = 16
    lengths = torch.tensor([0, 5, 11, 12, 13, 14, 15, 16])
    expected = torch.tensor([0.0, 0.0, 0.0, 0.0, -0.25, -0.5, -0.75, -1.0])
    got = overlong_penalty(lengths, max_len=16, buffer=4, factor=1.0)
    assert got.dtype == torch.float32 and got.shape == lengths.shape
    torch.testing.assert_close(got, expected, rtol=0, atol=0)


def test_factor_scales_the_ramp_and_shape_is_kept() -> None:
    # L_max 10, B 5, factor 0.5: L = 5 -> 0, L = 7 -> 0.5 * (5 - 7) / 5 = -0.2, L = 10 -> -0.5
    lengths = torch.tensor([[5, 7], [10, 3]])
    got = OverlongPenalty(max_len=10, buffer=5, factor=0.5)(lengths)
    torch.testing.assert_close(got, torch.tensor([[0.0, -0.2], [-0.5, 0.0]]))
    assert not torch.signbit(got[0, 0])  # a plain 0, not -0.0


def test_buffer_equal_to_max_len_ramps_from_zero_length() -> None:
    # L_max = B = 4: the whole range is the buffer, -L / 4
    got = overlong_penalty(torch.tensor([0, 1, 2, 4]), max_len=4, buffer=4, factor=2.0)
    torch.testing.assert_close(got, torch.tensor([0.0, -0.5, -1.0, -2.0]))


def test_factor_zero_is_no_penalty() -> None:
    got = overlong_penalty(torch.tensor([3, 8]), max_len=8, buffer=4, factor=0.0)
    torch.testing.assert_close(got, torch.zeros(2))


def test_buffer_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="buffer must be >= 1"):
        overlong_penalty(torch.tensor([1]), max_len=8, buffer=0, factor=1.0)


# --- config -------------------------------------------------------------------------------


def test_off_by_default_on_every_option() -> None:
    for option in ("partial", "exact_match", "math", "regex", "length", "weighted"):
        cfg = compose_config([f"reward={option}"], validate=False)
        assert cfg.reward.overlong_buffer is None and cfg.reward.overlong_penalty == 1.0
        assert overlong_from_config(cfg) is None


def test_composing_a_buffer_builds_the_penalty() -> None:
    cfg = compose_config(["reward.overlong_buffer=4", "reward.overlong_penalty=0.5"])
    max_len = cfg.train_type.sampling.max_new_tokens
    assert overlong_from_config(cfg) == OverlongPenalty(max_len=max_len, buffer=4, factor=0.5)


def test_weighted_takes_the_keys_on_its_top_level_node() -> None:
    cfg = compose_config(["reward=weighted", "reward.overlong_buffer=4"])
    assert overlong_from_config(cfg) == OverlongPenalty(
        cfg.train_type.sampling.max_new_tokens, 4, 1.0
    )
    assert build_reward(reward_node(cfg.reward)).names == ["partial", "format"]


def test_the_keys_are_not_reward_arguments() -> None:
    # partial_credit takes no keyword: passing overlong_* to it would raise TypeError
    node = {
        "_target_": "astrai.rewards.builtin.partial_credit",
        "name": None,
        "accuracy_threshold": 1.0,
        "overlong_buffer": 4,
        "overlong_penalty": 0.5,
    }
    reward = build_reward(node)
    assert reward.terms[0].fn is partial_credit
    # a class reward: the keys do not reach its constructor
    node = {**node, "_target_": "astrai.rewards.builtin.TargetLength", "target": 2}
    totals, _ = build_reward(node).score(["p"], ["19"], ["19"])
    assert totals == [1.0]


def test_a_term_may_not_carry_the_keys() -> None:
    node = {
        "accuracy_threshold": 1.0,
        "terms": [
            {"_target_": "astrai.rewards.builtin.partial_credit", "weight": 1.0},
            {"_target_": "astrai.rewards.builtin.exact_match", "weight": 1.0, "overlong_buffer": 4},
        ],
    }
    with pytest.raises(
        RewardConfigError, match=r"reward\.terms\[1\]\.overlong_buffer: set it on the reward node"
    ):
        build_reward(node)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["reward.overlong_buffer=0"], r"reward\.overlong_buffer must be null or an int in \[1, "),
        (["reward.overlong_buffer=-3"], r"reward\.overlong_buffer must be null or an int"),
        (
            ["train_type.sampling.max_new_tokens=8", "reward.overlong_buffer=9"],
            r"reward\.overlong_buffer .*max_new_tokens = 8\] \(got 9\)",
        ),
        (
            ["reward=custom", "reward._target_=astrai.rewards.builtin.exact_match",
             "reward.overlong_buffer=true"],
            r"reward\.overlong_buffer must be null or an int .*\(got True\)",
        ),
        (
            ["reward.overlong_buffer=4", "reward.overlong_penalty=-0.5"],
            r"reward\.overlong_penalty must be >= 0 \(a finite number, got -0\.5\)",
        ),
        (
            ["reward.overlong_buffer=4", "reward.overlong_penalty=nan"],
            r"reward\.overlong_penalty must be >= 0 \(a finite number, got nan\)",
        ),
        (
            ["reward.overlong_buffer=4", "reward.name=overlong"],
            r"reward: a term named 'overlong' clashes",
        ),
    ],
    ids=["zero", "negative", "past-max-new-tokens", "bool", "negative-penalty", "nan", "clash"],
)  # fmt: skip
def test_validation_names_the_key(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        compose_config(overrides)
    assert "\n" not in str(info.value)


def test_buffer_equal_to_max_new_tokens_is_valid() -> None:
    cfg = compose_config(["train_type.sampling.max_new_tokens=8", "reward.overlong_buffer=8"])
    assert overlong_from_config(cfg) == OverlongPenalty(8, 8, 1.0)


def test_a_node_without_the_keys_is_off() -> None:
    cfg = OmegaConf.create(
        {
            "reward": {"_target_": "astrai.rewards.builtin.exact_match", "accuracy_threshold": 1},
            "train_type": {"sampling": {"max_new_tokens": 8}},
        }
    )
    assert overlong_from_config(cfg) is None


# --- collect_rollout ----------------------------------------------------------------------


def problems(*prompts: str) -> list[Problem]:
    return [Problem(p, AdditionTask().answer(p), p) for p in prompts]


def collect(model: LlamaForCausalLM, tokenizer: CharTokenizer, **kwargs: Any) -> Any:
    return collect_rollout(
        model, tokenizer, problems("3+5=", "1+7=", "0+0="), group_size=4,
        sampling=SamplingConfig(max_new_tokens=5), reward=PARTIAL, policy_version=0,
        generator=torch.Generator().manual_seed(0), **kwargs,
    )  # fmt: skip


def test_collect_rollout_without_penalty_is_unchanged(
    tiny_model: LlamaForCausalLM, tokenizer: CharTokenizer
) -> None:
    plain = collect(tiny_model, tokenizer)
    off = collect(tiny_model, tokenizer, overlong=None)
    assert list(off.reward_terms) == ["partial"]
    assert torch.equal(off.rewards, plain.rewards)
    assert torch.equal(off.rewards, off.reward_terms["partial"])  # one term of weight 1


def test_collect_rollout_adds_the_penalty(
    tiny_model: LlamaForCausalLM, tokenizer: CharTokenizer
) -> None:
    plain = collect(tiny_model, tokenizer)
    # L_max 5, B 2, factor 0.5: L <= 3 -> 0; L = 4 -> 0.5 * (3 - 4) / 2 = -0.25; L = 5 -> -0.5
    rollout = collect(tiny_model, tokenizer, overlong=OverlongPenalty(5, 2, 0.5))
    assert torch.equal(rollout.response_ids, plain.response_ids)  # same samples
    lengths = rollout.response_mask.sum(-1)
    by_length = {0: 0.0, 1: 0.0, 2: 0.0, 3: 0.0, 4: -0.25, 5: -0.5}
    expected = torch.tensor([[by_length[int(n)] for n in row] for row in lengths])
    assert (expected < 0).any()  # the random tiny model runs into the limit
    assert sorted(rollout.reward_terms) == ["overlong", "partial"]
    torch.testing.assert_close(rollout.reward_terms["overlong"], expected, rtol=0, atol=0)
    torch.testing.assert_close(rollout.reward_terms["partial"], plain.rewards, rtol=0, atol=0)
    torch.testing.assert_close(rollout.rewards, plain.rewards + expected, rtol=0, atol=0)

    rollout.advantages = torch.zeros_like(rollout.logprobs)
    metrics = rollout_metrics(rollout, tokenizer.eos_id, accuracy_threshold=1.0)
    assert metrics["reward/overlong"] == pytest.approx(expected.mean().item())
    assert metrics["rollout/reward_mean"] == pytest.approx((plain.rewards + expected).mean().item())


def test_collect_rollout_refuses_a_clashing_term(
    tiny_model: LlamaForCausalLM, tokenizer: CharTokenizer
) -> None:
    clash = Reward([RewardTerm("overlong", 1.0, partial_credit)], accuracy_threshold=1.0)
    with pytest.raises(ValueError, match="already named 'overlong'"):
        collect_rollout(
            tiny_model, tokenizer, problems("3+5="), group_size=2,
            sampling=SamplingConfig(max_new_tokens=3), reward=clash, policy_version=0,
            overlong=OverlongPenalty(3, 1, 1.0),
        )  # fmt: skip
