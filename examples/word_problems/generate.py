"""Write the word-problem example files (deterministic; no download).

    python examples/word_problems/generate.py

``gsm8k_style.jsonl``: two-step word problems in GSM8K's record shape: ``question``, and an
``answer`` that works the steps and ends in ``#### <number>``. For a pretrained chat model
(``experiment=word_problems``, SmolLM2 after ``make smollm2``) with ``reward=math``.

``tiny.jsonl``: the same family cut to what astrai's tiny character model can read and learn on
a CPU in minutes: one step, one-digit numbers, lowercase text inside the character tokenizer's
alphabet; the same record shape (``experiment=word_problems_tiny``).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
NAMES = ["Mia", "Leo", "Ava", "Noah", "Zoe", "Liam", "Ivy", "Omar", "Nina", "Sam", "Rosa", "Ben"]
ITEMS = ["apples", "marbles", "stickers", "books", "coins", "shells", "pencils", "cards"]


def gsm8k_style(rng: random.Random) -> dict[str, str]:
    """Two steps: a gain then a loss (or the reverse), numbers up to 60."""
    name, other = rng.sample(NAMES, 2)
    item = rng.choice(ITEMS)
    start, gain = rng.randint(5, 40), rng.randint(2, 30)
    loss = rng.randint(1, start + gain - 1)
    if rng.random() < 0.5:
        question = (
            f"{name} has {start} {item}. {name} buys {gain} more and then gives {loss} to "
            f"{other}. How many {item} does {name} have now?"
        )
        middle, end = start + gain, start + gain - loss
        answer = (
            f"After buying, {name} has {start} + {gain} = {middle} {item}.\n"
            f"After giving {loss} away, {name} has {middle} - {loss} = {end} {item}.\n#### {end}"
        )
    else:
        loss = rng.randint(1, start)
        question = (
            f"{name} had {start} {item}, lost {loss} of them, and then found {gain} more. "
            f"How many {item} does {name} have?"
        )
        middle, end = start - loss, start - loss + gain
        answer = (
            f"After losing {loss}, {name} has {start} - {loss} = {middle} {item}.\n"
            f"After finding {gain}, {name} has {middle} + {gain} = {end} {item}.\n#### {end}"
        )
    return {"question": question, "answer": answer}


def tiny(rng: random.Random) -> dict[str, str]:
    """One step, one-digit numbers, lowercase: ``mia has 3 coins and gets 4 more. how many?``"""
    name, item = rng.choice(NAMES).lower(), rng.choice(ITEMS)
    a, b = rng.randint(0, 9), rng.randint(0, 9)
    if rng.random() < 0.5:
        question, result, step = f"{name} has {a} {item} and gets {b} more. how many?", a + b, "+"
    else:
        a, b = max(a, b), min(a, b)
        question, result, step = f"{name} has {a} {item} and loses {b}. how many?", a - b, "-"
    return {"question": question, "answer": f"{a} {step} {b} = {result}\n#### {result}"}


FILES = {  # name -> (generator, problems, seed)
    "gsm8k_style.jsonl": (gsm8k_style, 1200, 0),
    "tiny.jsonl": (tiny, 2500, 1),
}


def write(path: Path, make, count: int, seed: int) -> None:  # noqa: ANN001
    rng = random.Random(seed)
    rows, seen = [], set()
    while len(rows) < count:
        row = make(rng)
        if row["question"] not in seen:  # distinct prompts: the eval split hashes them
            seen.add(row["question"])
            rows.append(row)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    print(f"wrote {path}: {count} problems, {path.stat().st_size:,} bytes")


if __name__ == "__main__":
    for name, (make, count, seed) in FILES.items():
        write(HERE / name, make, count, seed)
