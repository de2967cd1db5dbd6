"""Where the repository's own files are: its root and the Hydra config dir ``conf/``.

astrai is installed in editable mode from the checkout (``make install``, the Docker image), so
``conf/`` sits two levels above this package's source directory.
"""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
CONFIG_DIR = str(REPO_ROOT / "conf")  # str: what hydra.main / initialize_config_dir take
