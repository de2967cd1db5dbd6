"""The trial commands of issue 21 that belong to the config: each is one line and exit 2.

Most rows run in-process (``check_run_config``: what ``train.py`` checks before its run
starts); a few go through ``python train.py`` to hold the CLI to the same (one stderr line
starting ``astrai: config error:``, exit 2, no run dir).
"""

from __future__ import annotations

import math

import pytest
from tests.train_runs import run_train_in_process

from astrai.config.compose import check_run_config, check_sweep_overrides
from astrai.config.errors import ConfigError
from astrai.config.ranges import check_betas, check_number
from astrai.models.llama import LlamaConfig

# (overrides, what the one line must say)
BAD_VALUES = [
    (["train_type.optimizer.betas=[2,3]"], "train_type.optimizer.betas[0] must be"),
    (["train_type.optimizer.betas=[0.9]"], "train_type.optimizer.betas must be a list of two"),
    (["train_type.optimizer.betas=[0.9,0.99,0.9]"], "train_type.optimizer.betas must be"),
    (["train_type.optimizer.betas=[0.9,nan]"], "train_type.optimizer.betas[1] must be"),
    (["train_type.optimizer.betas=0.9"], "train_type.optimizer.betas must be a list of two"),
    (["train_type.optimizer.weight_decay=-1"], "train_type.optimizer.weight_decay must be"),
    (["train_type.scheduler.min_lr_ratio=-5"], "train_type.scheduler.min_lr_ratio must be"),
    (["train_type.scheduler.min_lr_ratio=nan"], "train_type.scheduler.min_lr_ratio must be"),
    (["train_type.scheduler.warmup_steps=-1"], "train_type.scheduler.warmup_steps must be"),
    (
        ["train_type.optimizer.lr=inf"],
        "train_type.optimizer.lr must be > 0 (a finite number, got inf)",
    ),
    (["train_type.optimizer.lr=nan"], "train_type.optimizer.lr must be > 0 (a finite number"),
    (["train_type.optimizer.lr=true"], "train_type.optimizer.lr must be"),
    (["train_type.optimizer.lr=abc"], "train_type.optimizer.lr must be"),
    (["train_type.adv_eps=nan"], "train_type.adv_eps must be > 0 (a finite number, got nan)"),
    (["train_type.adv_eps=0"], "train_type.adv_eps must be"),
    (["train_type.kl_coef=inf"], "train_type.kl_coef must be"),
    (["train_type.clip_eps=nan"], "train_type.clip_eps must be"),
    (["train_type.clip_eps_high=inf"], "train_type.clip_eps_high must be"),
    (["train_type.sampling.top_p=nan"], "train_type.sampling.top_p must be"),
    (["train_type.sampling.temperature=inf"], "train_type.sampling.temperature must be"),
    (["model.rope_theta=nan"], "model.rope_theta must be a finite number > 0 (got nan)"),
    (["model.rms_norm_eps=inf"], "model.rms_norm_eps must be"),
    (["model.initializer_range=-1"], "model.initializer_range must be"),
    (["trainer.max_duration=[1,2]"], "trainer.max_duration: not a duration"),
    (["trainer.max_duration=inf"], "trainer.max_duration: duration must be finite"),
    (["trainer.max_grad_norm=nan"], "trainer.max_grad_norm must be"),
    (["seed=-1"], "seed must be in [0, 4611686018427387904) (an integer, got -1)"),
    (["logger.flush_secs=0"], "logger.flush_secs must be"),
    (["reward.overlong_penalty=nan"], "reward.overlong_penalty must be"),
    (["task.num_digits=100000"], "task.num_digits must be"),
    (["train_type.max_resample_rounds=100000000"], "train_type.max_resample_rounds must be"),
    # wrong types, unknown keys and options: Hydra's own errors
    (["train_type.optimizer.lr=abc", "trainer.total_steps=ten"], "trainer.total_steps=ten"),
    (["model=nope"], "model=nope is not an option"),
    (["trainer.bogus=1"], "trainer.bogus is not a config key"),
    # PPO: its own keys and the critic's optimizer
    (["train_type=online_ppo", "train_type.ppo_vf_coef=nan"], "train_type.ppo_vf_coef must be"),
    (["train_type=online_ppo", "train_type.entropy_coef=inf"], "train_type.entropy_coef must"),
    (["train_type=online_ppo", "train_type.value_clip=nan"], "train_type.value_clip must be"),
    (["train_type=online_ppo", "critic.optimizer.betas=[2,3]"], "critic.optimizer.betas[0]"),
    (["train_type=online_ppo", "critic.optimizer.lr=inf"], "critic.optimizer.lr must be"),
    # upper bounds: would hang the machine
    (["train_type.prompts_per_step=100000000"], "set trainer.allow_large=true"),
    (["trainer.eval_prompts=1000000000"], "trainer.eval_prompts (1,000,000,000) exceeds"),
    (["train_type.ppo_epochs=100000"], "train_type.ppo_epochs"),
    (["model.hidden_size=65536", "model.intermediate_size=262144"], "model parameters"),
    (["train_type.sampling.max_new_tokens=64"], "train_type.sampling.max_new_tokens"),
    # infra.environment: the launcher's names, and nothing under infra=local
    (["+infra.environment.FOO=1"], "infra.environment applies only to containers"),
    (["infra=docker", "+infra.environment.ASTRAI_UID=0"], "infra.environment.ASTRAI_UID cannot"),
    (["infra=docker", "+infra.environment.ASTRAI_GID=0"], "infra.environment.ASTRAI_GID cannot"),
    (["infra=docker", "+infra.environment.DOCKER_HOST=x"], "infra.environment.DOCKER_HOST"),
    (["infra=docker", "+infra.environment.PATH=/x"], "infra.environment.PATH cannot"),
    (
        ["infra=docker", "+infra.environment.CUDA_VISIBLE_DEVICES="],
        "infra.environment.CUDA_VISIBLE_DEVICES cannot",
    ),
    (["infra=docker", "+infra.environment.COMPOSE_FILE=x"], "infra.environment.COMPOSE_FILE"),
]


# the issue's own trial values stay in the fast suite (each row composes the whole config,
# ~0.4 s); the rest of the table runs in the slow one
ISSUE_TRIALS = {
    "train_type.optimizer.betas=[2,3]",
    "train_type.optimizer.weight_decay=-1",
    "train_type.scheduler.min_lr_ratio=-5",
    "train_type.scheduler.min_lr_ratio=nan",
    "train_type.optimizer.lr=inf",
    "train_type.adv_eps=nan",
    "model.rope_theta=nan",
    "trainer.max_duration=[1,2]",
    "model=nope",
    "trainer.bogus=1",
    "train_type.prompts_per_step=100000000",
    "trainer.eval_prompts=1000000000",
    "+infra.environment.FOO=1",
}
FAST_TOO = {"+infra.environment.ASTRAI_UID=0"}  # one of the launcher's own variables


def _rows() -> list:
    slow = pytest.mark.slow
    return [
        pytest.param(
            overrides,
            needle,
            id=" ".join(overrides),
            marks=() if overrides[0] in ISSUE_TRIALS or overrides[-1] in FAST_TOO else slow,
        )
        for overrides, needle in BAD_VALUES
    ]


@pytest.mark.parametrize(("overrides", "needle"), _rows())
def test_bad_values_are_one_line_config_errors(overrides: list[str], needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        check_run_config(overrides)
    message = str(info.value)
    assert needle in message
    assert len(message.splitlines()) == 1


def test_large_values_run_with_allow_large() -> None:
    check_run_config(["train_type.ppo_epochs=2000", "trainer.allow_large=true"])


def test_the_escape_key_is_named_in_the_yaml() -> None:
    from astrai.config.compose import compose_train_config

    assert compose_train_config([], validate=False).trainer.allow_large is False


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        (["model=tiny,nope"], "model=nope is not an option"),
        (["seed=0,1,x"], "seed=x: Value 'x'"),
        (["trainer.bogus=1,2"], "trainer.bogus is not a config key"),
        (["+foo=1"], "foo is not a config key"),
        (["train_type=online_grpo,online_ppo", "critic.optimizer.foo=1"], "critic.optimizer.foo"),
        (["seed=[0"], "no viable alternative at input '[0'"),
        (["train_type.optimizer.lr=1e-3,abc"], "train_type.optimizer.lr must be"),
    ],
)
def test_sweep_overrides_are_checked_value_by_value(overrides: list[str], needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        check_sweep_overrides(overrides)
    assert needle in str(info.value)
    assert len(str(info.value).splitlines()) == 1


def test_a_good_sweep_passes() -> None:
    check_sweep_overrides(["seed=range(0,3)", "train_type=online_grpo,online_ppo"])


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, True, "1", None, [1]])
def test_check_number_refuses_what_is_not_a_finite_number(value: object) -> None:
    with pytest.raises(ConfigError, match="key must be a finite number"):
        check_number(value, "key")


def test_check_number_bounds_and_integers() -> None:
    check_number(0, "key", 0, 1, high_open=True)
    check_number(None, "key", 0, optional=True)
    with pytest.raises(ConfigError, match=r"in \[0, 1\) \(a finite number, got 1\)"):
        check_number(1, "key", 0, 1, high_open=True)
    with pytest.raises(ConfigError, match=r"must be >= 1 \(an integer, got 1.5\)"):
        check_number(1.5, "key", 1, integer=True)
    with pytest.raises(ConfigError, match=r"an integer up to 2\*\*53"):
        check_number(2**80, "key", 1, integer=True)  # past MAX_COUNT
    with pytest.raises(ConfigError, match="list of two"):
        check_betas({"a": 0.1, "b": 0.2}, "betas")


@pytest.mark.parametrize("key", ["rope_theta", "rms_norm_eps", "initializer_range"])
@pytest.mark.parametrize("value", [math.nan, math.inf, 0.0, -1.0])
def test_llama_config_refuses_non_finite_and_non_positive_floats(key: str, value: float) -> None:
    with pytest.raises(ValueError, match=f"model.{key} must be a finite number > 0"):
        LlamaConfig(**{key: value})


# through train.py's main, in-process (tests/train_runs.py; the config family's real process is
# in tests/e2e/test_train_cli.py): one stderr line, exit 2, nothing written
CLI_ROWS = [
    ["-m", "model=tiny,nope"],
    ["train_type.optimizer.betas=[2,3]"],
    ["model.rope_theta=nan"],
    ["trainer.max_duration=[1,2]"],
    ["train_type.scheduler.min_lr_ratio=nan"],
    ["train_type.prompts_per_step=100000000"],
    ["+infra.environment.FOO=1"],
    ["-m", "train_type.optimizer.lr=abc,1e-3"],
    ["-m", "+foo=1"],
    ["-m", "trainer.bogus=1"],
]


@pytest.mark.parametrize("args", CLI_ROWS, ids=lambda v: " ".join(v))
def test_trial_commands_give_one_line_and_exit_2(tmp_path, args: list[str]) -> None:
    result = run_train_in_process(args, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("astrai: config error: ")
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "Traceback" not in result.stdout
    assert list(tmp_path.iterdir()) == []
