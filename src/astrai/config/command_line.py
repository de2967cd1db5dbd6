"""What ``python train.py``'s command line says before Hydra composes a config: the argv a
torchrun rank runs with, the overrides of a plain single run or sweep (which ``astrai.train``
checks up front) and an explicit ``hydra.run.dir``."""

from __future__ import annotations

from pathlib import Path

# what a process that shares a run dir without owning it adds: no ``.hydra/``, its log on stdout
NOT_THE_OWNER = ["hydra.output_subdir=null", "hydra/job_logging=stdout"]


def torchrun_arguments(argv: list[str], environ: dict[str, str]) -> list[str] | None:
    """Under torchrun every rank runs ``train.py`` and composes its own config: they must share
    one run dir (``${now:...}`` differs between ranks), and only rank 0 writes ``.hydra/`` and
    ``train.log``. The same for the launcher of a node other than node 0 (``infra.node_rank``
    on its command line): the nodes share the run dir, node 0's rank 0 owns it. Returns the
    argv to use, or None when the run dir is missing."""
    if node_rank(argv[1:]) != 0:
        return [*argv, *NOT_THE_OWNER]
    if int(environ.get("WORLD_SIZE", "1")) <= 1:
        return argv
    if not any(arg.startswith("hydra.run.dir=") for arg in argv[1:]):
        return None
    if environ.get("RANK", "0") != "0":
        return [*argv, *NOT_THE_OWNER]
    return argv


def node_rank(overrides: list[str]) -> int:
    """The ``infra.node_rank`` a command line gives (the last one; 0 when none, or one that is
    not a whole number: validation names it once the config is composed). It differs between
    the nodes of a job, so it is given there, not in a config file."""
    rank = 0
    for override in overrides:
        key, _, value = override.partition("=")
        if key.lstrip("+") == "infra.node_rank":
            rank = int(value) if value.strip().isdigit() else 0
    return rank


def single_run_overrides(argv: list[str], multirun: bool = False) -> list[str] | None:
    """The overrides of a plain single run (with ``multirun``: of a plain ``-m`` sweep), which
    ``astrai.train`` checks before Hydra starts the job; None for anything else Hydra handles on
    its own (the other mode, ``--cfg``, ``--info``, another config, shell completion, ...) or a
    command line Hydra's parser rejects."""
    from hydra._internal.utils import get_args_parser

    try:
        args, unknown = get_args_parser().parse_known_args(argv[1:])
    except SystemExit:  # argparse's usage error: Hydra reports it
        return None
    other_modes = (
        args.multirun != multirun,
        args.help,
        args.hydra_help,
        args.cfg,
        args.info,
        args.shell_completion,
        args.config_path,
        args.config_name,
        args.config_dir,
        args.experimental_rerun,
    )
    if unknown or any(other_modes):
        return None
    return list(args.overrides)


def explicit_run_dir(overrides: list[str]) -> Path | None:
    """A single run's ``hydra.run.dir=DIR`` given literally (no interpolation), else None."""
    for override in overrides:
        key, _, value = override.partition("=")
        if key == "hydra.run.dir" and value and "${" not in value:
            return Path(value)
    return None
