"""The hash of the code a trainer image runs, so that an image built before a code change is not
run as if it held the change.

The image copies the repo (``COPY . /workspace``, less ``.dockerignore``'s entries) and runs
that copy: a reward, a task or a ``conf/`` file changed after ``make docker-build`` is validated
on the host but not what the container imports. ``make docker-build`` bakes this hash into the
image (label ``astrai.source_hash``); the preflight computes it again from the checkout and
refuses an image whose label differs.

The hash covers what runs: every Python file, everything under ``conf/`` and ``pyproject.toml``,
of the build context, by relative path and content. Docs, data and examples do not count (a
change there needs no rebuild to run correctly, or is mounted).

    python docker/source_hash.py [REPO]     # prints the hash (default: this script's repo)
"""

from __future__ import annotations

import hashlib
import os
import sys
from fnmatch import fnmatchcase
from pathlib import Path

LABEL = "astrai.source_hash"
UNKNOWN = "unknown"  # the label of an image built without the hash (not through make)
CODE_SUFFIXES = (".py",)
CODE_DIRS = ("conf",)
CODE_FILES = ("pyproject.toml",)


def ignore_patterns(root: Path) -> list[str]:
    """``.dockerignore``'s patterns (comments and blank lines dropped, ``./`` and trailing
    ``/`` stripped). Negations (``!``) are not supported: none is used here."""
    path = root / ".dockerignore"
    if not path.is_file():
        return []
    patterns = []
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            patterns.append(line.removeprefix("./").rstrip("/"))
    return patterns


def is_ignored(relative: str, patterns: list[str]) -> bool:
    """Whether the build context leaves out ``relative`` (a ``/``-separated path): a pattern
    matches it or one of its parent folders; ``**/`` matches any number of folders."""
    parts = relative.split("/")
    for end in range(1, len(parts) + 1):
        prefix = "/".join(parts[:end])
        for pattern in patterns:
            if pattern.startswith("**/"):
                tail = pattern[3:]
                segments = prefix.split("/")
                if any(fnmatchcase("/".join(segments[i:]), tail) for i in range(len(segments))):
                    return True
            elif fnmatchcase(prefix, pattern):
                return True
    return False


def is_code(relative: str) -> bool:
    return (
        relative.endswith(CODE_SUFFIXES)
        or relative in CODE_FILES
        or relative.split("/", 1)[0] in CODE_DIRS
    )


def code_files(root: Path) -> list[str]:
    """The build context's code files (``is_code``), relative, sorted."""
    patterns = ignore_patterns(root)
    found = []
    for folder, subfolders, files in os.walk(root):
        base = Path(folder).relative_to(root).as_posix()
        prefix = "" if base == "." else base + "/"
        # left-out folders are not walked (.venv, data, models: many files, none copied)
        subfolders[:] = [d for d in subfolders if not is_ignored(prefix + d, patterns)]
        for name in files:
            relative = prefix + name
            if is_code(relative) and not is_ignored(relative, patterns):
                found.append(relative)
    return sorted(found)


def source_hash(root: Path) -> str:
    """sha256 over the code files' relative paths and contents, in path order."""
    digest = hashlib.sha256()
    for relative in code_files(root):
        content = (root / relative).read_bytes()
        digest.update(f"{relative}\0{len(content)}\0".encode())
        digest.update(content)
    return digest.hexdigest()


if __name__ == "__main__":
    repo = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1]
    print(source_hash(repo))
