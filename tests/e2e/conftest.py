"""Fixtures of the end-to-end tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def smollm2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SmolLM2-135M-Instruct as astrai loads it: ``make smollm2``'s directory (``make
    test-slow`` converts it first), else a conversion of the packaged GGUF file, once per test
    process."""
    from astrai.models.gguf_import import convert_gguf, packaged_smollm2_gguf
    from astrai.paths import REPO_ROOT

    converted = REPO_ROOT / "models" / "smollm2"
    if (converted / "config.json").is_file():
        return converted
    return convert_gguf(packaged_smollm2_gguf(), tmp_path_factory.mktemp("models") / "smollm2")
