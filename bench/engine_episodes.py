"""Multi-turn episodes: astrai's torch sampler vs vLLM's CPU build, side by side in one run.

``bench/engine.py`` times one-turn rollouts; this times the episode runner
(``rollout.episodes.runner.run_episodes``, what ``env=...`` rollouts call) on both engines. Each
turn continues every live episode from its token ids: the torch sampler prefills the whole episode
again each turn, vLLM may reuse its prefix cache. The environment (``Fixed``) answers each of
``--turns`` turns with the same observation of ``--observation`` tokens and ends the episode at
the last; every turn samples ``--new-tokens`` tokens (no stop ids), so both engines sample the
same number of tokens. Same random-init weights (float32), same prompts, temperature 1; timed
interleaved after one warm-up, sampled tokens/s over the best of ``--repeats``. Shapes as
``bench/engine.py``'s (``tiny`` with 2 heads of 32; ``smollm2``: SmolLM2-135M's shapes).

Prints a table and, last, ``ratio: <vllm / torch>`` at the last shape run.

    .venv-vllm/bin/python bench/engine_episodes.py [--shape tiny|smollm2|both] [--repeats 3]
    .venv-vllm/bin/python bench/engine_episodes.py --quick   # seconds: checks the script (CI)

Needs vLLM (``make install-vllm`` builds ``.venv-vllm``).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from astrai.envs.base import Environment, Message, StepResult
from astrai.envs.tool_calls import ParsedTurn
from astrai.models.llama import LlamaForCausalLM
from astrai.models.tokenizer import CharTokenizer
from astrai.models.weights import named_weights
from astrai.rollout.engines.engine import Engine, torch_engine
from astrai.rollout.engines.sampler import SamplingConfig
from astrai.rollout.engines.seeded_vllm import VLLM_INSTALL, SeededVLLM
from astrai.rollout.episodes.env_spec import turn_parser
from astrai.rollout.episodes.runner import Episode, EpisodeLimits, EpisodeText, run_episodes

sys.path.insert(0, str(Path(__file__).resolve().parent))
from engine import NO_STOP, best_seconds, shape_config  # noqa: E402 (bench/engine.py)

TOKENIZER = CharTokenizer()


@dataclass
class Workload:
    """``episodes`` episodes of ``turns`` turns, each turn ``new_tokens`` sampled tokens and
    (but the last) an observation of ``observation`` tokens, after a prompt of 12 tokens."""

    episodes: int
    turns: int
    new_tokens: int
    observation: int

    @property
    def tokens(self) -> int:
        return self.episodes * self.turns * self.new_tokens

    def __str__(self) -> str:
        return f"{self.episodes}x{self.turns}x{self.new_tokens}+{self.observation}"


class Fixed(Environment):
    """Answers ``turns - 1`` turns with ``observation`` (its tokens), ends at the last."""

    def __init__(self, turns: int, observation: str) -> None:
        self.turns, self.observation, self.seen = turns, observation, 0

    def reset(self, row: dict) -> list[Message]:
        self.seen = 0
        return [{"role": "user", "content": row["text"]}]

    def step(self, turn: ParsedTurn) -> StepResult:
        self.seen += 1
        if self.seen == self.turns:
            return StepResult(reward=1.0, done=True)
        return StepResult([{"role": "tool", "content": self.observation}])


def _plain(messages: Sequence[Message], bos: bool) -> list[int]:
    return TOKENIZER.encode("".join(str(m["content"]) for m in messages), add_bos=bos)


# the contents written one after the other (the character tokenizer's protocol); a sampled
# turn is never read (parser none, and ids past the characters decode to nothing)
TEXT = EpisodeText(
    lambda messages: _plain(messages, True),
    lambda messages: _plain(messages, False),
    lambda ids: "",
    turn_parser("none"),
)


def episode_runner(
    engine: Engine, work: Workload, sampling: SamplingConfig
) -> Callable[[int], list[Episode]]:
    """One repetition: ``work.episodes`` episodes on prompts drawn from ``seed``."""
    limits = EpisodeLimits(
        max_turns=work.turns, max_episode_tokens=100_000, max_observation_tokens=100_000
    )
    observation = "0123456789" * (work.observation // 10) + "0" * (work.observation % 10)

    def run(seed: int) -> list[Episode]:
        g = torch.Generator().manual_seed(seed)
        digits = torch.randint(0, 10, (work.episodes, 12), generator=g).tolist()
        rows = [{"text": "".join(map(str, row))} for row in digits]
        envs = [Fixed(work.turns, observation) for _ in rows]
        generator = torch.Generator().manual_seed(seed)
        return run_episodes(engine, envs, rows, TEXT, sampling, NO_STOP, limits, generator)

    return run


def best_tokens_per_second(
    runners: dict[str, Callable[[int], list[Episode]]], work: Workload, repeats: int
) -> dict[str, float]:
    """``bench/engine.py``'s ``best_seconds`` as ``tokens / best seconds``; every episode
    ended done with exactly its sampled tokens."""

    def check(name: str, episodes: list[Episode]) -> None:
        sampled = sum(sum(e.tokens.trainable) for e in episodes)
        assert sampled == work.tokens, (name, sampled, work.tokens)
        assert all(e.done and not e.failed for e in episodes), name

    best = best_seconds(runners, repeats, check)
    return {name: work.tokens / seconds for name, seconds in best.items()}


def bench_shape(name: str, work: Workload, repeats: int, kv_cache_gib: int) -> dict:
    from astrai.rollout.engines.vllm_settings import VLLMEngineConfig

    config = shape_config(name)
    # an episode is longer than a turn: the tiny preset's 64 positions would not hold one
    config.max_position_embeddings = max(config.max_position_embeddings, 1024)
    torch.manual_seed(0)
    policy = LlamaForCausalLM(config).eval()
    sampling = SamplingConfig(max_new_tokens=work.new_tokens, temperature=1.0)
    print(f"\n== {name}: {policy.num_parameters():,} parameters, workload {work}", flush=True)
    vllm = SeededVLLM(VLLMEngineConfig(kv_cache_space_gib=kv_cache_gib), policy, TOKENIZER)
    try:
        vllm.sync_weights(named_weights(policy))
        runners = {
            "torch": episode_runner(torch_engine(policy, TOKENIZER), work, sampling),
            "vllm": episode_runner(vllm, work, sampling),
        }
        tps = best_tokens_per_second(runners, work, repeats)
    finally:
        vllm.close()
    return {"shape": name, "work": work, "threads": torch.get_num_threads(), **tps}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=["tiny", "smollm2", "both"], default="both")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--new-tokens", type=int, default=16)
    parser.add_argument("--observation", type=int, default=32)
    parser.add_argument("--kv-cache-gib", type=int, default=1, help="VLLM_CPU_KVCACHE_SPACE")
    parser.add_argument("--quick", action="store_true", help="a tiny workload: checks the script")
    args = parser.parse_args()
    workloads = {
        "tiny": Workload(16, args.turns, args.new_tokens, args.observation),
        "smollm2": Workload(8, args.turns, args.new_tokens, args.observation),
    }
    if args.quick:
        args.shape, args.repeats = "tiny", 1
        workloads["tiny"] = Workload(2, 2, 4, 5)
    if importlib.util.find_spec("vllm") is None:
        print(f"bench/engine_episodes.py needs vLLM: {VLLM_INSTALL}", file=sys.stderr)
        sys.exit(2)
    import vllm

    print(
        f"torch {torch.__version__}, vllm {vllm.__version__}; fp32, temperature 1, best of "
        f"{args.repeats} after a warm-up",
        flush=True,
    )
    shapes = ("tiny", "smollm2") if args.shape == "both" else (args.shape,)
    results = [bench_shape(s, workloads[s], args.repeats, args.kv_cache_gib) for s in shapes]
    print(f"\n{'shape':<9}{'workload':>14}{'threads':>8}{'torch tok/s':>13}{'vllm tok/s':>12}"
          f"{'vllm/torch':>11}")  # fmt: skip
    for r in results:
        print(
            f"{r['shape']:<9}{str(r['work']):>14}{r['threads']:>8}{r['torch']:>13,.0f}"
            f"{r['vllm']:>12,.0f}{r['vllm'] / r['torch']:>11.3f}"
        )
    print(
        "workload: episodes x turns x new tokens a turn + observation tokens a turn; tok/s: "
        "sampled tokens over the episodes' wall time (the environment's steps included)"
    )
    print(f"ratio: {results[-1]['vllm'] / results[-1]['torch']:.3f}")


if __name__ == "__main__":
    main()
