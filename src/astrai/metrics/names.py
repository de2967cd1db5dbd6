"""The documented metric names: the contract between a run, its dashboards and its readers.

A test runs the trainer and checks the emitted names against this table.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from astrai.policy_lag import LagPlan

METRICS: dict[str, str] = {
    # rollout (sampled with the live policy)
    # the reward statistics count the valid responses: a failed episode is left out (env/failed)
    "rollout/reward_mean": "mean reward (weighted sum of the terms) of the valid sampled responses",
    "rollout/reward_std": "std of the reward over the valid sampled responses",
    "rollout/accuracy": "share of valid responses whose reward reaches reward.accuracy_threshold",
    "rollout/response_len": "mean response length in tokens (EOS included)",
    "rollout/eos_frac": "share of responses that ended with EOS (not cut at the limit)",
    "rollout/truncated_frac": "share of responses cut at max_new_tokens (1 − rollout/eos_frac)",
    "rollout/frac_reward_zero_std": "share of groups whose valid rewards are all equal (no signal)",
    "rollout/reward_timeouts": "responses whose reward did not return within reward.timeout_s",
    "rollout/policy_lag": "updates between the oldest sample's policy and the one training on it",
    "rollout/policy_lag_min": "updates between the newest sample's policy and the training one",
    # evaluation (greedy, held-out prompts)
    "eval/accuracy": "share of greedy answers on held-out prompts reaching the threshold",
    "eval/reward_mean": "mean reward of greedy answers on held-out prompts",
    "eval/response_len": "mean greedy response length in tokens",
    # losses
    "loss/policy": "clipped surrogate policy loss (aggregated by train_type.loss_agg)",
    "loss/kl": "GRPO: KL-to-reference term before kl_coef (in the loss unless reinforce_pp)",
    "loss/total": "loss that was back-propagated",
    # policy update
    "policy/clipfrac": "share of tokens where the ratio clip was active",
    "policy/approx_kl": "½(log π − log π_old)² averaged over tokens: drift within the update",
    "policy/entropy": "entropy of the policy's token distribution (token mean)",
    "policy/grad_norm": "policy gradient norm before clipping",
    "policy/lr": "policy learning rate",
    "policy/version": "optimizer steps taken by the policy",
    "update/nonfinite_skipped": "optimizer steps skipped this update: NaN/inf loss or grad norm",
    "advantages/mean": "mean advantage over the valid responses' sampled tokens",
    "advantages/std": "std of advantages over the valid responses' sampled tokens",
    # KL of the behaviour policy to the frozen reference, per token (Schulman's estimators)
    "kl/k1": "k1 = −log r, r = π_ref/π (unbiased, high variance)",
    "kl/k2": "k2 = ½ (log r)² (low variance, biased)",
    "kl/k3": "k3 = r − 1 − log r (unbiased, ≥ 0, low variance)",
    # PPO only: critic and returns
    "loss/value": "PPO value regression loss ½(V − returns)² (token mean; clipped when value_clip)",
    "value/explained_variance": "1 − Var(returns − V)/Var(returns) over the whole rollout",
    "value/clipfrac": "share of tokens where value clipping was active",
    "value/mean": "mean critic value over response tokens at rollout time",
    "value/grad_norm": "critic gradient norm before clipping",
    "value/lr": "critic learning rate (critic.optimizer.lr on critic.scheduler: the policy's)",
    "returns/mean": "mean GAE return over response tokens",
    "rollout/token_reward_mean": "mean per-token reward (score on the last token − kl_coef·KL)",
    # throughput and time
    "perf/tokens_per_s": "response tokens sampled per second of sampling (time/sample_s)",
    "perf/step_s": "wall seconds per RL step (an engine's weight sync included)",
    "perf/weight_sync_s": "seconds loading the updated weights into the engine (engine=vllm)",
    "perf/mfu": "the update's model FLOPs (6·N + attention per token) over its seconds × peak",
    "perf/update_tokens_per_s": "sequence tokens trained per second of the update (epochs in)",
    "perf/step_tokens_per_s": "response tokens sampled per wall second of the whole step",
    # the engine/trainer logprob mismatch (engine.old_logprobs: recompute; docs/engines.md)
    "rollout/logprob_diff_mean": "mean |log π_old − log π_behav| over response tokens",
    "rollout/logprob_diff_max": "max |log π_old − log π_behav| over response tokens",
    "rollout/mismatch_kl": "k3 estimate of KL(π_behav ‖ π_old) from the engine's samples",
    "rollout/is_ratio_min": "smallest π_old/π_behav (per token, or per response) before its band",
    "rollout/is_ratio_mean": "mean π_old/π_behav over response tokens before its band",
    "rollout/is_ratio_max": "largest π_old/π_behav (per token, or per response) before its band",
    "rollout/is_masked_frac": "share of response tokens the correction's band zeroed (mask modes)",
    "time/rollout_s": "seconds from the step's start until its rollout was scored and prepared",
    "time/sample_s": "seconds sampling and scoring it (on the sampling thread when overlapped)",
    "time/update_s": "seconds in the update epochs",
    "time/eval_s": "seconds in greedy evaluation",
    "time/elapsed_s": "wall seconds since the run started (step-0 eval in, summed over resumes)",
    # multi-turn episodes (env=..., docs/environments.md): means over the step's episodes
    "env/turns": "assistant turns per episode",
    "env/tool_calls": "tool calls parsed from the sampled turns, per episode",
    "env/tool_errors": "tool calls the environment answered with an error, per episode",
    "env/parse_errors": "malformed tool calls (the turn's format parser), per episode",
    "env/timeouts": "steps past env.step_timeout_s or env.episode_timeout_s, per episode",
    "env/failed": "share of episodes failed (a call hung, raised, gave junk): out of the update",
    # ... by cause (rollout.episodes.calls.FAILURE_CAUSES); the first of each cause is logged
    "env/failed_timeout": "share of episodes failed past env.step_timeout_s / episode_timeout_s",
    "env/failed_raised": "share of episodes failed: the environment or a user's parser raised",
    "env/failed_died": "share of episodes failed: the environment's worker process died",
    "env/failed_invalid": "share of episodes failed: a returned value is not what the API says",
    "env/failed_flood": "share of episodes failed: an answer past env.max_observation_chars",
    "env/failed_observation": "share of episodes failed: an answer the tokenizer cannot render",
    "env/failed_opening": "share of episodes failed: their group opened differently (reset)",
    "env/failed_trace_break": "share of agent episodes refused: a call did not extend the trace",
    "env/abandoned_workers": "timed-out environment calls still running (env.workers=thread)",
    "env/step_s": "seconds per environment step",
    "env/solved": "share of episodes solved (the environment's solved, else the threshold)",
    "env/turns_solved": "mean turns of the solved episodes",
    "rollout/observation_token_frac": "share of episode tokens after the prompt that are context",
    # on-policy distillation (distill=opd): the teacher's judgement of the sampled tokens
    "distill/reverse_kl": "mean of log π_old − log π_teacher over the valid sampled tokens (k1)",
    "distill/teacher_logprob": "mean teacher logprob of the valid sampled tokens",
    "loss/distill": "distill.estimator k3 | forward_topk: the distillation loss before its coef",
}

# and one per reward term, named by the run's reward config (``reward/partial_credit``, ...)
REWARD_TERM_PREFIX = "reward/"
REWARD_TERM_MEANING = "mean of one reward term (before its weight) over the valid responses"


def reward_term_names(emitted: set[str]) -> set[str]:
    """The ``reward/<name>`` metrics among ``emitted``."""
    return {name for name in emitted if name.startswith(REWARD_TERM_PREFIX)}


# What an algorithm with a critic and KL-shaped token rewards emits (PPO's ``metric_names``)
CRITIC_METRICS: frozenset[str] = frozenset(
    {
        "loss/value",
        "value/explained_variance",
        "value/clipfrac",
        "value/mean",
        "value/grad_norm",
        "value/lr",
        "returns/mean",
        "rollout/token_reward_mean",
    }
)
# Emitted by some algorithms only: which, each strategy's ``metric_names`` says.
ALGORITHM_METRICS: frozenset[str] = CRITIC_METRICS | {"loss/kl"}
# What every algorithm emits; a strategy's ``metric_names`` adds its own ``METRICS`` keys
# what an engine with its own copy of the weights adds (engine=vllm; engine=torch has none)
ENGINE_METRICS: frozenset[str] = frozenset({"perf/weight_sync_s"})
# what the trainer's recomputation of π_old adds (engine.old_logprobs: recompute)
MISMATCH_METRICS: frozenset[str] = frozenset(
    name for name in METRICS if name.startswith(("rollout/logprob_diff", "rollout/is_"))
) | {"rollout/mismatch_kl"}
# what an environment's episodes add (a collector that plays them), beside its own env/<name>
ENV_METRICS: frozenset[str] = frozenset(name for name in METRICS if name.startswith("env/")) | {
    "rollout/observation_token_frac"
}
ENV_METRIC_PREFIX = "env/"
# what distill=opd adds (``distill_metrics``), beside one pair per teacher with several
DISTILL_METRICS: frozenset[str] = frozenset(
    name for name in METRICS if name.startswith("distill/")
) | {"loss/distill"}
# several teachers (teacher.paths): each teacher's own, named by it
TEACHER_METRIC_PREFIXES: dict[str, str] = {
    "distill/reverse_kl/": "distill/reverse_kl over the rows routed to that teacher",
    "distill/token_frac/": "share of the valid sampled tokens routed to that teacher",
}
CORE_METRICS: frozenset[str] = (
    frozenset(METRICS)
    - ALGORITHM_METRICS
    - ENGINE_METRICS
    - MISMATCH_METRICS
    - ENV_METRICS
    - DISTILL_METRICS
)


def distill_metrics(
    estimator: str | None, teachers: Sequence[str] = (), loss_estimators: Sequence[str] = ()
) -> frozenset[str]:
    """What a run with distillation emits: nothing with ``estimator`` None (``distill=none``);
    else ``distill/*``, ``loss/distill`` for an estimator in ``loss_estimators``, and the
    per-teacher pair of each of several ``teachers`` (``teacher.paths``)."""
    if estimator is None:
        return frozenset()
    names = {"distill/reverse_kl", "distill/teacher_logprob"}
    if estimator in loss_estimators:
        names.add("loss/distill")
    for teacher in teachers:
        names |= {prefix + teacher for prefix in TEACHER_METRIC_PREFIXES}
    return frozenset(names)


# Need the reference forward. Every step while ``train_type.kl_coef`` > 0 (the KL is then in
# the reward or the loss); at kl_coef = 0 nothing but these metrics reads the reference, so it
# is scored only at the steps ``kl_logged_at`` names (step 1, then every ``logger.kl_every``).
KL_METRICS: frozenset[str] = frozenset({"kl/k1", "kl/k2", "kl/k3", "loss/kl"})


def kl_logged_at(step: int, kl_coef: float, kl_every: int) -> bool:
    """Whether step ``step`` (1-based: the step being taken) scores the reference and logs the
    ``KL_METRICS``: always while ``kl_coef`` is nonzero, else at step 1 (so every run emits
    them) and every ``kl_every`` steps."""
    return kl_coef != 0 or step == 1 or step % kl_every == 0


# Emitted only while the option (a ``train_type`` key) is on: name -> (key, meaning)
OPTION_METRICS: dict[str, tuple[str, str]] = {
    "policy/dual_clipfrac": (
        "clip_ratio_c",
        "share of tokens where the dual-clip bound was active (negative advantages)",
    ),
    "rollout/filtered_groups": (
        "filter_groups",
        "groups with all-equal rewards sampled this step, over every rank and round",
    ),
    "rollout/resample_rounds": ("filter_groups", "extra sampling rounds this step took"),
}


def emitted_metrics(
    base: frozenset[str],
    options: Mapping[str, object],
    lag: LagPlan | None = None,
    own_weights: bool = False,
    episodes: bool = False,
    distill: frozenset[str] = frozenset(),
) -> frozenset[str]:
    """The metric names a run emits (reward terms aside): its algorithm's (``base``, the
    strategy's ``metric_names``), plus those of the options that are on (``options``: the
    ``train_type`` node; an option is on when its value is neither null nor false), plus the
    engine's: the weight sync of an engine with its own weights (``own_weights``: the engine
    class does not sample the live policy, ``Engine.samples_live_policy``), the mismatch
    metrics where the run's lag plan recomputes π_old (``lag``: ``astrai.policy_lag.lag_plan``
    of the run's config; None = it does not), and the episodes' (``episodes``: the run's
    collector plays an environment's, ``Collector.episodes``), and distillation's
    (``distill``: ``distill_metrics`` of the run's ``distill`` and ``teacher``)."""
    extra = {
        name for name, (key, _) in OPTION_METRICS.items() if options.get(key) not in (None, False)
    }
    if own_weights:
        extra |= ENGINE_METRICS
    if episodes:
        extra |= ENV_METRICS
    if lag is not None and lag.recomputes:
        extra |= MISMATCH_METRICS
    return base | extra | distill
