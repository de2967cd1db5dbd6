"""On-policy distillation's teachers in a run (``distill=opd``, ``docs/distillation.md``): load
them, route each prompt's rows to its teacher, and score the sampled tokens before the strategy
prepares the rollout.

``Distiller.score`` pins the teacher's logprobs of the sampled tokens on the rollout
(``Rollout.teacher_logprobs``; for ``forward_topk`` also its top-k ids and logprobs at each
position) and returns the ``distill/*`` metrics; the strategy reads them
(``Strategy.distill_rewards`` for k1, ``Strategy.distill_loss`` for k3 and forward top-k).

- One teacher (``teacher.path``): it scores every row through the update's own forwards
  (``PassPlan.score_rollout``), so a teacher with the policy's weights reads a KL of exactly 0
  against a π_old the trainer computed (``engine.old_logprobs: recompute``); against the
  sampler's logprobs (the default, what k1's reward and ``distill/reverse_kl`` then read) it
  reads the sampler's rounding (~1e-8 in fp32).
- Several (``teacher.paths``, MOPD): each prompt's teacher is its ``task.teacher_key`` column
  (``task=dataset``); each teacher scores its rows only, in the update's micro-batching of
  those rows, and the per-teacher metrics ``distill/reverse_kl/<name>`` and
  ``distill/token_frac/<name>`` are logged beside the totals.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig
from torch import Tensor, nn

from astrai.algorithms.distillation import DistillSettings
from astrai.algorithms.masked import SumFn, local_sum, masked_global_mean
from astrai.algorithms.pass_plan import NoGradMode, PassPlan
from astrai.config.errors import ConfigError
from astrai.config.role_checks import SINGLE_TEACHER, teacher_sources
from astrai.models.llama import LlamaForCausalLM
from astrai.models.lora import base_fingerprint
from astrai.models.precision import DTYPES
from astrai.models.scoring import response_topk
from astrai.models.tokenizer import Tokenizer
from astrai.rollout.rollout import Rollout
from astrai.tasks.base import ProblemSource
from astrai.tasks.dataset import DatasetTask
from astrai.training.roles import build_teacher
from astrai.training.setup import on_device_while


def distill_settings(cfg: DictConfig) -> DistillSettings | None:
    """``distill``'s keys (None: ``distill=none``, or a config saved before the group)."""
    node = cfg.get("distill")
    if node is None or node.name == "none":
        return None
    return DistillSettings(
        estimator=node.estimator,
        coef=float(node.coef),
        topk=int(node.topk),
        use_task_reward=bool(node.use_task_reward),
        discount=None if node.discount is None else float(node.discount),
        log_prob_min_clamp=node.log_prob_min_clamp,
        loss_max_clamp=node.loss_max_clamp,
    )


@dataclass(frozen=True)
class Teacher:
    """One frozen teacher: its model, the path it was loaded from and its weights' SHA-256."""

    model: nn.Module
    path: str
    sha256: str


@dataclass
class Distiller:
    """The run's teachers and how its rows reach them (see the module docstring).

    Attributes:
        settings: ``distill``'s keys.
        teachers: name -> teacher (one: ``SINGLE_TEACHER``).
        teacher_of: with several teachers, the task's ``teacher_of(prompt text)`` (a dataset
            task's ``task.teacher_key`` column); None with one.
        device: the training device the teachers score on.
        offload: ``teacher.offload``: keep them on the CPU but while they score.
    """

    settings: DistillSettings
    teachers: Mapping[str, Teacher]
    teacher_of: Callable[[str], str] | None
    device: torch.device
    offload: bool

    @property
    def routed(self) -> bool:
        """Several teachers, each row's named by the task."""
        return self.teacher_of is not None

    def describe(self) -> str:
        """The banner's line, e.g. ``distill: k1 (coef 1), the task's reward left out; teacher
        /runs/t (sha256 1a2b3c4d)``."""
        s = self.settings
        task = "added to the task's reward" if s.use_task_reward else "the task's reward left out"
        teachers = ", ".join(
            (f"{name} " if self.routed else "") + f"{t.path} (sha256 {t.sha256[:8]})"
            for name, t in self.teachers.items()
        )
        routing = " by task.teacher_key" if self.routed else ""
        return f"distill: {s.estimator} (coef {s.coef:g}), {task}; teacher{routing}: {teachers}"

    def fingerprint(self) -> dict[str, Any]:
        """``{"teacher": {name: {"path", "sha256"}}}``: a resume with other teacher weights is
        refused (``checkpoints.identity``; the path may change)."""
        return {
            "teacher": {
                name: {"path": teacher.path, "sha256": teacher.sha256}
                for name, teacher in self.teachers.items()
            }
        }

    def score(
        self,
        rollout: Rollout,
        passes: PassPlan,
        sum_over_ranks: SumFn = local_sum,
        no_grad: NoGradMode = torch.inference_mode,
    ) -> dict[str, float]:
        """Pin the teachers' scores of ``rollout`` and return the ``distill/*`` metrics (token
        means over the valid responses' sampled tokens of every rank)."""
        rows = self.rows_by_teacher(rollout)
        if not self.routed:  # one teacher: every row, through the update's own forwards
            scores = self.score_rows(self.teachers[SINGLE_TEACHER], rollout, passes, no_grad)
        else:  # several: each teacher its rows, in order, put back in their places
            scores = self.score_routed(rollout, rows, passes, no_grad)
        rollout.teacher_logprobs, rollout.teacher_topk_ids, rollout.teacher_topk_logprobs = scores
        return self.metrics(rollout, rows, sum_over_ranks)

    def score_rows(
        self, teacher: Teacher, rollout: Rollout, passes: PassPlan, no_grad: NoGradMode
    ) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """``teacher``'s logprobs ``[b, G, R]`` of ``rollout``'s sampled tokens and, for
        ``forward_topk``, its top-k ids and logprobs ``[b, G, R, k]`` (else None)."""
        with on_device_while(teacher.model, self.device, self.offload):
            if self.settings.estimator == "forward_topk":
                return score_topk(teacher.model, rollout, passes, self.settings.topk, no_grad)
            return passes.score_rollout(teacher.model, rollout, no_grad), None, None

    def score_routed(
        self,
        rollout: Rollout,
        rows: Mapping[str, list[int]],
        passes: PassPlan,
        no_grad: NoGradMode,
    ) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """``score_rows`` of each teacher over its own ``rows`` (the update's micro-batching of
        those rows), gathered into the whole rollout's tensors."""
        gathered: list[Tensor | None] = [None, None, None]
        for name, teacher in self.teachers.items():
            if not rows[name]:
                continue
            part = rollout.take(rows[name])
            at = torch.tensor(rows[name], dtype=torch.long, device=rollout.logprobs.device)
            for i, scored in enumerate(
                self.score_rows(teacher, part, passes.through(None), no_grad)
            ):
                if scored is None:
                    continue
                whole = gathered[i]
                if whole is None:
                    whole = scored.new_zeros((rollout.num_prompts, *scored.shape[1:]))
                    gathered[i] = whole
                whole.index_copy_(0, at, scored)
        logprobs, ids, values = gathered
        assert logprobs is not None  # every prompt has a teacher, so some teacher had rows
        return logprobs, ids, values

    def rows_by_teacher(self, rollout: Rollout) -> dict[str, list[int]]:
        """Name -> the prompt rows (``[B]`` indices) its teacher scores."""
        if not self.routed:
            return {SINGLE_TEACHER: list(range(rollout.num_prompts))}
        rows: dict[str, list[int]] = {name: [] for name in self.teachers}
        assert self.teacher_of is not None
        for index, text in enumerate(rollout.prompts):
            name = self.teacher_of(text)
            if name not in rows:
                raise ValueError(
                    f"task.teacher_key names teacher {name!r} for a prompt, not one of "
                    f"teacher.paths ({', '.join(self.teachers)})"
                )
            rows[name].append(index)
        return rows

    def metrics(
        self, rollout: Rollout, rows: Mapping[str, list[int]], sum_over_ranks: SumFn
    ) -> dict[str, float]:
        assert rollout.teacher_logprobs is not None
        mask = rollout.valid_action_mask()
        reverse_kl = rollout.logprobs - rollout.teacher_logprobs  # k1 per token, [B, G, R]
        metrics = {
            "distill/reverse_kl": masked_global_mean(reverse_kl, mask, sum_over_ranks).item(),
            "distill/teacher_logprob": masked_global_mean(
                rollout.teacher_logprobs, mask, sum_over_ranks
            ).item(),
        }
        if not self.routed:
            return metrics
        total = sum_over_ranks(mask.sum().double().reshape(1))
        for name, index in rows.items():
            routed = torch.zeros_like(mask)
            routed[index] = True
            own = mask & routed
            metrics[f"distill/reverse_kl/{name}"] = masked_global_mean(
                reverse_kl, own, sum_over_ranks
            ).item()
            tokens = sum_over_ranks(own.sum().double().reshape(1))
            metrics[f"distill/token_frac/{name}"] = (tokens / total.clamp(min=1)).item()
        return metrics


def score_topk(
    teacher: nn.Module, rollout: Rollout, passes: PassPlan, k: int, no_grad: NoGradMode
) -> tuple[Tensor, Tensor, Tensor]:
    """``teacher``'s logprobs ``[B, G, R]`` of the sampled tokens and its top-``k`` ids and
    logprobs ``[B, G, R, k]``, over the rows of the update's passes (``passes.split``; whole
    width, so every part's tensors line up) or all rows at once."""
    prompt_ids, prompt_mask = rollout.flat_prompts()
    response_ids, response_mask = rollout.flat("response_ids"), rollout.flat("response_mask")
    n = response_ids.shape[0]
    row_sets = (
        [rows for rows, _ in passes.split.passes()]
        if passes.split is not None
        else [torch.arange(n, device=response_ids.device)]
    )
    outputs: list[tuple[Tensor, Tensor, Tensor, Tensor]] = []
    with no_grad():
        for rows in row_sets:
            scored = response_topk(
                teacher, prompt_ids[rows], prompt_mask[rows], response_ids[rows],
                response_mask[rows], k, passes.temperature,
            )  # fmt: skip
            outputs.append((rows, *scored))
    shape = rollout.logprobs.shape
    logprobs = rollout.logprobs.new_zeros((n, shape[-1]))
    ids = torch.zeros((n, shape[-1], k), dtype=torch.long, device=logprobs.device)
    values = logprobs.new_zeros((n, shape[-1], k))
    for rows, sampled, top_ids, top_values in outputs:  # outside inference mode: plain tensors
        logprobs[rows], ids[rows], values[rows] = (
            sampled.clone(),
            top_ids.clone(),
            top_values.clone(),
        )
    return logprobs.view(shape), ids.view(*shape, k), values.view(*shape, k)


def build_distiller(
    cfg: DictConfig,
    task: ProblemSource,
    policy: LlamaForCausalLM,
    tokenizer: Tokenizer,
    device: torch.device,
) -> Distiller | None:
    """The run's distiller (None with ``distill=none``): every teacher of ``teacher.path`` /
    ``teacher.paths`` loaded frozen (``roles.build_teacher``: one line for a teacher that
    cannot be loaded or has another vocabulary), in ``teacher.dtype``, on the CPU when
    offloaded."""
    settings = distill_settings(cfg)
    if settings is None:
        return None
    offload = bool(cfg.teacher.offload)
    teachers: dict[str, Teacher] = {}
    for name, path in teacher_sources(cfg).items():
        model = build_teacher(path, policy, tokenizer, device).to(DTYPES[cfg.teacher.dtype])
        if offload:
            model.to("cpu")
        teachers[name] = Teacher(model, str(Path(path).resolve()), base_fingerprint(model))
    if not teachers:
        raise ConfigError("distill=opd needs a teacher: set teacher.path (or teacher.paths)")
    teacher_of = None
    if cfg.teacher.get("paths") is not None:
        if not isinstance(task, DatasetTask) or task.teacher_key is None:
            raise ConfigError("teacher.paths: set task.teacher_key (task=dataset) to route rows")
        teacher_of = task.teacher_of
    return Distiller(settings, teachers, teacher_of, device, offload)
