"""``task.filter_overlong_prompts``: rows whose prompt leaves the response too few positions are
dropped (verl's ``filter_overlong_prompts``) instead of refusing the run, counted in one line at
start; a split left empty is one error. The limit is the one the refusal uses: the model's
``max_position_embeddings`` less ``train_type.sampling.max_new_tokens``, in the tokens the
policy's tokenizer encodes (BOS and chat template included)."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest
from tests.helpers import compose_config

from astrai.config.errors import ConfigError
from astrai.config.run_task import build_task, max_prompt_tokens
from astrai.models.tokenizer import CharTokenizer
from astrai.tasks.dataset import DatasetError, DatasetTask

LONG = "1 + " * 15 + "1?"  # 62 characters: <bos> + 62 = 63 tokens
OTHER_LONG = LONG.replace("1", "2")  # an eval prompt: a train row equal to it would be dropped


def _file(path: Path, prompts: list[str]) -> Path:
    path.write_text("".join(json.dumps({"prompt": p, "answer": "1"}) + "\n" for p in prompts))
    return path


def _task(tmp_path: Path, train: list[str], evals: list[str]) -> DatasetTask:
    return DatasetTask(
        str(_file(tmp_path / "train.jsonl", train)),
        str(_file(tmp_path / "eval.jsonl", evals)),
        0.1,
        "prompt",
        "answer",
        None,
        filter_overlong_prompts=True,
    )


def test_rows_longer_than_the_limit_are_dropped_and_counted(tmp_path: Path) -> None:
    # <bos> + characters: "1?" is 3 tokens, "12 + 3?" 8, LONG 63; the limit is 8 tokens
    task = _task(tmp_path, ["1?", LONG, "12 + 3?", LONG, "2?"], ["3?", OTHER_LONG])
    report = task.check_tokens(CharTokenizer().encode_prompt, max_prompt_tokens=8)
    assert report is not None
    assert report.line() == (
        "task: dropped 3 of 7 prompts longer than 8 tokens (2 of 5 training, 1 of 2 eval; "
        "task.filter_overlong_prompts)"
    )
    assert [p.prompt for p in task.train] == ["1?", "12 + 3?", "2?"]  # file order kept
    train = str(tmp_path / "train.jsonl")
    assert task.train_rows == [f"{train} row 1", f"{train} row 3", f"{train} row 5"]
    assert [p.prompt for p in task.evals] == ["3?"]
    stream = {p.prompt for i in range(4) for p in task.train_problems(0, i, 3)}
    assert stream == {"1?", "12 + 3?", "2?"}


def test_a_split_left_empty_is_refused(tmp_path: Path) -> None:
    task = _task(tmp_path, [LONG, LONG], ["1?"])
    with pytest.raises(
        DatasetError,
        match=r"^task\.filter_overlong_prompts: all 2 training prompts of .*train\.jsonl are "
        r"longer than 60 tokens",
    ):
        task.drop_overlong(CharTokenizer().encode_prompt, 60)
    task = _task(tmp_path, ["1?"], [OTHER_LONG])
    with pytest.raises(DatasetError, match=r"all 1 eval prompts of .*eval\.jsonl are longer"):
        task.drop_overlong(CharTokenizer().encode_prompt, 60)


def test_a_run_config_with_the_filter_validates_and_builds_the_filtered_task(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """model=tiny: 64 positions, max_new_tokens 4: prompts up to 60 tokens (59 characters)."""
    train = _file(tmp_path / "train.jsonl", ["1 + 2?", LONG, "3 + 4?", LONG[:59]])
    evals = _file(tmp_path / "eval.jsonl", ["5 + 6?", OTHER_LONG])
    job = ["task=dataset", f"task.train_path={train}", f"task.eval_path={evals}"]
    cfg = compose_config([*job, "task.filter_overlong_prompts=true"])  # validates
    assert max_prompt_tokens(cfg) == 60
    with caplog.at_level(logging.INFO, logger="astrai.config.run_task"):
        task = build_task(cfg.task, CharTokenizer(), max_prompt_tokens(cfg))
    assert [r.getMessage() for r in caplog.records] == [
        "task: dropped 2 of 6 prompts longer than 60 tokens (1 of 4 training, 1 of 2 eval; "
        "task.filter_overlong_prompts)"
    ]
    assert caplog.records[0].levelno == logging.WARNING
    assert isinstance(task, DatasetTask)
    assert [p.prompt for p in task.train] == ["1 + 2?", "3 + 4?", LONG[:59]]

    only_long = _file(tmp_path / "long.jsonl", [LONG])
    with pytest.raises(ConfigError, match=re.escape("all 1 training prompts of ")):
        compose_config([*job, f"task.train_path={only_long}", "task.filter_overlong_prompts=true"])


def test_a_trainer_trains_on_the_filtered_rows(tmp_path: Path) -> None:
    from astrai.training.run import Run

    train = _file(tmp_path / "train.jsonl", ["1 + 2?", LONG, "3 + 4?"])
    evals = _file(tmp_path / "eval.jsonl", ["5 + 6?", OTHER_LONG])
    cfg = compose_config(
        [
            "task=dataset",
            f"task.train_path={train}",
            f"task.eval_path={evals}",
            "task.filter_overlong_prompts=true",
            "logger.tensorboard=false",
        ]
    )
    task = Run(cfg, tmp_path / "run").parts.task
    assert isinstance(task, DatasetTask)
    assert [p.prompt for p in task.train] == ["1 + 2?", "3 + 4?"]
    assert [p.prompt for p in task.evals] == ["5 + 6?"]
