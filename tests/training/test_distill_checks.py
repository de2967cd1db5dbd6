"""``distill=opd`` at the door (``config.distill_checks``, the teacher role of
``config.role_checks``): each setting that cannot mean what it says is one ``ConfigError``
line naming the key, the whole message matched; the setting next to it is accepted. The
teachers are real checkpoints (the policy's initial weights), so only the checked key is
wrong in each row."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
from tests.helpers import compose_config
from tests.training.distill_helpers import (
    ADD_ROWS,
    REV_ROWS,
    initial_policy,
    routed_dataset,
    with_teacher_paths,
    write_teacher,
)

from astrai.config.distill_checks import distill_metric_names
from astrai.config.errors import ConfigError
from astrai.models.tokenizer import CharTokenizer

Q = ["debug=quick"]
OPD = [*Q, "distill=opd", "teacher.path={teacher}"]
TOKENIZER = (
    "the teacher's tokenizer is not the policy's ({}); a teacher must share the policy's vocabulary"
)


@pytest.fixture(scope="module")
def teachers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``teacher``: the policy's initial weights; ``foreign``: the same weights with the
    alphabet reversed (id 3 is '?', the policy's '0'); ``wide``: a config of 64 ids with the
    policy's tokenizer; ``data``: the folder of the routed dataset."""
    root = tmp_path_factory.mktemp("teachers")
    policy, tokenizer = initial_policy(root / "built")
    reversed_alphabet = CharTokenizer(CharTokenizer().alphabet[::-1])
    wide = write_teacher(policy, tokenizer, root / "wide" / "step_0")
    config = dataclasses.asdict(policy.config) | {"vocab_size": 64}
    (wide / "config.json").write_text(json.dumps(config))  # read without its weights
    (root / "data").mkdir()
    return {
        "teacher": write_teacher(policy, tokenizer, root / "teacher" / "step_0"),
        "foreign": write_teacher(policy, reversed_alphabet, root / "foreign" / "step_0"),
        "wide": wide,
        "data": root / "data",
    }


def _refused(message: str) -> pytest.RaisesContext:
    """``message`` as the whole one-line error."""
    assert "\n" not in message
    return pytest.raises(ConfigError, match="^" + re.escape(message) + "$")


def _overrides(rows: list[str], teachers: dict[str, Path]) -> list[str]:
    return [row.format(**teachers) for row in rows]


ONE_TEACHER = {
    "no_teacher": (
        [*Q, "distill=opd"],
        "distill=opd needs a teacher: set teacher.path to a Hugging Face model directory or an "
        "astrai checkpoint (got teacher.path=null)",
    ),
    "teacher_without_distill": (
        [*Q, "teacher.path={teacher}"],
        "train_type=online_grpo uses no teacher: leave teacher.path null, or distill from it "
        "with distill=opd (got teacher.path={teacher})",
    ),
    "estimator": (
        [*OPD, "distill.estimator=k2"],
        "distill.estimator must be one of k1, k3, forward_topk (got 'k2')",
    ),
    "coef_0": ([*OPD, "distill.coef=0"], "distill.coef must be a finite number above 0 (got 0.0)"),
    "topk_0": (
        [*OPD, "distill.topk=0"],
        "distill.topk must be an integer from 1 to the vocabulary's 48 (got 0)",
    ),
    "topk_over_vocabulary": (
        [*OPD, "distill.topk=49"],
        "distill.topk must be an integer from 1 to the vocabulary's 48 (got 49)",
    ),
    "discount_with_k3": (
        [*OPD, "distill.estimator=k3", "distill.discount=0.9"],
        "distill.discount makes k1's reward a reward-to-go; distill.estimator=k3 is a loss with "
        "no reward to sum: leave distill.discount null",
    ),
    "discount_with_ppo": (
        [*OPD, "train_type=online_ppo", "distill.discount=0.9"],
        "distill.discount: train_type=online_ppo sums the distillation reward through GAE "
        "(train_type.ppo_gamma, ppo_gae_lambda): leave distill.discount null",
    ),
    "ppo_k3_without_task_reward": (
        [*OPD, "train_type=online_ppo", "distill.estimator=k3"],
        "train_type=online_ppo with distill.estimator=k3 and distill.use_task_reward=false gives "
        "its critic no reward to learn: use distill.estimator=k1 (the reward through GAE) or "
        "distill.use_task_reward=true",
    ),
    "filter_groups_without_task_reward": (
        [*OPD, "train_type.filter_groups=true"],
        "train_type.filter_groups drops groups by the task's reward, which "
        "distill.use_task_reward=false leaves out: set distill.use_task_reward=true or "
        "train_type.filter_groups=false",
    ),
    "engine_vllm": (
        [*OPD, "distill.engine=vllm"],
        "distill.engine must be one of torch (got 'vllm'; a vLLM teacher with prompt_logprobs "
        "is not built yet)",
    ),
    "teacher_dtype": (
        [*OPD, "teacher.dtype=float8"],
        "teacher.dtype must be one of float32, bfloat16, float16 (got 'float8')",
    ),
    "tokenizer_differs": (
        [*Q, "distill=opd", "teacher.path={foreign}"],
        "teacher.path: " + TOKENIZER.format("id 3 is '?', the policy's '0'"),
    ),
    "vocab_size_differs": (
        [*Q, "distill=opd", "teacher.path={wide}"],
        "teacher.path: " + TOKENIZER.format("its vocab_size is 64, the policy's 48"),
    ),
}


@pytest.mark.parametrize("case", list(ONE_TEACHER))
def test_a_setting_that_cannot_mean_what_it_says_is_one_line(
    case: str, teachers: dict[str, Path]
) -> None:
    rows, message = ONE_TEACHER[case]
    with _refused(message.format(**teachers)):
        compose_config(_overrides(rows, teachers))


# the setting beside each refusal above: accepted, and the distill metrics it will log
ACCEPTED = {
    "topk_the_vocabulary": (
        [*OPD, "distill.estimator=forward_topk", "distill.topk=48"],
        {"distill/reverse_kl", "distill/teacher_logprob", "loss/distill"},
    ),
    "discount_1_with_k1": (
        [*OPD, "distill.discount=1.0"],
        {"distill/reverse_kl", "distill/teacher_logprob"},
    ),
    "ppo_k3_with_task_reward": (
        [*OPD, "train_type=online_ppo", "distill.estimator=k3", "distill.use_task_reward=true"],
        {"distill/reverse_kl", "distill/teacher_logprob", "loss/distill"},
    ),
    "filter_groups_with_task_reward": (
        [*OPD, "train_type.filter_groups=true", "distill.use_task_reward=true"],
        {"distill/reverse_kl", "distill/teacher_logprob"},
    ),
}


@pytest.mark.parametrize("case", list(ACCEPTED))
def test_the_setting_beside_each_refusal_is_accepted(case: str, teachers: dict[str, Path]) -> None:
    rows, names = ACCEPTED[case]
    assert distill_metric_names(compose_config(_overrides(rows, teachers))) == names


def _routed(teachers: dict[str, Path], rows: list[dict[str, str]] | None = None) -> list[str]:
    """``distill=opd`` over the routed dataset; ``rows``: another train file, in a folder of its
    own (``_several`` writes every case's files each time it is called)."""
    folder = teachers["data"] / ("rows" if rows else "default")
    return [*Q, "distill=opd", *routed_dataset(folder, rows)]


def test_several_teachers_compose_and_name_their_metrics(teachers: dict[str, Path]) -> None:
    t = str(teachers["teacher"])
    cfg = with_teacher_paths(_routed(teachers), {"add": t, "rev": t})
    assert distill_metric_names(cfg) == {
        "distill/reverse_kl",
        "distill/teacher_logprob",
        "distill/reverse_kl/add",
        "distill/reverse_kl/rev",
        "distill/token_frac/add",
        "distill/token_frac/rev",
    }


def _several(teachers: dict[str, Path], case: str) -> tuple[list[str], dict[str, str] | None, str]:
    """Case -> the overrides, the ``teacher.paths`` set on them (None: none) and the line."""
    t, foreign = str(teachers["teacher"]), str(teachers["foreign"])
    both = {"add": t, "rev": t}
    mul = {"prompt": "2*3=", "answer": "6", "teacher": "mul"}
    cases = {
        "paths_without_teacher_key": (
            [*Q, "distill=opd"],
            both,
            "teacher.paths routes each row to a teacher by a column: set task.teacher_key "
            "(task=dataset) to the column naming it",
        ),
        "teacher_key_without_paths": (
            [*_routed(teachers), f"teacher.path={t}"],
            None,
            "task.teacher_key=teacher routes rows among several teachers: set teacher.paths "
            "(name: path), or leave task.teacher_key null",
        ),
        "path_and_paths": (
            [*_routed(teachers), f"teacher.path={t}"],
            both,
            "teacher.path and teacher.paths are both set: one teacher (path) or several (paths)",
        ),
        "paths_without_distill": (
            [*Q, *routed_dataset(teachers["data"] / "default")],
            both,
            "train_type=online_grpo uses no teacher: leave teacher.path null, or distill from "
            f"it with distill=opd (got teacher.paths={both})",
        ),
        "tokenizer_differs": (
            _routed(teachers),
            {"add": t, "rev": foreign},
            "teacher.paths.rev: " + TOKENIZER.format("id 3 is '?', the policy's '0'"),
        ),
        "row_names_another_teacher": (
            _routed(teachers, [*ADD_ROWS, *REV_ROWS, mul]),
            both,
            "task.teacher_key names teacher 'mul', not one of teacher.paths (add, rev)",
        ),
        "teacher_no_row_names": (
            _routed(teachers),
            {**both, "extra": t},
            "teacher.paths.extra: no row of the task names it (task.teacher_key=teacher)",
        ),
    }
    return cases[case]


@pytest.mark.parametrize(
    "case",
    [
        "paths_without_teacher_key",
        "teacher_key_without_paths",
        "path_and_paths",
        "paths_without_distill",
        "tokenizer_differs",
        "row_names_another_teacher",
        "teacher_no_row_names",
    ],
)
def test_several_teachers_that_cannot_route_are_one_line(
    case: str, teachers: dict[str, Path]
) -> None:
    overrides, paths, message = _several(teachers, case)
    with _refused(message):
        if paths is None:
            compose_config(overrides)
        else:
            with_teacher_paths(overrides, paths)


# --- three gaps the tests found in the core, mended ---


def test_teacher_paths_can_be_given_on_the_command_line(teachers: dict[str, Path]) -> None:
    t = teachers["teacher"]
    cfg = compose_config([*_routed(teachers), f"teacher.paths={{add: {t}, rev: {t}}}"])
    assert dict(cfg.teacher.paths) == {"add": str(t), "rev": str(t)}


def test_a_teacher_path_that_is_no_model_is_one_line(teachers: dict[str, Path]) -> None:
    with pytest.raises(ConfigError, match=r"^teacher\.path: .*neither a checkpoint"):
        compose_config([*Q, "distill=opd", f"teacher.path={teachers['data']}"])


def test_a_teacher_key_without_distillation_is_one_line(teachers: dict[str, Path]) -> None:
    with pytest.raises(ConfigError, match=r"^task\.teacher_key"):
        compose_config([*Q, *routed_dataset(teachers["data"] / "default")])
