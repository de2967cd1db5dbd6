"""Weights & Biases as a ``RunLogger`` sink (``logger=wandb``): every metric at ``step=`` the RL
step, the resolved config as the run's config, sample completions as a ``wandb.Table``.

The W&B run id is kept in ``<run dir>/wandb_run_id``. A resume whose W&B run holds exactly the
rows up to the checkpoint (the usual stop: a checkpoint at the last step logged) continues it:
``wandb.init(id=..., resume="allow")``. A W&B run's steps only increase, so one that holds steps
after the checkpoint (a crash, ``kill -9``, after it) cannot take the resumed run's rows for
them; nor can it take an evaluation added to the checkpoint's step (``amend``). Then a new W&B
run starts, named as the first, that replays ``metrics.jsonl``'s rows up to the checkpoint
before going on, so its history is ``metrics.jsonl``'s; its notes name the run it continues,
which is left as it was. W&B's own ways (``resume_from``, a rewind, and ``fork_from``) are
preview features a W&B server must enable for the account, and an offline run cannot use
them (docs/metrics.md).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

import wandb
from omegaconf import DictConfig

from astrai.metrics.logger_start import LoggerStartError, one_line
from astrai.metrics.run_ids import display_name, read_run_id, sweep_group, write_run_id
from astrai.metrics.writers import ResumePoint

log = logging.getLogger(__name__)

RUN_ID_FILE = "wandb_run_id"
SAMPLE_COLUMNS: list[str | int] = ["prompt", "response", "reward"]


def created_paths(settings: DictConfig, run_dir: Path) -> list[Path]:
    """What starting a W&B run may create: the run id file and W&B's folder (``<dir>/wandb``,
    and ``dir`` itself)."""
    folder = Path(settings.dir) if settings.dir is not None else run_dir
    return [run_dir / RUN_ID_FILE, folder, folder / "wandb"]


class WandbSink:
    """One W&B run of one astrai run (rank 0).

    Args:
        settings: ``logger.wandb`` (project, entity, name, tags, group, mode, dir).
        config: the resolved run config, recorded as the W&B run's config.
        run_dir: the astrai run dir (default W&B ``dir``, where the run id is kept).
        resume: where a (re)start picks up: continue the stored W&B run when it holds
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
        self.settings = settings
        self.config = dict(config)
        self.run_dir = run_dir
        self.id_path = run_dir / RUN_ID_FILE
        stored = read_run_id(self.id_path) if resume is not None else None
        # the last step the continued run holds from an earlier start: it takes no row at or
        # before it (None: a run this start began)
        self.held_step: int | None = None
        if stored is not None and resume is not None and resume.trackers_hold_exactly_the_rows:
            self.run = self._init(stored, resume="allow")
            self.held_step = resume.step
        else:
            rows = resume.rows if resume is not None else []
            self.run = self._start_new(stored, rows)

    def _init(
        self, run_id: str, resume: Literal["allow"] | None = None, notes: str | None = None
    ) -> wandb.Run:
        folder = Path(self.settings.dir) if self.settings.dir is not None else self.run_dir
        folder.mkdir(parents=True, exist_ok=True)
        return wandb.init(
            project=self.settings.project,
            entity=self.settings.entity,
            name=self.settings.name or display_name(self.run_dir),
            group=self.settings.group or sweep_group(),
            tags=list(self.settings.tags),
            notes=notes,
            mode=self.settings.mode,  # None: W&B's own (WANDB_MODE, else online)
            dir=str(folder),
            id=run_id,
            resume=resume,
            config=self.config,
            # console="off": astrai's log lines and tqdm bar stay as they are (W&B would wrap
            # stdout and stderr); no system-metrics sampler thread
            settings=wandb.Settings(console="off", x_disable_stats=True),
        )

    def _start_new(self, earlier: str | None, rows: list[dict[str, float]]) -> wandb.Run:
        """A new W&B run holding ``rows`` (replayed); ``earlier``: the W&B run it continues.
        Its id is kept only once the rows are in it: a start killed half-way leaves the
        earlier id, and the next resume starts over."""
        run_id = uuid.uuid4().hex[:16]  # W&B ids: letters and digits
        notes = None
        if earlier is not None and rows:
            last = int(rows[-1]["step"])
            notes = f"continues W&B run {earlier} from step {last} (astrai resume)"
            log.info(
                "W&B: new run %s continues %s, which holds steps after the checkpoint at "
                "step %d: replaying %d rows of metrics.jsonl",
                run_id,
                earlier,
                last,
                len(rows),
            )
        run = self._init(run_id, notes=notes)
        for row in rows:
            run.log({k: v for k, v in row.items() if k != "step"}, step=int(row["step"]))
        write_run_id(self.id_path, run_id)
        return run

    def log(self, step: int, values: dict[str, float]) -> None:
        # rows of one step (metrics, then an evaluation amended onto them) merge into one
        self.run.log(dict(values), step=step)

    def amend(self, step: int, values: dict[str, float], rows: list[dict[str, float]]) -> None:
        """Into this start's own row, as a log; into a step the continued run holds already
        (the checkpoint's, whose evaluation a stop abandoned), by a new run replaying
        ``rows``: W&B drops a row at a step it has passed."""
        if self.held_step is None or step > self.held_step:
            self.log(step, values)
            return
        earlier = self.run.id
        self.run.finish()
        try:
            self.run = self._start_new(earlier, rows)
        except Exception as err:
            raise LoggerStartError(f"logger=wandb cannot start: {one_line(err)}") from err
        self.held_step = None

    def log_samples(self, step: int, tag: str, rows: list[tuple[str, str, float]]) -> None:
        table = wandb.Table(columns=SAMPLE_COLUMNS, data=[list(row) for row in rows])
        self.run.log({tag: table}, step=step)

    def close(self) -> None:
        self.run.finish()
