"""The ``_target_`` values a module move renamed, old -> new (issue 60: the engines moved into
``rollout.engines``), and the one place they are rewritten.

A run's saved ``config.yaml`` (the run dir's and every checkpoint's) names the classes it was
built with where they were then. Where a saved config is read back, ``current_targets`` rewrites
those names first: ``checkpoint_run.read_run_config`` (``astrai.generate`` sampling a checkpoint
with its run's engine knobs and sampling defaults) and ``plain_config.typed_config``
(``astrai.fit`` on a loaded ``config.yaml``). Resume needs none: it composes ``conf/`` afresh,
and a checkpoint's fingerprint names no module.
"""

from __future__ import annotations

import copy

from omegaconf import DictConfig, ListConfig, ValueNode

MOVED_TARGETS: dict[str, str] = {
    "astrai.rollout.engine.TorchEngine": "astrai.rollout.engines.engine.TorchEngine",
    "astrai.rollout.seeded_vllm.SeededVLLM": "astrai.rollout.engines.seeded_vllm.SeededVLLM",
    "astrai.rollout.sampler.SamplingConfig": "astrai.rollout.engines.sampler.SamplingConfig",
}


def current_targets(cfg: DictConfig) -> DictConfig:
    """A copy of ``cfg`` with every ``_target_`` that ``MOVED_TARGETS`` names (at any depth:
    ``engine``, ``train_type.sampling``) replaced by its new name; interpolations are left
    unresolved."""
    cfg = copy.deepcopy(cfg)
    _rename(cfg)
    return cfg


def _rename(node: DictConfig | ListConfig) -> None:
    if isinstance(node, ListConfig):
        for item in node._iter_ex(resolve=False):
            if isinstance(item, DictConfig | ListConfig):
                _rename(item)
        return
    for key in list(node.keys()):
        child = node._get_node(key)
        if isinstance(child, DictConfig | ListConfig):
            _rename(child)
        elif key == "_target_" and isinstance(child, ValueNode):
            value = child._value()
            if isinstance(value, str) and value in MOVED_TARGETS:
                node[key] = MOVED_TARGETS[value]
