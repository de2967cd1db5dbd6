"""What a run tells its console and ``train.log``: the start banner, the per-evaluation line and
the warning for GPU settings that no visible GPU can honour. Pure formatting: the trainer
gathers the facts and logs the lines.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from omegaconf import ListConfig, OmegaConf

from astrai.config.devices import ALL, NONE, DevicePlan
from astrai.rollout.collectors import CollectorFacts


@dataclass(frozen=True)
class RunFacts:
    """What the banner says about one run (rank 0's view).

    Attributes:
        run_dir: the run directory, as given to the trainer.
        train_type: the strategy's name (``online_grpo``, ``online_ppo``).
        task: the task's name (``addition``, ``dataset``).
        train_file: ``task.train_path`` for ``task=dataset``, else None.
        reward: the ``reward`` config choice (``partial``, ``weighted``); None outside Hydra.
        reward_terms: the reward's term names, logged as ``reward/<name>``
            (``["partial_credit"]``; several for a weighted reward).
        model: the ``model`` config choice (``tiny``, ``hf``); None outside Hydra.
        policy_parameters: parameters of the policy (tied weights counted once).
        critic_parameters: parameters of the critic; None without one.
        device: ``cpu`` or ``cuda``.
        local_devices: CUDA indices of this node's ranks, as they see them; ``()`` on CPU.
        processes: processes in the job (the world size).
        nnodes: machines in the job.
        parallel: ``infra.parallel`` (``ddp``, ``fsdp``); said only with several processes.
        cpu_reason: why a CPU run is on the CPU, e.g. ``no GPU visible``; None to say nothing.
        cuda_visible_devices: the ``CUDA_VISIBLE_DEVICES`` the ranks see; None when unset.
        total_steps: ``trainer.total_steps``.
        start_step: the step the run starts from (> 0 when resumed).
        tensorboard: whether ``<run dir>/tb`` is written (``logger.tensorboard``).
        learning_rate: the policy's peak learning rate (``train_type.optimizer.lr``).
        critic_learning_rate: the critic's (``critic.optimizer.lr``); None without a critic.
        schedule: the policy's schedule, e.g. ``warmup_cosine (warmup_steps 0, min_lr_ratio
            0.0) over 9,600 optimizer steps``.
        critic_schedule: ``the policy's``, ``constant`` or its own; None without a critic.
        adapters: a LoRA run's adapters and their trainable parameters; None: full fine-tuning.
        max_new_tokens: the response limit (``train_type.sampling.max_new_tokens``); None to
            say nothing.
        prompt_counts: the task's ``(train prompts, held-out prompts, exact)``
            (``split_sizes``); None for a task that does not say.
        evaluated_prompts: held-out prompts each evaluation decodes (``trainer.eval_prompts``,
            capped by the pool); said when fewer than the held-out ones.
        policy_lag: ``train_type.max_policy_lag`` and the ``(old_logprobs, correction)`` the run
            uses (``astrai.policy_lag.lag_plan``: ``auto`` resolved); a line of its own
            when the lag is above 0, None otherwise.
        collector: what the run's collector says of its mode (``Collector.facts``): who
            scores, whether ``max_new_tokens`` is a turn's, a line of its own (an episode run's
            environment, which scores the episodes instead of the reward group's terms).
    """

    run_dir: str
    train_type: str
    task: str
    train_file: str | None
    reward: str | None
    reward_terms: Sequence[str]
    model: str | None
    policy_parameters: int
    critic_parameters: int | None
    device: str
    local_devices: tuple[int, ...]
    processes: int
    nnodes: int
    parallel: str
    cpu_reason: str | None
    cuda_visible_devices: str | None
    total_steps: int
    start_step: int
    tensorboard: bool
    learning_rate: float
    critic_learning_rate: float | None
    schedule: str
    critic_schedule: str | None
    adapters: str | None = None
    max_new_tokens: int | None = None
    prompt_counts: tuple[int, int, bool] | None = None
    evaluated_prompts: int | None = None
    policy_lag: tuple[int, str, str] | None = None
    collector: CollectorFacts = CollectorFacts()


def format_banner(facts: RunFacts) -> list[str]:
    """The start banner: a first line naming the run, then four indented lines.

    Example::

        astrai: online_grpo on addition, run dir outputs/2026-01-01/12-00-00
          device: cpu, 1 process (no GPU visible)
          model: tiny, 67,136 parameters
          task: addition (87 train / 13 eval prompts); reward: partial (partial_credit); ...
          lr: 0.001, warmup_cosine (warmup_steps 0, min_lr_ratio 0.0) over 9,600 optimizer steps
          tensorboard --logdir outputs/2026-01-01/12-00-00/tb

    where the task line ends ``; 1,200 steps, max_new_tokens 4``. An episode run
    (``facts.collector``: ``EpisodeCollector.facts``) has ``reward: the environment's`` and
    ``max_new_tokens 48 a turn`` there, and an ``env:`` line after it.

    With a critic the ``lr`` line reads ``lr: policy 0.001, critic 0.001 (critic.optimizer.lr);
    <schedule>; critic: the policy's``.
    """
    task = facts.task if facts.train_file is None else f"{facts.task}, {facts.train_file}"
    counts = format_prompt_counts(facts.prompt_counts, facts.evaluated_prompts)
    if counts is not None:
        task += f" ({counts})"
    steps = f"{facts.total_steps:,} step" + ("s" if facts.total_steps != 1 else "")
    if facts.start_step > 0:
        steps += f" (resumed at step {facts.start_step:,})"
    if facts.max_new_tokens is not None:
        steps += f", max_new_tokens {facts.max_new_tokens:,}"
        steps += " a turn" if facts.collector.per_turn else ""
    terms = " + ".join(facts.reward_terms)
    reward = terms if facts.reward in (None, terms) else f"{facts.reward} ({terms})"
    reward = facts.collector.reward or reward  # an environment's: the reward group scores nothing
    model = f"model: {facts.model or 'policy'}, {facts.policy_parameters:,} parameters"
    if facts.critic_parameters is not None:
        model += f"; critic: {facts.critic_parameters:,} parameters"
    if facts.adapters is not None:
        model += f"; {facts.adapters}"
    tensorboard = (
        f"tensorboard --logdir {shlex.quote(facts.run_dir.rstrip('/') + '/tb')}"
        if facts.tensorboard
        else "tensorboard: off (logger.tensorboard=false)"
    )
    lag = [] if facts.policy_lag is None else [f"  {format_policy_lag(*facts.policy_lag)}"]
    own = [] if facts.collector.line is None else [f"  {facts.collector.line}"]
    return [
        f"astrai: {facts.train_type} on {facts.task}, run dir {facts.run_dir}",
        f"  device: {format_device(facts)}",
        f"  {model}",
        f"  task: {task}; reward: {reward}; {steps}",
        *own,
        f"  {format_learning_rates(facts)}",
        *lag,
        f"  {tensorboard}",
    ]


def format_policy_lag(lag: int, old_logprobs: str, correction: str) -> str:
    """``rollouts up to 1 update behind the policy: π_old recomputed, token_truncate
    correction``: what a run with ``train_type.max_policy_lag`` > 0 trains with."""
    behind = f"{lag} update{'s' if lag != 1 else ''}"
    source = "recomputed" if old_logprobs == "recompute" else "the engine's"
    return f"rollouts up to {behind} behind the policy: π_old {source}, {correction} correction"


def format_prompt_counts(
    counts: tuple[int, int, bool] | None, evaluated: int | None = None
) -> str | None:
    """``87 train / 13 eval prompts``, ``~800,000 train / ~200,000 eval prompts`` (estimated),
    with ``, 8 evaluated`` when each evaluation decodes fewer than the held-out ones; None when
    the task does not say."""
    if counts is None:
        return None
    train, held_out, exact = counts
    about = "" if exact else "~"
    text = f"{about}{train:,} train / {about}{held_out:,} eval prompts"
    if evaluated is not None and evaluated < held_out:
        text += f", {evaluated:,} evaluated"
    return text


def format_learning_rates(facts: RunFacts) -> str:
    """``lr: 0.001, <schedule>``; with a critic, both peaks and the critic's schedule, so a
    lowered policy lr beside an unchanged critic one is seen at start."""
    if facts.critic_learning_rate is None:
        return f"lr: {facts.learning_rate:g}, {facts.schedule}"
    return (
        f"lr: policy {facts.learning_rate:g}, critic {facts.critic_learning_rate:g} "
        f"(critic.optimizer.lr); {facts.schedule}; critic: {facts.critic_schedule}"
    )


def describe_schedule(node: Mapping[str, Any] | None, optimizer_steps: int | None = None) -> str:
    """A scheduler config node in words: ``warmup_cosine (warmup_steps 0, min_lr_ratio 0.0)``,
    then `` over 9,600 optimizer steps`` when ``optimizer_steps`` is given; None (no schedule):
    ``constant``."""
    if node is None:
        return "constant"
    name = str(node["_target_"]).rsplit(".", 1)[-1]
    knobs = ", ".join(f"{k} {v}" for k, v in node.items() if not str(k).startswith("_"))
    span = "" if optimizer_steps is None else f" over {optimizer_steps:,} optimizer steps"
    return name + (f" ({knobs})" if knobs else "") + span


def format_device(facts: RunFacts) -> str:
    """``cpu, 1 process (no GPU visible)``, ``cuda:0, 1 process``, ``cuda:0-1, 2 processes
    (ddp)``, ``cuda:0-7, 16 processes on 2 nodes (fsdp)``, with ``CUDA_VISIBLE_DEVICES`` when
    set (the indices count its entries)."""
    where = "cpu" if facts.device == "cpu" else f"cuda:{_index_range(facts.local_devices)}"
    processes = f"{facts.processes} process" + ("es" if facts.processes != 1 else "")
    if facts.nnodes > 1:
        processes += f" on {facts.nnodes} nodes"
    notes = []
    if facts.processes > 1:
        notes.append(facts.parallel)
    if facts.device == "cpu" and facts.cpu_reason:
        notes.append(facts.cpu_reason)
    if facts.device != "cpu" and facts.cuda_visible_devices is not None:
        notes.append(f"CUDA_VISIBLE_DEVICES={facts.cuda_visible_devices}")
    return f"{where}, {processes}" + (f" ({'; '.join(notes)})" if notes else "")


def _index_range(indices: Sequence[int]) -> str:
    """``(0,)`` -> ``0``; ``(0, 1, 2)`` -> ``0-2``; ``(0, 2)`` -> ``0,2``; ``()`` -> ``?``."""
    if not indices:
        return "?"
    first = indices[0]
    if len(indices) > 1 and list(indices) == list(range(first, first + len(indices))):
        return f"{first}-{indices[-1]}"
    return ",".join(str(index) for index in indices)


def cpu_reason(infra: Mapping[str, Any], plan: DevicePlan) -> str | None:
    """Why a run planned onto the CPU is there: ``infra.gpu.devices=none`` or ``no GPU
    visible`` (``infra.device=auto`` found none); None for ``infra.device=cpu`` or a GPU run."""
    if plan.device != "cpu" or infra["device"] == "cpu":
        return None
    if _gpu_devices(infra) == NONE:
        return "infra.gpu.devices=none"
    return "no GPU visible"  # auto with a selection falls back to the CPU only without GPUs


def ignored_gpu_warning(
    infra: Mapping[str, Any], plan: DevicePlan, overrides: Sequence[str]
) -> str | None:
    """The one-line warning for GPU settings ignored because no GPU is visible, or None.

    The rule: ``infra.device=auto`` fell back to the CPU (no GPU visible) although the job
    asked for GPUs, i.e. ``infra.gpu.devices`` is a list of indices (from anywhere: the command
    line, an experiment, an infra file) or ``all`` given explicitly on the command line
    (``overrides``: Hydra's task overrides). Never for the defaults (``all`` from
    ``infra/local.yaml``: "use the GPUs if there are any"), for ``infra.gpu.devices=none`` (CPU
    on purpose) or ``infra.device=cpu``. ``infra.nproc_per_node`` is no GPU setting: an explicit
    count runs that many CPU processes. ``infra.device=cuda`` without a GPU is a config error
    before any of this.
    """
    if cpu_reason(infra, plan) != "no GPU visible":
        return None
    devices = _gpu_devices(infra)
    if devices == ALL and not _overridden(overrides, "infra.gpu.devices"):
        return None
    shown = devices if devices == ALL else f"[{','.join(str(i) for i in devices)}]"
    processes = plan.processes or 1
    return (
        f"infra.gpu.devices={shown} ignored: no GPU is visible, training on the CPU "
        f"({processes} process{'es' if processes != 1 else ''}); "
        "infra.gpu.devices=none trains on the CPU without this warning"
    )


def format_eval_line(step: int, total: int, metrics: Mapping[str, float]) -> str:
    """The line logged at each evaluation: ``step 50/1200: reward 0.412, eval/accuracy 0.375,
    step 0.21s``; step 0's (before training) has no rollout: ``step 0/1200: eval/accuracy
    0.050 (before training)``."""
    accuracy = _number(metrics.get("eval/accuracy"), ".3f")
    if step == 0 or "rollout/reward_mean" not in metrics:
        return f"step {step}/{total}: eval/accuracy {accuracy} (before training)"
    reward = _number(metrics.get("rollout/reward_mean"), ".3f")
    step_s = _number(metrics.get("perf/step_s"), ".2f")
    return f"step {step}/{total}: reward {reward}, eval/accuracy {accuracy}, step {step_s}s"


def _number(value: float | None, spec: str) -> str:
    return "n/a" if value is None or math.isnan(value) else format(value, spec)


def _gpu_devices(infra: Mapping[str, Any]) -> Any:
    devices = infra["gpu"]["devices"]
    return OmegaConf.to_container(devices) if isinstance(devices, ListConfig) else devices


def _overridden(overrides: Sequence[str], key: str) -> bool:
    """Whether ``key`` is set by one of Hydra's overrides (``key=``, ``+key=``, ``++key=``)."""
    return any(str(o).lstrip("+").partition("=")[0] == key for o in overrides)
