"""Padding in the update and scoring passes, before and after ``models.length_parts``.

Part 1, index arithmetic only (no model): a rollout of 64 prompts × 8 responses whose prompt
and response lengths are drawn like math RL's (lognormal, median 300 tokens, σ 0.6, capped at
1,024), split as the trainer splits it under a token budget:

- update: 4 shuffled minibatches of 128 rows; *before* consecutive micro-batches of as many rows
  as fit the budget at the rollout's padded width (``models.pass_memory.rows_per_pass``), each
  the full rectangle; *now* rows sorted by length into parts that fit the budget, each at most
  5% padding (``models.sorted_parts``), each row run from column 0 without its prompt's left
  padding (``length_parts``, ``models.shared_prefix.padding_free_rows``);
- scoring: consecutive group-aligned parts of the full rectangle before; now π_old's and (since
  issue 59) the reference's passes as the update's micro-batches (the update's forward), and
  the critic's cached pass (a group's prompt runs once): groups sorted by prompt length into parts
  (``group_parts``), each part's distinct prompts once, then its responses in passes of like
  length (``models.shared_prefix.response_passes``), counted by ``cached_share``.

It prints the share of token positions that are padding (the goal: ≤ 10%).

Part 2, timed: one update minibatch of a SmolLM2-135M-shaped model (``bench/engine.py``'s
shapes, ``--layers`` decoder layers, random weights) on this CPU, with such lengths scaled down
to CPU size, the same micro-batch budget: before (consecutive, full width) and now (sorted,
trimmed), alternating, ``--rounds`` times. The last line is ``ratio: <now ÷ before>``, the
median of the rounds' update times (< 1: faster).

    python bench/padding.py [--rounds 3] [--layers 4] [--threads N]
    python bench/padding.py --quick     # small shapes, one round: checks the script (CI)
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import Tensor

from astrai.algorithms.aggregation import whole_minibatch_divisors
from astrai.algorithms.strategy import Strategy
from astrai.config.compose import compose_train_config
from astrai.config.train_type_checks import build_strategy
from astrai.models.length_parts import (
    cached_share,
    consecutive_parts,
    group_parts,
    length_parts,
    padding_share,
)
from astrai.models.llama import LlamaForCausalLM
from astrai.models.pass_memory import rows_per_pass
from astrai.rollout.minibatch import Minibatch
from engine import shape_config  # bench/engine.py's model shapes (SmolLM2-135M's)

MEDIAN, SIGMA, CAP = 300, 0.6, 1024  # lognormal lengths, tokens
PROMPTS, GROUP, MINIBATCHES = 64, 8, 4
UPDATE_TOKENS = 16_384  # a micro-batch's budget: what `auto` gives Qwen3-0.6B on 80 GiB is ~10k
SCORE_TOKENS = 65_536


def lognormal_lengths(n: int, median: float, cap: int, generator: torch.Generator) -> Tensor:
    """``[n]`` lengths, lognormal around ``median`` with ``SIGMA``, in ``[1, cap]``."""
    draws = torch.randn(n, generator=generator, dtype=torch.float64) * SIGMA
    return (median * draws.exp()).round().clamp(1, cap).long()


def masks(prompt_lens: Tensor, response_lens: Tensor) -> tuple[Tensor, Tensor]:
    """Left-padded prompt and right-padded response masks at the longest of each."""
    p, r = int(prompt_lens.max()), int(response_lens.max())
    prompt = torch.arange(p)[None, :] >= (p - prompt_lens)[:, None]
    response = torch.arange(r)[None, :] < response_lens[:, None]
    return prompt, response


def rollout_masks(scale: float, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """``PROMPTS × GROUP`` rows: one prompt length per group, one response length per row."""
    median, cap = MEDIAN * scale, max(1, int(CAP * scale))
    prompts = lognormal_lengths(PROMPTS, median, cap, generator).repeat_interleave(GROUP)
    return masks(prompts, lognormal_lengths(PROMPTS * GROUP, median, cap, generator))


def full_width_share(prompt: Tensor, response: Tensor, parts: list[Tensor]) -> float:
    """Padding share of parts that keep the rollout's whole rectangle (no trimming)."""
    width = prompt.shape[1] + response.shape[1]
    positions = sum(len(part) for part in parts) * width
    return 1.0 - (int(prompt.sum()) + int(response.sum())) / positions


def padding_table(generator: torch.Generator) -> None:
    prompt, response = rollout_masks(1.0, generator)
    rows, width = prompt.shape[0], prompt.shape[1] + response.shape[1]
    print(
        f"rollout: {PROMPTS} prompts × {GROUP}, lengths lognormal (median {MEDIAN}, σ {SIGMA}, "
        f"cap {CAP}); padded width {prompt.shape[1]} + {response.shape[1]}"
    )
    order = torch.randperm(rows, generator=generator)
    before_u, now_u, parts_before, parts_now = [], [], 0, 0
    for minibatch in order.chunk(MINIBATCHES):
        pm, rm = prompt[minibatch], response[minibatch]
        size = rows_per_pass(UPDATE_TOKENS, width, len(minibatch))
        before = consecutive_parts(len(minibatch), size, torch.device("cpu"))
        now = length_parts(pm, rm, UPDATE_TOKENS)
        before_u.append(full_width_share(pm, rm, before))
        now_u.append(padding_share(pm, rm, now))
        parts_before, parts_now = parts_before + len(before), parts_now + len(now)
    size = rows_per_pass(SCORE_TOKENS, width, rows, GROUP)
    score_parts = consecutive_parts(rows, size, torch.device("cpu"))
    before_s = full_width_share(prompt, response, score_parts)
    cached_parts = group_parts(prompt, response, GROUP, SCORE_TOKENS)
    cached_s = cached_share(prompt, response, cached_parts, GROUP, by_length=True)
    old_parts = length_parts(prompt, response, SCORE_TOKENS)
    old_s = padding_share(prompt, response, old_parts)
    print(f"update ({UPDATE_TOKENS:,} tokens a micro-batch, {MINIBATCHES} minibatches):")
    print(f"  before: padding {statistics.mean(before_u):.1%} in {parts_before} micro-batches")
    print(f"  now:    padding {statistics.mean(now_u):.1%} in {parts_now} micro-batches")
    print(f"scoring ({SCORE_TOKENS:,} tokens a part; before: {len(score_parts)} parts):")
    print(f"  before: padding {before_s:.1%} (every pass)")
    print(f"  now, π_old (the update's forward, by length): padding {old_s:.1%} in "
          f"{len(old_parts)} parts")  # fmt: skip
    print(f"  now, the critic (cached: groups by prompt length, responses by "
          f"length): padding {cached_s:.1%} in {len(cached_parts)} parts")  # fmt: skip
    worst = max(statistics.mean(now_u), old_s, cached_s)
    print(f"the most padding of any pass now: {worst:.1%} (the goal: at most 10%)")


def smollm2_shaped(layers: int, quick: bool) -> LlamaForCausalLM:
    """SmolLM2-135M's shapes (``bench/engine.py``'s), ``layers`` decoder layers (``quick``: the
    tiny model, one layer), random weights."""
    config = shape_config("tiny" if quick else "smollm2")
    config.num_hidden_layers = 1 if quick else layers
    return LlamaForCausalLM(config)


def minibatch_of(model: LlamaForCausalLM, rows: int, scale: float, generator: torch.Generator):
    """A minibatch of ``rows`` rows with math-RL lengths scaled by ``scale``, random tokens."""
    median, cap = MEDIAN * scale, max(2, int(CAP * scale))
    prompt, response = masks(
        lognormal_lengths(rows, median, cap, generator),
        lognormal_lengths(rows, median, cap, generator),
    )
    vocab = model.config.vocab_size
    response_ids = torch.randint(0, vocab, response.shape, generator=generator)
    advantages = torch.randn(response.shape, generator=generator)
    return Minibatch(
        prompt_ids=torch.randint(0, vocab, prompt.shape, generator=generator),
        prompt_mask=prompt,
        response_ids=response_ids,
        response_mask=response,
        old_logprobs=None,  # the update's own forward (one update a step)
        ref_logprobs=None,
        advantages=advantages * response,
    )


def update_seconds(
    model: LlamaForCausalLM, strategy: Strategy, batch: Minibatch, parts: list[Tensor], trim: bool
) -> float:
    """One minibatch's forward and backward, part by part (``trim``: each part trimmed)."""
    divisors = whole_minibatch_divisors(batch.loss_mask)
    model.zero_grad(set_to_none=True)
    start = time.perf_counter()
    for part in parts:
        piece = batch.select(part)
        loss, _ = strategy.loss(model, piece.trimmed() if trim else piece, divisors=divisors)
        loss.backward()
    return time.perf_counter() - start


def timed_rounds(args: argparse.Namespace, generator: torch.Generator) -> None:
    model = smollm2_shaped(args.layers, args.quick).train()
    strategy = build_strategy(compose_train_config(["train_type.kl_coef=0.0"]).train_type)
    rows, scale = (8, 0.03) if args.quick else (16, 0.1)
    batch = minibatch_of(model, rows, scale, generator)
    width = batch.prompt_ids.shape[1] + batch.response_ids.shape[1]
    budget = max(width, int(UPDATE_TOKENS * scale * 0.5))
    before = consecutive_parts(rows, rows_per_pass(budget, width, rows), torch.device("cpu"))
    now = length_parts(batch.prompt_mask, batch.response_mask, budget)
    name = "small model" if args.quick else f"SmolLM2-135M-shaped, {args.layers} layers"
    share_before = full_width_share(batch.prompt_mask, batch.response_mask, before)
    share_now = padding_share(batch.prompt_mask, batch.response_mask, now)
    print(
        f"update step: {name}, {rows} rows, lengths scaled by {scale} (width {width}), "
        f"{budget} tokens a micro-batch: padding {share_before:.1%} in {len(before)} parts "
        f"before, {share_now:.1%} in {len(now)} now"
    )
    update_seconds(model, strategy, batch, now, trim=True)  # warm-up
    ratios = []
    for round_index in range(1 if args.quick else args.rounds):
        first = update_seconds(model, strategy, batch, before, trim=False)
        second = update_seconds(model, strategy, batch, now, trim=True)
        ratios.append(second / first)
        print(f"  round {round_index + 1}: before {first:.2f} s, now {second:.2f} s")
    print(f"ratio: {statistics.median(ratios):.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(0)
    padding_table(generator)
    timed_rounds(args, generator)


if __name__ == "__main__":
    main()
