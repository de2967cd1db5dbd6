"""The resolved config a training checkpoint holds (``config.yaml``), read back to sample the
checkpoint as its run did (``astrai.generate``): its precision, its sampling defaults and its
task, with the task's data files found where the run read them."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from omegaconf import DictConfig, OmegaConf

from astrai.checkpoints.layout import RUN_CONFIG_FILE, CheckpointError
from astrai.config.collector_checks import configured_collector
from astrai.config.env_checks import configured_env
from astrai.config.errors import ConfigError
from astrai.config.moved_targets import current_targets
from astrai.models.precision import PRECISIONS
from astrai.models.pretrained import is_hf_model_dir
from astrai.rollout.collectors import Collector
from astrai.rollout.episodes.env_spec import EnvSpec

if TYPE_CHECKING:
    from astrai.checkpoints.policy import LoadedPolicy

DATASET_PATH_KEYS = ("train_path", "eval_path")  # task=dataset: read relative to the run's cwd


def read_run_config(loaded: LoadedPolicy, source: Path) -> DictConfig | None:
    """The resolved config of the run that wrote ``loaded``, its moved ``_target_`` names
    brought up to date (``moved_targets``); None for a model directory."""
    if is_hf_model_dir(source):
        return None
    path = loaded.source / RUN_CONFIG_FILE
    try:
        cfg = OmegaConf.load(path)
    except Exception as err:  # OmegaConf raises yaml's and its own errors
        raise CheckpointError(f"{path}: unreadable run config ({err})") from err
    if not isinstance(cfg, DictConfig):
        raise CheckpointError(f"{path}: not a mapping")
    return current_targets(cfg)


def run_precision(run: DictConfig | None) -> str:
    """The run's ``infra.precision`` (``fp32`` without a run config: a model directory)."""
    if run is None:
        return "fp32"
    precision = OmegaConf.select(run, "infra.precision", default="fp32")
    if precision not in PRECISIONS:
        raise ValueError(f"the run's infra.precision is {precision!r}, not one of {PRECISIONS}")
    return str(precision)


def run_sampling_default(run: DictConfig | None, key: str, fallback: Any) -> Any:
    """``train_type.sampling.<key>`` of the run, else ``fallback``."""
    if run is None:
        return fallback
    return OmegaConf.select(run, f"train_type.sampling.{key}", default=fallback)


def run_cwd(checkpoint: Path) -> Path | None:
    """The working directory the run was launched from (Hydra's ``.hydra/hydra.yaml``)."""
    hydra_file = checkpoint.parent.parent / ".hydra" / "hydra.yaml"
    try:
        cwd = OmegaConf.select(OmegaConf.load(hydra_file), "hydra.runtime.cwd")
    except Exception:  # no record: paths stay relative to this working directory
        return None
    return Path(cwd) if isinstance(cwd, str) else None


def run_task_config(run: DictConfig, checkpoint: Path) -> DictConfig:
    """The run's ``task`` node; relative data files read from where the run read them, when
    they are still there."""
    # a DictConfig's container is a dict (to_container's type also covers a list's)
    task = OmegaConf.create(cast(dict[str, Any], OmegaConf.to_container(run.task, resolve=True)))
    cwd = run_cwd(checkpoint)
    for key in DATASET_PATH_KEYS:
        value = task.get(key)
        if cwd is None or not isinstance(value, str) or Path(value).is_absolute():
            continue
        if (cwd / value).exists():
            task[key] = str(cwd / value)
    return task


def run_env(run: DictConfig | None) -> EnvSpec | None:
    """The environment the run trained with (``env=...``); None for one-turn runs and model
    directories."""
    if run is None or run.get("env") is None:
        return None
    try:
        return configured_env(run.env)
    except ConfigError as err:
        raise ValueError(f"the run's env: {err}") from None


def run_collector(run: DictConfig | None, env: EnvSpec | None) -> type[Collector]:
    """The collector class the run trained with (its ``collector`` node, checked as
    validation checks it; ``auto`` for a run saved before it had one, or a model directory)
    for its environment (``env``: ``run_env``): whether it plays an environment's episodes is
    the collector's to say (``Collector.episodes``)."""
    node = None if run is None else run.get("collector")
    try:
        return configured_collector(node, env)
    except ConfigError as err:
        raise ValueError(f"the run's collector: {err}") from None
