"""TensorBoard dashboards of a run: the custom-scalars layout and the HParams record.

Both are written through the run's own writer (``<run dir>/tb``), never through
``SummaryWriter.add_hparams``, which would put them into a timestamped sub-run: with
``tensorboard --logdir <sweep dir>`` every job of a sweep is then exactly one run, and the HParams
tab compares the jobs.

**Only the session start** (this run's values) and, at the end, the session end are written, no
experiment record (the HParams ``experiment`` summary, which lists the columns). TensorBoard's
HParams plugin reads one experiment per board: when any run carries an experiment record it takes
the first it finds as the columns of every run (``backend_context._find_experiment_tag``: "we
expect only one run to have an EXPERIMENT_TAG ... arbitrarily pick the first one"). In
``make tensorboard``'s combined board (``outputs/`` and every sweep under ``multirun/``) that
was one run's keys, so the other sweeps' swept keys had no column. Without one, the plugin builds
the columns from every run's session start (``_compute_experiment_from_runs``): the union of the
keys, each typed by its values and marked ``differs`` where the runs' values differ (its HParams
tab sorts the columns by ``differs``, then by name, and ticks the first five), and one metric
column per scalar tag of the runs (docs/sweeps.md).

**Which hyperparameters** a job records (``run_hparams``), in this order:

1. the keys the sweep varies (``swept_keys``: those given a sweep — ``a=1,2``, ``range(...)``,
   ``interval(...)`` — on the sweep's command line, in ``<sweep dir>/multirun.yaml``, or in
   ``hydra.sweeper.params``); they also name the job's run;
2. every other task override of the job (Hydra's ``hydra.overrides.task``, also in
   ``.hydra/overrides.yaml``), keyed by its dotted key without ``+``/``++``; deletions (``~key``),
   ``hydra.*`` keys and path-like keys (``infra.mounts.*``, ``*_dir``, ``*_path``, ...) are left
   out. A leaf takes its resolved, typed value from the config; a config-group override
   (``train_type=online_ppo``, ``experiment=ppo_sweep``) keeps the chosen option's name;
3. a few core knobs (``KEY_GROUPS``, ``KEY_KNOBS``: the algorithm, model and task choices,
   seed, steps and learning rate), so runs that were not swept over the same keys still line up.

**Run names**: a sweep job's event files go to ``tb/<run name>/`` (``tensorboard_run_name``):
its swept overrides with the shortest unambiguous end of each key,
``ppo_gamma=0.95,ppo_gae_lambda=0.9``.

Values are typed as the HParams plugin requires: bools stay bools, ints and floats become numbers,
strings stay strings, ``None`` becomes ``"null"`` and lists or mappings their YAML-ish ``str``.

**Metrics**: the HParams plugin shows the last logged value of each scalar tag in the job's run,
so the final metrics are the run's own scalars; no copies are written.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from omegaconf import DictConfig, ListConfig, OmegaConf
from tensorboard.compat.proto.summary_pb2 import Summary
from tensorboard.plugins.hparams import plugin_data_pb2
from torch.utils.tensorboard import summary as tb_summary

if TYPE_CHECKING:
    from hydra.conf import HydraConf

HParamValue = bool | float | str

# config-group choices and leaf knobs recorded for every run (when the run's config has them);
# few, so that they do not crowd out the swept keys
KEY_GROUPS: tuple[str, ...] = ("train_type", "model", "task")
KEY_KNOBS: tuple[str, ...] = ("seed", "trainer.total_steps", "train_type.optimizer.lr")

# override keys that name files or folders: where a job writes or reads, not a hyperparameter
PATH_KEY_PARTS: frozenset[str] = frozenset({"mounts", "dir", "path", "file", "root"})
PATH_KEY_SUFFIXES: tuple[str, ...] = ("_dir", "_path", "_file", "_root")
MULTIRUN_FILE = "multirun.yaml"  # what Hydra writes into the sweep dir before launching
RUN_NAME_MAX = 120  # characters of a run name (a folder name)


class JobOverrides(list[str]):
    """A job's task overrides and which keys of them the sweep varies (``swept``; empty for a
    single run). A list, so a ``(overrides, choices)`` job context keeps its shape and pickles
    to elastic workers with the swept keys."""

    swept: tuple[str, ...] = ()


class RunHParams(dict[str, HParamValue]):
    """A run's hyperparameters (name -> value, in record order) and which of them the sweep
    varies (``swept``, a prefix of the keys)."""

    swept: tuple[str, ...] = ()


# custom-scalars layout: one category, one multi-line chart per group of related metrics
LAYOUT_CATEGORY = "astrai"
LAYOUT_CHARTS: dict[str, tuple[str, ...]] = {
    "reward & accuracy": (
        "rollout/reward_mean",
        "rollout/accuracy",
        "eval/accuracy",
        "eval/reward_mean",
    ),
    "policy: loss, clipfrac, approx KL": (
        "loss/policy",
        "policy/clipfrac",
        "policy/approx_kl",
        "policy/dual_clipfrac",  # train_type.clip_ratio_c only
    ),
    "value: loss, explained variance": ("loss/value", "value/explained_variance"),
    "KL to reference: k1, k2, k3": ("kl/k1", "kl/k2", "kl/k3"),
    "dynamic sampling: filtered groups, rounds": (  # train_type.filter_groups only
        "rollout/filtered_groups",
        "rollout/resample_rounds",
    ),
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


def _is_path_key(key: str) -> bool:
    """``infra.mounts.data``, ``hydra.sweep.dir``, ``task.train_path``: a file or folder."""
    parts = re.split(r"[./]", key)
    return any(p in PATH_KEY_PARTS or p.endswith(PATH_KEY_SUFFIXES) for p in parts)


def _override_item(override: str) -> tuple[str, str] | None:
    """``"+a.b=1"`` -> ``("a.b", "1")``; None for deletions, ``hydra.*`` keys, path-like keys
    and bare keys."""
    if override.startswith("~") or "=" not in override:
        return None
    key, raw = override.split("=", 1)
    key = key.lstrip("+")
    key = key.split("@", 1)[0]  # "group@package=option": the group names the choice
    if key == "hydra" or key.startswith(("hydra.", "hydra/")) or _is_path_key(key):
        return None
    return key, raw


def swept_keys(job_overrides: Sequence[str], sweep_overrides: Sequence[str]) -> list[str]:
    """The keys a sweep varies, in the order of the job's overrides (dotted, as recorded).

    Args:
        job_overrides: this job's task overrides (one value per key).
        sweep_overrides: the sweep's definition: its command-line overrides (with sweep syntax,
            from ``multirun.yaml``) and ``hydra.sweeper.params`` as ``key=value``. When none of
            them is a sweep (unknown definition), every recorded override of the job counts.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    swept: set[str] = set()
    for line in sweep_overrides:
        item = _override_item(line)
        if item is None:
            continue
        try:
            (override,) = parser.parse_overrides([line])
        except Exception:  # noqa: BLE001 - a value Hydra cannot parse is no sweep
            continue
        if override.is_sweep_override():
            swept.add(item[0].replace("/", "."))
    keys = [item[0].replace("/", ".") for o in job_overrides if (item := _override_item(o))]
    return [k for k in keys if k in swept] if swept else keys


def run_hparams(
    cfg: DictConfig,
    overrides: Sequence[str] = (),
    choices: Mapping[str, object] | None = None,
    swept: Sequence[str] | None = None,
) -> RunHParams:
    """The hyperparameters a run records (see the module docstring for the definition).

    Args:
        cfg: the run's composed config.
        overrides: the job's task overrides (``hydra.overrides.task``).
        choices: Hydra's ``runtime.choices`` (group -> chosen option), when known.
        swept: the keys the sweep varies (``swept_keys``); recorded first (default:
            ``overrides.swept`` of a ``JobOverrides``).

    Returns:
        name -> value, the swept keys first, then the other overrides, then the core knobs.
    """
    choices = choices or {}
    swept = getattr(overrides, "swept", ()) if swept is None else swept
    from_overrides: dict[str, HParamValue] = {}
    for override in overrides:
        item = _override_item(override)
        if item is None:
            continue
        key, raw = item
        node = OmegaConf.select(cfg, key.replace("/", "."), default=None, throw_on_missing=False)
        # a group override (also a `# @package _global_` one such as experiment=...) records
        # the chosen option's name
        is_group = key in choices or isinstance(node, DictConfig)
        from_overrides[key.replace("/", ".")] = raw if is_group else hparam_value(node)
    hparams = RunHParams()
    hparams.swept = tuple(k for k in swept if k in from_overrides)
    for key in hparams.swept:
        hparams[key] = from_overrides[key]
    hparams.update({k: v for k, v in from_overrides.items() if k not in hparams})
    for group in KEY_GROUPS:
        option = choices.get(group)
        if isinstance(option, str):
            hparams.setdefault(group, option)
    for key in KEY_KNOBS:
        node = OmegaConf.select(cfg, key, default=None, throw_on_missing=False)
        if node is not None:
            hparams.setdefault(key, hparam_value(node))
    return hparams


def short_key_names(keys: Sequence[str]) -> dict[str, str]:
    """The shortest dotted end of each key that no other key ends with
    (``train_type.ppo_gamma`` -> ``ppo_gamma``)."""
    names = {}
    for key in keys:
        parts = key.split(".")
        others = [k for k in keys if k != key]
        for n in range(1, len(parts) + 1):
            suffix = ".".join(parts[-n:])
            if not any(k == suffix or k.endswith("." + suffix) for k in others):
                break
        names[key] = suffix
    return names


def run_name(overrides: Sequence[str], swept: Sequence[str]) -> str | None:
    """A sweep job's TensorBoard run name: its swept overrides, ``ppo_gamma=0.95,ppo_gae_lambda=
    0.9``, safe as one folder name (other characters become ``_``); None when nothing is swept.
    """
    values = {}
    for override in overrides:
        item = _override_item(override)
        if item is not None and item[0].replace("/", ".") in swept:
            values[item[0].replace("/", ".")] = item[1]
    if not values:
        return None
    names = short_key_names(list(values))
    text = ",".join(f"{names[k]}={v}" for k, v in values.items())
    text = re.sub(r"[^A-Za-z0-9._,=+-]", "_", text)[:RUN_NAME_MAX]
    return text.lstrip(".") or None  # never ".", ".." or a hidden folder


def _sweep_definition(hydra_cfg: HydraConf) -> list[str]:
    """The sweep's overrides: ``hydra.sweeper.params`` and the command line in
    ``<sweep dir>/multirun.yaml`` (the job's own config holds one value per key)."""
    params = hydra_cfg.sweeper.get("params") or {}
    lines = [f"{k}={v}" for k, v in params.items()]
    path = Path(str(hydra_cfg.sweep.dir)) / MULTIRUN_FILE
    if path.is_file():
        try:
            lines += [str(o) for o in OmegaConf.load(path).hydra.overrides.task]
        except Exception:  # noqa: BLE001 - unreadable: fall back to the job's overrides
            pass
    return lines


def hydra_job_context() -> tuple[JobOverrides, dict[str, object]]:
    """The current Hydra job's task overrides (with the swept keys when the job is part of a
    multirun) and group choices; empty outside Hydra."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized():
        return JobOverrides(), {}
    hydra_cfg = HydraConfig.get()
    overrides = JobOverrides(str(o) for o in hydra_cfg.overrides.task)
    choices = {str(k): v for k, v in hydra_cfg.runtime.choices.items()}
    if hydra_cfg.mode == RunMode.MULTIRUN:
        overrides.swept = tuple(swept_keys(overrides, _sweep_definition(hydra_cfg)))
    return overrides, choices


def tensorboard_run_name(overrides: Sequence[str] | None = None) -> str | None:
    """A job's run name (``run_name`` of a ``JobOverrides``; default: the current Hydra job's);
    None outside a multirun."""
    if overrides is None:
        overrides = hydra_job_context()[0]
    return run_name(overrides, getattr(overrides, "swept", ()))


@contextmanager
def _plugin_data(summary: Summary) -> Iterator[plugin_data_pb2.HParamsPluginData]:
    """Edit the HParams plugin data that ``summary`` carries in its metadata."""
    plugin_data = summary.value[0].metadata.plugin_data
    data = plugin_data_pb2.HParamsPluginData.FromString(plugin_data.content)
    yield data
    plugin_data.content = data.SerializeToString()


def hparams_start_summary(
    hparams: Mapping[str, HParamValue], start_time_s: float | None = None
) -> Summary:
    """The HParams session start (this run's values), as a summary to write into the run's own
    event files; no experiment record (the module docstring says why).

    Built by ``torch.utils.tensorboard.summary.hparams``, plus what it leaves out: bools (it
    tests ``int`` first, so it records them as numbers) and the start time.
    """
    start = time.time() if start_time_s is None else start_time_s
    bools = {name: value for name, value in hparams.items() if isinstance(value, bool)}
    _, session_start, _ = tb_summary.hparams(dict(hparams), {})
    with _plugin_data(session_start) as data:
        data.session_start_info.start_time_secs = start
        for name, value in bools.items():
            data.session_start_info.hparams[name].bool_value = value
    return session_start


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
