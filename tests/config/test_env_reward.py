"""``config.env_reward``: a reward group that an environment leaves unused is refused in one line
(issue 58: ``experiment=calculator reward=math`` trained on the environment's rewards while the
command line named math); the default group, its keys changed, is what an episode run takes."""

from __future__ import annotations

import pytest
from tests.helpers import compose_config

from astrai.config.env_reward import check_env_reward, default_reward_group, reward_group_name
from astrai.config.errors import ConfigError

CALCULATOR = "env=astrai.envs.calculator.Calculator"


def _refusal(overrides: list[str]) -> str:
    with pytest.raises(ConfigError) as refused:
        check_env_reward(compose_config(overrides, validate=False))
    return str(refused.value)


@pytest.mark.parametrize(
    ("overrides", "name"),
    [
        (["reward=math"], "math"),
        (["reward=exact_match"], "exact_match"),
        (["reward=weighted"], "weighted"),
        (["reward=custom"], "custom"),
        (["reward=custom", "reward._target_=tests.constructed_rewards.constant_reward"],
         "custom (reward._target_=tests.constructed_rewards.constant_reward)"),
    ],
)  # fmt: skip
def test_a_reward_group_other_than_the_default_is_refused_under_an_environment(
    overrides: list[str], name: str
) -> None:
    message = _refusal(["experiment=calculator", *overrides])
    assert message == (
        f"reward={name} is not used with {CALCULATOR}: the environment scores its episodes "
        "(its rewards and its solved metric); leave reward at its default (partial), whose "
        "accuracy_threshold counts an episode without a solved metric as correct"
    )


@pytest.mark.slow  # the fast suite's budget (issue 58 moved it)
def test_the_default_group_and_runs_without_an_environment_pass() -> None:
    assert default_reward_group() == "partial"  # conf/train.yaml's defaults list
    for overrides in (
        ["experiment=calculator"],
        ["experiment=guess", "reward=partial"],  # named, but the default
        ["experiment=calculator", "reward.accuracy_threshold=0.5"],  # its keys changed
        ["reward=math"],  # no environment: the reward group scores the answers
        ["experiment=word_problems_lora"],
    ):
        cfg = compose_config(overrides, validate=False)
        check_env_reward(cfg)
    cfg = compose_config(["experiment=word_problems_lora"], validate=False)
    assert reward_group_name(cfg.reward) == "weighted"
    assert reward_group_name(compose_config(["reward=regex"], validate=False).reward) == "regex"
