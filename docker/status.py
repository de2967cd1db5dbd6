"""``make docker-status``: the astrai trainer containers and the named jobs, in two tables.

    python docker/status.py [OUTPUTS_DIR ...]      (default: outputs)

Containers: your trainer containers of the ``astrai`` compose project (labelled ``astrai.user=<your
uid>`` by the launcher: other users' on a shared engine are not listed), running or kept (a named
job's container stays after it exits, with its exit code and logs), with its job name and run dir.
Named jobs: each run dir under ``OUTPUTS_DIR`` that the Docker launcher marked (``docker-job.json``,
written for ``hydra.launcher.job_name``), with its state, last step of ``trainer.total_steps``, last
``eval/accuracy`` and latest complete checkpoint. The state:

* ``running``: its container runs;
* ``done``: ``summary.json`` says it reached ``total_steps``;
* ``stopped (<why>)``: it ended early and wrote a checkpoint (``docker stop``, SIGTERM,
  ``trainer.max_duration``); the same command resumes it;
* ``failed (exit N)``: its container exited non-zero without a newer summary;
* ``interrupted``: no summary newer than its metrics (killed, or the engine went down); the
  same command resumes it from its latest checkpoint.

When the engine does not answer, the jobs are still listed from disk, with one line saying so.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml
from hydra_plugins.astrai_docker_launcher._docker_cli import DockerCallError, docker_output
from hydra_plugins.astrai_docker_launcher._environment import (
    JOB_FILE,
    JOB_LABEL,
    RUN_DIR_LABEL,
    USER_LABEL,
)

from astrai.checkpoints.completeness import complete_checkpoints
from astrai.metrics.writers import METRICS_FILE, SUMMARY_FILE, read_metrics


def trainer_filters(uid: int) -> tuple[str, ...]:
    """``docker ps`` filters for user ``uid``'s astrai trainer containers."""
    return (
        "--filter",
        "label=com.docker.compose.project=astrai",
        "--filter",
        "label=com.docker.compose.service=trainer",
        "--filter",
        f"label={USER_LABEL}={uid}",
    )


@dataclass(frozen=True)
class Container:
    name: str
    state: str  # running, exited, ...
    exit_code: int
    job: str
    run_dir: str


class EngineError(Exception):
    """The Docker engine did not answer; the message says why, on one line."""


def _docker(*args: str) -> str:
    try:
        return docker_output("docker", *args)
    except DockerCallError as err:
        raise EngineError(str(err)) from err


def containers() -> list[Container]:
    """This user's astrai trainer containers (running or kept), newest first."""
    ids = _docker("ps", "-aq", *trainer_filters(os.getuid())).split()
    if not ids:
        return []
    found = []
    for record in json.loads(_docker("inspect", *ids)):
        labels = record.get("Config", {}).get("Labels") or {}
        state = record.get("State", {})
        found.append(
            Container(
                name=str(record.get("Name", "")).lstrip("/"),
                state=str(state.get("Status", "?")),
                exit_code=int(state.get("ExitCode", 0)),
                job=labels.get(JOB_LABEL, "-"),
                run_dir=labels.get(RUN_DIR_LABEL, "-"),
            )
        )
    return found


@dataclass(frozen=True)
class JobStatus:
    name: str
    state: str
    step: str  # "12/40"
    accuracy: str  # "0.250 (step 10)"
    checkpoint: str  # "step_10"
    run_dir: Path


def _total_steps(run_dir: Path) -> int | None:
    """``trainer.total_steps`` of the run's resolved config (written when it starts)."""
    try:
        config = yaml.safe_load((run_dir / "config.yaml").read_text())
        return int(config["trainer"]["total_steps"])
    except (OSError, ValueError, TypeError, KeyError, yaml.YAMLError):
        return None


def _summary(run_dir: Path) -> dict | None:
    try:
        summary = json.loads((run_dir / SUMMARY_FILE).read_text())
    except (OSError, ValueError):
        return None
    return summary if isinstance(summary, dict) else None


def job_status(name: str, run_dir: Path, container: Container | None) -> JobStatus:
    """One named job's row, from its run dir and its container (None: no container kept)."""
    rows = read_metrics(run_dir / METRICS_FILE)
    step = int(rows[-1]["step"]) if rows else 0
    total = _total_steps(run_dir)
    evals = [row for row in rows if not math.isnan(row.get("eval/accuracy", math.nan))]
    accuracy = f"{evals[-1]['eval/accuracy']:.3f} (step {int(evals[-1]['step'])})" if evals else "-"
    summary = _summary(run_dir)
    current = summary is not None and int(summary.get("step", -1)) >= step
    if container is not None and container.state in ("running", "restarting", "created"):
        state = container.state
    elif current and summary is not None and summary.get("stopped"):
        state = f"stopped ({summary['stopped']})"
    elif current and total is not None and step >= total:
        state = "done"
    elif container is not None and container.exit_code != 0:
        state = f"failed (exit {container.exit_code})"
    else:
        state = "interrupted"
    complete = complete_checkpoints(run_dir)  # the one completeness check (resume's, list's)
    return JobStatus(
        name=name,
        state=state,
        step=f"{step}/{total}" if total is not None else str(step),
        accuracy=accuracy,
        checkpoint=complete[-1].path.name if complete else "-",
        run_dir=run_dir,
    )


def named_runs(outputs: Path) -> list[tuple[str, Path, str | None]]:
    """(job, run dir, container name) of each run dir under ``outputs`` with the launcher's
    marker: ``exp1`` for a single job, ``exp1/0`` ... for the jobs of a named sweep."""
    found = []
    for marker in sorted([*outputs.glob(f"*/{JOB_FILE}"), *outputs.glob(f"*/*/{JOB_FILE}")]):
        try:
            record = json.loads(marker.read_text())
        except (OSError, ValueError):
            record = {}
        container = record.get("container") if isinstance(record, dict) else None
        name = marker.parent.relative_to(outputs).as_posix()
        found.append((name, marker.parent, container if isinstance(container, str) else None))
    return found


def _table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    return [
        "  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="make docker-status", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("outputs", nargs="*", type=Path, default=[Path("outputs")])
    args = parser.parse_args(argv)

    try:
        found = containers()
        engine_note = None
    except EngineError as err:
        found, engine_note = [], f"Docker engine not reachable ({err}): containers unknown"
    print("containers:")
    if engine_note:
        print(f"  {engine_note}")
    elif not found:
        print("  no astrai trainer container")
    else:
        rows = [
            (
                c.name,
                c.state if c.state == "running" else f"{c.state} ({c.exit_code})",
                c.job,
                c.run_dir,
            )
            for c in found
        ]
        print("\n".join(_table(("CONTAINER", "STATE", "JOB", "RUN DIR"), rows)))

    by_name = {c.name: c for c in found}
    for outputs in args.outputs:
        print(f"named jobs in {outputs}/:")
        runs = named_runs(outputs)
        if not runs:
            print("  none (make docker-train NAME=<name> starts one)")
            continue
        rows = []
        for name, run_dir, container in runs:
            status = job_status(name, run_dir, by_name.get(container or ""))
            state = status.state
            if engine_note and state == "interrupted":  # or running: only the engine knows
                state = "unknown (engine not reachable)"
            row = (name, state, status.step, status.accuracy, status.checkpoint, str(run_dir))
            rows.append(row)
        header = ("JOB", "STATE", "STEP", "EVAL/ACCURACY", "CHECKPOINT", "RUN DIR")
        print("\n".join(_table(header, rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
