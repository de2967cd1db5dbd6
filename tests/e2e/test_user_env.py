"""A user's environment in a file outside the package (``examples/tool_env``), selected from the
command line (issue 50's acceptance): 2 training steps through the real ``train.py`` with
``engine=torch`` (``tests/engine/test_vllm_episodes.py``: ``engine=vllm``); a wrong class or
path is one line and exit 2, every other bad key a config error naming it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.episode_envs import EXAMPLE, LOOKUP_ENV
from tests.helpers import compose_config
from tests.train_runs import run_train_in_process

from astrai.config.errors import ConfigError
from astrai.metrics.names import ENV_METRICS

JOB = [
    *LOOKUP_ENV,
    "+env.call_bonus=0.5",
    "train_type.sampling.max_new_tokens=8",
    "train_type.prompts_per_step=4",
    "train_type.group_size=4",
    "train_type.minibatches=1",
    "trainer.total_steps=2",
    "trainer.eval_every=2",
    "trainer.progress_bar=false",
    "ckpt.every_steps=0",
]


@pytest.mark.slow  # ~4 s: the fast suite's budget
def test_a_user_environment_trains_two_steps(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    result = run_train_in_process(
        [*JOB, f"hydra.run.dir={run_dir}"], cwd=tmp_path, import_path=EXAMPLE
    )
    assert result.returncode == 0, result.stderr[-2000:]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2]
    assert ENV_METRICS <= set(rows[1]) and ENV_METRICS <= set(rows[2])
    assert all(r["env/turns"] >= 1 and r["env/failed"] == 0 for r in rows[1:])
    assert "eval/accuracy" in rows[2]


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "env._target_=lookup_env.Lookpu",
            "env._target_ 'lookup_env.Lookpu': module 'lookup_env' has no 'Lookpu'",
        ),
        ("+env.bonus=1", "env.bonus is not an argument of lookup_env.Lookup (its arguments:"),
    ],
)
def test_a_wrong_class_or_path_is_one_line_and_exit_2(
    override: str, message: str, tmp_path: Path
) -> None:
    result = run_train_in_process(
        [*JOB, override, f"hydra.run.dir={tmp_path / 'run'}"], cwd=tmp_path, import_path=EXAMPLE
    )
    assert result.returncode == 2, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "env._target_=no_such_module.Lookup",
            "env._target_ 'no_such_module.Lookup' cannot be imported: No module named "
            "'no_such_module'",
        ),
        (
            "env._target_=lookup_env.parse_lookup",
            "env._target_ 'lookup_env.parse_lookup' is not an astrai.envs.Environment subclass",
        ),
        ("env.parser=lookup_env.nope", "env.parser 'lookup_env.nope': module 'lookup_env' has"),
        ("infra.parallel=fsdp", "env=lookup_env.Lookup with infra.parallel=fsdp is not built"),
        (
            "env.observation_truncation_side=middle",
            "env.observation_truncation_side must be left or right (got 'middle')",
        ),
    ],
)
def test_every_other_bad_environment_key_is_a_config_error_naming_it(
    override: str, message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same checks as the two command-line rows above (the config's validation), each
    refusal's text; composed in process, without a run."""
    monkeypatch.syspath_prepend(str(EXAMPLE))
    with pytest.raises(ConfigError) as refused:
        compose_config([*JOB, override])
    assert message in str(refused.value) and "\n" not in str(refused.value)
