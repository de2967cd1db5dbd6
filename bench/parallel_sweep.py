"""A 2-job sweep run one job after another vs side by side, measured in one run.

The same jobs (``seed=0,1`` of ``experiment=quick``, cut to ``--steps``) as two multiruns of
``python train.py -m``: sequential (Hydra's basic launcher) and parallel (``hydra/launcher=joblib
hydra.launcher.n_jobs=2``), both with ``infra.num_threads=1``. Wall times are whole commands
(start-up, the loky workers' start included); the training time is the jobs' own
``summary.json`` ``wall_time_s``. The last line is ``ratio: <parallel ÷ sequential>``.

    python bench/parallel_sweep.py [--steps 60] [--seeds 0,1] [--repeats 1] [--keep DIR]
    python bench/parallel_sweep.py --quick   # 2 steps a job: checks the script (CI)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TRAIN = Path(__file__).resolve().parents[1] / "train.py"
MODES = {
    "sequential": [],
    "parallel": ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"],
}


def run_sweep(sweep_dir: Path, steps: int, seeds: str, extra: list[str]) -> float:
    """Wall seconds of one ``python train.py -m`` sweep into ``sweep_dir``."""
    args = [
        "-m",
        "experiment=quick",
        f"seed={seeds}",
        f"trainer.total_steps={steps}",
        "trainer.progress_bar=false",
        "infra.num_threads=1",
        f"hydra.sweep.dir={sweep_dir}",
        *extra,
    ]
    # infra.num_threads pins the threads, not an inherited OMP_NUM_THREADS
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    start = time.perf_counter()
    result = subprocess.run(
        [sys.executable, str(TRAIN), *args], cwd=sweep_dir.parent, env=env, capture_output=True
    )
    wall = time.perf_counter() - start
    if result.returncode != 0:
        sys.exit(f"sweep failed ({sweep_dir.name}):\n{result.stderr.decode()[-3000:]}")
    return wall


def training_seconds(sweep_dir: Path) -> list[float]:
    """Each job's own training time (``summary.json`` ``wall_time_s``), in job order."""
    jobs = sorted((p for p in sweep_dir.iterdir() if p.is_dir()), key=lambda p: int(p.name))
    return [json.loads((job / "summary.json").read_text())["wall_time_s"] for job in jobs]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60, help="trainer.total_steps of each job")
    parser.add_argument("--seeds", default="0,1", help="the swept seeds (one job each)")
    parser.add_argument("--repeats", type=int, default=1, help="sweeps per mode, alternating")
    parser.add_argument("--keep", type=Path, help="keep the sweeps under DIR (default: a temp dir)")
    parser.add_argument("--quick", action="store_true", help="2 steps a job: checks the script")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.repeats = 2, 1
    print(f"cores: {os.cpu_count()}, jobs: seed={args.seeds}, {args.steps} steps each")
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        best = dict.fromkeys(MODES, float("inf"))
        for repeat in range(args.repeats):  # alternating: both modes see the same machine load
            for mode, extra in MODES.items():
                sweep_dir = root / f"{mode}_{repeat}"
                wall = run_sweep(sweep_dir, args.steps, args.seeds, extra)
                jobs = ", ".join(f"{s:.1f}s" for s in training_seconds(sweep_dir))
                print(f"{mode:>10}: {wall:.1f}s wall (jobs' training: {jobs})")
                best[mode] = min(best[mode], wall)
    print(f"ratio: {best['parallel'] / best['sequential']:.2f}")


if __name__ == "__main__":
    main()
