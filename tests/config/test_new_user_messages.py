"""What a new user's first mistakes read like (issue 59, item 11): each is one line that names
the override or file and says what to do."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from tests.train_runs import run_train_in_process

from astrai.config.compose import check_overrides, check_sweep_overrides
from astrai.config.errors import ConfigError
from astrai.config.help import ENV_COMMENTS_FILE, ENV_FILE, ENV_KEYS, help_text, yaml_entry
from astrai.paths import CONFIG_DIR
from astrai.rollout.episodes.env_spec import environment_class
from astrai.tasks.dataset_rows import DatasetError, read_rows


def _message(overrides: list[str]) -> str:
    with pytest.raises(ConfigError) as caught:
        check_overrides(overrides)
    return str(caught.value)


# --- a mistyped group option -----------------------------------------------------------------


def test_a_mistyped_group_option_names_the_close_one() -> None:
    assert _message(["train_type=online_grp"]) == (
        "train_type=online_grp is not an option (did you mean train_type=online_grpo? "
        "choose from online_grpo, online_ppo)"
    )


def test_an_option_like_none_gets_the_list_only() -> None:
    assert _message(["train_type=nope"]) == (
        "train_type=nope is not an option (choose from online_grpo, online_ppo)"
    )


# --- Hydra's lexer ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("override", "message"),
    [
        (
            "hydra.run.dir=outputs/é",
            "hydra.run.dir=outputs/é: Hydra's override grammar takes 'é' (U+00E9 LATIN SMALL "
            "LETTER E WITH ACUTE) only inside quotes: quote the value, e.g. "
            """'hydra.run.dir="outputs/é"'""",
        ),
        (
            "hydra.run.dir=runs/a\nb",
            "hydra.run.dir=runs/a\\nb: Hydra's override grammar takes a newline (\\n) only inside "
            """quotes: quote the value, e.g. 'hydra.run.dir="runs/a\\nb"'""",
        ),
        (  # a latin-1 file name's byte: Python hands argv's undecodable bytes on as surrogates
            "hydra.run.dir=caf" + b"\xe9".decode("utf-8", "surrogateescape"),
            "hydra.run.dir=caf\\xe9: Hydra's override grammar takes the byte 0xe9 (not UTF-8) "
            """only inside quotes: quote the value, e.g. 'hydra.run.dir="caf\\xe9"'""",
        ),
    ],
)
def test_a_lexer_error_names_the_override_and_says_to_quote_it(override: str, message: str) -> None:
    # before: "LexerNoViableAltException: hydra.run.dir=outputs/é"
    assert _message(["trainer.total_steps=2", override]) == message


def test_a_key_with_such_a_character_is_not_told_to_quote() -> None:
    assert _message(["trainer.tötal_steps=2"]) == (
        "trainer.tötal_steps=2: a key is ASCII (letters, digits, _ and .), not 'ö' (U+00F6 LATIN "
        "SMALL LETTER O WITH DIAERESIS)"
    )


def test_the_quoted_form_the_message_suggests_composes() -> None:
    cfg = check_overrides(["trainer.total_steps=2", 'hydra.run.dir="outputs/é"'])
    assert cfg.trainer.total_steps == 2


def test_a_sweeps_lexer_error_is_the_same_line() -> None:
    with pytest.raises(ConfigError) as caught:
        check_sweep_overrides(["seed=1,2", "hydra.run.dir=é"])
    assert str(caught.value).startswith("hydra.run.dir=é: Hydra's override grammar takes 'é'")


@pytest.mark.slow  # ~2 s alone (train.py's imports); the same check in-process above
def test_train_py_prints_the_lexer_error_in_one_line(tmp_path: Path) -> None:
    result = run_train_in_process(["debug=quick", "hydra.run.dir=outputs/é"], cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.startswith("astrai: config error: hydra.run.dir=outputs/é: ")
    assert len(result.stderr.strip().splitlines()) == 1 and "Exception" not in result.stderr
    assert list(tmp_path.iterdir()) == []


# --- a missing data file ---------------------------------------------------------------------


def test_a_missing_relative_data_file_says_what_it_is_relative_to(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DatasetError) as caught:
        read_rows(Path("data/train.jsonl"), "task.train_path")
    assert str(caught.value) == (
        f"task.train_path: data/train.jsonl does not exist (relative to the working directory "
        f"{tmp_path})"
    )
    with pytest.raises(DatasetError) as absolute:
        read_rows(tmp_path / "train.jsonl", "task.train_path")
    assert str(absolute.value) == f"task.train_path: {tmp_path / 'train.jsonl'} does not exist"


# --- an environment Python cannot import -----------------------------------------------------


def _env_error(target: str) -> str:
    with pytest.raises(ValueError) as caught:
        environment_class(target)
    return str(caught.value)


def test_an_unimportable_environment_says_to_set_pythonpath(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert _env_error("lookup_env_h4.Lookup") == (
        "env._target_ 'lookup_env_h4.Lookup' cannot be imported: No module named "
        "'lookup_env_h4' (not on Python's search path: put the folder holding lookup_env_h4.py "
        "on PYTHONPATH, e.g. PYTHONPATH=path/to/that/folder python train.py ...)"
    )


def test_a_module_in_the_working_directory_but_not_on_the_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "lookup_env_h4.py").write_text("class Lookup: ...\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(tmp_path))])
    assert _env_error("lookup_env_h4.Lookup").endswith(
        "(lookup_env_h4.py is in the working directory, which is not on sys.path: PYTHONPATH=.)"
    )


def test_a_missing_dependency_of_the_environment_gets_no_path_hint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Found, but it imports a package that is not installed: PYTHONPATH is not the fix."""
    (tmp_path / "needs_more_h4.py").write_text("import not_installed_h4\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert _env_error("needs_more_h4.Env") == (
        "env._target_ 'needs_more_h4.Env' cannot be imported: No module named 'not_installed_h4'"
    )


# --- --help ----------------------------------------------------------------------------------


def test_help_lists_the_env_keys_with_defaults_and_meanings_from_the_yaml() -> None:
    lines = help_text().splitlines()
    conf = Path(CONFIG_DIR)
    for key in ENV_KEYS:
        value, comment = yaml_entry(conf / ENV_FILE, key)
        comment = comment or yaml_entry(conf / ENV_COMMENTS_FILE, key)[1]
        assert comment, key
        assert f"  {f'env.{key}={value}':<40}{comment}" in lines, key
    assert (
        "  e.g. PYTHONPATH=examples/tool_env python train.py env=custom "
        "env._target_=lookup_env.Lookup +env.k=3" in lines
    )
    assert "  env.max_turns=4                         assistant turns per episode" in lines
