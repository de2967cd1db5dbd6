"""Weights & Biases as a ``RunLogger`` sink (``logger=wandb``): every metric at ``step=`` the RL
step, the resolved config as the run's config, sample completions as a ``wandb.Table``.

The W&B run id is kept in ``<run dir>/wandb_run_id``: a run resumed from a checkpoint calls
``wandb.init(id=..., resume="allow")`` with it, so its steps continue the same W&B run; a fresh
start (no checkpoint) begins a new one. W&B's history cannot be rewound: steps a crashed run
logged after its last checkpoint stay, and W&B ignores a later row at a step lower than its
last (docs/metrics.md).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from pathlib import Path

import wandb
from omegaconf import DictConfig

from astrai.metrics.run_ids import display_name, read_run_id, sweep_group, write_run_id

RUN_ID_FILE = "wandb_run_id"
SAMPLE_COLUMNS: list[str | int] = ["prompt", "response", "reward"]


class WandbSink:
    """One W&B run of one astrai run (rank 0).

    Args:
        settings: ``logger.wandb`` (project, entity, name, tags, group, mode, dir).
        config: the resolved run config, recorded as the W&B run's config.
        run_dir: the astrai run dir (default W&B ``dir``, where the run id is kept).
        resuming: True when resuming from a checkpoint: continue the stored W&B run.
    """

    def __init__(
        self, settings: DictConfig, config: Mapping[str, object], run_dir: Path, resuming: bool
    ) -> None:
        id_path = run_dir / RUN_ID_FILE
        run_id = read_run_id(id_path) if resuming else None
        if run_id is None:
            run_id = uuid.uuid4().hex[:16]  # W&B ids: letters and digits
            write_run_id(id_path, run_id)
        folder = Path(settings.dir) if settings.dir is not None else run_dir
        folder.mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(
            project=settings.project,
            entity=settings.entity,
            name=settings.name or display_name(run_dir),
            group=settings.group or sweep_group(),
            tags=list(settings.tags),
            mode=settings.mode,  # None: W&B's own (WANDB_MODE, else online)
            dir=str(folder),
            id=run_id,
            resume="allow",
            config=dict(config),
            # console="off": astrai's log lines and tqdm bar stay as they are (W&B would wrap
            # stdout and stderr); no system-metrics sampler thread
            settings=wandb.Settings(console="off", x_disable_stats=True),
        )

    def log(self, step: int, values: dict[str, float]) -> None:
        # rows of one step (metrics, then an evaluation amended onto them) merge into one
        self.run.log(dict(values), step=step)

    def log_samples(self, step: int, tag: str, rows: list[tuple[str, str, float]]) -> None:
        table = wandb.Table(columns=SAMPLE_COLUMNS, data=[list(row) for row in rows])
        self.run.log({tag: table}, step=step)

    def close(self) -> None:
        self.run.finish()
