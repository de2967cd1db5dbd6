"""Every config group composes with Hydra's compose API, validates and instantiates."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra.utils import instantiate
from omegaconf import DictConfig
from tests.helpers import compose_config

from astrai.algorithms.grpo import GRPOStrategy
from astrai.algorithms.ppo import PPOStrategy
from astrai.config.devices import parse_gpu_devices
from astrai.config.lora_checks import builder_node
from astrai.config.train_type_checks import build_strategy
from astrai.config.validate import ConfigError, validate_config
from astrai.models.llama import LlamaForCausalLM
from astrai.paths import CONFIG_DIR
from astrai.rollout.engines.sampler import SamplingConfig
from astrai.tasks import AdditionTask, ReverseTask, SortTask
from astrai.tasks.arithmetic import HiddenNumberTask, ProductTask

CONF = Path(CONFIG_DIR)


def _compose(overrides: list[str] | None = None) -> DictConfig:
    return compose_config(overrides, validate=False)


def _options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


def test_default_composes_validates_and_instantiates() -> None:
    cfg = _compose()
    validate_config(cfg)
    strategy = build_strategy(cfg.train_type)
    assert isinstance(strategy, GRPOStrategy)
    assert strategy.group_size == 8 and strategy.kl_estimator == "k3"
    assert isinstance(strategy.sampling, SamplingConfig)
    model = instantiate(builder_node(cfg.model))
    assert isinstance(model, LlamaForCausalLM) and model.config.hidden_size == 64
    assert isinstance(instantiate(cfg.task), AdditionTask)
    assert cfg.infra.device == "auto" and cfg.infra.gpu.devices == "all"
    assert cfg.trainer.total_steps > 0 and cfg.seed == 0
    assert cfg.optimized_metric == "eval/accuracy"


def test_defaults_list_covers_every_group() -> None:
    for group in ("train_type", "model", "critic", "task", "reward", "infra", "logger"):
        assert _options(group), f"conf/{group}/ is empty"


@pytest.mark.parametrize("option", [o for o in _options("task") if o != "dataset"])
def test_every_embedded_task_composes(option: str) -> None:  # task=dataset: tests/tasks/
    cfg = _compose([f"task={option}"])
    validate_config(cfg)
    task = instantiate(cfg.task)
    assert isinstance(task, AdditionTask | ReverseTask | SortTask | ProductTask | HiddenNumberTask)
    assert task.name == option


PRETRAINED_MODELS = ("hf", "smollm2")  # read from a model directory


@pytest.mark.parametrize("option", [o for o in _options("model") if o not in PRETRAINED_MODELS])
def test_every_random_init_model_composes(option: str) -> None:
    cfg = _compose([f"model={option}"])
    validate_config(cfg)
    assert instantiate(builder_node(cfg.model)).config.vocab_size == 48


@pytest.mark.parametrize("option", PRETRAINED_MODELS)
def test_pretrained_models_compose_and_load_from_their_directory(
    option: str, tmp_path: Path
) -> None:
    from tests.hf_models import save_tiny_hf_model

    cfg = _compose([f"model={option}"])
    assert cfg.model._target_ == "astrai.models.pretrained.load_pretrained_policy"
    assert cfg.model.chat_template is True
    if option == "smollm2":
        assert cfg.model.path == "models/smollm2"  # where `make smollm2` writes it
    hf_dir = save_tiny_hf_model(tmp_path / "model")
    cfg = _compose([f"model={option}", f"model.path={hf_dir}"])
    validate_config(cfg)
    assert instantiate(builder_node(cfg.model)).config.hidden_size == 64


@pytest.mark.parametrize(
    ("group", "option"), [(g, o) for g in ("infra", "logger") for o in _options(g)]
)
def test_every_other_option_composes(group: str, option: str) -> None:
    validate_config(_compose([f"{group}={option}"]))


@pytest.mark.parametrize(
    ("train_type", "critic", "strategy"),
    [("online_grpo", "none", GRPOStrategy), ("online_ppo", "value_model", PPOStrategy)],
)
def test_each_train_type_brings_its_critic(train_type: str, critic: str, strategy: type) -> None:
    assert _options("train_type") == ["online_grpo", "online_ppo"]
    assert _options("critic") == ["none", "value_model"]
    cfg = _compose([f"train_type={train_type}"])
    validate_config(cfg)
    assert cfg.critic.name == critic
    assert isinstance(build_strategy(cfg.train_type), strategy)


def test_ppo_sweep_composes() -> None:
    for gamma in (0.95, 1.0):
        for lam in (0.9, 0.95):
            cfg = _compose(
                [
                    "train_type=online_ppo",
                    f"train_type.ppo_gamma={gamma}",
                    f"train_type.ppo_gae_lambda={lam}",
                ]
            )
            validate_config(cfg)
            ppo = build_strategy(cfg.train_type)
            assert (ppo.ppo_gamma, ppo.ppo_gae_lambda) == (gamma, lam)


def test_optimizer_and_scheduler_are_partials() -> None:
    import torch

    cfg = _compose(["train_type.optimizer.lr=0.01", "trainer.total_steps=10"])
    strategy = build_strategy(cfg.train_type)
    params = [torch.nn.Parameter(torch.zeros(2))]
    optimizer = strategy.optimizer(params)
    assert isinstance(optimizer, torch.optim.AdamW)
    assert optimizer.param_groups[0]["lr"] == 0.01
    scheduler = strategy.scheduler(optimizer, total_steps=10)
    assert scheduler.get_last_lr() == [0.01]


@pytest.mark.parametrize(
    ("overrides", "key"),
    [
        (["train_type.group_size=1"], "train_type.group_size"),
        (["model.hidden_size=-3"], "model.hidden_size"),
        (["model.num_attention_heads=3"], "model.num_attention_heads"),
        (["model.vocab_size=50"], "model.vocab_size"),
        (["model.max_position_embeddings=8"], "model.max_position_embeddings"),
        (["train_type.minibatches=7"], "train_type.minibatches"),
        (["train_type.clip_eps=0"], "train_type.clip_eps"),
        (["train_type.kl_estimator=k4"], "train_type.kl_estimator"),
        (["train_type.sampling.top_p=1.5"], "train_type.sampling.top_p"),
        (["train_type.sampling.temperature=0"], "train_type.sampling.temperature"),
        (["train_type.optimizer.lr=-1"], "train_type.optimizer.lr"),
        (["trainer.total_steps=0"], "trainer.total_steps"),
        (["trainer.eval_every=0"], "trainer.eval_every"),
        (["logger.kl_every=0"], "logger.kl_every"),
        (["infra.device=tpu"], "infra.device"),
        (["infra.gpu.devices=[0,0]"], "infra.gpu.devices"),
        (["infra.gpu.devices=[-1]"], "infra.gpu.devices"),
        (["infra.gpu.devices=[]"], "infra.gpu.devices"),
        (["infra.gpu.devices=[a]"], "infra.gpu.devices"),
        (["infra.nproc_per_node=0"], "infra.nproc_per_node"),
        (["+infra.environment={PATH:/tmp/bin}"], "infra.environment.PATH"),
        (["+infra.environment.CUDA_VISIBLE_DEVICES="], "infra.environment.CUDA_VISIBLE_DEVICES"),
        (["+infra.environment.DOCKER_HOST=tcp://x:2375"], "infra.environment.DOCKER_HOST"),
        (["+infra.environment.ASTRAI_IMAGE=other:1"], "infra.environment.ASTRAI_IMAGE"),
        (["task.eval_fraction=1.5"], "eval_fraction"),
        (["task=reverse", "task.max_len=5"], "train_type.sampling.max_new_tokens"),
        (["critic=value_model"], "critic=none"),
        (["train_type=online_ppo", "critic=none"], "critic=value_model"),
        (["train_type=online_ppo", "train_type.ppo_gamma=1.5"], "train_type.ppo_gamma"),
        (["train_type=online_ppo", "train_type.ppo_gae_lambda=-0.1"], "train_type.ppo_gae_lambda"),
        (["train_type=online_ppo", "train_type.value_clip=0"], "train_type.value_clip"),
        (["train_type=online_ppo", "train_type.kl_estimator=k5"], "train_type.kl_estimator"),
    ],
)
def test_cross_field_checks_name_the_key(overrides: list[str], key: str) -> None:
    cfg = _compose(overrides)
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        validate_config(cfg)


def test_gpu_device_list_parsing() -> None:
    assert parse_gpu_devices("all") is None
    assert parse_gpu_devices([0, 2]) == [0, 2]
    with pytest.raises(ConfigError, match="duplicates"):
        parse_gpu_devices([1, 1])
    with pytest.raises(ConfigError, match="non-negative"):
        parse_gpu_devices([True])


def test_the_quick_preset_is_the_default_job_cut_to_400_steps() -> None:
    # experiment=quick (no +): the README's first command; only the run length changes
    default, quick = compose_config([]), compose_config(["experiment=quick"])
    assert (quick.trainer.total_steps, quick.trainer.eval_every) == (400, 25)
    assert quick.ckpt.every_steps == 100
    for key in ("train_type", "model", "task", "reward", "seed"):
        assert quick[key] == default[key], key
    # the command line still wins over the preset
    assert compose_config(["experiment=quick", "trainer.total_steps=7"]).trainer.total_steps == 7


@pytest.mark.parametrize(
    ("preset", "task", "kl_coef"),
    [("calculator_ppo", "calculator", 0.05), ("guess_ppo", "guess", 0.0)],
)
def test_ppo_s_episode_presets_are_the_task_s_job_with_its_measured_choices(
    preset: str, task: str, kl_coef: float
) -> None:
    # issue 64's measured choices (docs/environments.md); the rest is the task's preset with
    # train_type=online_ppo, and the command line still wins
    ppo = compose_config([f"experiment={task}", "train_type=online_ppo"])
    chosen = compose_config([f"experiment={preset}"])
    choices = {"kl_coef": kl_coef, "whiten_advantages": True, "gae_level": "turn"}
    assert {key: chosen.train_type[key] for key in choices} == choices
    assert ppo.train_type.kl_coef == 0.0 and not ppo.train_type.whiten_advantages
    for key in choices:
        ppo.train_type[key] = chosen.train_type[key]
    assert chosen == ppo
    overridden = compose_config([f"experiment={preset}", "train_type.gae_level=token"])
    assert overridden.train_type.gae_level == "token"
