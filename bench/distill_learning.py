"""On-policy distillation learns on this CPU (issue 61's learning acceptance): real ``train.py``
runs of the tiny model, one after another, in three sections (``--only``):

- ``students``: the teacher is the default job (GRPO on addition) until held-out greedy
  accuracy 0.9. For each seed a fresh student three ways, each until held-out 0.9
  (``trainer.stop_at``, evaluated every 10 steps) or 10 minutes (``trainer.max_duration``):
  ``grpo`` (the task's reward alone: the default job), ``grpo-opd`` (``distill=opd``: the
  teacher's k1 reward alone, ``use_task_reward=false``), ``ppo-opd`` (``train_type=online_ppo
  distill=opd``: the same reward through GAE and the critic). A line per run, the table of
  seeds × steps and ``ratio: <median GRPO steps ÷ median GRPO-OPD steps>`` (the anchors expect
  several times fewer).
- ``mopd``: two teachers, the default job trained on ``addition`` and on ``reverse``; one
  fresh student on a dataset of both tasks' training prompts (a ``teacher`` column names each
  row's teacher; addition's 87 rows ×10 beside ~1,500 reverse rows) taught by its rows'
  teachers alone (``teacher.paths={add: .., rev: ..} task.teacher_key=teacher``) until the
  held-out mix of 13 prompts of each reaches 0.96 (at most one miss); then ``astrai.generate
  --task addition`` and ``--task reverse`` score it on each task's own held-out set.
- ``calculator``: the teacher is ``experiment=calculator`` (GRPO, a multiply tool) until
  held-out 0.9; the student, the same experiment from scratch with ``distill=opd`` (its sampled
  turns only are distilled on, never the tool's replies), until 0.9 or 10 minutes.

``distill_learning: PASS`` or ``FAIL`` (exit 1): every distillation run reached its bar within
its 10 minutes, and the multi-teacher student is ≥ 0.9 on both tasks.

    .venv/bin/python bench/distill_learning.py                  # ~20 min on 2 cores
    .venv/bin/python bench/distill_learning.py --only students --seeds 0 1 2 3 4
    .venv/bin/python bench/distill_learning.py --quick          # seconds: checks the script (CI)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
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
STOP = [f"trainer.stop_at={{eval/accuracy:{TARGET}}}", "trainer.eval_every=10"]
STUDENTS: dict[str, list[str]] = {
    "grpo": [],
    "grpo-opd": ["distill=opd"],
    "ppo-opd": ["train_type=online_ppo", "distill=opd"],
}
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


def steps_to_target(rows: list[dict], target: float = TARGET) -> int | None:
    """The first evaluated step with held-out accuracy ≥ ``target`` (None: never)."""
    return next((int(r["step"]) for r in rows if r.get("eval/accuracy", -1.0) >= target), None)


def last(rows: list[dict], name: str) -> float | None:
    values = [row[name] for row in rows if row.get(name) is not None]
    return values[-1] if values else None


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


def mopd(root: Path, quick: bool, quick_teacher: Path) -> bool:
    """Two teachers, one student routed by a column (the module docstring's ``mopd``)."""
    teachers: dict[str, Path] = {}
    for name, task in (("add", "addition"), ("rev", "reverse")):
        if quick:  # the script's check: the one quick teacher stands in for both
            teachers[name] = quick_teacher
            continue
        teachers[name] = root / f"teacher-{name}"
        rows, seconds = train([f"task={task}", *STOP], teachers[name], quick)
        print(f"mopd/teacher-{name}: {steps_to_target(rows)} steps to {TARGET}, {seconds:.0f}s")
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
    shares = {n: last(rows, f"distill/token_frac/{n}") for n in teachers}
    reached = steps_to_target(rows, 0.96)
    print(f"mopd/student: {reached} steps to 0.96, {seconds:.0f}s, last token shares {shares}")
    tasks = ("addition",) if quick else ("addition", "reverse")  # quick: the same call once
    accuracy = {task: held_out_accuracy(student, task, 200) for task in tasks}
    print(f"mopd/student held out: {accuracy}")
    return all(value >= TARGET for value in accuracy.values())


def calculator(root: Path, quick: bool, quick_teacher: Path) -> bool:
    """A calculator teacher, then a student of its episodes (the docstring's ``calculator``)."""
    teacher = quick_teacher
    if not quick:
        teacher = root / "calculator-teacher"
        rows, seconds = train(["experiment=calculator", *STOP], teacher, quick)
        print(f"calculator/teacher: {steps_to_target(rows)} steps to {TARGET}, {seconds:.0f}s")
    student = ["experiment=calculator", "distill=opd", f"teacher.path={teacher}", *STOP]
    rows, seconds = train(student, root / "calculator-student", quick)
    kl = [r["distill/reverse_kl"] for r in rows if "distill/reverse_kl" in r]
    print(
        f"calculator/student: {steps_to_target(rows)} steps to {TARGET}, {seconds:.0f}s, "
        f"distill/reverse_kl {kl[0]:.3f} -> {kl[-1]:.3f}"
    )
    return steps_to_target(rows) is not None


def students(root: Path, seeds: list[int], quick: bool) -> tuple[bool, Path]:
    """The teacher, then each seed's three students (the docstring's 1. and 2.); whether every
    distillation run reached 0.9, and the teacher's run dir."""
    teacher = root / "teacher"
    rows, seconds = train(STOP, teacher, quick)
    print(f"teacher: {steps_to_target(rows)} steps to {TARGET}, {seconds:.0f}s", flush=True)
    steps: dict[str, dict[int, int | None]] = {name: {} for name in STUDENTS}
    for seed in seeds:
        for name, extra in STUDENTS.items():
            if quick and name == "grpo":  # the default job: the quick check runs the others
                continue
            overrides = [*extra, f"seed={seed}", *STOP]
            if "distill=opd" in extra:
                overrides.append(f"teacher.path={teacher}")
            rows, seconds = train(overrides, root / f"{name}-{seed}", quick)
            steps[name][seed] = steps_to_target(rows)
            kl = last(rows, "distill/reverse_kl")
            kl_text = "" if kl is None else f", distill/reverse_kl {kl:.3f}"
            print(
                f"{name} seed {seed}: {steps[name][seed]} steps to {TARGET}, "
                f"{seconds:.0f}s{kl_text}",
                flush=True,
            )
    print("seed  " + "  ".join(f"{name:>9}" for name in STUDENTS))
    for seed in seeds:
        print(f"{seed:>4}  " + "  ".join(f"{str(steps[n].get(seed, '-')):>9}" for n in STUDENTS))
    reached = {name: [s for s in steps[name].values() if s is not None] for name in STUDENTS}
    if reached["grpo"] and reached["grpo-opd"]:
        ratio = statistics.median(reached["grpo"]) / statistics.median(reached["grpo-opd"])
        print(f"ratio: {ratio:.2f} (median GRPO steps ÷ median GRPO-OPD steps)")
    passed = all(len(reached[name]) == len(seeds) for name in STUDENTS if name != "grpo")
    return passed, teacher


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--only", choices=("students", "mopd", "calculator"))
    parser.add_argument("--quick", action="store_true", help="3-step runs: checks the script")
    args = parser.parse_args()
    seeds = args.seeds[:1] if args.quick else args.seeds
    passed = True
    with tempfile.TemporaryDirectory(prefix="distill-learning-") as tmp:
        root = Path(tmp)
        quick_teacher = root / "teacher"
        if args.only in (None, "students"):
            passed, quick_teacher = students(root, seeds, args.quick)
        elif args.quick:
            train(STOP, quick_teacher, args.quick)
        if args.only in (None, "mopd"):
            passed = mopd(root, args.quick, quick_teacher) and passed
        if args.only in (None, "calculator"):
            passed = calculator(root, args.quick, quick_teacher) and passed
    if args.quick:
        print("distill_learning: quick mode (3 steps a run): no bar")
        return 0
    print(f"distill_learning: {'PASS' if passed else 'FAIL'}")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
