"""The files a Docker job reads, seen from the host before its container starts.

In the container the working directory is ``/workspace``, the image's copy of the repo (as of
``make docker-build``), and the host folders ``infra.mounts.data`` / ``models`` / ``outputs`` are
mounted at ``/data``, ``/models``, ``/outputs`` (``/workspace/data`` ... link to them). So
``model.path=models/qwen`` and ``model.path=/models/qwen`` both read ``<infra.mounts.models>/qwen``
on the host, whatever ``infra.mounts.models`` is; a host path outside the mounts and the repo
(``/home/me/qwen``) does not exist in the container at all. The Docker launcher validates each
job on the host with its input paths translated this way (``container_view``), so a missing or
bad file, or one the container cannot see, is one line before any container starts.
"""

from __future__ import annotations

import copy
import posixpath
from pathlib import Path, PurePosixPath

from omegaconf import DictConfig, ListConfig, OmegaConf

from astrai.paths import REPO_ROOT

WORKSPACE = "/workspace"  # the image's WORKDIR: the repo's copy (docker/Dockerfile)
MOUNT_NAMES = ("data", "models", "outputs")  # each mounted at /<name> (docker/compose.yaml)
# ckpt.resume's values that name no path
RESUME_WORDS = ("auto", "null", "none", "")


class NotInContainer(ValueError):
    """A job's input path that its container cannot see."""


def mount_source(value: str, repo_root: Path) -> Path:
    """An ``infra.mounts.*`` value as the host folder mounted: relative = to the repo root."""
    path = Path(value).expanduser()
    return path if path.is_absolute() else (repo_root / path).resolve()


def host_path(path: str, mounts: dict[str, Path], repo_root: Path) -> Path | None:
    """The host file the container reads as ``path`` (relative = to ``/workspace``): under a
    mount, that mount's host folder; elsewhere under ``/workspace``, the repo (the image's
    copy of it); None for any other place, which the container does not have."""
    resolved = PurePosixPath(posixpath.normpath(posixpath.join(WORKSPACE, path)))
    parts = resolved.parts[1:]  # without the leading "/"
    if parts and parts[0] == WORKSPACE.strip("/"):
        parts = parts[1:]
        if not parts or parts[0] not in MOUNT_NAMES:
            return repo_root.joinpath(*parts)
    if parts and parts[0] in MOUNT_NAMES:
        return mounts[parts[0]].joinpath(*parts[1:])
    return None


def input_path_keys(cfg: DictConfig) -> list[str]:
    """The dotted keys of ``cfg`` that name a file or folder a job reads: the model directory,
    the dataset files, a reward model (also as a weighted reward's term), a checkpoint to
    resume from and the teachers (``teacher.path``, each of ``teacher.paths``)."""
    keys = ["model.path", "task.train_path", "task.eval_path", "reward.path", "ckpt.resume"]
    terms = OmegaConf.select(cfg, "reward.terms")
    if isinstance(terms, ListConfig):
        keys += [f"reward.terms.{i}.path" for i in range(len(terms))]
    keys.append("teacher.path")
    teachers = OmegaConf.select(cfg, "teacher.paths")
    if isinstance(teachers, DictConfig):
        keys += [f"teacher.paths.{name!s}" for name in teachers.keys()]
    return keys


def container_view(cfg: DictConfig, repo_root: Path = REPO_ROOT) -> DictConfig:
    """A copy of ``cfg`` whose input paths (``input_path_keys``) are the host files the
    container will read; ``NotInContainer`` naming the key for one it cannot see."""
    view = copy.deepcopy(cfg)
    mounts = {name: mount_source(str(cfg.infra.mounts[name]), repo_root) for name in MOUNT_NAMES}
    for key in input_path_keys(cfg):
        value = OmegaConf.select(cfg, key, throw_on_missing=False)  # ??? reads as None
        if not isinstance(value, str):
            continue  # absent, null or missing: the checks that follow say what is wrong
        if key == "ckpt.resume" and value.strip().lower() in RESUME_WORDS:
            continue
        host = host_path(value, mounts, repo_root)
        if host is None:
            raise NotInContainer(
                f"{key}={value} is not visible in the container, which sees the repo at "
                f"{WORKSPACE} and infra.mounts.data / models / outputs at /data, /models, "
                "/outputs: put it under one of those folders"
            )
        OmegaConf.update(view, key, str(host), merge=False)
    return view
