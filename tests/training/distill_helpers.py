"""What the on-policy distillation tests (``test_distill_checks.py``, ``test_distill_run.py``)
share: a one-step run's overrides, a teacher checkpoint written from a model's weights, a
config with several teachers, and a small routed dataset of two kinds of rows.

``teacher.paths`` is given the way a user gives it, as a ``teacher.paths={a: X, b: Y}``
override (``with_teacher_paths``).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from omegaconf import DictConfig
from tests.helpers import compose_config

from astrai.checkpoints import io
from astrai.models.llama import LlamaForCausalLM
from astrai.models.tokenizer import CharTokenizer
from astrai.rollout.rollout import Rollout
from astrai.training.build import build_run
from astrai.training.run import Run

# one step of 4 prompts × 4 responses, one optimizer step (minibatches 1, ppo_epochs 1) and
# π_old from the trainer's own forward (engine.old_logprobs=recompute), the forward the single
# teacher scores through: a teacher with the policy's weights then reads exactly what π_old does
ONE_STEP = [
    "debug=quick",
    "trainer.total_steps=1",
    "train_type.prompts_per_step=4",
    "train_type.group_size=4",
    "train_type.minibatches=1",
    "train_type.ppo_epochs=1",
    "engine.old_logprobs=recompute",
    "logger.tensorboard=false",
    "ckpt.every_steps=0",
]


def initial_policy(
    run_dir: Path, overrides: list[str] | None = None
) -> tuple[LlamaForCausalLM, CharTokenizer]:
    """The policy a run of ``ONE_STEP + overrides`` starts from (``build_run`` of its config,
    e.g. ``seed=1`` for other weights of the same shape) and its tokenizer."""
    parts = build_run(compose_config([*ONE_STEP, *(overrides or [])], validate=False), run_dir)
    assert isinstance(parts.tokenizer, CharTokenizer)
    return parts.policy, parts.tokenizer


def write_teacher(policy: LlamaForCausalLM, tokenizer: CharTokenizer, step_dir: Path) -> Path:
    """An astrai checkpoint directory ``step_<N>`` of ``policy`` (what ``load_policy`` reads:
    its config, weights and tokenizer); returns it."""
    step_dir.mkdir(parents=True)
    (step_dir / "config.json").write_text(json.dumps(dataclasses.asdict(policy.config)))
    io.save_module(policy, step_dir / "model.safetensors")
    tokenizer.save(step_dir)
    return step_dir


def with_teacher_paths(
    overrides: list[str], paths: dict[str, str], validate: bool = True
) -> DictConfig:
    """``compose_config`` of ``overrides`` and ``teacher.paths={name: path, ...}`` (validated
    unless ``validate`` is False)."""
    mapping = ", ".join(f"{name}: {path}" for name, path in paths.items())
    return compose_config([*overrides, f"teacher.paths={{{mapping}}}"], validate=validate)


def write_jsonl(path: Path, rows: list[dict[str, str]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


# the two kinds of rows and the teacher each names (task.teacher_key=teacher)
ADD_ROWS = [
    {"prompt": f"{a}+{a + 2}=", "answer": str(2 * a + 2), "teacher": "add"} for a in range(6)
]
REV_ROWS = [
    {"prompt": f"rev {a}{a + 3}=", "answer": f"{a + 3}{a}", "teacher": "rev"} for a in range(6)
]
EVAL_ROWS = [
    {"prompt": "9+9=", "answer": "18", "teacher": "add"},
    {"prompt": "rev 98=", "answer": "89", "teacher": "rev"},
]


def routed_dataset(directory: Path, train_rows: list[dict[str, str]] | None = None) -> list[str]:
    """``task=dataset`` overrides over a train file of ``ADD_ROWS + REV_ROWS`` (or
    ``train_rows``) and an eval file of ``EVAL_ROWS``, each row's teacher in column
    ``teacher``."""
    directory.mkdir(parents=True, exist_ok=True)
    train = write_jsonl(directory / "train.jsonl", train_rows or [*ADD_ROWS, *REV_ROWS])
    evals = write_jsonl(directory / "eval.jsonl", EVAL_ROWS)
    return [
        "task=dataset",
        f"task.train_path={train}",
        f"task.eval_path={evals}",
        "task.teacher_key=teacher",
    ]


def one_step(cfg: DictConfig, run_dir: Path) -> tuple[dict[str, float], Rollout]:
    """One training step of a run of ``cfg`` (``Run.train_step``): its metrics and its
    rollout, as the distiller scored it (its teacher logprobs pinned)."""
    run = Run(cfg, run_dir)
    distiller = run.parts.distiller
    assert distiller is not None
    scored: list[Rollout] = []
    score = distiller.score

    def keep(rollout: Rollout, *args: object, **kwargs: object) -> dict[str, float]:
        scored.append(rollout)
        return score(rollout, *args, **kwargs)  # type: ignore[arg-type]

    distiller.score = keep  # type: ignore[method-assign]
    try:
        metrics = run.train_step()
    finally:
        run.close()
    assert len(scored) == 1
    return metrics, scored[0]
