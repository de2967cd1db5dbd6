"""Where the repository's own files are (its root and the Hydra config dir ``conf/``), and why
a user's path cannot be reached.

astrai is installed in editable mode from the checkout (``make install``, the Docker image), so
``conf/`` sits two levels above this package's source directory.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
CONFIG_DIR = str(REPO_ROOT / "conf")  # str: what hydra.main / initialize_config_dir take


def missing_reason(path: Path) -> str:
    """Why ``path`` (which ``exists()`` calls missing) cannot be reached, to follow it in a
    message: ``is a symlink loop`` (``ELOOP``, also for a loop in a parent folder), ``is a
    broken symlink (to <target>)``, or ``does not exist``."""
    try:
        os.stat(path)
    except OSError as err:
        if err.errno == errno.ELOOP:
            return "is a symlink loop"
    if path.is_symlink():
        return f"is a broken symlink (to {os.readlink(path)})"
    return "does not exist"
