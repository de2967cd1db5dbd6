"""Loggers as a list (``logger=[tensorboard,wandb,mlflow]``): how the options compose, the
checks before anything is built, the flattened config MLflow records, and the fan-out of
``RunLogger`` to its sinks. End to end (real W&B and MLflow runs): tests/e2e/test_loggers_cli.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from tests.helpers import compose_config

from astrai.config import logger_checks
from astrai.config.compose import check_overrides
from astrai.config.errors import ConfigError
from astrai.config.logger_checks import validate_logger_backends
from astrai.metrics.flat_config import batches, flatten_config, param_text
from astrai.metrics.loggers import open_run_logger
from astrai.metrics.run_ids import display_name, read_run_id, write_run_id
from astrai.metrics.writers import RunLogger


@pytest.mark.parametrize(
    ("choice", "tensorboard", "wandb", "mlflow"),
    [
        ("tensorboard", True, False, False),  # the default
        ("wandb", False, True, False),  # W&B alone: no TensorBoard
        ("[tensorboard,wandb,mlflow]", True, True, True),
        ("[mlflow,tensorboard]", True, False, True),  # any order
        ("[]", False, False, False),  # metrics.jsonl and summary.json only
    ],
)
def test_logger_options_combine_and_each_sets_only_its_own_keys(
    choice: str, tensorboard: bool, wandb: bool, mlflow: bool
) -> None:
    cfg = compose_config([f"logger={choice}"], validate=False)
    logger = cfg.logger
    assert (logger.tensorboard, logger.wandb is not None, logger.mlflow is not None) == (
        tensorboard,
        wandb,
        mlflow,
    )
    # the shared keys keep their values whatever is chosen (conf/logger_base.yaml)
    assert (logger.samples_every, logger.num_samples, logger.kl_every) == (10, 8, 10)
    if wandb:
        assert OmegaConf.to_container(logger.wandb) == {
            "project": "astrai",
            "entity": None,
            "name": None,
            "tags": [],
            "group": None,
            "mode": None,
            "dir": None,
        }
    if mlflow:
        assert logger.mlflow.experiment == "astrai" and logger.mlflow.tracking_uri is None


def test_a_selected_logger_without_its_package_is_one_line_naming_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cfg = compose_config(["logger=[tensorboard,wandb,mlflow]"], validate=False)
    validate_logger_backends(cfg.logger)  # installed here (make install-dev)
    absent = {"wandb", "sqlalchemy"}
    monkeypatch.setattr(
        logger_checks.importlib.util,
        "find_spec",
        lambda name, *args: None if name in absent else object(),
    )
    with pytest.raises(ConfigError) as wandb_error:
        validate_logger_backends(cfg.logger)
    assert str(wandb_error.value) == (
        "logger=wandb needs the wandb package: pip install 'astrai[wandb]'"
    )
    cfg.logger.wandb = None
    with pytest.raises(ConfigError, match=r"^logger=mlflow needs the sqlalchemy package: pip "):
        validate_logger_backends(cfg.logger)
    cfg.logger.mlflow = None
    validate_logger_backends(cfg.logger)  # nothing selected needs them


def test_a_key_of_an_unselected_logger_is_one_line_saying_to_select_it() -> None:
    with pytest.raises(ConfigError) as error:
        check_overrides(["logger.wandb.mode=offline"])  # logger=tensorboard: wandb is null
    assert str(error.value) == (
        "logger.wandb.mode is a key of logger=wandb, which is not selected: add it to the "
        "loggers, e.g. 'logger=[tensorboard,wandb]'"
    )


def test_an_unknown_wandb_mode_is_refused() -> None:
    cfg = compose_config(["logger=wandb"], validate=False)  # composed above: cached
    cfg.logger.wandb.mode = "ofline"
    with pytest.raises(ConfigError, match="logger.wandb.mode must be one of online, offline"):
        validate_logger_backends(cfg.logger)


def test_flatten_config_dots_keys_spells_leaves_as_yaml_and_cuts_long_values() -> None:
    config = {
        "seed": 0,
        "trainer": {"total_steps": 5, "max_duration": None, "progress_bar": False},
        "ckpt": {"allow_changes": ["seed", "model"], "extra": {}},
        "optimized_metric": "eval/accuracy",
        "lr": 1e-05,
        "long": "x" * 12,
    }
    assert flatten_config(config, max_len=10) == {
        "seed": "0",
        "trainer.total_steps": "5",
        "trainer.max_duration": "null",
        "trainer.progress_bar": "false",
        "ckpt.allow_changes": '["seed"...',  # '["seed","model"]': 16 characters, cut to 7 + "..."
        "ckpt.extra": "{}",  # an empty mapping is a leaf
        "optimized_metric": "eval/ac...",
        "lr": "1e-05",
        "long": "xxxxxxx...",
    }
    assert param_text(True) == "true"


def test_batches_split_into_slices_of_at_most_the_size() -> None:
    assert [list(b) for b in batches(list(range(7)), 3)] == [[0, 1, 2], [3, 4, 5], [6]]
    assert list(batches([], 100)) == []


def test_the_whole_default_config_flattens_within_mlflows_limits() -> None:
    cfg = compose_config(["logger=[tensorboard,wandb,mlflow]"], validate=False)
    flat = flatten_config(OmegaConf.to_container(cfg, resolve=True))  # type: ignore[arg-type]
    assert flat["trainer.total_steps"] == "1200" and flat["logger.wandb.project"] == "astrai"
    assert all(len(value) <= 500 and len(key) <= 250 for key, value in flat.items())


def test_run_ids_are_kept_in_the_run_dir_and_runs_are_named_by_it(tmp_path: Path) -> None:
    path = tmp_path / "wandb_run_id"
    assert read_run_id(path) is None
    write_run_id(path, "abc123")
    assert path.read_text() == "abc123\n" and read_run_id(path) == "abc123"
    assert display_name(tmp_path / "12-00-00") == "12-00-00"  # outside a Hydra multirun


class RecordingSink:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def log(self, step: int, values: dict[str, float]) -> None:
        self.calls.append(("log", step, values))

    def amend(self, step: int, values: dict[str, float], rows: list[dict[str, float]]) -> None:
        self.calls.append(("amend", step, values, [row["step"] for row in rows]))

    def log_samples(self, step: int, tag: str, rows: list[tuple[str, str, float]]) -> None:
        self.calls.append(("samples", step, tag, rows))

    def close(self) -> None:
        self.calls.append(("close",))


def test_run_logger_hands_every_scalar_amendment_and_sample_panel_to_its_sinks(
    tmp_path: Path,
) -> None:
    sink = RecordingSink()
    logger = RunLogger(tmp_path, tensorboard=False, sinks=[sink])
    logger.log(1, {"b": 2.0, "a": float("nan")})
    logger.amend(1, {"eval/accuracy": 0.5})
    logger.log_samples(1, "samples/eval", [("1+1=", "2", 1.0)])
    logger.close()
    logger.close()  # closes its sinks once
    nan = sink.calls[0][2]["a"]
    assert nan != nan  # NaN handed on as NaN (metrics.jsonl writes null)
    assert sink.calls == [
        ("log", 1, {"a": nan, "b": 2.0}),
        ("amend", 1, {"eval/accuracy": 0.5}, [1.0]),
        ("samples", 1, "samples/eval", [("1+1=", "2", 1.0)]),
        ("close",),
    ]
    row = json.loads((tmp_path / "metrics.jsonl").read_text())
    assert row == {"step": 1, "a": None, "b": 2.0, "eval/accuracy": 0.5}


def test_a_rank_that_does_not_log_opens_no_sink(tmp_path: Path) -> None:
    cfg = compose_config(["logger=[tensorboard,wandb,mlflow]"], validate=False)
    logger = open_run_logger(cfg, tmp_path / "run", resume_step=None, enabled=False)
    assert logger.sinks == [] and not (tmp_path / "run").exists()
