"""MLflow as a ``RunLogger`` sink (``logger=mlflow``): the flattened resolved config as params,
every metric at its RL step, the checkpoint dir as a tag (named, never uploaded).

The default store is ``sqlite:///<run dir>/mlflow.db``: MLflow 3 refuses its old ``./mlruns``
file store, and a database of the run's own keeps parallel sweep jobs from contending for one
SQLite file. The MLflow run id is kept in ``<run dir>/mlflow_run_id``: a resume whose MLflow run
holds exactly the rows up to the checkpoint (the usual stop) re-opens that run. MLflow keeps
every value logged at a step and cannot delete one, so a run that holds steps after the
checkpoint (a crash after it) would show them twice: a new MLflow run starts instead, named as
the first, replays ``metrics.jsonl``'s rows up to the checkpoint and goes on; the tags
``astrai.continues`` / ``astrai.continued_by`` link the two, and the first is marked KILLED
(docs/metrics.md).
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
from astrai.metrics.writers import ResumePoint

log = logging.getLogger(__name__)

RUN_ID_FILE = "mlflow_run_id"
DB_FILE = "mlflow.db"
ARTIFACT_DIR = "mlflow-artifacts"  # the default store's artifact root (astrai uploads none)
METRICS_PER_BATCH = 1000  # MLflow's bound on one log_batch call
STORE_LOGGER = "mlflow.store.db.utils"  # says INFO "Creating initial MLflow database tables"
CHECKPOINTS_TAG = "astrai.checkpoint_dir"
RESUMED_TAG = "astrai.resumed_with."  # + param key: a value a resume changed
CONTINUES_TAG = "astrai.continues"  # on a run that replaced one holding steps after a checkpoint
CONTINUED_BY_TAG = "astrai.continued_by"  # on that one: the run that replaced it


def default_tracking_uri(run_dir: Path) -> str:
    return f"sqlite:///{(run_dir / DB_FILE).resolve()}"


def created_paths(settings: DictConfig, run_dir: Path) -> list[Path]:
    """What starting an MLflow run may create in the run dir: the run id file, and the
    default store's database and artifact folder."""
    paths = [run_dir / RUN_ID_FILE]
    if settings.tracking_uri is None:
        paths += [run_dir / DB_FILE, run_dir / ARTIFACT_DIR]
    return paths


class MlflowSink:
    """One MLflow run of one astrai run (rank 0).

    Args:
        settings: ``logger.mlflow`` (tracking_uri, experiment, run_name).
        config: the resolved run config, logged as flattened params.
        run_dir: the astrai run dir (default store, where the run id is kept).
        resume: where a (re)start picks up: re-open the stored MLflow run when it holds
            exactly the kept rows, else start a new one that replays them; None: a fresh
            run dir.
    """

    def __init__(
        self,
        settings: DictConfig,
        config: Mapping[str, object],
        run_dir: Path,
        resume: ResumePoint | None,
    ) -> None:
        if settings.tracking_uri is None:  # the run's own store, new with each run dir: its
            logging.getLogger(STORE_LOGGER).setLevel(logging.WARNING)  # "Creating tables"
        uri = settings.tracking_uri or default_tracking_uri(run_dir)
        self.client = MlflowClient(tracking_uri=uri)
        experiment = self.client.get_experiment_by_name(settings.experiment)
        if experiment is not None:
            experiment_id = experiment.experiment_id
        else:  # the default store keeps artifacts beside it, not in the working directory
            location = None if settings.tracking_uri else (run_dir / ARTIFACT_DIR).as_uri()
            experiment_id = self.client.create_experiment(settings.experiment, location)
        id_path = run_dir / RUN_ID_FILE
        stored = read_run_id(id_path) if resume is not None else None
        self.run_id: str | None = None
        if stored is not None and resume is not None and resume.trackers_hold_exactly_the_rows:
            self.run_id = self._reopen(stored)
            if self.run_id is None:  # not in this store: nothing to link to
                stored = None
        if self.run_id is not None:
            self._log_params(flatten_config(config))
            return
        tags = {CHECKPOINTS_TAG: str((run_dir / "checkpoints").resolve())}
        if stored is not None:
            tags[CONTINUES_TAG] = stored
        name = settings.run_name or display_name(run_dir)
        self.run_id = self.client.create_run(experiment_id, tags=tags, run_name=name).info.run_id
        self._log_params(flatten_config(config))
        self._replay(resume.rows if resume is not None else [])
        if stored is not None:
            self._mark_replaced(stored)
        write_run_id(id_path, self.run_id)  # once the rows are in: see WandbSink

    def _replay(self, rows: list[dict[str, float]]) -> None:
        """Log ``rows`` (``metrics.jsonl``'s up to the checkpoint) into this new run."""
        assert self.run_id is not None
        if rows:
            log.info("MLflow: run %s replays %d rows of metrics.jsonl", self.run_id, len(rows))
        now_ms = int(time.time() * 1000)
        metrics = [
            Metric(name, value, now_ms, int(row["step"]))
            for row in rows
            for name, value in row.items()
            if name != "step"
        ]
        for chunk in batches(metrics, METRICS_PER_BATCH):
            self.client.log_batch(self.run_id, metrics=list(chunk))

    def _mark_replaced(self, earlier: str) -> None:
        """``earlier``, the stored run this new one replaces (it holds steps after the
        checkpoint, or the run restarted before its first one): KILLED, linked to this one."""
        assert self.run_id is not None
        log.info("MLflow: run %s replaces %s (marked KILLED)", self.run_id, earlier)
        try:
            self.client.set_tag(earlier, CONTINUED_BY_TAG, self.run_id)
            self.client.set_terminated(earlier, RunStatus.to_string(RunStatus.KILLED))
        except MlflowException as err:  # e.g. deleted by hand
            log.warning("MLflow run %s not marked as replaced (%s)", earlier, err)

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

    def amend(self, step: int, values: dict[str, float], rows: list[dict[str, float]]) -> None:
        """``values`` at ``step``: MLflow keeps each metric's values per step, and these are
        new at that step (an evaluation a stop abandoned was never logged)."""
        self.log(step, values)

    def log_samples(self, step: int, tag: str, rows: list[tuple[str, str, float]]) -> None:
        """Not recorded: MLflow would store them as artifacts, and astrai uploads none."""

    def close(self) -> None:
        assert self.run_id is not None
        self.client.set_terminated(self.run_id, RunStatus.to_string(RunStatus.FINISHED))
