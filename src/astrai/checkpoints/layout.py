"""Where checkpoint files live and which ones a complete checkpoint must hold."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from astrai.files import TMP_MARKER  # temporaries are named ".step_<N>.tmp-<pid>-<random>"

CHECKPOINTS_DIR = "checkpoints"
STEP_PREFIX = "step_"

MODEL_FILE = "model.safetensors"  # policy weights
MODEL_CONFIG_FILE = "config.json"  # policy hyperparameters (Hugging Face LlamaConfig names)
TOKENIZER_FILE = "tokenizer.json"
OPTIMIZER_FILE = "optimizer.pt"
SCHEDULER_FILE = "scheduler.pt"
TRAINER_STATE_FILE = "trainer_state.json"  # step, samples, data position, version, RNG states
RUN_CONFIG_FILE = "config.yaml"  # the resolved Hydra config
VALUE_MODEL_FILE = "value_model.pt"  # online_ppo: critic weights
VALUE_OPTIMIZER_FILE = "value_optimizer.pt"  # online_ppo: critic optimizer state
VALUE_SCHEDULER_FILE = "value_scheduler.pt"  # online_ppo: critic learning-rate schedule
# The frozen reference (the initial policy), stored once per run next to the step directories.
REFERENCE_FILE = "reference.safetensors"
# model.lora runs: the adapters in PEFT's format (PeftModel.from_pretrained loads a checkpoint
# directory onto the base model) in place of model.safetensors; no reference file (the
# reference is the base with the adapters off). Listed in ``EXTRA_FILES_KEY``.
ADAPTER_CONFIG_FILE = "adapter_config.json"
ADAPTER_MODEL_FILE = "adapter_model.safetensors"
ADAPTER_FILES = (ADAPTER_CONFIG_FILE, ADAPTER_MODEL_FILE)
# trainer_state.json of a LoRA run: {"lora": settings, "base": {"path", "sha256"}}
ADAPTERS_KEY = "adapters"
# the rollouts sampled for the next steps, not yet trained (train_type.max_policy_lag > 0), one
# list per rank; listed in ``EXTRA_FILES_KEY`` when there are any
IN_FLIGHT_FILE = "in_flight.pt"
IN_FLIGHT_KEY = "in_flight"  # trainer_state.json: how many rollouts each rank had in flight

COMMON_FILES = (
    MODEL_FILE,
    MODEL_CONFIG_FILE,
    TOKENIZER_FILE,
    OPTIMIZER_FILE,
    SCHEDULER_FILE,
    TRAINER_STATE_FILE,
    RUN_CONFIG_FILE,
)
CRITIC_FILES = (VALUE_MODEL_FILE, VALUE_OPTIMIZER_FILE, VALUE_SCHEDULER_FILE)
# ``trainer_state.json`` lists the files its algorithm added (``Strategy.checkpoint_files``)
# under this key since format 2; a format-1 checkpoint's are known by its train_type
EXTRA_FILES_KEY = "extra_files"
FORMAT_1_EXTRA_FILES = {"online_ppo": (VALUE_MODEL_FILE, VALUE_OPTIMIZER_FILE)}

# an incomplete step_<N> that a save of step N found in its way: "step_<N>.incomplete-<time>"
ASIDE_MARKER = ".incomplete-"

_STEP_DIR = re.compile(rf"^{STEP_PREFIX}(\d+)$")


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be used; the message names the directory or file."""


def step_dir_name(step: int) -> str:
    return f"{STEP_PREFIX}{step}"


def parse_step(name: str) -> int | None:
    """``"step_12"`` -> 12; anything else (temporaries included) -> None."""
    match = _STEP_DIR.match(name)
    return int(match.group(1)) if match else None


def holds_adapters(extra_files: Sequence[str]) -> bool:
    """Whether a checkpoint with these ``extra_files`` is a LoRA run's (adapters, no full
    weights and no reference file)."""
    return ADAPTER_MODEL_FILE in extra_files


def required_files(extra_files: Sequence[str] = ()) -> tuple[str, ...]:
    """Files a complete checkpoint holds: every run's, then its algorithm's ``extra_files``;
    a LoRA run's (``holds_adapters``) hold its adapters instead of ``model.safetensors``."""
    common: tuple[str, ...] = COMMON_FILES
    if holds_adapters(extra_files):
        common = tuple(name for name in COMMON_FILES if name != MODEL_FILE)
    return common + tuple(extra_files)


def recorded_extra_files(state: Mapping[str, Any]) -> tuple[str, ...]:
    """The algorithm's files a checkpoint's ``trainer_state.json`` (``state``) says it holds;
    for a format-1 checkpoint, which did not list them, its train_type's."""
    listed = state.get(EXTRA_FILES_KEY)
    if isinstance(listed, list) and all(isinstance(name, str) for name in listed):
        return tuple(listed)
    return FORMAT_1_EXTRA_FILES.get(str(state.get("train_type")), ())


def missing_files(path: Path, names: Sequence[str]) -> list[str]:
    """Those of ``names`` that are not regular files in ``path``."""
    if isinstance(names, str):  # one name is no list of names (its letters would be)
        raise TypeError(f"missing_files wants a sequence of file names, not {names!r}")
    return [name for name in names if not (path / name).is_file()]


def checkpoints_root(path: str | Path) -> Path:
    """A run dir or its ``checkpoints/`` folder -> the ``checkpoints/`` folder."""
    path = Path(path)
    if path.name != CHECKPOINTS_DIR and (path / CHECKPOINTS_DIR).is_dir():
        return path / CHECKPOINTS_DIR
    return path


@dataclass(frozen=True)
class CheckpointInfo:
    """One ``step_<N>`` directory under a checkpoints root."""

    step: int
    path: Path

    def train_type(self) -> str | None:
        """The train_type recorded in ``trainer_state.json``; None when unreadable."""
        try:
            state = json.loads((self.path / TRAINER_STATE_FILE).read_text())
        except (OSError, ValueError):
            return None
        value = state.get("train_type") if isinstance(state, dict) else None
        return value if isinstance(value, str) else None


def list_checkpoints(root: str | Path) -> list[CheckpointInfo]:
    """Every ``step_<N>`` directory under ``root`` sorted by step, complete or not
    (``completeness.scan_checkpoints`` says which); temporaries are never listed."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = []
    for child in root.iterdir():
        step = parse_step(child.name)
        if step is not None and child.is_dir():
            found.append(CheckpointInfo(step, child))
    return sorted(found, key=lambda info: info.step)


def stale_temporaries(root: str | Path) -> list[Path]:
    """Leftovers of saves that never finished (a crash or a second signal mid-save)."""
    root = Path(root)
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.name.startswith(".") and TMP_MARKER in p.name)


def set_aside(root: str | Path) -> list[Path]:
    """Incomplete ``step_<N>`` directories that a later save of step N moved aside
    (``io.set_aside_incomplete``); never read, never deleted by astrai."""
    root = Path(root)
    if not root.is_dir():
        return []
    return sorted(
        p for p in root.iterdir() if p.name.startswith(STEP_PREFIX) and ASIDE_MARKER in p.name
    )
