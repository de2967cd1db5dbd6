"""Checks of ``trainer.stop_at`` (``metrics.targets``): each target names a metric this run
emits, with a bound that parses. A typo (``eval/acc``) or a metric another algorithm emits
(``value/explained_variance`` under GRPO) would never stop the run: refused at start."""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from astrai.config.collector_checks import configured_collector
from astrai.config.distill_checks import distill_metric_names
from astrai.config.engine_checks import configured_engine
from astrai.config.env_checks import configured_env
from astrai.config.errors import ConfigError
from astrai.config.train_type_checks import strategy_class_of
from astrai.metrics.names import REWARD_TERM_PREFIX, emitted_metrics
from astrai.metrics.targets import STOP_AT_KEY, parse_targets
from astrai.policy_lag import lag_plan


def validate_stop_at(cfg: DictConfig, reward_terms: list[str]) -> None:
    """``trainer.stop_at``: a mapping metric -> bound (``metrics.targets``) over the metrics
    the run emits: its algorithm's, its options' and engine's, and ``reward/<term>`` for each
    of ``reward_terms`` (the run's reward term names)."""
    node = cfg.trainer.stop_at
    plain = OmegaConf.to_container(node) if isinstance(node, DictConfig) else node
    try:
        targets = parse_targets(plain)  # type: ignore[arg-type]
    except ValueError as err:
        raise ConfigError(str(err)) from None
    if not targets:
        return
    strategy = strategy_class_of(cfg.train_type)
    own_weights = not configured_engine(cfg.get("engine")).samples_live_policy
    emitted = set(
        emitted_metrics(
            strategy.metric_names,
            cfg.train_type,
            lag_plan(cfg),
            own_weights,
            configured_collector(cfg.get("collector"), configured_env(cfg.get("env"))).episodes,
            distill_metric_names(cfg),
        )
    )
    emitted |= {REWARD_TERM_PREFIX + term for term in reward_terms}
    for target in targets:
        if target.metric not in emitted:
            raise ConfigError(
                f"{STOP_AT_KEY}.{target.metric}: this run does not log {target.metric!r} "
                f"(train_type={strategy.name}); it logs e.g. eval/accuracy, "
                "rollout/reward_mean, loss/policy (docs/metrics.md)"
            )
