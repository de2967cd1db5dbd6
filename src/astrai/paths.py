"""Where astrai's own files are (the Hydra config dir, the checkout's root), and why a user's
path cannot be reached.

The configs ship inside the package as ``astrai/conf``: in a checkout (``make install``'s
editable install, the Docker image) that is a symlink to the repository's ``conf/``, their one
home, so ``CONFIG_DIR`` resolves to ``conf/`` itself; a wheel (``pip install .``) holds a copy.
``REPO_ROOT`` is the checkout's root, meaningful only in a checkout (``make smollm2``'s message,
the Docker launcher, which mounts the checkout).
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
# str: what hydra.main / initialize_config_dir take; resolved, so messages name conf/ in a checkout
CONFIG_DIR = str((Path(__file__).resolve().parent / "conf").resolve())


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
