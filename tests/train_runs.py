"""``python train.py`` for the end-to-end tests: as a real process (``run_train``) or in this
interpreter (``run_train_in_process``, the same ``main`` with a patched ``sys.argv``, as
torchtune's recipe tests do: no torch import per row); a quick preset, a run's last logged step
and checkpoint weights, and the embedded addition task written as JSONL files (``task=dataset``
tests)."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import torch

from astrai.tasks import AdditionTask

REPO = Path(__file__).resolve().parents[1]
TRAIN = str(REPO / "train.py")
QUICK = [
    "debug=quick",  # conf/debug/quick.yaml
]
# rollouts one update behind the policy; engine=torch's auto choices then recompute π_old and
# truncate the token weights, the correction lag requires (astrai.policy_lag, docs/async.md)
LAG_1 = ["train_type.max_policy_lag=1"]


def run_train(
    args: list[str],
    cwd: Path,
    timeout: int = 120,
    threads: int | None = 1,
    extra_env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess:
    """``python train.py args`` in ``cwd``; ``threads=None`` keeps torch's default (as
    ``make train`` runs), an int pins ``OMP_NUM_THREADS`` (quick runs on a shared machine);
    ``extra_env`` is added to (or replaces entries of) this process's environment."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "HYDRA_FULL_ERROR")}
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    env.update(extra_env or {})
    return subprocess.run(
        [sys.executable, TRAIN, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@contextlib.contextmanager
def _process_state(cwd: Path, argv: list[str], env: dict[str, str]) -> Iterator[None]:
    """What ``main`` changes in a process, put back afterwards: the working directory,
    ``sys.argv``, the environment, the stop-signal handlers, the root logger's handlers and
    level (Hydra's job logging replaces them), Hydra's job config (a later Trainer would take
    its job's overrides for its TensorBoard run name) and torch's intra-op threads."""
    from hydra.core.hydra_config import HydraConfig

    saved_cwd, saved_argv, saved_env = os.getcwd(), sys.argv, dict(os.environ)
    hydra_config = HydraConfig.instance().cfg
    handlers = {signum: signal.getsignal(signum) for signum in (signal.SIGTERM, signal.SIGINT)}
    root = logging.getLogger()
    root_handlers, root_level = list(root.handlers), root.level
    threads = torch.get_num_threads()
    os.chdir(cwd)
    sys.argv = argv
    os.environ.update(env)
    try:
        yield
    finally:
        for handler in [h for h in root.handlers if h not in root_handlers]:
            root.removeHandler(handler)
            handler.close()
        root.handlers[:] = root_handlers
        root.setLevel(root_level)
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
        os.environ.clear()
        os.environ.update(saved_env)
        sys.argv = saved_argv
        os.chdir(saved_cwd)
        torch.set_num_threads(threads)
        HydraConfig.instance().cfg = hydra_config


@contextlib.contextmanager
def _importable(folder: Path | None) -> Iterator[None]:
    """``folder`` first on ``sys.path`` (``PYTHONPATH=folder`` of a real process); afterwards the
    modules imported from it are forgotten, so the next row imports its own version."""
    if folder is None:
        yield
        return
    sys.path.insert(0, str(folder))
    try:
        yield
    finally:
        sys.path.remove(str(folder))
        for name, module in list(sys.modules.items()):
            if str(getattr(module, "__file__", None) or "").startswith(str(folder)):
                del sys.modules[name]


def run_train_in_process(
    args: list[str],
    cwd: Path,
    extra_env: dict[str, str] | None = None,
    import_path: Path | None = None,
) -> subprocess.CompletedProcess:
    """``python train.py args`` in ``cwd``, run by ``astrai.train.main`` in this interpreter:
    its exit status, stdout and stderr as ``subprocess.run`` gives them. ``import_path``: a
    folder of user modules (a custom reward), importable during the run. For rows whose run
    refuses to start or is short: a run's own state (signal handlers, logging, threads, the
    working directory, the user's modules) is put back afterwards; a job that starts worker
    processes or waits for a signal belongs in ``run_train``."""
    from astrai.train import main

    out, err = io.StringIO(), io.StringIO()
    code: int = 0
    env = {"HYDRA_FULL_ERROR": "", **(extra_env or {})}
    with _process_state(cwd, [TRAIN, *args], env), _importable(import_path):
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main()
            except SystemExit as exit_:
                code = (
                    exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
                )
    return subprocess.CompletedProcess([TRAIN, *args], code, out.getvalue(), err.getvalue())


def last_logged_step(run_dir: Path) -> int:
    """The step of the last complete row of ``run_dir/metrics.jsonl``; -1 for none."""
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return -1
    lines = path.read_text().splitlines()
    try:
        return json.loads(lines[-1])["step"] if lines else -1
    except ValueError:
        return -1  # a line being written


def checkpoint_weights(path: Path) -> dict:
    """The tensors of a ``model.safetensors`` file."""
    from safetensors.torch import load_file

    return load_file(str(path))


def write_addition_files(directory: Path) -> tuple[Path, Path]:
    """The embedded addition task as two JSONL files: every training problem, and the held-out
    ones in ``eval_problems`` order (the same split)."""
    task = AdditionTask()
    held_out = task.eval_prompts(1000)
    every = [f"{a}+{b}=" for a in range(10) for b in range(10)]
    train = [p for p in every if p not in set(held_out)]
    paths = directory / "train.jsonl", directory / "eval.jsonl"
    for path, prompts in zip(paths, (train, held_out), strict=True):
        rows = [{"prompt": p, "answer": task.answer(p)} for p in prompts]
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return paths
