"""``python train.py task=dataset``: your prompts and your reward, end to end through the CLI.

Bad input exits 2 with one line naming the file, row and key (or the reward), no traceback and
no run dir; a JSONL of the embedded addition problems with a custom reward learns as well as
``task=addition`` (slow).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.train_runs import TRAIN, run_train, run_train_in_process, write_addition_files

QUICK = ["debug=quick", "trainer.progress_bar=false"]
REWARDS = '''
from astrai.tasks.rewards import positional_match_reward


def addition_reward(prompts, responses, answers):
    """The embedded task's partial credit, as a user would write it."""
    return [positional_match_reward(r, a) for r, a in zip(responses, answers)]


def raises_on_seven(prompts, responses, answers):
    return [1 / 0 if "7" in p else 0.0 for p in prompts]


def miscounts(prompts, responses, answers):
    return [0.0]


def overflows(prompts, responses, answers):
    return [1e308 for _ in prompts]
'''


def dataset_run(tmp_path: Path, *overrides: str, threads: int | None = 1, timeout: int = 120):  # noqa: ANN201
    """A real ``python train.py task=dataset ...`` process, the test's rewards importable."""
    (tmp_path / "user_rewards.py").write_text(REWARDS)
    return run_train(
        ["task=dataset", *overrides, f"hydra.run.dir={tmp_path / 'run'}"],
        cwd=tmp_path,
        threads=threads,
        timeout=timeout,
        extra_env={"PYTHONPATH": str(tmp_path)},
    )


def dataset_run_in_process(tmp_path: Path, *overrides: str):  # noqa: ANN201
    """The same command through ``main`` in this interpreter (tests/train_runs.py)."""
    (tmp_path / "user_rewards.py").write_text(REWARDS)
    args = ["task=dataset", *overrides, f"hydra.run.dir={tmp_path / 'run'}"]
    return run_train_in_process(args, cwd=tmp_path, import_path=tmp_path)


def assert_one_line_exit_2(result, tmp_path: Path, *needles: str) -> None:  # noqa: ANN001
    assert result.returncode == 2, result.stderr[-2000:]
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    for needle in needles:
        assert needle in lines[0], lines[0]
    assert not (tmp_path / "run").exists()


@pytest.mark.slow  # the fast suite's budget (issue 58 moved it)
def test_a_missing_file_is_one_line_exit_2_and_no_run_dir(tmp_path: Path) -> None:
    result = dataset_run(tmp_path, *QUICK, f"task.train_path={tmp_path / 'nope.jsonl'}")
    assert_one_line_exit_2(result, tmp_path, "task.train_path", "nope.jsonl", "does not exist")


def broken_jsonl(tmp_path: Path) -> list[str]:
    path = tmp_path / "broken.jsonl"
    path.write_text('{"prompt": "1+2=", "answer": "3"}\n{"prompt": "1+3=", "answer": \n')
    return [f"task.train_path={path}"]


def no_answer_column(tmp_path: Path) -> list[str]:
    path = tmp_path / "q.jsonl"
    path.write_text('{"prompt": "1+2=", "solution": "3"}\n')
    return [f"task.train_path={path}"]


def all_held_out(tmp_path: Path) -> list[str]:
    train, _ = write_addition_files(tmp_path)
    return [f"task.train_path={train}", f"task.eval_path={train}"]  # every row is an eval row


def unknown_character(tmp_path: Path) -> list[str]:
    train, held_out = write_addition_files(tmp_path)
    rows = train.read_text().splitlines()
    rows[4] = json.dumps({"prompt": "ZZ+1=", "answer": "1"})
    train.write_text("\n".join(rows) + "\n")
    return [f"task.train_path={train}", f"task.eval_path={held_out}"]


def addition_files(tmp_path: Path) -> list[str]:
    train, held_out = write_addition_files(tmp_path)
    return [f"task.train_path={train}", f"task.eval_path={held_out}"]


# one real process per family above (a missing file) and below (a reward that raises); the rest
# run main in-process
@pytest.mark.parametrize(
    ("make", "overrides", "needles"),
    [
        (broken_jsonl, [], ["broken.jsonl", "row 2", "unreadable JSON"]),
        (no_answer_column, [], ["q.jsonl", "'answer'", "task.answer_key"]),
        (all_held_out, [], ["task.train_path", "no training rows"]),
        (unknown_character, [], ["train.jsonl row 5", "'Z'", "character"]),
        pytest.param(  # the real process of the reward family: slow (~4 s)
            addition_files,
            ["reward=custom", "reward._target_=user_rewards.raises_on_seven"],
            ["reward raises_on_seven failed on prompt", "7", "tried before the run"],
            marks=pytest.mark.slow,
        ),
        (
            addition_files,
            ["reward=custom", "reward._target_=user_rewards.miscounts"],
            ["reward miscounts returned 1 scores for 4 responses"],
        ),
        (
            addition_files,
            ["reward=custom", "reward._target_=user_rewards.overflows"],
            ["reward overflows returned 1e+308 (not a finite float32)"],
        ),
        (addition_files, ["reward._target_=user_rewards.nope"], ["reward._target_", "nope"]),
    ],
    ids=[
        "unreadable-row",
        "missing-key",
        "empty-split",
        "unknown-character",
        "reward-raises",
        "reward-miscounts",
        "reward-overflows",
        "reward-unimportable",
    ],
)
def test_bad_input_is_one_line_exit_2_and_no_run_dir(
    tmp_path: Path,
    make,
    overrides: list[str],
    needles: list[str],  # noqa: ANN001
) -> None:
    run = dataset_run if "reward._target_=user_rewards.raises_on_seven" in overrides else None
    run = run or dataset_run_in_process
    result = run(tmp_path, *QUICK, *make(tmp_path), *overrides)
    assert_one_line_exit_2(result, tmp_path, *needles)


@pytest.mark.slow  # ~8 s; tests/rollout/test_collect.py checks the weighting fast
def test_dataset_run_logs_each_reward_term(tmp_path: Path) -> None:
    """A weighted reward on the addition files: each term logged beside the total. The format
    term's pattern matches every response, so one term is 1 by construction (a random model's
    answers may score 0 on both terms, and 0 == 0.9·0 + 0.1·0 would not show the weighting)."""
    train, held_out = write_addition_files(tmp_path)
    result = dataset_run(
        tmp_path,
        *QUICK,
        f"task.train_path={train}",
        f"task.eval_path={held_out}",
        "reward=weighted",
        "reward.terms.1.pattern=.*",
    )
    assert result.returncode == 0, result.stderr[-2000:]
    rows = [
        json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    ]
    trained = [row for row in rows if "rollout/reward_mean" in row]
    assert len(trained) == 2
    for row in trained:
        assert row["reward/format"] == 1.0
        total = 0.9 * row["reward/partial"] + 0.1 * row["reward/format"]
        assert row["rollout/reward_mean"] == pytest.approx(total, abs=1e-6)
        assert row["rollout/reward_mean"] >= 0.1  # the weighted format term is in the total


SEEDS = (0,)  # seeds 2 and 1 were cut in issues 33 and 34 for CI's 35-minute budget (~4 min each)
# held-out accuracy the run must reach (trainer.stop_at ends it there): 8 of the 13 prompts. Since
# issue 59 (π_old and the reference scored through the update's forwards) the dataset's seed 0
# climbs to 0.615 at step 300 and stays at 0.846 from step 650 to the end of its 1,200 steps
# (measured 2026-12-07): 12 of 13 (the 0.85 of before) is a trajectory's luck, 8 of 13 from 0 is
# learning every run measured showed
TARGET = 0.6
# task=addition's own numbers for the same seed, default job, one thread: its first evaluation
# at or above TARGET, recorded on 2026-12-07 (AMD EPYC, torch 2.13.0 CPU, with issue 59's
# scoring) from `OMP_NUM_THREADS=1 python train.py seed=0` (tests/e2e/test_learning.py's
# acceptance run: 0.538 at step 150, 0.846 at 200, 0.923 at 250), instead of re-running that run
# every time. Another machine's kernels round differently, so the comparisons below have
# tolerances, not equalities.
ADDITION = {
    0: {
        "step": 200,
        "eval/accuracy": 0.8461538461538461,
        "rollout/reward_mean": 0.8868815109017305,
    },
}


def _train_in_background(args: list[str], cwd: Path, log: Path) -> subprocess.Popen:
    """A default-length run on one thread; output into ``log``."""
    env = {k: v for k, v in os.environ.items() if k != "HYDRA_FULL_ERROR"}
    env.update({"OMP_NUM_THREADS": "1", "PYTHONPATH": str(cwd)})
    command = [sys.executable, TRAIN, *args, "trainer.progress_bar=false"]
    with log.open("w") as out:  # the child keeps its own handle
        return subprocess.Popen(command, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)


@pytest.mark.slow  # the default job on one thread until it reaches TARGET (the slow suite's
# other worker has the other core): ~1 min (the dataset's seed 0 reached 0.615 at step 300)
def test_a_jsonl_of_the_addition_problems_learns_like_task_addition(tmp_path: Path) -> None:
    """The embedded addition problems as JSONL files with the same split, trained with
    ``task=dataset`` and a custom reward on the default schedule until held-out accuracy
    reaches ``TARGET`` (``trainer.stop_at``), against ``task=addition``'s recorded numbers
    for seed 0."""
    train, held_out = write_addition_files(tmp_path)
    (tmp_path / "user_rewards.py").write_text(REWARDS)
    dataset = [
        "task=dataset",
        f"task.train_path={train}",
        f"task.eval_path={held_out}",
        "reward=custom",
        "reward._target_=user_rewards.addition_reward",
        f"trainer.stop_at={{eval/accuracy:{TARGET}}}",
    ]
    summaries: dict[int, dict] = {}
    for batch in ((seed,) for seed in SEEDS):  # one at a time: one core
        started = {
            seed: _train_in_background(
                [*dataset, f"seed={seed}", f"hydra.run.dir={tmp_path / f'dataset{seed}'}"],
                tmp_path,
                tmp_path / f"dataset{seed}.log",
            )
            for seed in batch
        }
        for seed, process in started.items():
            log = (tmp_path / f"dataset{seed}.log").read_text
            assert process.wait(timeout=3600) == 0, (seed, log()[-2000:])
            summaries[seed] = json.loads((tmp_path / f"dataset{seed}" / "summary.json").read_text())
    for seed in SEEDS:
        summary, theirs = summaries[seed], ADDITION[seed]
        assert summary["initial/eval/accuracy"] <= 0.2
        # greedy accuracy on the same 13 held-out prompts (one prompt is 0.077) reached the
        # target, through trainer.stop_at, in at most twice task=addition's steps (the two runs
        # draw the prompts in another order: the dataset's seed 0 got there at step 300 here)
        assert summary["stopped"] == "stop_at" and summary["eval/accuracy"] >= TARGET, summary
        assert summary["step"] <= 2 * theirs["step"], (summary["step"], theirs)
        # the training problems are the same: so is the sampled reward where each first reached
        # the target (measured 0.790 here at 0.615, task=addition 0.887 at 0.846; 0.879 here
        # when this run reached 0.769 at step 400)
        assert abs(summary["rollout/reward_mean"] - theirs["rollout/reward_mean"]) <= 0.15, summary
        assert summary["reward/addition"] == summary["rollout/reward_mean"]  # the one term
