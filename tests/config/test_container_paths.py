"""A Docker job's files, checked on the host where its container will read them: the mounts'
host folders for /data, /models, /outputs (and data/, models/, outputs/), the repo for the rest
of /workspace, nothing for any other path."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from tests.helpers import compose_config
from tests.hf_models import save_tiny_hf_model

from astrai.config.container_paths import host_path
from astrai.config.validate import ConfigError, validate_config
from astrai.paths import REPO_ROOT

REPO = Path("/repo")
MOUNTS = {"data": Path("/srv/data"), "models": Path("/srv/models"), "outputs": REPO / "outputs"}


@pytest.mark.parametrize(
    ("path", "host"),
    [
        ("models/qwen", "/srv/models/qwen"),  # relative = to /workspace
        ("/models/qwen", "/srv/models/qwen"),
        ("/workspace/models/qwen", "/srv/models/qwen"),
        ("./data/../models/qwen/", "/srv/models/qwen"),
        ("/data/train.jsonl", "/srv/data/train.jsonl"),
        ("outputs/exp1/checkpoints/step_4", "/repo/outputs/exp1/checkpoints/step_4"),
        ("examples/word_problems/tiny.jsonl", "/repo/examples/word_problems/tiny.jsonl"),
        ("/workspace/my_data.jsonl", "/repo/my_data.jsonl"),  # the image's copy of the repo
        ("/data", "/srv/data"),
        ("/home/me/qwen", None),  # the container has no such path
        ("/repo/models/qwen", None),  # the host's own path to the repo: not the container's
        ("../elsewhere/x.jsonl", None),  # above /workspace
        ("/datasets/x.jsonl", None),
    ],
)
def test_a_container_path_is_the_mounts_host_file(path: str, host: str | None) -> None:
    assert host_path(path, MOUNTS, REPO) == (None if host is None else Path(host))


def docker_job(tmp_path: Path, *overrides: str) -> list[str]:
    """A job's overrides with its mounts in ``tmp_path`` (``mounts/{data,models,outputs}``)."""
    mounts = [f"infra.mounts.{name}={tmp_path / 'mounts' / name}" for name in ("data", "models")]
    return ["infra=docker", "debug=quick", *mounts, *overrides]


def test_a_model_under_the_models_mount_validates_by_its_container_path(tmp_path: Path) -> None:
    save_tiny_hf_model(tmp_path / "mounts" / "models" / "tiny")
    for path in ("/models/tiny", "models/tiny"):  # both read <infra.mounts.models>/tiny there
        job = compose_config(docker_job(tmp_path, "model=hf", f"model.path={path}"), validate=False)
        validate_config(job, where="container")
        with pytest.raises(ConfigError, match="model.path: no model directory at"):
            validate_config(job, where="host")  # here, models/tiny is the repo's (absent)
    outside = save_tiny_hf_model(tmp_path / "elsewhere")  # a host path: absent in the container
    job = compose_config(docker_job(tmp_path, "model=hf", f"model.path={outside}"), validate=False)
    validate_config(job, where="host")
    with pytest.raises(
        ConfigError, match=re.escape(f"model.path={outside} is not visible in the container")
    ):
        validate_config(job, where="container")


def test_a_jobs_prompt_file_and_reward_are_checked_before_its_container(tmp_path: Path) -> None:
    data = tmp_path / "mounts" / "data"
    data.mkdir(parents=True)
    rows = [{"prompt": f"{i}+1=", "answer": str(i + 1)} for i in range(20)]
    (data / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    task = ["task=dataset", "task.train_path=/data/train.jsonl", "task.eval_fraction=0.5"]
    validate_config(compose_config(docker_job(tmp_path, *task), validate=False), "container")

    (data / "train.jsonl").write_text('{"prompt": "1+1=", "answer": "2"}\nnot json\n')
    with pytest.raises(ConfigError, match=re.escape(f"{data / 'train.jsonl'}: row 2")):
        validate_config(compose_config(docker_job(tmp_path, *task), validate=False), "container")

    # a reward that cannot be imported: refused here, not in each job's container
    job = compose_config(docker_job(tmp_path, "reward._target_=no_such_module.fn"), validate=False)
    with pytest.raises(ConfigError, match="no_such_module"):
        validate_config(job, where="container")


def test_the_shipped_examples_and_a_checkpoint_under_the_outputs_mount_are_visible(
    tmp_path: Path,
) -> None:
    job = compose_config(docker_job(tmp_path, "experiment=word_problems_tiny"), validate=False)
    assert not Path(job.task.train_path).is_absolute()  # examples/...: the image's copy
    assert (REPO_ROOT / job.task.train_path).is_file()
    validate_config(job, where="container")
    resume = docker_job(tmp_path, "ckpt.resume=/outputs/exp1/checkpoints/step_2")
    validate_config(compose_config(resume, validate=False), where="container")
    hidden = docker_job(tmp_path, f"ckpt.resume={tmp_path}/run/checkpoints/step_2")
    with pytest.raises(ConfigError, match=r"ckpt.resume=.* is not visible in the container"):
        validate_config(compose_config(hidden, validate=False), where="container")


def test_a_teacher_under_the_models_mount_validates_by_its_container_path(tmp_path: Path) -> None:
    """``teacher.path`` (distill=opd) is read in the container as the model is: under a mount,
    by its container path; a host path outside the mounts is one line before any container."""
    save_tiny_hf_model(tmp_path / "mounts" / "models" / "tiny")
    model = ["model=hf", "model.path=/models/tiny", "distill=opd"]
    job = compose_config(docker_job(tmp_path, *model, "teacher.path=/models/tiny"), validate=False)
    validate_config(job, where="container")
    outside = save_tiny_hf_model(tmp_path / "elsewhere")
    job = compose_config(docker_job(tmp_path, *model, f"teacher.path={outside}"), validate=False)
    with pytest.raises(
        ConfigError, match=re.escape(f"teacher.path={outside} is not visible in the container")
    ):
        validate_config(job, where="container")
    several = docker_job(tmp_path, *model, f"teacher.paths={{a: {outside}}}")
    with pytest.raises(ConfigError, match=re.escape("teacher.paths.a=")):
        validate_config(compose_config(several, validate=False), where="container")
