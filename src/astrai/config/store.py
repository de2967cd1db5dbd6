"""Register the schemas in Hydra's ``ConfigStore`` (called before ``@hydra.main`` composes).

Each group's schemas live in their own group, ``schema/<group>/base_<name>``, which the YAML
options name in their defaults (``- /schema/train_type/base_online_ppo@_here_``): kept out of
``conf/<group>/``'s options, they are never offered as ``<group>=base_<name>``."""

from __future__ import annotations

import functools
import inspect
import typing
from dataclasses import field, make_dataclass

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from astrai.algorithms.grpo import GRPOStrategy
from astrai.algorithms.ppo import PPOStrategy
from astrai.algorithms.strategy import Strategy
from astrai.config import schema
from astrai.config.distill_schema import DistillConfig, OPDConfig

SCHEMA_GROUP = "schema"


@functools.cache
def strategy_schema(cls: type[Strategy]) -> type:
    """The schema of a ``train_type`` whose ``_target_`` is ``cls``: the knobs every strategy shares
    (``schema.StrategyConfig``) plus the keyword arguments its own constructors add, typed by
    their annotations, every value ``MISSING`` (the YAML holds them): an algorithm's knobs have
    one home, its constructor, and a new one needs no schema of its own. The built-in ones are
    stored as ``schema/train_type/base_<name>`` (their YAML's compose is typed); a strategy's
    YAML outside ``conf/`` is checked against it after compose
    (``config.train_type_checks.check_strategy_keys``), as an engine's is."""
    own: dict[str, object] = {}
    for klass in reversed(cls.__mro__):
        if klass is Strategy or not issubclass(klass, Strategy) or "__init__" not in vars(klass):
            continue
        hints = typing.get_type_hints(klass.__init__)
        for parameter in inspect.signature(klass.__init__).parameters.values():
            if parameter.kind is inspect.Parameter.KEYWORD_ONLY:
                own[parameter.name] = hints[parameter.name]
    fields = [(name, kind, field(default=MISSING)) for name, kind in own.items()]
    derived = make_dataclass(f"{cls.__name__}Config", fields, bases=(schema.StrategyConfig,))
    derived.__module__ = __name__
    derived.__doc__ = f"``train_type={cls.name}`` ({cls.__module__}.{cls.__qualname__})."
    return derived


GROUP_SCHEMAS: dict[str, dict[str, type]] = {
    # the algorithms astrai ships (conf/train_type/); another is its module and its YAML
    "train_type": {f"base_{cls.name}": strategy_schema(cls) for cls in (GRPOStrategy, PPOStrategy)},
    "model": {
        "base_llama": schema.ModelConfig,
        "base_hf": schema.HFModelConfig,
        "base_lora": schema.LoraSchema,
    },
    "engine": {"base_engine": schema.TorchEngineSchema, "base_vllm": schema.VLLMEngineSchema},
    "collector": {"base_collector": schema.CollectorConfig},
    "critic": {"base_critic": schema.CriticConfig, "base_value_model": schema.ValueModelConfig},
    "distill": {"base_distill": DistillConfig, "base_opd": OPDConfig},
    "task": {
        "base_addition": schema.AdditionTaskConfig,
        "base_reverse": schema.ReverseTaskConfig,
        "base_sort": schema.SortTaskConfig,
        "base_dataset": schema.DatasetTaskConfig,
        "base_products": schema.ProductTaskConfig,
        "base_hidden_number": schema.HiddenNumberTaskConfig,
    },
    "reward": {
        "base_reward": schema.RewardConfig,
        "base_regex": schema.RegexRewardConfig,
        "base_length": schema.LengthRewardConfig,
        "base_reward_model": schema.RewardModelConfig,
        "base_weighted": schema.WeightedRewardConfig,
    },
    "infra": {"base_infra": schema.InfraConfig},
    "sampling": {"base_sampling": schema.SamplingConfigSchema},
    "scheduler": {
        "base_warmup_constant": schema.WarmupConstantConfig,
        "base_warmup_cosine": schema.WarmupCosineConfig,
    },
    "logger": {"base_logger": schema.LoggerConfig},
}


# maps a plain override may fill with new keys (``'model.chat_template_kwargs={enable_thinking:
# false}'``, as docs/your-own-model.md writes it): their struct flag is off, so Hydra merges the
# given map into the empty default instead of asking for ``+``. Their keys are checked by the
# code that reads them (``hf_tokenizer.check_template_kwargs``).
FREE_MAPS: dict[type, tuple[str, ...]] = {schema.HFModelConfig: ("chat_template_kwargs",)}


def schema_node(node: type) -> type | DictConfig:
    """What the store holds for the schema ``node``: the dataclass itself, or, where it has
    ``FREE_MAPS``, its structured config with those maps open to new keys."""
    if node not in FREE_MAPS:
        return node
    structured = OmegaConf.structured(node)
    for key in FREE_MAPS[node]:
        OmegaConf.set_struct(structured._get_node(key), False)  # type: ignore[arg-type]
    return structured


# whether ``register_configs`` has stored the schemas (once per process, as Hydra's store)
_STORED: list[bool] = [False]


def register_configs() -> None:
    """Store the root schema as ``train_schema`` and each group's schema as
    ``schema/<group>/base_<name>``; once per process (Hydra's store is process-wide and hands
    out deep copies, so a second ``main()`` in one interpreter finds them there)."""
    cs = ConfigStore.instance()
    if _STORED[0] and "train_schema.yaml" in cs.repo:
        return
    for group, nodes in GROUP_SCHEMAS.items():
        for name, node in nodes.items():
            cs.store(group=f"{SCHEMA_GROUP}/{group}", name=name, node=schema_node(node))
    cs.store(name="train_schema", node=schema.TrainConfig)
    _STORED[0] = True
