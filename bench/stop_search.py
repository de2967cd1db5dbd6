"""Finding a stop string in a sampled turn (issue 58, finding 7): the episode runner's binary
search over the turn's prefixes (``rollout.episodes.runner.cut_at_stop_string``) beside the search
it replaced, one decode per prefix, on the same 1,024-token turn of a byte-level BPE tokenizer
(Qwen's ChatML vocabulary, tests/chat_families.py) with Hermes' ``</tool_call>`` near its end.
Prints both times (best of a few) and their ratio; ``--quick`` a 128-token turn (CI)."""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.chat_families

from tests.chat_families import write_family_tokenizer  # noqa: E402

from astrai.models.hf_tokenizer import HFTokenizer  # noqa: E402
from astrai.rollout.episodes.runner import cut_at_stop_string  # noqa: E402

STOP = "</tool_call>"


def per_prefix(ids: list[int], decode: Callable[[list[int]], str], stops: Sequence[str]) -> int:
    """The search before issue 58: every prefix decoded until one holds a stop string."""
    for end in range(1, len(ids) + 1):
        if any(stop in decode(ids[:end]) for stop in stops):
            return end
    return len(ids)


def best_seconds(fn: Callable[[], int], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a 128-token turn (CI)")
    args = parser.parse_args()
    tokens = 128 if args.quick else 1024
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer = HFTokenizer.load(write_family_tokenizer(Path(tmp), "qwen3"))
    body = tokenizer.encode("x" * (tokens - 40), add_special_tokens=False)
    call = tokenizer.encode(f'<tool_call>{{"name": "f"}}{STOP}', add_special_tokens=False)
    ids = (body + call + body)[:tokens]
    assert len(ids) == tokens and STOP in tokenizer.decode(ids)
    found = cut_at_stop_string(ids, tokenizer.decode, [STOP])
    assert found == per_prefix(ids, tokenizer.decode, [STOP]) == len(body) + len(call)
    old = best_seconds(lambda: per_prefix(ids, tokenizer.decode, [STOP]), 3)
    new = best_seconds(lambda: cut_at_stop_string(ids, tokenizer.decode, [STOP]), 20)
    print(f"stop search on a {tokens}-token turn (the stop at token {found}):")
    print(f"  one decode per prefix  {old * 1e3:8.2f} ms")
    print(f"  binary search          {new * 1e3:8.2f} ms")
    print(f"  ratio (per prefix / binary search): {old / new:.1f}x")


if __name__ == "__main__":
    main()
