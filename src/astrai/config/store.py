"""Register the schemas in Hydra's ``ConfigStore`` (called before ``@hydra.main`` composes).

Each group's schemas live in their own group, ``schema/<group>/base_<name>``, which the YAML
options name in their defaults (``- /schema/train_type/base_online_ppo@_here_``): kept out of
``conf/<group>/``'s options, they are never offered as ``<group>=base_<name>``."""

from __future__ import annotations

from hydra.core.config_store import ConfigStore

from astrai.config import schema

SCHEMA_GROUP = "schema"
GROUP_SCHEMAS: dict[str, dict[str, type]] = {
    "train_type": {"base_online_grpo": schema.GRPOConfig, "base_online_ppo": schema.PPOConfig},
    "model": {"base_llama": schema.ModelConfig, "base_hf": schema.HFModelConfig},
    "critic": {"base_critic": schema.CriticConfig, "base_value_model": schema.ValueModelConfig},
    "task": {
        "base_addition": schema.AdditionTaskConfig,
        "base_reverse": schema.ReverseTaskConfig,
        "base_sort": schema.SortTaskConfig,
        "base_dataset": schema.DatasetTaskConfig,
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


def register_configs() -> None:
    """Store the root schema as ``train_schema`` and each group's schema as
    ``schema/<group>/base_<name>``."""
    cs = ConfigStore.instance()
    cs.store(name="train_schema", node=schema.TrainConfig)
    for group, nodes in GROUP_SCHEMAS.items():
        for name, node in nodes.items():
            cs.store(group=f"{SCHEMA_GROUP}/{group}", name=name, node=node)
