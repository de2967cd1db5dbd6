"""``python -m astrai.generate`` on a real checkpoint: the run's own task and response length by
default, flags still win; ``task=dataset`` runs answer their own files; a model directory keeps
the defaults (32 new tokens, a task named with ``--task NAME``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.helpers import run_main
from tests.train_runs import QUICK, run_train, run_train_in_process, write_addition_files

from astrai.generate import main as generate_main
from astrai.tasks import AdditionTask

# non-default on purpose: conf/sampling's max_new_tokens is 4, conf/task/addition's num_digits 1
RUN_MAX_NEW_TOKENS = 3
RUN_TASK = ["task=addition", "task.num_digits=2", "task.num_digits_b=1"]


def generate_cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """``python -m astrai.generate args`` in-process (``main``; paths here are absolute, so
    ``cwd`` is not needed); the first test below runs the real entry point."""
    return run_main(generate_main, args)


def generate_process(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """``python -m astrai.generate args`` in a child process in ``cwd``."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "astrai.generate", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def answers(stdout: str) -> list[tuple[str, str]]:
    """``(prompt, completion)`` of every ``'p' -> 'c'`` line."""
    pairs = []
    for line in stdout.splitlines():
        if " -> " in line:
            prompt, _, rest = line.partition(" -> ")
            pairs.append((eval(prompt), eval(rest.split("  reward ")[0])))  # reprs we printed
    return pairs


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two GRPO steps on two-digit addition, responses of at most 3 tokens."""
    cwd = tmp_path_factory.mktemp("generate")
    run = cwd / "run"
    overrides = [*QUICK, *RUN_TASK, f"train_type.sampling.max_new_tokens={RUN_MAX_NEW_TOKENS}"]
    result = run_train_in_process([*overrides, f"hydra.run.dir={run}"], cwd=cwd)  # train.py's main
    assert result.returncode == 0, result.stderr[-3000:]
    return run


def run_task_prompts(n: int) -> list[str]:
    return AdditionTask(num_digits=2, num_digits_b=1, eval_fraction=0.2).eval_prompts(n)


@pytest.mark.parametrize(
    "task_args",
    [
        ["--task"],
        # the same answer through the other spellings: a generate start each (slow)
        pytest.param(["--task", "run"], marks=pytest.mark.slow),
        pytest.param(["--task", "addition"], marks=pytest.mark.slow),
    ],
)
def test_a_checkpoint_answers_its_run_task_with_its_response_length(
    run_dir: Path, tmp_path: Path, task_args: list[str]
) -> None:
    result = generate_process([str(run_dir), *task_args, "--n", "5"], tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"# {run_dir / 'checkpoints' / 'step_2'}"
    assert (
        lines[1]
        == f"# task addition (the run's), max_new_tokens {RUN_MAX_NEW_TOKENS}, greedy, fp32"
    )
    pairs = answers(result.stdout)
    # the run's two-digit problems, not conf/task/addition.yaml's one-digit ones
    assert [prompt for prompt, _ in pairs] == run_task_prompts(5)
    # the character tokenizer: one token per character (EOS is not printed)
    assert all(len(completion) <= RUN_MAX_NEW_TOKENS for _, completion in pairs)
    assert lines[-1].startswith("# mean reward ")


def test_flags_win_over_the_run_settings(run_dir: Path, tmp_path: Path) -> None:
    args = [str(run_dir), "12+3=", "--max-new-tokens", "7", "--temperature", "1", "--n", "4"]
    result = generate_cli(args, tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[1] == "# max_new_tokens 7, temperature 1.0, fp32"
    pairs = answers(result.stdout)
    assert [p for p, _ in pairs] == ["12+3="] * 4
    assert all(len(c) <= 7 for _, c in pairs) and max(len(c) for _, c in pairs) > 3


def test_another_task_by_name_uses_its_own_config(run_dir: Path, tmp_path: Path) -> None:
    result = generate_cli([str(run_dir), "--task", "reverse", "--n", "2"], tmp_path)
    assert result.returncode == 0, result.stderr
    header = (
        f"# task reverse (conf/task/reverse.yaml), max_new_tokens {RUN_MAX_NEW_TOKENS}, "
        "greedy, fp32"
    )
    assert result.stdout.splitlines()[1] == header
    assert all(p.startswith("rev ") for p, _ in answers(result.stdout))


@pytest.mark.slow  # ~8 s: an export and a generate start
def test_a_model_directory_keeps_the_defaults(run_dir: Path, tmp_path: Path) -> None:
    """An export is a plain Hugging Face directory: no run config, so 32 tokens and no own task."""
    export = tmp_path / "export"
    done = subprocess.run(
        [sys.executable, "-m", "astrai.export", str(run_dir), str(export)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    result = generate_cli([str(export), "--task", "addition", "--n", "2"], tmp_path)
    assert result.returncode == 0, result.stderr
    header = "# task addition (conf/task/addition.yaml), max_new_tokens 32, greedy, fp32"
    assert result.stdout.splitlines()[1] == header
    assert [p for p, _ in answers(result.stdout)] == AdditionTask().eval_prompts(2)
    own = generate_cli([str(export), "--task"], tmp_path)
    assert own.returncode == 2 and len(own.stderr.strip().splitlines()) == 1
    assert "--task without a name answers a training checkpoint's own task" in own.stderr


@pytest.mark.slow  # ~30 s on 2 shared cores: a task=dataset run of its own
def test_a_dataset_run_answers_its_own_files(tmp_path: Path) -> None:
    """Relative files, named from the run's working directory; generate runs from elsewhere."""
    launch = tmp_path / "launch"
    (launch / "data").mkdir(parents=True)
    write_addition_files(launch / "data")
    run = tmp_path / "run"
    files = ["task.train_path=data/train.jsonl", "task.eval_path=data/eval.jsonl"]
    result = run_train(["task=dataset", *files, *QUICK, f"hydra.run.dir={run}"], cwd=launch)
    assert result.returncode == 0, result.stderr[-3000:]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    result = generate_process([str(run), "--task", "--n", "3"], elsewhere)
    assert result.returncode == 0, result.stderr
    assert (
        result.stdout.splitlines()[1]
        == "# task dataset (the run's), max_new_tokens 4, greedy, fp32"
    )
    held_out = AdditionTask().eval_prompts(1000)[:3]  # eval.jsonl's first rows
    assert [p for p, _ in answers(result.stdout)] == held_out
    same = generate_process([str(run), "--task", "dataset", "--n", "3"], elsewhere)
    assert same.returncode == 0 and same.stdout == result.stdout
