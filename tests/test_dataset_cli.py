"""``python train.py task=dataset``: your prompts and your reward, end to end through the CLI.

Bad input exits 2 with one line naming the file, row and key (or the reward), no traceback and
no run dir; a JSONL of the embedded addition problems with a custom reward learns as well as
``task=addition`` (slow).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.test_train_cli import run_train

from astrai.tasks import AdditionTask

QUICK = ["+debug=quick", "trainer.progress_bar=false"]
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


def write_addition_files(directory: Path) -> tuple[Path, Path]:
    """The embedded addition task as two JSONL files: every training problem, and the held-out
    ones in ``eval_problems`` order (the same split)."""
    task = AdditionTask()
    held_out = task.eval_prompts(1000)
    every = [f"{a}+{b}=" for a in range(10) for b in range(10)]
    train = [p for p in every if p not in set(held_out)]
    paths = directory / "train.jsonl", directory / "eval.jsonl"
    for path, prompts in zip(paths, (train, held_out), strict=True):
        rows = [{"prompt": p, "answer": task.answer(p)} for p in prompts]
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return paths


def dataset_run(tmp_path: Path, *overrides: str, threads: int | None = 1, timeout: int = 120):  # noqa: ANN201
    (tmp_path / "user_rewards.py").write_text(REWARDS)
    return run_train(
        ["task=dataset", *overrides, f"hydra.run.dir={tmp_path / 'run'}"],
        cwd=tmp_path,
        threads=threads,
        timeout=timeout,
        extra_env={"PYTHONPATH": str(tmp_path)},
    )


def assert_one_line_exit_2(result, tmp_path: Path, *needles: str) -> None:  # noqa: ANN001
    assert result.returncode == 2, result.stderr[-2000:]
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    for needle in needles:
        assert needle in lines[0], lines[0]
    assert not (tmp_path / "run").exists()


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


@pytest.mark.slow  # ~4 s each
@pytest.mark.parametrize(
    ("make", "overrides", "needles"),
    [
        (broken_jsonl, [], ["broken.jsonl", "row 2", "unreadable JSON"]),
        (no_answer_column, [], ["q.jsonl", "'answer'", "task.answer_key"]),
        (all_held_out, [], ["task.train_path", "no training rows"]),
        (unknown_character, [], ["train.jsonl row 5", "'Z'", "character"]),
        (
            addition_files,
            ["reward=custom", "reward._target_=user_rewards.raises_on_seven"],
            ["reward raises_on_seven failed on prompt", "7", "tried before the run"],
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
    result = dataset_run(tmp_path, *QUICK, *make(tmp_path), *overrides)
    assert_one_line_exit_2(result, tmp_path, *needles)


@pytest.mark.slow  # ~8 s; tests/rollout/test_collect.py checks the weighting fast
def test_dataset_run_logs_each_reward_term(tmp_path: Path) -> None:
    """A weighted reward on the addition files: each term logged beside the total."""
    train, held_out = write_addition_files(tmp_path)
    result = dataset_run(
        tmp_path,
        *QUICK,
        f"task.train_path={train}",
        f"task.eval_path={held_out}",
        "reward=weighted",
    )
    assert result.returncode == 0, result.stderr[-2000:]
    rows = [
        json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    ]
    last = rows[-1]
    total = 0.9 * last["reward/partial"] + 0.1 * last["reward/format"]
    assert last["rollout/reward_mean"] == pytest.approx(total, abs=1e-6)


@pytest.mark.slow  # two default-length runs, ~3 min each on 2 cores
def test_a_jsonl_of_the_addition_problems_learns_like_task_addition(tmp_path: Path) -> None:
    train, held_out = write_addition_files(tmp_path)
    dataset = dataset_run(
        tmp_path,
        f"task.train_path={train}",
        f"task.eval_path={held_out}",
        "reward=custom",
        "reward._target_=user_rewards.addition_reward",
        "trainer.progress_bar=false",
        threads=None,
        timeout=1800,
    )
    assert dataset.returncode == 0, dataset.stderr[-2000:]
    embedded_dir = tmp_path / "embedded"
    embedded = run_train(
        [f"hydra.run.dir={embedded_dir}", "trainer.progress_bar=false"],
        cwd=tmp_path,
        threads=None,
        timeout=1800,
    )
    assert embedded.returncode == 0, embedded.stderr[-2000:]
    ours = json.loads((tmp_path / "run" / "summary.json").read_text())
    theirs = json.loads((embedded_dir / "summary.json").read_text())
    # the same held-out prompts, greedy, after the same 1200 steps and seed
    assert ours["initial/eval/accuracy"] <= 0.2 and ours["eval/accuracy"] >= 0.9, ours
    assert abs(ours["eval/accuracy"] - theirs["eval/accuracy"]) <= 0.1, (ours, theirs)
    assert ours["reward/addition"] == ours["rollout/reward_mean"]  # the one term is the total
