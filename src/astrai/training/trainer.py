"""The training loop: rollout → score → advantages → update → log / evaluate.

No math lives here; each numbered stage is one call into the module that owns it.
"""

from __future__ import annotations

import contextlib
import logging
import time
from pathlib import Path

import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from torch import nn
from torch.optim.lr_scheduler import LRScheduler

from astrai.algorithms.aggregation import Divisors, whole_minibatch_divisors
from astrai.algorithms.correction import correction_from_config
from astrai.algorithms.strategy import Strategy
from astrai.checkpoints.io import prune_checkpoints
from astrai.config.lag_checks import check_lag_world
from astrai.config.lora_checks import builder_node, lora_settings
from astrai.config.run_task import build_task, max_prompt_tokens
from astrai.config.train_type_checks import check_world_batch
from astrai.distributed import (
    all_reduce_max,
    all_reduce_sum,
    apply_slurm_environment,
    env_context,
    init_distributed,
    no_grad_for,
)
from astrai.files import naming_write_errors
from astrai.metrics.aggregate import MetricMeans
from astrai.metrics.dashboards import hydra_job_context
from astrai.metrics.loggers import open_run_logger
from astrai.metrics.names import kl_logged_at
from astrai.metrics.writers import METRICS_FILE
from astrai.models.llama import LlamaForCausalLM
from astrai.models.precision import autocast
from astrai.models.pretrained import tokenizer_for
from astrai.models.tokenizer import Tokenizer
from astrai.models.value_model import ValueModel
from astrai.models.weights import named_weights
from astrai.rewards.build import build_reward
from astrai.rewards.config import overlong_from_config, reward_node
from astrai.rollout.engine import Engine, build_engine
from astrai.rollout.minibatch import Minibatch, flatten_rollout, iter_minibatches
from astrai.rollout.rollout import Rollout, ended_with_eos
from astrai.rollout.staleness import check_policy_lag
from astrai.tasks.base import ProblemSource
from astrai.training.accumulation import accumulate_gradients
from astrai.training.adapters import (
    TrainableState,
    adapter_record,
    base_identity,
    build_reference_and_critic,
    trainable_counts,
    trainable_parameters,
)
from astrai.training.announce import (
    announce_run,
    count_parameters,
    prompt_count_summary,
    write_dashboards,
)
from astrai.training.banner import format_eval_line
from astrai.training.checkpointing import (
    CheckpointParts,
    critic_parts,
    read_trainer_state,
    restore_training_checkpoint,
    save_training_checkpoint,
    settled_state,
)
from astrai.training.evaluation import EvalResult, evaluate
from astrai.training.loop import run_loop
from astrai.training.optim import clip_and_step, constant
from astrai.training.parallel import shard_policy, wrap_data_parallel
from astrai.training.resume import resolve_resume
from astrai.training.rollout_stage import RolloutStage
from astrai.training.rollout_stats import rollout_metrics, rollout_samples
from astrai.training.schedule import resumed_schedule_steps
from astrai.training.setup import (
    make_generator,
    on_device_while,
    resolve_device,
    seed_everything,
)
from astrai.training.signal_watch import GROUP_BASELINES, SignalWatch
from astrai.training.state import TrainState
from astrai.training.stopping import (
    StopInterrupt,
    interruptible,
)

log = logging.getLogger(__name__)

LossOutput = tuple[torch.Tensor, dict[str, torch.Tensor]]
JobContext = tuple[list[str], dict[str, object]]


class Trainer(RolloutStage):
    """Owns the policy, the frozen reference, the strategy, optimizers and logger of one run;
    its mutable state is one record, ``state`` (``training.state``), which ``training.loop``
    advances and ``training.checkpointing`` saves and returns.

    ``job_context``: the Hydra job's command-line overrides and group choices (default: the
    current Hydra job's, empty outside Hydra); an elastic worker gets its launcher's.
    """

    def __init__(
        self, cfg: DictConfig, run_dir: str | Path, job_context: JobContext | None = None
    ) -> None:
        self.cfg = cfg
        self.run_dir = Path(run_dir)
        self.job_overrides, self.job_choices = job_context or hydra_job_context()
        seed_everything(cfg.seed)
        apply_slurm_environment(cfg.infra.name)  # train.py did; a Trainer built directly
        self.dist = env_context()
        self.device = resolve_device(cfg.infra, self.dist)
        init_distributed(self.device)
        check_world_batch(cfg.train_type, self.dist.world_size)
        check_lag_world(cfg.train_type, self.dist.world_size, cfg.infra.parallel)
        self.tokenizer: Tokenizer = tokenizer_for(cfg.model)
        # task.filter_overlong_prompts drops the rows too long for this model and response limit
        self.task: ProblemSource = build_task(cfg.task, self.tokenizer, max_prompt_tokens(cfg))
        self.lora = lora_settings(cfg.model)  # None: full fine-tuning
        self.policy: LlamaForCausalLM = instantiate(builder_node(cfg.model))
        # a LoRA run's base: where it was read and what it holds (compared on resume)
        self.base = base_identity(cfg.model, self.policy) if self.lora is not None else None
        self.policy.to(self.device)
        self.sharded = cfg.infra.parallel == "fsdp" and self.dist.world_size > 1
        self.strategy: Strategy = instantiate(cfg.train_type)
        self.critic: ValueModel | None = None
        self.critic_optimizer: torch.optim.Optimizer | None = None
        self.critic_scheduler: LRScheduler | None = None
        # the frozen reference and the critic (LoRA: the base with its adapters off, the critic's
        # own adapters on the policy's trunk), before any sharding
        self.reference, self.critic = build_reference_and_critic(
            self.policy, self.lora, cfg.critic, cfg.infra.offload_reference, self.sharded
        )
        if self.critic is not None:
            self.critic_optimizer = instantiate(cfg.critic.optimizer)(
                trainable_parameters(self.critic)
            )
        # counted before any sharding, for the start banner
        self.parameter_counts = (
            count_parameters(self.policy),
            None if self.critic is None else count_parameters(self.critic),
        )
        self.adapter_counts = (
            None if self.lora is None else trainable_counts(self.policy, self.critic)
        )
        # after every model init: a reward model's construction must not move the global RNG
        with torch.random.fork_rng(devices=[]):
            self.reward = build_reward(reward_node(cfg.reward)).to(self.device)
        self.overlong = overlong_from_config(cfg)  # training rollouts only, never evaluation
        if self.sharded:  # in place; the optimizer must then see the sharded parameters
            shard_policy(self.policy, self.device)
        self.optimizer = self.strategy.optimizer(trainable_parameters(self.policy))
        resume = resolve_resume(
            cfg.ckpt.resume, self.run_dir, self.strategy, adapters=self.lora is not None
        )
        # read before the schedules are built: a resume with another total_steps may keep the
        # curve the checkpoint's schedules were built for (``ckpt.resume_schedule``)
        saved = read_trainer_state(resume) if resume is not None else None
        span = resumed_schedule_steps(
            cfg, saved, self.optimizer_steps_per_step(), self.strategy.scheduler
        )
        schedule_steps = span.steps
        # the critic has its own peak learning rate (critic.optimizer.lr) and the policy's
        # schedule shape (train_type.scheduler: warmup, decay), as in verl and OpenRLHF
        self.scheduler = self.strategy.scheduler(self.optimizer, total_steps=schedule_steps)
        if self.critic_optimizer is not None:
            make_critic_scheduler = (
                constant if cfg.critic.scheduler is None else instantiate(cfg.critic.scheduler)
            )
            self.critic_scheduler = make_critic_scheduler(
                self.critic_optimizer, total_steps=schedule_steps
            )
        # each rank samples its own responses: its own stream (rank 0's is the 1-process one)
        generators = {
            "sample": make_generator(cfg.seed + 1 + 7919 * self.dist.rank, self.device),
            "shuffle": make_generator(cfg.seed + 2, torch.device("cpu")),
        }
        self.state = TrainState(generators, schedule_steps)
        self.eval_problems = self.task.eval_problems(cfg.trainer.eval_prompts)
        self.sampling_metrics: dict[str, float] = {}  # the last rollout's dynamic sampling
        # a run whose rewards carry no signal says so (rank 0), after a few such steps in a row
        self.signal_watch = SignalWatch(
            self.strategy.advantage in GROUP_BASELINES,
            self.strategy.sampling.max_new_tokens,
            enabled=self.dist.is_main,
        )
        # restore before anything is written: a bad checkpoint leaves the run dir untouched
        if resume is not None:
            self.state = restore_training_checkpoint(self.checkpoint_parts(), resume, self.state)
            self.check_resumed_in_flight()  # before anything is started or written
            log.info("resumed from %s at step %d", resume, self.state.step)
            if span.notice is not None:  # said once the checkpoint is accepted
                log.warning("%s", span.notice)
        # what samples the rollouts and the evaluations (engine=torch: the live policy); built
        # after the restore, so an engine with its own copy starts from the resumed weights
        self.engine: Engine = build_engine(
            cfg.get("engine"), self.policy, self.tokenizer, cfg.infra.precision
        )
        # where π_old comes from: None = the engine's logprobs (bypass)
        self.correction = correction_from_config(cfg.get("engine"), cfg.train_type.max_policy_lag)
        # train_type.max_policy_lag > 0: the next steps' rollouts are sampled on a thread of
        # their own while this one updates (a checkpoint's in-flight rollouts first)
        self.start_sampling()
        # metrics.jsonl, TensorBoard, W&B, MLflow: as cfg.logger selects (metrics.loggers)
        self.logger = open_run_logger(cfg, self.run_dir, self.logged_up_to(), self.dist.is_main)
        # data parallel: gradients averaged over ranks (the critic too, so critics never drift);
        # a sharded policy averages its own
        replicate = self.dist.world_size > 1
        self.train_policy: nn.Module = (
            wrap_data_parallel(self.policy, self.device)
            if replicate and not self.sharded
            else self.policy
        )
        self.train_critic: nn.Module | None = self.critic
        if self.critic is not None and replicate:
            self.train_critic = wrap_data_parallel(self.critic, self.device)
        self.set_train_mode(False)  # eval but in the update (set_train_mode)

    def logged_up_to(self) -> int | None:
        """The last step whose logged rows a (re)start keeps: the checkpoint's step on resume;
        -1 (none) for a fresh start into a dir a crashed run logged into before its first
        checkpoint, so its rows are not logged twice; None for a fresh dir."""
        if self.state.resumed_from is not None:
            return self.state.step
        return -1 if (self.run_dir / METRICS_FILE).is_file() else None

    def optimizer_steps_per_step(self) -> int:
        """Policy (and critic) optimizer steps per RL step: ``ppo_epochs × minibatches``."""
        return self.strategy.ppo_epochs * self.strategy.minibatches

    def checkpoint_parts(self) -> CheckpointParts:
        """What a checkpoint saves besides ``state``: the trained objects, loaded in place on
        restore, and the facts its fingerprint records."""
        return CheckpointParts(
            cfg=self.cfg,
            run_dir=self.run_dir,
            strategy_name=self.strategy.name,
            checkpoint_files=self.strategy.checkpoint_files,
            samples_per_step=self.strategy.prompts_per_step * self.strategy.group_size,
            policy=self.policy,
            reference=self.reference,
            optimizer=self.optimizer,
            scheduler=self.scheduler,
            tokenizer=self.tokenizer,
            extra=critic_parts(
                self.critic
                if self.lora is None or self.critic is None
                else TrainableState(self.critic),
                self.critic_optimizer,
                self.critic_scheduler,
            ),
            dist=self.dist,
            device=self.device,
            sharded=self.sharded,
            adapters=adapter_record(self.lora, self.base),
        )

    # --- one RL step ---------------------------------------------------------------------------

    def prepare(self, rollout: Rollout) -> dict[str, float]:
        """2. Reference logprobs, (critic values,) advantages, pinned on the rollout; statistics
        of the whole rollout are summed over the ranks. ``engine.old_logprobs: recompute``:
        first the trainer's own π_old and the mismatch correction's weights
        (``Strategy.recompute_old_logprobs``). ``train_type.mask_truncated``: the
        responses cut at the length limit leave the loss (``rollout.loss_mask``).

        At ``kl_coef`` 0 the reference feeds only the ``kl/*`` metrics, so it is scored only on
        the steps that log them (``metrics.names.kl_logged_at``: step 1 and every
        ``logger.kl_every``)."""
        metrics = {}
        self.set_train_mode(False)  # π_old, the reference and the critic score without dropout
        if self.correction is not None:  # engine.old_logprobs: recompute
            with self.autocast():
                metrics = self.strategy.recompute_old_logprobs(
                    rollout,
                    self.policy,
                    self.correction,
                    all_reduce_sum,
                    all_reduce_max,
                    no_grad_for(self.policy),
                )
        if self.strategy.mask_truncated:
            eos = ended_with_eos(
                rollout.response_ids, rollout.response_mask, self.tokenizer.stop_ids
            )
            rollout.loss_mask = rollout.response_mask & eos[..., None]
        score = kl_logged_at(self.state.step + 1, self.strategy.kl_coef, self.cfg.logger.kl_every)
        reference = self.reference if score else None
        with self.reference_on_device(score), self.autocast():
            metrics |= self.strategy.prepare(
                rollout,
                reference,
                self.critic,
                sum_over_ranks=all_reduce_sum,
                no_grad=no_grad_for(reference) if reference is not None else torch.no_grad,
            )
        return metrics

    def reference_on_device(self, needed: bool = True) -> contextlib.AbstractContextManager:
        """``infra.offload_reference``: the frozen reference is moved to the training device
        for its scoring pass only and back to the CPU after it (as OpenRLHF's
        ``--ref_reward_offload``), so it holds no device memory while the update runs; not
        moved at all on a step that does not score it (not ``needed``)."""
        enabled = bool(self.cfg.infra.offload_reference) and needed
        return on_device_while(self.reference, self.device, enabled)

    def loss_divisors(self, minibatch: Minibatch) -> Divisors | None:
        """The divisors of the minibatch's losses over every rank (one collective); None in one
        process, where the minibatch's own counts divide."""
        if self.dist.world_size == 1:
            return None
        return whole_minibatch_divisors(minibatch.loss_mask, all_reduce_sum, self.dist.world_size)

    def update(self, rollout: Rollout) -> dict[str, float]:
        """3. ``ppo_epochs × minibatches`` optimizer steps on the pinned targets, in train
        mode (the policy's and the critic's: back to eval after)."""
        self.set_train_mode(True)
        means = MetricMeans()
        batch = flatten_rollout(rollout)
        for _ in range(self.strategy.ppo_epochs):
            for minibatch in iter_minibatches(
                batch, self.strategy.minibatches, self.state.generators["shuffle"]
            ):
                metrics = self.backward(minibatch)
                metrics["policy/grad_norm"] = self._step_policy()
                if self.critic is not None:
                    metrics["value/grad_norm"] = self._step_critic()
                means.update(metrics)
        # each rank's losses and stats are its share of the global value (loss_divisors):
        # ``compute`` sums them over the ranks, once per update (one all-reduce)
        result = means.compute()
        result["policy/lr"] = self.scheduler.get_last_lr()[0]
        if self.critic_scheduler is not None:
            critic_lr = self.critic_scheduler.get_last_lr()[0]
            # a Tensor only for a Tensor lr, which no config gives (critic.optimizer.lr is a number)
            assert not isinstance(critic_lr, torch.Tensor)
            result["value/lr"] = critic_lr
        result["policy/version"] = float(self.state.policy_version)
        self.set_train_mode(False)
        return result

    def set_train_mode(self, training: bool) -> None:
        """The live policy's and critic's mode: train for the update only, eval (no dropout,
        e.g. LoRA's) for π_old, the reference, the critic's values, sampling and evaluation.
        Only this, the training thread, changes it: a sampling thread samples a snapshot or an
        engine's own weights and leaves the live modules' modes alone (issue 45)."""
        for module in (self.train_policy, self.train_critic):
            if module is not None:
                module.train(training)

    def backward(self, minibatch: Minibatch) -> dict[str, torch.Tensor]:
        """Gradients of the minibatch's token-mean loss, in micro-batches of
        ``train_type.micro_batch_size`` sequences (``accumulation``); returns its metrics."""

        def loss(part: Minibatch, divisors: Divisors | None) -> LossOutput:
            with self.autocast():
                return self.strategy.loss(
                    self.train_policy, part, self.train_critic, divisors=divisors
                )

        return accumulate_gradients(
            minibatch,
            self.strategy.micro_batch_size,
            self.loss_divisors(minibatch),
            loss,
            replicas=(self.train_policy, self.train_critic),
        )

    def autocast(self) -> torch.autocast:
        """The update's and the scoring passes' precision (``infra.precision``,
        ``models.precision``); sampling and evaluation are told it and open their own."""
        return autocast(self.device, self.cfg.infra.precision)

    def _step_policy(self) -> torch.Tensor:
        """Clip, step the policy optimizer and scheduler, clear the grads. The policy-version
        guard: the only place ``policy_version`` changes, once per policy optimizer step."""
        grad_norm = clip_and_step(self.policy, self.optimizer, self.cfg.trainer.max_grad_norm)
        self.scheduler.step()
        self.state.policy_version += 1
        return grad_norm

    def _step_critic(self) -> torch.Tensor:
        """Clip with the same ``max_grad_norm``, step the critic optimizer, clear its grads.
        Outside the policy-version guard: a critic step never changes ``policy_version``."""
        assert self.critic is not None and self.critic_optimizer is not None
        assert self.critic_scheduler is not None
        grad_norm = clip_and_step(
            self.critic, self.critic_optimizer, self.cfg.trainer.max_grad_norm
        )
        self.critic_scheduler.step()
        return grad_norm

    def train_step(self) -> dict[str, float]:
        """One RL step; returns its metrics."""
        t0 = time.perf_counter()
        batch = self.next_batch()
        rollout = batch.rollout
        assert rollout.sample_versions is not None  # collect_rollout stamps every sample
        # the seed's version guard: a batch older than train_type.max_policy_lag is refused
        lag = check_policy_lag(
            rollout.sample_versions,
            self.state.policy_version,
            self.optimizer_steps_per_step(),
            self.strategy.max_policy_lag,
            self.state.step + 1,
        )
        metrics = {**batch.metrics, **lag, **self.prepare(rollout)}
        t1 = time.perf_counter()
        self.engine.before_update()  # an engine beside the update may release its memory
        metrics.update(self.update(rollout))
        self.engine.after_update()
        t2 = time.perf_counter()
        if not self.engine.samples_live_policy:  # it takes the updated weights (HF names)
            if self.pipeline is not None:  # its jobs on the old weights finish first
                self.pipeline.before_weight_sync()
            metrics["perf/weight_sync_s"] = self.engine.sync_weights(named_weights(self.policy))
        threshold = self.reward.accuracy_threshold
        timeouts = batch.metrics.get("rollout/reward_timeouts", 0.0)  # this rank's (sample_rollout)
        metrics.update(rollout_metrics(rollout, self.tokenizer.stop_ids, threshold, timeouts))
        self.signal_watch.observe(self.state.step + 1, rollout, metrics, all_reduce_max)
        metrics["time/rollout_s"] = t1 - t0
        metrics["time/update_s"] = t2 - t1
        metrics["perf/step_s"] = time.perf_counter() - t0  # the weight sync included
        # over the sampling's own time (on the sampling thread, when it overlapped the update)
        metrics["time/sample_s"] = batch.sample_s
        metrics["perf/tokens_per_s"] = float(rollout.response_mask.sum()) / max(
            batch.sample_s, 1e-9
        )
        self.state.step += 1
        if self.state.step % self.cfg.logger.samples_every == 0:
            self._log_samples("samples/rollout", rollout_samples(rollout))
        return metrics

    # --- evaluation and the loop ----------------------------------------------------------------

    def evaluate(self) -> EvalResult:
        """Greedy answers to the held-out prompts."""
        return evaluate(
            self.policy,
            self.tokenizer,
            self.reward,
            self.eval_problems,
            self.strategy.sampling.max_new_tokens,
            precision=self.cfg.infra.precision,
            engine=self.engine,
        )

    def eval_metrics(self) -> dict[str, float]:
        """The evaluation's metrics; {} when a stop signal abandoned it (one process: an
        evaluation changes no training state)."""
        t0 = time.perf_counter()
        try:
            with interruptible(self.dist.world_size == 1):
                result = self.evaluate()
        except StopInterrupt:
            return {}
        self._log_samples("samples/eval", result.samples)
        return {**result.metrics(), "time/eval_s": time.perf_counter() - t0}

    def _log_samples(self, tag: str, rows: list[tuple[str, str, float]]) -> None:
        self.logger.log_samples(self.state.step, tag, rows[: self.cfg.logger.num_samples])

    def fit(self, until: int | None = None) -> dict[str, object]:
        """Train up to ``trainer.total_steps`` (or ``until``, if smaller), checkpointing on
        schedule, on SIGTERM/SIGINT, when ``trainer.max_duration`` is spent and at the end
        (``training.loop``). Returns the summary also written to ``summary.json``; ``stopped``
        says why a run ended before ``total_steps`` (None when it completed)."""
        return run_loop(self, until)

    def announce(self) -> None:
        """The TensorBoard dashboards, then (rank 0) the start banner (``announce``)."""
        write_dashboards(self)
        announce_run(self)

    def prompt_counts(self) -> dict[str, object]:
        """The task's prompt counts, for ``summary.json`` (``prompt_count_summary``)."""
        return prompt_count_summary(self.task, len(self.eval_problems))

    def log_eval_line(self, metrics: dict[str, float]) -> None:
        """Rank 0: one INFO line per evaluation, so ``train.log`` grows as the run goes."""
        if self.dist.is_main:
            log.info(format_eval_line(self.state.step, self.cfg.trainer.total_steps, metrics))

    def save_checkpoint(self) -> Path:
        """Write ``checkpoints/step_<step>/`` atomically, then prune beyond ``ckpt.keep_last``."""
        state = self.state
        if self.pipeline is not None:  # the rollouts sampled for the next steps go with it
            state = settled_state(state, self.pipeline.settle(), self.pipeline.stream)
        path = save_training_checkpoint(self.checkpoint_parts(), state)
        if self.dist.is_main:
            prune_checkpoints(path.parent, self.cfg.ckpt.keep_last)
        return path

    def close(self) -> None:
        """Free what the run holds beyond its memory: the engine (vLLM's, and its export);
        idempotent. ``train.py`` and each torchrun worker call it when ``fit`` returns."""
        if self.pipeline is not None:
            self.pipeline.close()
        self.engine.close()
        self.reward.close()  # its worker processes (astrai.rewards.worker)

    def save_config(self) -> None:
        if not self.dist.is_main:
            return
        with naming_write_errors(self.run_dir / "config.yaml"):  # a full disk names the file
            (self.run_dir / "config.yaml").write_text(OmegaConf.to_yaml(self.cfg, resolve=True))
