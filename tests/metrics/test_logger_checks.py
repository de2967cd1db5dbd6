"""What the logger checks refuse before anything is built, each as one line naming the key: a
mistyped logger option (the loggers listed), a W&B tag W&B would refuse, an MLflow tracking URI
without a store, a SQLite store that cannot be written. The same rules as the libraries: the
slow tests ask wandb and MLflow themselves. A logger that passes them and still cannot start:
tests/e2e/test_logger_errors_cli.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from astrai.config.errors import ConfigError
from astrai.config.logger_checks import (
    MLFLOW_DATABASES,
    MLFLOW_SERVER_SCHEMES,
    logger_options,
    mlflow_scheme,
    sqlite_path,
    sqlite_store_problem,
    unknown_logger_message,
    validate_mlflow_settings,
    validate_wandb_settings,
)


def _wandb(**keys: object) -> OmegaConf:
    return OmegaConf.create({"mode": None, "tags": [], **keys})


def _mlflow(uri: str | None) -> OmegaConf:
    return OmegaConf.create({"tracking_uri": uri, "experiment": "astrai", "run_name": None})


def test_a_mistyped_logger_option_lists_the_loggers() -> None:
    assert logger_options() == ["mlflow", "tensorboard", "wandb"]
    assert unknown_logger_message(["seed=1", "logger=[tensorboard,wandbb]"]) == (
        "logger=[tensorboard,wandbb]: 'wandbb' is not a logger (did you mean wandb?); the "
        "loggers are mlflow, tensorboard, wandb, as one or a list: 'logger=[tensorboard,wandb]'"
    )
    assert unknown_logger_message(["logger=comet"]) == (
        "logger=comet: 'comet' is not a logger; the loggers are mlflow, tensorboard, wandb, as "
        "one or a list: 'logger=[tensorboard,wandb]'"
    )
    assert unknown_logger_message(["logger=tensorboard,[mlfow]"])  # a sweep's value too
    for fine in (["logger=[tensorboard,wandb,mlflow]"], ["logger=[]"], ["logger=wandb"], []):
        assert unknown_logger_message(fine) is None


def test_composing_a_mistyped_logger_list_says_which_loggers_there_are() -> None:
    """Through the command line's check (``check_overrides``): Hydra's own error, "Could not
    load 'logger/wandbb'", named no logger."""
    from astrai.config.compose import check_overrides

    overrides = ["logger=[tensorboard,wandbb]"]
    with pytest.raises(ConfigError) as raised:
        check_overrides(overrides)
    assert str(raised.value) == unknown_logger_message(overrides)


@pytest.mark.parametrize(
    ("tags", "message"),
    [
        (["a" * 64], None),
        (
            ["ok", "x" * 65],
            "logger.wandb.tags[1] must be 1 to 64 characters, as W&B requires (got 65: "
            "'xxxxxxxxxxxxxxxxxxxx...')",
        ),
        ([""], "logger.wandb.tags[0] must be 1 to 64 characters, as W&B requires (got 0: '')"),
    ],
)
def test_wandb_tags_are_1_to_64_characters(tags: list[str], message: str | None) -> None:
    if message is None:
        validate_wandb_settings(_wandb(tags=tags))
        return
    with pytest.raises(ConfigError) as error:
        validate_wandb_settings(_wandb(tags=tags))
    assert str(error.value) == message


def test_mlflow_schemes_are_read_as_mlflow_reads_them() -> None:
    assert mlflow_scheme("postgresql+psycopg2://u@h/db") == "postgresql"
    assert mlflow_scheme("HTTPS://host") == "https"
    assert mlflow_scheme("/tmp/mlruns") == "" and mlflow_scheme("file:///tmp/m") == "file"
    assert mlflow_scheme("banana://x") == "banana"


def test_a_tracking_uri_of_an_unknown_scheme_is_one_line() -> None:
    with pytest.raises(ConfigError) as error:
        validate_mlflow_settings(_mlflow("banana://x"))
    schemes = ", ".join(f"{s}://" for s in [*MLFLOW_SERVER_SCHEMES, *MLFLOW_DATABASES])
    assert str(error.value) == (
        f"logger.mlflow.tracking_uri=banana://x: MLflow has no store for the scheme 'banana' "
        f"(it takes {schemes}, e.g. sqlite:///<path>.db or http://<host>:5000)"
    )
    for fine in (None, "http://localhost:5000", "postgresql+psycopg2://u@h/db"):
        validate_mlflow_settings(_mlflow(fine))


def test_a_file_store_is_refused_unless_mlflow_allows_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    with pytest.raises(ConfigError) as error:
        validate_mlflow_settings(_mlflow("file:///tmp/mlruns"))
    assert str(error.value) == (
        "logger.mlflow.tracking_uri=file:///tmp/mlruns: MLflow 3 refuses a file store (set "
        "MLFLOW_ALLOW_FILE_STORE=true to use one); use a database, e.g. sqlite:///mlruns.db, "
        "or a server (http://...)"
    )
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    validate_mlflow_settings(_mlflow("file:///tmp/mlruns"))


def test_sqlite_paths_are_read_as_sqlalchemy_reads_them() -> None:
    assert sqlite_path("sqlite:///mlflow.db") == Path("mlflow.db")  # the working directory's
    assert sqlite_path("sqlite:////tmp/x/mlflow.db") == Path("/tmp/x/mlflow.db")
    assert sqlite_path("sqlite:///:memory:") is None and sqlite_path("sqlite://") is None


def test_a_sqlite_store_that_cannot_be_written_is_named(tmp_path: Path) -> None:
    a_file = tmp_path / "notes.txt"
    a_file.write_text("not a folder\n")
    assert sqlite_store_problem(f"sqlite:///{tmp_path}/new/deeper/mlflow.db") is None  # made
    assert sqlite_store_problem(f"sqlite:///{a_file}/mlflow.db") == (
        f"its folder cannot be made: {a_file} is not a folder"
    )
    assert sqlite_store_problem(f"sqlite:///{a_file}") == f"{a_file} is not a SQLite database"
    assert sqlite_store_problem(f"sqlite:///{tmp_path}") == f"{tmp_path} is not a file"
    with pytest.raises(ConfigError) as error:
        validate_mlflow_settings(_mlflow(f"sqlite:///{a_file}/mlflow.db"))
    assert str(error.value) == (
        f"logger.mlflow.tracking_uri=sqlite:///{a_file}/mlflow.db: its folder cannot be made: "
        f"{a_file} is not a folder"
    )


@pytest.mark.slow  # ~3 s: imports wandb and MLflow
def test_the_rules_are_the_libraries_own(tmp_path: Path) -> None:
    """W&B's settings accept the tags these checks accept and refuse the others; MLflow's
    registry has a store for exactly the schemes taken here (its Unity Catalog ones only
    raise "not supported", its file store is the separate rule above)."""
    import wandb
    from mlflow.tracking._tracking_service.utils import _tracking_store_registry

    wandb.Settings(run_tags=("a" * 64,))
    for bad in ("x" * 65, ""):
        with pytest.raises(ValueError, match="Tags must be between 1 and 64 characters"):
            wandb.Settings(run_tags=(bad,))
    registered = set(_tracking_store_registry._registry) - {"", "file", "databricks-uc", "uc"}
    assert registered == {*MLFLOW_SERVER_SCHEMES, *MLFLOW_DATABASES}
    # MLflow itself cannot open the store the check refuses
    from mlflow.store.db.utils import _make_parent_dirs_if_sqlite

    a_file = tmp_path / "notes.txt"
    a_file.write_text("not a folder\n")
    with pytest.raises(OSError):
        _make_parent_dirs_if_sqlite(f"sqlite:///{a_file}/mlflow.db")
