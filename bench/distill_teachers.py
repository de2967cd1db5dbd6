"""On-policy distillation from several teachers, and over multi-turn episodes, learns on this CPU
(issue 61's multi-teacher and multi-turn acceptance): real ``train.py`` runs of the tiny model,
one after another.

- ``mopd``: two teachers, each the default job's GRPO trained on one embedded task until
  held-out 0.9 (``addition``; ``reverse``); one fresh student on a dataset mixing both tasks'
  training prompts (``task=dataset``, a ``teacher`` column naming each row's teacher;
  addition's 87 rows ×10 beside 1,500-odd reverse rows), trained by its rows' teachers alone
  (``distill=opd teacher.paths={add: .., rev: ..} task.teacher_key=teacher``), until the
  26-prompt held-out mix (13 of each task) reaches 0.96 (at most one miss: ≥ 12 of 13 = 0.923 on
  each). Then ``astrai.generate --task addition`` and ``--task reverse`` score it on each
  task's own held-out set: both are to be ≥ 0.9.
- ``calculator``: the teacher is ``experiment=calculator`` (GRPO, a multiply tool) until
  held-out 0.9; the student is the same experiment from scratch with ``distill=opd`` (the
  teacher's judgement of its sampled turns only; the tool's replies are never distilled on),
  until held-out 0.9 or 10 minutes.

A line per run, then ``distill_teachers: PASS`` or ``FAIL`` (exit 1).

    .venv/bin/python bench/distill_teachers.py                   # ~12 min on 2 cores
    .venv/bin/python bench/distill_teachers.py --only calculator
    .venv/bin/python bench/distill_teachers.py --quick           # seconds: checks the script (CI)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from astrai.tasks.arithmetic import AdditionTask
from astrai.tasks.strings import ReverseTask

REPO = Path(__file__).resolve().parents[1]
BUDGET_S = 600
TARGET = 0.9
STOP = f"trainer.stop_at={{eval/accuracy:{TARGET}}}"
QUICK = [
    "trainer.total_steps=3",
    "trainer.eval_every=3",
    "trainer.eval_prompts=8",
    "train_type.prompts_per_step=4",
    "train_type.minibatches=1",
]


def train(args: list[str], directory: Path, quick: bool) -> tuple[list[dict], float]:
    """One ``train.py`` run in ``directory``: its metrics rows and wall seconds."""
    args = [*args, f"hydra.run.dir={directory}", "trainer.progress_bar=false"]
    args += QUICK if quick else [f"trainer.max_duration={BUDGET_S}s"]
    start = time.perf_counter()
    result = subprocess.run(
        [sys.executable, str(REPO / "train.py"), *args],
        cwd=REPO,
        env=_env(),
        capture_output=True,
        text=True,
    )
    seconds = time.perf_counter() - start
    if result.returncode != 0:
        sys.exit(f"{directory.name}: train.py exited {result.returncode}:\n{result.stderr[-3000:]}")
    lines = (directory / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines], seconds


def _env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2")}


def first_step(rows: list[dict], target: float = TARGET) -> int | None:
    """The first evaluated step with held-out accuracy ≥ ``target`` (None: never)."""
    return next((int(r["step"]) for r in rows if r.get("eval/accuracy", -1.0) >= target), None)


def held_out_accuracy(run_dir: Path, task: str, n: int) -> float:
    """``astrai.generate RUN --task TASK --n N``'s accuracy: the run's latest checkpoint, greedy,
    on ``task``'s first ``n`` held-out prompts."""
    result = subprocess.run(
        [sys.executable, "-m", "astrai.generate", str(run_dir), "--task", task, "--n", str(n)],
        cwd=REPO,
        env=_env(),
        capture_output=True,
        text=True,
    )
    found = re.search(r"accuracy ([0-9.]+)\s*$", result.stdout)
    if result.returncode != 0 or found is None:
        sys.exit(f"generate --task {task}: exit {result.returncode}:\n{result.stderr[-2000:]}")
    return float(found.group(1))


def _rows(problems: list, teacher: str) -> list[dict]:
    """One ``{prompt, answer, teacher}`` row per distinct prompt, in order."""
    rows: dict[str, dict] = {}
    for p in problems:
        rows.setdefault(p.text, {"prompt": p.text, "answer": p.answer, "teacher": teacher})
    return list(rows.values())


def write_mix(directory: Path) -> tuple[Path, Path]:
    """The two tasks' training rows (addition's repeated 10 times, so that each task is a fair
    share of a step's prompts) and a 26-prompt held-out mix, as jsonl."""
    add = AdditionTask(num_digits=1, num_digits_b=None, eval_fraction=0.2)
    rev = ReverseTask(min_len=3, max_len=4, eval_fraction=0.1)
    add_train = _rows(add.train_problems(0, 0, 2000), "add")
    train = add_train * 10 + _rows(rev.train_problems(0, 0, 2000), "rev")
    evals = _rows(add.eval_problems(13), "add") + _rows(rev.eval_problems(13), "rev")
    paths = directory / "train.jsonl", directory / "eval.jsonl"
    for path, rows in zip(paths, (train, evals), strict=True):
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return paths


def mopd(root: Path, quick: bool) -> bool:
    teachers: dict[str, Path] = {}
    for name, task in (("add", "addition"), ("rev", "reverse")):
        teachers[name] = root / f"teacher-{name}"
        rows, seconds = train([f"task={task}", STOP], teachers[name], quick)
        print(f"mopd/teacher-{name}: {first_step(rows)} steps to {TARGET}, {seconds:.0f}s")
    train_path, eval_path = write_mix(root)
    paths = ",".join(f"{name}:{path}" for name, path in teachers.items())
    student = root / "mopd-student"
    overrides = [
        "task=dataset",
        f"task.train_path={train_path}",
        f"task.eval_path={eval_path}",
        "task.teacher_key=teacher",
        "distill=opd",
        f"teacher.paths={{{paths}}}",
        "trainer.stop_at={eval/accuracy: 0.96}",
        "trainer.eval_every=10",
    ]
    rows, seconds = train(overrides, student, quick)
    shares = {n: rows[-2].get(f"distill/token_frac/{n}") for n in teachers} if len(rows) > 1 else {}
    print(f"mopd/student: {first_step(rows, 0.96)} steps to 0.96, {seconds:.0f}s, shares {shares}")
    accuracy = {task: held_out_accuracy(student, task, 200) for task in ("addition", "reverse")}
    print(f"mopd/student held out: {accuracy}")
    return all(value >= TARGET for value in accuracy.values())


def calculator(root: Path, quick: bool) -> bool:
    teacher = root / "calculator-teacher"
    rows, seconds = train(["experiment=calculator", STOP], teacher, quick)
    print(f"calculator/teacher: {first_step(rows)} steps to {TARGET}, {seconds:.0f}s")
    student = ["experiment=calculator", "distill=opd", f"teacher.path={teacher}", STOP]
    rows, seconds = train(student, root / "calculator-student", quick)
    kl = [r["distill/reverse_kl"] for r in rows if "distill/reverse_kl" in r]
    print(
        f"calculator/student: {first_step(rows)} steps to {TARGET}, {seconds:.0f}s, "
        f"distill/reverse_kl {kl[0]:.3f} -> {kl[-1]:.3f}"
    )
    return first_step(rows) is not None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=("mopd", "calculator"))
    parser.add_argument("--quick", action="store_true", help="3-step runs: checks the script")
    args = parser.parse_args()
    sections = {"mopd": mopd, "calculator": calculator}
    passed = True
    with tempfile.TemporaryDirectory(prefix="distill-teachers-") as tmp:
        for name, section in sections.items():
            if args.only in (None, name):
                passed = section(Path(tmp), args.quick) and passed
    if args.quick:
        print("distill_teachers: quick mode (3 steps a run): no bar")
        return 0
    print(f"distill_teachers: {'PASS' if passed else 'FAIL'}")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
