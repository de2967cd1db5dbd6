"""The start-up check plays an environment's opening as the run will (issue 58, finding 3): two
fresh environments, each built and reset in a worker slot within the limits. An ``async def
reset`` passes and is awaited (before: it passed the check unawaited and crashed mid-run), a
nondeterministic opening is refused at start (before: it crashed the run at its first group), a
hanging ``reset`` times out and a raising one is named as the environment's (before: a
``ConnectionError`` there was reported as an I/O error), each in one line."""

from __future__ import annotations

import pytest
from tests.helpers import compose_config

from astrai.config.errors import ConfigError

ENV = ["env=custom", "env.parser=none", "env.max_turns=3", "env.step_timeout_s=0.5"]


def test_an_async_reset_passes_the_check() -> None:
    compose_config([*ENV, "env._target_=tests.episode_envs.AsyncTwoTurns"])


@pytest.mark.parametrize(
    ("target", "message"),
    [
        (
            "RandomOpening",
            "returned different messages on two calls (message 0: ",
        ),
        ("ResetHangs", "tests.episode_envs.ResetHangs.reset of task=addition's row"),
        ("ResetConnectionError", "ConnectionError: the sandbox is down"),
        ("NoStep", "TypeError: Can't instantiate abstract class NoStep"),
    ],
)
def test_an_opening_the_run_cannot_use_is_refused_in_one_line(target: str, message: str) -> None:
    with pytest.raises(ConfigError) as refused:
        compose_config([*ENV, f"env._target_=tests.episode_envs.{target}"])
    text = str(refused.value)
    assert message in text and "\n" not in text and text.startswith("env: "), text
    if target == "ResetHangs":
        assert "timed out after 0.5 s" in text
