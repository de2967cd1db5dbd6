"""``python -m astrai.checkpoints {list,verify,prune} DIR``: inspect and tidy checkpoints.

DIR is a run dir, its ``checkpoints/`` folder, a sweep dir, whose numbered job dirs are taken
one by one, or (for ``verify``) one ``step_<N>`` directory. ``list`` says of each checkpoint
``complete`` or ``incomplete: <reasons>`` (``completeness.checkpoint_problems``, the check resume
and retention use); ``prune`` counts and deletes complete checkpoints only and reports each
incomplete one as skipped. Exit status: 0 on success, 1 when ``list`` finds no checkpoints or
``verify`` finds a missing or unreadable file, 2 on bad usage or when ``verify`` finds a
checkpoint that resume would refuse (its step against its directory name and
``trainer.total_steps``), with the line resume prints. ``verify`` runs the checks resume runs
on what the files hold (in-flight rollouts, a LoRA checkpoint's adapter config and base), so
its OK means resume starts. ``prune`` removes a ``step_<N>`` that is a symbolic link as the
link alone (its target is left alone). A closed pipe (``list DIR | head``) ends it quietly,
exit 141.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from astrai.checkpoints.completeness import scan_checkpoints
from astrai.checkpoints.io import prune_checkpoints, remove_stale_temporaries
from astrai.checkpoints.layout import (
    CHECKPOINTS_DIR,
    CheckpointError,
    CheckpointInfo,
    checkpoints_root,
    list_checkpoints,
    parse_step,
    set_aside,
    stale_temporaries,
)
from astrai.checkpoints.verify import verify_checkpoint
from astrai.cli_errors import EXPECTED_ERRORS, report_error, silence_stdout

PROG = "astrai.checkpoints"


def _size_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 2**20


def _targets(directory: Path) -> list[CheckpointInfo]:
    step = parse_step(directory.name)
    if step is not None and directory.is_dir():
        return [CheckpointInfo(step, directory)]
    return list_checkpoints(checkpoints_root(directory))


def sweep_job_dirs(directory: Path) -> list[Path]:
    """A sweep dir's job dirs (numbered sub-folders with ``checkpoints/``), by job number; empty
    for a run dir or a ``checkpoints/`` folder."""
    root = checkpoints_root(directory)
    if not directory.is_dir() or root.name == CHECKPOINTS_DIR or _has_checkpoints(root):
        return []
    jobs = [
        path
        for path in directory.iterdir()
        if path.name.isdigit() and (path / CHECKPOINTS_DIR).is_dir()
    ]
    return sorted(jobs, key=lambda path: int(path.name))


def _list_run(root: Path) -> None:
    print(f"{'step':>8}  {'train_type':<12} {'size':>11}  status  path")
    for status in scan_checkpoints(root):
        info = status.info
        train_type = info.train_type() or "?"
        size = _size_mb(info.path)
        print(f"{info.step:>8}  {train_type:<12} {size:8.2f} MB  {status.describe()}  {info.path}")
    for tmp in stale_temporaries(root):
        print(f"   stale  {tmp}  (unfinished save; ignored, removed by the next save)")
    for aside in set_aside(root):
        print(f"   aside  {aside}  (incomplete, moved aside by a save of its step; never used)")


def _has_checkpoints(root: Path) -> bool:
    return bool(list_checkpoints(root) or stale_temporaries(root) or set_aside(root))


def _roots(directory: Path) -> tuple[list[Path], bool]:
    """(checkpoints folders to walk, whether ``directory`` is a sweep): a sweep's jobs', else
    ``directory``'s own; only those holding a checkpoint or a leftover."""
    jobs = sweep_job_dirs(directory)
    roots = [checkpoints_root(job) for job in jobs] or [checkpoints_root(directory)]
    return [root for root in roots if _has_checkpoints(root)], bool(jobs)


def cmd_list(directory: Path) -> int:
    roots, sweep = _roots(directory)
    if not roots:
        print(f"no checkpoints under {directory}", file=sys.stderr)
        return 1
    for n, root in enumerate(roots):
        if sweep:  # a sweep: one block per job, under its job dir
            if n:
                print()
            print(f"{root.parent}:")
        _list_run(root)
    return 0


def cmd_verify(directory: Path, train_type: str | None) -> int:
    roots, sweep = _roots(directory) if parse_step(directory.name) is None else ([], False)
    blocks = [list_checkpoints(root) for root in roots] if sweep else [_targets(directory)]
    if not any(blocks):
        print(f"no checkpoints under {directory}", file=sys.stderr)
        return 1
    failed, refused = 0, 0
    for n, targets in enumerate(blocks):
        if sweep:  # one block per job, as ``list`` prints a sweep
            if n:
                print()
            print(f"{roots[n].parent}:")
        for info in targets:
            ok, refusal = _verify_one(info, train_type)
            failed += not ok
            refused += refusal
    return 2 if refused else 1 if failed else 0


def _verify_one(info: CheckpointInfo, train_type: str | None) -> tuple[bool, bool]:
    """Print one checkpoint's verdict; (ok, refused by the identity check)."""
    verdict = verify_checkpoint(info, train_type)
    label = verdict.train_type or "?"
    if verdict.ok:
        print(f"OK    {info.path} ({label})")
    for problem in [*verdict.problems, *filter(None, [verdict.refusal])]:
        print(f"FAIL  {info.path} ({label}): {problem}")
    if verdict.refusal is not None:  # the line resume would print, on stderr as train.py
        print(f"astrai: checkpoint error: {verdict.refusal}", file=sys.stderr)
    print(f"      fingerprint: {_fingerprint_line(verdict.fingerprint)}")
    return verdict.ok, verdict.refusal is not None


def _fingerprint_line(fingerprint: dict | None) -> str:
    if fingerprint is None:
        return "none (written before astrai recorded one; resume warns and checks less)"
    return json.dumps(fingerprint, sort_keys=True, separators=(",", ":"))


def cmd_prune(directory: Path, keep: int, force: bool) -> int:
    jobs = sweep_job_dirs(directory)
    for job in jobs:  # a sweep: each job keeps its own newest ``keep``
        print(f"{job}:")
        _prune_run(checkpoints_root(job), keep, force)
    if not jobs:
        _prune_run(checkpoints_root(directory), keep, force)
    return 0


def _prune_run(root: Path, keep: int, force: bool) -> None:
    statuses = scan_checkpoints(root)
    # a symbolic link step_<N> is pruned as the link alone: its target is not the run's
    links = {s.info.path: s.info.path.resolve() for s in statuses if s.info.path.is_symlink()}
    doomed = prune_checkpoints(root, keep, dry_run=not force, statuses=statuses)
    verb = "deleted" if force else "would delete"
    for path in doomed:
        target = links.get(path)
        print(f"{verb} {path}" if target is None else f"{verb} {path} (a link; {target} kept)")
    skipped = [status for status in statuses if not status.complete]
    for status in skipped:  # never counted, never deleted: its files may be all there is
        print(f"skipped {status.info.path} ({status.describe()})")
    stale = remove_stale_temporaries(root) if force else stale_temporaries(root)
    for path in stale:
        print(f"{verb} {path} (stale temporary)")
    if not force and (doomed or stale):
        print("dry run: pass --force to delete")
    if not doomed and not stale:
        print(f"nothing to prune under {root} (keeping {keep} complete)")


def main(argv: list[str] | None = None) -> int:
    """The command's exit status; an expected failure (a path the machine refuses, a
    ``CheckpointError``) is one line on stderr and 2, never a traceback. A closed stdout
    (``BrokenPipeError``) is left to ``run``."""
    try:
        return _command(argv)
    except BrokenPipeError:
        raise
    except (*EXPECTED_ERRORS, CheckpointError) as err:  # type: ignore[misc]  # a tuple of classes
        return report_error(PROG, err)


def _command(argv: list[str] | None) -> int:
    parser = argparse.ArgumentParser(prog="python -m astrai.checkpoints", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    p_list = commands.add_parser(
        "list", help="checkpoints of a run (or of each job of a sweep), with completeness"
    )
    p_list.add_argument("dir", type=Path)
    p_verify = commands.add_parser(
        "verify", help="complete, every file readable and finite (of a run or of each job)"
    )
    p_verify.add_argument("dir", type=Path)
    p_verify.add_argument(
        "--train-type", help="check for this train_type instead of the recorded one"
    )
    p_prune = commands.add_parser(
        "prune", help="keep the newest N of a run or of each job (dry run unless --force)"
    )
    p_prune.add_argument("dir", type=Path)
    p_prune.add_argument("--keep", type=int, required=True)
    p_prune.add_argument("--force", action="store_true")
    args = parser.parse_args(argv)
    if not args.dir.exists():
        print(f"astrai.checkpoints: {args.dir}: no such directory", file=sys.stderr)
        return 2
    if args.command == "list":
        return cmd_list(args.dir)
    if args.command == "verify":
        return cmd_verify(args.dir, args.train_type)
    if args.keep < 1:
        print("astrai.checkpoints: --keep must be >= 1", file=sys.stderr)
        return 2
    return cmd_prune(args.dir, args.keep, args.force)


def run(argv: list[str] | None = None) -> int:
    """``main``, quiet when the reader of stdout goes away (``list DIR | head -2``), as Unix
    tools are: exit 141 (128 + SIGPIPE, what a shell reports for a tool the pipe killed)."""
    try:
        code = main(argv)
        sys.stdout.flush()  # a closed pipe shows here for output still buffered
    except BrokenPipeError:
        return silence_stdout()
    return code


if __name__ == "__main__":
    sys.exit(run())
