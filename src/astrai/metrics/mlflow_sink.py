"""MLflow as a ``RunLogger`` sink (``logger=mlflow``): the flattened resolved config as params,
every metric at its RL step, the checkpoint dir as a tag (named, never uploaded).

The default store is ``sqlite:///<run dir>/mlflow.db``: MLflow 3 refuses its old ``./mlruns``
file store, and a database of the run's own keeps parallel sweep jobs from contending for one
SQLite file. The MLflow run id is kept in ``<run dir>/mlflow_run_id``: a run resumed from a
checkpoint re-opens that run. MLflow keeps every value logged at a step, so steps a crashed
run logged after its last checkpoint show twice (docs/metrics.md).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from pathlib import Path

from mlflow.entities import Metric, Param, RunStatus
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient
from omegaconf import DictConfig

from astrai.metrics.flat_config import PARAMS_PER_BATCH, batches, flatten_config
from astrai.metrics.run_ids import display_name, read_run_id, write_run_id

log = logging.getLogger(__name__)

RUN_ID_FILE = "mlflow_run_id"
DB_FILE = "mlflow.db"
ARTIFACT_DIR = "mlflow-artifacts"  # the default store's artifact root (astrai uploads none)
METRICS_PER_BATCH = 1000  # MLflow's bound on one log_batch call
CHECKPOINTS_TAG = "astrai.checkpoint_dir"
RESUMED_TAG = "astrai.resumed_with."  # + param key: a value a resume changed


def default_tracking_uri(run_dir: Path) -> str:
    return f"sqlite:///{(run_dir / DB_FILE).resolve()}"


class MlflowSink:
    """One MLflow run of one astrai run (rank 0).

    Args:
        settings: ``logger.mlflow`` (tracking_uri, experiment, run_name).
        config: the resolved run config, logged as flattened params.
        run_dir: the astrai run dir (default store, where the run id is kept).
        resuming: True when resuming from a checkpoint: re-open the stored MLflow run.
    """

    def __init__(
        self, settings: DictConfig, config: Mapping[str, object], run_dir: Path, resuming: bool
    ) -> None:
        uri = settings.tracking_uri or default_tracking_uri(run_dir)
        self.client = MlflowClient(tracking_uri=uri)
        experiment = self.client.get_experiment_by_name(settings.experiment)
        if experiment is not None:
            experiment_id = experiment.experiment_id
        else:  # the default store keeps artifacts beside it, not in the working directory
            location = None if settings.tracking_uri else (run_dir / ARTIFACT_DIR).as_uri()
            experiment_id = self.client.create_experiment(settings.experiment, location)
        id_path = run_dir / RUN_ID_FILE
        stored = read_run_id(id_path) if resuming else None
        self.run_id = self._reopen(stored) if stored is not None else None
        if self.run_id is None:
            tags = {CHECKPOINTS_TAG: str((run_dir / "checkpoints").resolve())}
            name = settings.run_name or display_name(run_dir)
            run = self.client.create_run(experiment_id, tags=tags, run_name=name)
            self.run_id = run.info.run_id
            write_run_id(id_path, self.run_id)
        self._log_params(flatten_config(config))

    def _reopen(self, run_id: str) -> str | None:
        """``run_id`` marked running again; None (with a warning) when this store lacks it."""
        try:
            self.client.update_run(run_id, status=RunStatus.to_string(RunStatus.RUNNING))
        except MlflowException as err:
            log.warning("MLflow run %s not found (%s): starting a new one", run_id, err)
            return None
        return run_id

    def _log_params(self, params: dict[str, str]) -> None:
        """Params the run lacks; MLflow refuses to change one, so a value a resume changed
        (``trainer.total_steps``) goes to the tag ``astrai.resumed_with.<key>``."""
        assert self.run_id is not None
        logged = self.client.get_run(self.run_id).data.params
        new = [Param(k, v) for k, v in params.items() if k not in logged]
        for chunk in batches(new, PARAMS_PER_BATCH):
            self.client.log_batch(self.run_id, params=list(chunk))
        for key, value in params.items():
            if key in logged and logged[key] != value:
                self.client.set_tag(self.run_id, RESUMED_TAG + key, value)

    def log(self, step: int, values: dict[str, float]) -> None:
        assert self.run_id is not None
        now_ms = int(time.time() * 1000)
        metrics = [Metric(name, value, now_ms, step) for name, value in values.items()]
        for chunk in batches(metrics, METRICS_PER_BATCH):
            self.client.log_batch(self.run_id, metrics=list(chunk))

    def log_samples(self, step: int, tag: str, rows: list[tuple[str, str, float]]) -> None:
        """Not recorded: MLflow would store them as artifacts, and astrai uploads none."""

    def close(self) -> None:
        assert self.run_id is not None
        self.client.set_terminated(self.run_id, RunStatus.to_string(RunStatus.FINISHED))
