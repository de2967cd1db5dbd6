"""``python -m astrai.checkpoints list|verify|prune`` on real checkpoints of a tiny run."""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tests.checkpoints.checkpoint_dirs import write_checkpoint
from tests.helpers import compose_config, run_main

from astrai.checkpoints.__main__ import main
from astrai.training.run import Run

QUICK = [
    "debug=quick",  # conf/debug/quick.yaml; the lines below differ from it
    "trainer.total_steps=3",
    "ckpt.every_steps=1",
    "ckpt.keep_last=3",
]


def python_m(*args: str | Path) -> subprocess.CompletedProcess:
    """``python -m astrai.checkpoints args`` in a child process: the real entry point."""
    return subprocess.run(
        [sys.executable, "-m", "astrai.checkpoints", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def cli(*args: str | Path) -> subprocess.CompletedProcess:
    """The same command in this process (``main``, what ``python -m`` runs)."""
    return run_main(main, [str(a) for a in args])


@pytest.fixture(scope="module")
def ppo_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("ppo")
    Run(compose_config(["train_type=online_ppo", *QUICK]), run_dir).fit()
    return run_dir


def test_list_shows_every_checkpoint_complete(ppo_run: Path) -> None:
    result = cli("list", ppo_run)
    assert result.returncode == 0, result.stderr
    rows = [line.split() for line in result.stdout.splitlines()[1:]]
    assert [(r[0], r[1], r[4]) for r in rows] == [
        ("1", "online_ppo", "complete"),
        ("2", "online_ppo", "complete"),
        ("3", "online_ppo", "complete"),
    ]


def test_verify_accepts_complete_and_names_missing_critic_files(ppo_run: Path) -> None:
    ok = cli("verify", ppo_run)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert ok.stdout.count("OK ") == 3
    step = ppo_run / "checkpoints" / "step_1"
    (step / "value_model.pt").unlink()
    (step / "value_optimizer.pt").unlink()
    bad = cli("verify", step)
    assert bad.returncode == 1
    assert "FAIL" in bad.stdout
    assert "missing value_model.pt, value_optimizer.pt" in bad.stdout
    # a whole-run verify fails too, naming the same checkpoint
    assert cli("verify", ppo_run).returncode == 1


def test_verify_names_a_truncated_file(tmp_path: Path) -> None:
    Run(compose_config(QUICK), tmp_path).fit()
    optimizer = tmp_path / "checkpoints" / "step_3" / "optimizer.pt"
    optimizer.write_bytes(optimizer.read_bytes()[:50])
    result = cli("verify", tmp_path / "checkpoints" / "step_3")
    assert result.returncode == 1
    assert f"{optimizer}: unreadable torch file" in result.stdout


def test_prune_is_a_dry_run_unless_forced(tmp_path: Path) -> None:
    Run(compose_config(QUICK), tmp_path).fit()
    root = tmp_path / "checkpoints"
    dry = cli("prune", tmp_path, "--keep", "1")
    assert dry.returncode == 0
    assert "would delete" in dry.stdout and "--force" in dry.stdout
    assert sorted(p.name for p in root.glob("step_*")) == ["step_1", "step_2", "step_3"]
    forced = cli("prune", tmp_path, "--keep", "1", "--force")
    assert forced.returncode == 0
    assert sorted(p.name for p in root.glob("step_*")) == ["step_3"]


def test_bad_usage_exits_2(tmp_path: Path) -> None:
    missing = python_m("list", tmp_path / "nope")
    assert missing.returncode == 2
    assert missing.stderr == f"astrai.checkpoints: {tmp_path / 'nope'}: no such directory\n"
    assert cli("prune", tmp_path, "--keep", "0").returncode == 2
    assert cli("list").returncode == 2  # argparse: the directory is required


@pytest.mark.slow  # ~6 s: a real 2-job sweep
def test_list_and_prune_walk_a_sweep_dirs_jobs(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    for job in ("0", "1"):
        Run(compose_config(QUICK), sweep / job).fit()
    (sweep / "multirun.yaml").write_text("{}\n")
    result = cli("list", sweep)
    assert result.returncode == 0, result.stderr
    blocks = result.stdout.split("\n\n")
    assert [b.splitlines()[0] for b in blocks] == [f"{sweep / '0'}:", f"{sweep / '1'}:"]
    for job, block in zip(("0", "1"), blocks, strict=True):
        rows = [line.split() for line in block.splitlines()[2:]]
        assert [(r[0], r[4], r[5]) for r in rows] == [
            (str(n), "complete", str(sweep / job / "checkpoints" / f"step_{n}")) for n in (1, 2, 3)
        ]
    forced = cli("prune", sweep, "--keep", "1", "--force")
    assert forced.returncode == 0, forced.stderr
    for job in ("0", "1"):
        assert [p.name for p in (sweep / job / "checkpoints").glob("step_*")] == ["step_3"]


def test_list_of_a_dir_without_checkpoints_exits_1(tmp_path: Path) -> None:
    (tmp_path / "0").mkdir()
    result = cli("list", tmp_path)
    assert result.returncode == 1
    assert result.stdout == "" and result.stderr == f"no checkpoints under {tmp_path}\n"


def test_retention_in_a_run_keeps_incomplete_dirs_and_counts_complete_ones(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``ckpt.keep_last=1`` in a real run next to an incomplete step_9 (a restore that never
    finished) and an incomplete step_3 in the way of the run's own step 3: step_9 used to be
    the one kept, and step_3 was deleted by the save."""
    config = compose_config([*QUICK, "ckpt.keep_last=1"])
    Run(config, tmp_path).fit(until=1)
    root = tmp_path / "checkpoints"
    for name in ("step_9", "step_3"):
        (root / name).mkdir()
        shutil.copy(root / "step_1" / "model.safetensors", root / name)
    with caplog.at_level(logging.WARNING):
        resumed = Run(config, tmp_path)  # ckpt.resume=auto skips both
        assert resumed.started.state.step == 1
        resumed.fit()
    assert "skipped newer incomplete checkpoint(s) step_3 (incomplete: missing " in caplog.text
    assert sorted(p.name for p in root.glob("step_*")) == [
        "step_3",
        *[p.name for p in root.glob("step_3.incomplete-*")],
        "step_9",
    ]
    [aside] = root.glob("step_3.incomplete-*")
    assert [p.name for p in aside.iterdir()] == ["model.safetensors"]
    assert f"moved aside to {aside.name}" in caplog.text
    rows = {line.split()[0]: line for line in cli("list", tmp_path).stdout.splitlines()[1:]}
    assert " complete " in rows["3"] and " incomplete: missing config.json" in rows["9"]
    assert rows["aside"].startswith(f"   aside  {aside}")


def test_verify_walks_a_sweep_dirs_jobs_as_list_does(tmp_path: Path) -> None:
    """Issue 30, item 7: ``verify <sweep dir>`` said "no checkpoints"."""
    sweep = tmp_path / "sweep"
    for job in ("0", "1"):
        for step in (1, 2):
            write_checkpoint(sweep / job / "checkpoints", step)
    (sweep / "multirun.yaml").write_text("{}\n")
    assert cli("verify", sweep).returncode == 0
    optimizer = sweep / "1" / "checkpoints" / "step_2" / "optimizer.pt"
    optimizer.write_bytes(optimizer.read_bytes()[:100])
    result = cli("verify", sweep)
    assert result.returncode == 1, result.stdout + result.stderr
    blocks = result.stdout.split("\n\n")
    assert [b.splitlines()[0] for b in blocks] == [f"{sweep / '0'}:", f"{sweep / '1'}:"]
    lines = result.stdout.splitlines()
    verdicts = [line.split()[:2] for line in lines if line.startswith(("OK ", "FAIL "))]
    assert verdicts == [
        ["OK", str(sweep / "0" / "checkpoints" / "step_1")],
        ["OK", str(sweep / "0" / "checkpoints" / "step_2")],
        ["OK", str(sweep / "1" / "checkpoints" / "step_1")],
        ["FAIL", str(sweep / "1" / "checkpoints" / "step_2")],
    ]
    assert f"{optimizer}: unreadable torch file" in result.stdout


# --- a symbolic link step_<N>, a closed pipe (issue 45) -------------------------------------


def _run_with_a_linked_step(tmp_path: Path) -> tuple[Path, Path]:
    """(checkpoints root with step_8, step_9 and step_5 -> a checkpoint elsewhere, the
    target)."""
    root = tmp_path / "run" / "checkpoints"
    for step in (8, 9):
        write_checkpoint(root, step)
    target = write_checkpoint(tmp_path / "elsewhere", 5)
    (root / "step_5").symlink_to(target, target_is_directory=True)
    return root, target


def test_prune_removes_a_linked_step_as_the_link_alone(tmp_path: Path) -> None:
    """``prune --force`` used to fail on it ("Cannot call rmtree on a symbolic link"): the link
    is the run's entry, its target someone else's files."""
    root, target = _run_with_a_linked_step(tmp_path)
    files = sorted(p.name for p in target.iterdir())
    dry = cli("prune", root.parent, "--keep", "1")
    assert dry.returncode == 0 and f"would delete {root / 'step_5'} (a link; {target} kept)" in (
        dry.stdout
    )
    forced = cli("prune", root.parent, "--keep", "1", "--force")
    assert forced.returncode == 0, forced.stderr
    assert forced.stdout.splitlines()[:2] == [
        f"deleted {root / 'step_5'} (a link; {target} kept)",
        f"deleted {root / 'step_8'}",
    ]
    assert sorted(p.name for p in root.iterdir()) == ["reference.safetensors", "step_9"]
    assert sorted(p.name for p in target.iterdir()) == files  # the target untouched


def test_retention_removes_a_linked_step_as_the_link_alone(tmp_path: Path) -> None:
    """``ckpt.keep_last`` (``io.prune_checkpoints`` after each save) used to stop the run."""
    from astrai.checkpoints import io

    root, target = _run_with_a_linked_step(tmp_path)
    assert io.prune_checkpoints(root, keep_last=2) == [root / "step_5"]
    assert not (root / "step_5").exists() and (target / "trainer_state.json").is_file()


def test_a_closed_pipe_ends_list_quietly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``list DIR | head -2``: the reader gone, ``run`` exits 141 (128 + SIGPIPE) without a
    traceback (in-process: stdout is a pipe whose reading end is closed)."""
    import os

    from astrai.checkpoints.__main__ import run
    from astrai.cli_errors import BROKEN_PIPE_EXIT

    root, _ = _run_with_a_linked_step(tmp_path)
    read_end, write_end = os.pipe()
    os.close(read_end)
    stdout = os.fdopen(write_end, "w")
    monkeypatch.setattr(sys, "stdout", stdout)
    try:
        assert run(["list", str(root)]) == BROKEN_PIPE_EXIT
    finally:
        monkeypatch.undo()
        stdout.close()


@pytest.mark.slow  # a real process: ~3 s of imports
def test_list_piped_into_a_reader_that_stops(tmp_path: Path) -> None:
    root, _ = _run_with_a_linked_step(tmp_path)
    child = subprocess.Popen(
        [sys.executable, "-m", "astrai.checkpoints", "list", str(root)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert child.stdout is not None and child.stderr is not None
    child.stdout.close()  # as ``head`` does once it has its lines
    stderr = child.stderr.read().decode()
    assert child.wait(timeout=120) == 141 and stderr == ""


def test_a_refused_delete_is_one_line_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the machine refuses (here a rename, as a read-only run dir would) is one line naming
    the path, exit 2, not a traceback."""
    import errno

    from astrai.checkpoints import io

    root, _ = _run_with_a_linked_step(tmp_path)

    def refuse(source: Path, _: Path) -> None:
        raise PermissionError(errno.EACCES, "Permission denied", str(source))

    monkeypatch.setattr(io.os, "rename", refuse)
    result = cli("prune", root, "--keep", "1", "--force")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"astrai.checkpoints: {root / 'step_8'}: Permission denied"
    ]
