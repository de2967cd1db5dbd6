"""TensorBoard dashboards of a run: the custom-scalars layout and the HParams record.

Both are written through the run's own writer (``<run dir>/tb``), never through
``SummaryWriter.add_hparams``, which would put them into a timestamped sub-run: with
``tensorboard --logdir <sweep dir>`` every job of a sweep is then exactly one run, and the HParams
tab compares the jobs.

**Which hyperparameters** a job records (``run_hparams``):

1. every task override of the job (Hydra's ``hydra.overrides.task``, also in
   ``.hydra/overrides.yaml``), keyed by its dotted key without ``+``/``++``; deletions (``~key``)
   and ``hydra.*`` keys are left out. A leaf takes its resolved, typed value from the config; a
   config-group override (``train_type=online_ppo``, ``+experiment=ppo_sweep``) keeps the chosen
   option's name;
2. plus ``KEY_KNOBS`` (the algorithm, model and task choices, seed, learning rate, the shared RL
   knobs and, where the algorithm has them, the PPO knobs), so runs that were not swept over the
   same keys still line up.

Values are typed as the HParams plugin requires: bools stay bools, ints and floats become numbers,
strings stay strings, ``None`` becomes ``"null"`` and lists or mappings their YAML-ish ``str``.

**Which metrics** (``HPARAM_METRICS``): the HParams plugin shows the last logged value of each
metric's scalar tag in the job's run, so the final metrics are the run's own scalars; no copies
are written.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager

from omegaconf import DictConfig, ListConfig, OmegaConf
from tensorboard.compat.proto.summary_pb2 import Summary
from tensorboard.plugins.hparams import api_pb2, plugin_data_pb2
from torch.utils.tensorboard import summary as tb_summary

HParamValue = bool | float | str

# final metrics compared in the HParams tab (those a run emits; value/* is PPO only)
HPARAM_METRICS: tuple[str, ...] = (
    "eval/accuracy",
    "rollout/reward_mean",
    "value/explained_variance",
    "time/elapsed_s",
)

# config-group choices and leaf knobs recorded for every run (when the run's config has them)
KEY_GROUPS: tuple[str, ...] = ("train_type", "model", "task", "critic")
KEY_KNOBS: tuple[str, ...] = (
    "seed",
    "trainer.total_steps",
    "train_type.optimizer.lr",
    "train_type.prompts_per_step",
    "train_type.group_size",
    "train_type.clip_eps",
    "train_type.kl_coef",
    "train_type.kl_estimator",
    "train_type.ppo_gamma",
    "train_type.ppo_gae_lambda",
    "train_type.ppo_vf_coef",
)

# custom-scalars layout: one category, one multi-line chart per group of related metrics
LAYOUT_CATEGORY = "astrai"
LAYOUT_CHARTS: dict[str, tuple[str, ...]] = {
    "reward & accuracy": (
        "rollout/reward_mean",
        "rollout/accuracy",
        "eval/accuracy",
        "eval/reward_mean",
    ),
    "policy: loss, clipfrac, approx KL": ("loss/policy", "policy/clipfrac", "policy/approx_kl"),
    "value: loss, explained variance": ("loss/value", "value/explained_variance"),
    "KL to reference: k1, k2, k3": ("kl/k1", "kl/k2", "kl/k3"),
}


def hparam_value(value: object) -> HParamValue:
    """One config value as the HParams plugin takes it (bool, number or string)."""
    if isinstance(value, bool | str):
        return value
    if isinstance(value, int | float):
        return float(value)
    if value is None:
        return "null"
    if isinstance(value, DictConfig | ListConfig):
        value = OmegaConf.to_container(value, resolve=True)
    return str(value)


def _override_item(override: str) -> tuple[str, str] | None:
    """``"+a.b=1"`` -> ``("a.b", "1")``; None for deletions, ``hydra.*`` keys and bare keys."""
    if override.startswith("~") or "=" not in override:
        return None
    key, raw = override.split("=", 1)
    key = key.lstrip("+")
    key = key.split("@", 1)[0]  # "group@package=option": the group names the choice
    if key == "hydra" or key.startswith(("hydra.", "hydra/")):
        return None
    return key, raw


def run_hparams(
    cfg: DictConfig, overrides: Sequence[str] = (), choices: Mapping[str, object] | None = None
) -> dict[str, HParamValue]:
    """The hyperparameters a run records (see the module docstring for the definition).

    Args:
        cfg: the run's composed config.
        overrides: the job's task overrides (``hydra.overrides.task``).
        choices: Hydra's ``runtime.choices`` (group -> chosen option), when known.
    """
    choices = choices or {}
    hparams: dict[str, HParamValue] = {}
    for group in KEY_GROUPS:
        option = choices.get(group)
        if isinstance(option, str):
            hparams[group] = option
    for key in KEY_KNOBS:
        node = OmegaConf.select(cfg, key, default=None, throw_on_missing=False)
        if node is not None:
            hparams[key] = hparam_value(node)
    for override in overrides:
        item = _override_item(override)
        if item is None:
            continue
        key, raw = item
        node = OmegaConf.select(cfg, key.replace("/", "."), default=None, throw_on_missing=False)
        # a group override (also a `# @package _global_` one such as +experiment=...) records
        # the chosen option's name
        is_group = key in choices or isinstance(node, DictConfig)
        hparams[key.replace("/", ".")] = raw if is_group else hparam_value(node)
    return hparams


def hydra_job_context() -> tuple[list[str], dict[str, object]]:
    """The current Hydra job's task overrides and group choices; empty outside Hydra."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return [], {}
    hydra_cfg = HydraConfig.get()
    overrides = [str(o) for o in hydra_cfg.overrides.task]
    choices = {str(k): v for k, v in hydra_cfg.runtime.choices.items()}
    return overrides, choices


@contextmanager
def _plugin_data(summary: Summary) -> Iterator[plugin_data_pb2.HParamsPluginData]:
    """Edit the HParams plugin data that ``summary`` carries in its metadata."""
    plugin_data = summary.value[0].metadata.plugin_data
    data = plugin_data_pb2.HParamsPluginData.FromString(plugin_data.content)
    yield data
    plugin_data.content = data.SerializeToString()


def hparams_start_summaries(
    hparams: Mapping[str, HParamValue], metrics: Iterable[str], start_time_s: float | None = None
) -> list[Summary]:
    """The HParams experiment (the columns: hparams and metrics) and the session start (this
    run's values), as summaries to write into the run's own event files.

    Built by ``torch.utils.tensorboard.summary.hparams``, plus what it leaves out: bools (it
    tests ``int`` first, so it records them as numbers) and the start time.
    """
    start = time.time() if start_time_s is None else start_time_s
    experiment, session_start, _ = tb_summary.hparams(
        dict(sorted(hparams.items())), dict.fromkeys(metrics)
    )
    bools = {name: value for name, value in hparams.items() if isinstance(value, bool)}
    with _plugin_data(experiment) as data:
        data.experiment.time_created_secs = start
        for info in data.experiment.hparam_infos:
            if info.name in bools:
                info.type = api_pb2.DATA_TYPE_BOOL
    with _plugin_data(session_start) as data:
        data.session_start_info.start_time_secs = start
        for name, value in bools.items():
            data.session_start_info.hparams[name].bool_value = value
    return [experiment, session_start]


def hparams_end_summary() -> Summary:
    """The session end of a complete run: the HParams tab's status column says success (a
    stopped run writes none: it may be resumed, and TensorBoard keeps the first record)."""
    end = tb_summary.hparams({}, {})[2]  # torch's session end: STATUS_SUCCESS
    with _plugin_data(end) as data:
        data.session_end_info.end_time_secs = time.time()
    return end


def layout_charts(emitted: Iterable[str]) -> dict[str, list[str]]:
    """``LAYOUT_CHARTS`` restricted to the metrics a run emits; empty charts dropped."""
    names = set(emitted)
    charts = {title: [t for t in tags if t in names] for title, tags in LAYOUT_CHARTS.items()}
    return {title: tags for title, tags in charts.items() if tags}


def layout_summary(emitted: Iterable[str]) -> Summary:
    """The custom-scalars layout (TensorBoard's CUSTOM SCALARS tab) as a summary: one
    multi-line chart per group of related metrics, each tag matched exactly (the chart's tags
    are regular expressions)."""
    charts = {
        title: ["Multiline", [f"^{re.escape(tag)}$" for tag in tags]]
        for title, tags in layout_charts(emitted).items()
    }
    return tb_summary.custom_scalars({LAYOUT_CATEGORY: charts})
