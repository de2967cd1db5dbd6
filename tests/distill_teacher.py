"""A distillation teacher for the ``distill=opd`` tests: a Hugging Face directory of the tiny
model whose weights are not the student's (``teacher.path`` reads it as it reads any)."""

from __future__ import annotations

from pathlib import Path

import torch
from tests.helpers import compose_config

from astrai.models.pretrained import save_policy_dir
from astrai.training.build import build_run

# the teacher's final-norm weights × this: every logit 8× the student's, a far sharper
# distribution than a random-init policy's near-uniform one, so the reverse KL is well above 0
SHARPEN = 8.0


def write_teacher(overrides: list[str], directory: Path) -> Path:
    """The initial policy of a run of ``overrides`` (``build_run``: the student's own start),
    its logits made ``SHARPEN``× sharper, written as a Hugging Face directory; returns it."""
    parts = build_run(compose_config(overrides, validate=False), directory / "built")
    with torch.no_grad():
        parts.policy.model.norm.weight.mul_(SHARPEN)
    teacher = directory / "teacher"
    teacher.mkdir(parents=True)
    save_policy_dir(parts.policy, parts.tokenizer, teacher)
    return teacher
