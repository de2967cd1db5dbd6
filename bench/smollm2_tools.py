"""A real chat model learns to call a tool on this CPU (issue 58's acceptance): SmolLM2-135M
Instruct (``make smollm2``) with rank-16 LoRA adapters, GRPO, ``examples/tool_env``'s ``Lookup``
under ``env.parser=hermes``, as real ``train.py`` runs, one per seed.

First the prompt: SmolLM2's ChatML template ignores ``tools=``, so the opening the model sees
holds Qwen's Hermes tools block in its system message (``rollout.episodes.tool_prompt``); the script
checks that the rendered opening holds the ``lookup`` schema.

The tasks are ``examples/tool_env/tasks.jsonl``'s rows with the call spelled out after each
question (``code of kiwi?\\nRepeat after me:\\n<tool_call>\\n{"name": "lookup", ...}
\\n</tool_call>``): with the tools in the system message alone the 135M model wrote no
well-formed call in 96 first turns sampled at temperature 1 from the rows as they are, and none
greedy; spelled out, 1 in 32 of its first sampled turns is one (while greedy decoding already
solves the 5 held-out rows: eval/accuracy 1.0 before any training). Each well-formed call earns
``env.call_bonus=1.0`` once, the right code after it 1.0 more (``Lookup``). Each run's
``metrics.jsonl`` is read back: ``env/tool_calls`` (parsed calls per episode of the step's
rollouts, sampled at temperature 1) per step; the bar is its rise from step 1 to the mean of the
last 3 steps, in every seed.

    .venv/bin/python bench/smollm2_tools.py            # 2 seeds x 8 steps, ~60 min on 2 cores
    .venv/bin/python bench/smollm2_tools.py --seeds 0  # one seed
    .venv/bin/python bench/smollm2_tools.py --quick    # one tiny step: checks the script (CI)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "examples" / "tool_env"
MODEL = REPO / "models" / "smollm2"
STEPS = 8
# env/tool_calls, the last 3 steps' mean minus step 1's: measured +1.01 and +1.41 (seeds 0, 1;
# docs/environments.md), the bar half the smaller
RISE_BAR = 0.5
WORDS = ("kiwi", "plum", "fig", "lime", "pear", "date")  # lookup_env.CODES
JOB = [
    "model=smollm2",
    f"model.path={MODEL}",
    "model.lora.rank=16",  # alpha 32, every decoder linear (conf/model/lora/default.yaml)
    "task=dataset",
    "task.eval_fraction=0.25",
    "env=custom",
    "env._target_=lookup_env.Lookup",
    "env.parser=hermes",
    "env.max_turns=2",  # the call, then the answer
    "+env.call_bonus=1.0",
    "train_type.prompts_per_step=4",
    "train_type.group_size=8",
    "train_type.minibatches=2",
    "train_type.kl_coef=0.0",
    "train_type.sampling.max_new_tokens=48",  # a call is ~27 tokens
    "train_type.optimizer.lr=5e-4",
    "trainer.eval_every=1000",  # step 0 only: greedy already calls (the rollouts are the measure)
    "trainer.progress_bar=false",
    "ckpt.every_steps=0",
]
QUICK = [
    "trainer.total_steps=1",
    "train_type.prompts_per_step=2",
    "train_type.group_size=2",
    "train_type.minibatches=1",
    "train_type.sampling.max_new_tokens=8",
    "trainer.eval_prompts=1",
]


def call(word: str) -> str:
    return f'<tool_call>\n{{"name": "lookup", "arguments": {{"word": "{word}"}}}}\n</tool_call>'


def write_tasks(path: Path) -> Path:
    """``examples/tool_env/tasks.jsonl`` with each row's call spelled out after its question."""
    rows = [json.loads(line) for line in (EXAMPLE / "tasks.jsonl").read_text().splitlines()]
    with path.open("w") as out:
        for row in rows:
            word = next(w for w in WORDS if w in row["prompt"])
            prompt = f"{row['prompt']}\nRepeat after me:\n{call(word)}"
            out.write(json.dumps({"prompt": prompt, "answer": row["answer"]}) + "\n")
    return path


def check_prompt() -> str:
    """The rendered opening of a task row holds the ``lookup`` schema (SystemExit otherwise);
    its first line."""
    sys.path.insert(0, str(EXAMPLE))
    from astrai.models.hf_tokenizer import HFTokenizer
    from astrai.rollout.episodes.env_spec import env_spec
    from astrai.rollout.episodes.text import episode_text
    from astrai.rollout.episodes.view import decode_kept

    tokenizer = HFTokenizer.load(MODEL)
    spec = env_spec({"_target_": "lookup_env.Lookup", "parser": "hermes", "workers": "thread"})
    assert spec is not None
    tools = spec.make().tools()
    opening = [{"role": "user", "content": "code of kiwi?"}]
    seen = decode_kept(tokenizer, episode_text(tokenizer, spec, tools).prompt_ids(opening))
    if json.dumps(tools[0]) not in seen:
        sys.exit(f"smollm2_tools: the opening lacks the lookup schema:\n{seen}")
    return seen.splitlines()[1]


def train(seed: int, tasks: Path, run_dir: Path, overrides: list[str]) -> tuple[list[dict], float]:
    """One run: its metrics rows and wall seconds."""
    args = [*JOB, f"seed={seed}", f"task.train_path={tasks}", f"hydra.run.dir={run_dir}"]
    env = {**os.environ, "PYTHONPATH": str(EXAMPLE)}
    env.setdefault("OMP_NUM_THREADS", "1")
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, str(REPO / "train.py"), *args, *overrides],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
    )
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"smollm2_tools: seed {seed}: train.py exited {done.returncode}:\n"
                 f"{done.stderr[-3000:]}")  # fmt: skip
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return rows, seconds


def rise(rows: list[dict]) -> tuple[list[float], float, float]:
    """Each step's ``env/tool_calls``, step 1's and the last 3 steps' mean."""
    calls = [r["env/tool_calls"] for r in rows if "env/tool_calls" in r]
    return calls, calls[0], sum(calls[-3:]) / len(calls[-3:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one tiny step: checks the script")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--out", type=Path, help="keep the run dirs here")
    args = parser.parse_args()
    print(f"smollm2_tools: the opening's system message: {check_prompt()!r} ...", flush=True)
    seeds = args.seeds[:1] if args.quick else args.seeds
    overrides = QUICK if args.quick else [f"trainer.total_steps={args.steps}"]
    passed = True
    with tempfile.TemporaryDirectory() as tmp:
        root = args.out or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        tasks = write_tasks(root / "tasks.jsonl")
        for seed in seeds:
            rows, seconds = train(seed, tasks, root / f"seed{seed}", overrides)
            calls, first, last = rise(rows)
            steps = ", ".join(f"{c:.2f}" for c in calls)
            ok = last - first >= RISE_BAR
            passed &= ok
            verdict = "" if args.quick else f" (rise >= {RISE_BAR}: {ok})"
            line = f"seed {seed}: {len(calls)} steps in {seconds:.0f} s; env/tool_calls per step "
            print(f"{line}{steps}; step 1 {first:.2f} -> last 3 {last:.2f}{verdict}", flush=True)
    if args.quick:
        print("smollm2_tools: quick run done (no bar checked)")
        return
    print(f"smollm2_tools: {'PASS' if passed else 'FAIL'}")
    sys.exit(0 if passed else 1)


if __name__ == "__main__":
    main()
