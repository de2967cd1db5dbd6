"""The run's task as its config builds it, with what the start says about it.

``task=dataset`` settles two things here, once per process, after validation has refused what
cannot run: with ``task.filter_overlong_prompts`` the rows whose prompt is longer than the run
allows (``max_prompt_tokens``) are dropped, logged as one line ``task: dropped K of N prompts
longer than L tokens``; rows whose own system turn kept ``task.system_prompt`` out are counted
in one line too. The trainer and ``astrai.generate --task`` build the run's task here, so both
see the same rows.
"""

from __future__ import annotations

import logging

from hydra.utils import instantiate
from omegaconf import DictConfig

from astrai.models.tokenizer import Tokenizer
from astrai.tasks.base import ProblemSource
from astrai.tasks.dataset import DatasetTask

log = logging.getLogger(__name__)


def max_prompt_tokens(cfg: DictConfig, max_positions: int | None = None) -> int:
    """The longest prompt a run of ``cfg`` can sample from, in tokens as its tokenizer encodes
    it (BOS or chat template included): the model's ``max_position_embeddings`` (or
    ``max_positions``) less ``train_type.sampling.max_new_tokens``, so every response has room
    for its whole length."""
    if max_positions is None:
        if "path" in cfg.model.keys():  # model=hf: its config.json says
            from astrai.models.pretrained import read_hf_config

            max_positions = read_hf_config(cfg.model.path).max_position_embeddings
        else:
            max_positions = int(cfg.model.max_position_embeddings)
    return max_positions - int(cfg.train_type.sampling.max_new_tokens)


def build_task(task_node: DictConfig, tokenizer: Tokenizer, max_tokens: int) -> ProblemSource:
    """``task_node`` (a run's ``task``) instantiated; a dataset's over-long rows dropped when
    ``task.filter_overlong_prompts`` asks for it, and its start-up lines logged.

    Args:
        task_node: the run's validated ``task`` config.
        tokenizer: the policy's, which encodes the prompts as sampling will.
        max_tokens: the run's ``max_prompt_tokens``.
    """
    task: ProblemSource = instantiate(task_node)
    if not isinstance(task, DatasetTask):
        return task
    if task.filter_overlong_prompts:
        report = task.drop_overlong(tokenizer.encode_prompt, max_tokens)
        dropped = report.dropped_train + report.dropped_eval
        log.log(logging.WARNING if dropped else logging.INFO, report.line())
    line = task.system_prompt_line()
    if line is not None:
        log.info(line)
    return task
