"""Fuzz of override values for the documented keys (issue 21, item 7): every case ends in a
config that validates and builds, or in one ``ConfigError`` line (``train.py``: one stderr line,
exit 2) — never a traceback.

In-process for the hundreds of cases (``check_run_config``: what ``train.py`` checks before its
run starts), then what the run builds first from a valid config (model, optimizer, scheduler,
sampling, the first prompts, the generators); a handful of the same overrides through
``python train.py`` hold the CLI to it.
"""

from __future__ import annotations

import math
import random

import pytest
import torch
from hydra.utils import instantiate
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from omegaconf import DictConfig, OmegaConf
from tests.train_runs import run_train, run_train_in_process

from astrai.config.compose import check_run_config
from astrai.config.duration import parse_duration
from astrai.config.errors import ConfigError
from astrai.models.llama import LlamaConfig, LlamaForCausalLM
from astrai.training.setup import make_generator, seed_everything

pytestmark = pytest.mark.slow

# the documented keys a user sets (conf/*.yaml), for either train_type
COMMON_KEYS = [
    "seed",
    "trainer.total_steps",
    "trainer.eval_every",
    "trainer.eval_prompts",
    "trainer.max_grad_norm",
    "trainer.max_duration",
    "trainer.allow_large",
    "ckpt.every_steps",
    "ckpt.keep_last",
    "ckpt.background",
    "logger.samples_every",
    "logger.num_samples",
    "logger.flush_secs",
    "logger.kl_every",
    "train_type.group_size",
    "train_type.prompts_per_step",
    "train_type.ppo_epochs",
    "train_type.minibatches",
    "train_type.micro_batch_size",
    "train_type.clip_eps",
    "train_type.kl_coef",
    "train_type.clip_eps_low",
    "train_type.clip_eps_high",
    "train_type.clip_ratio_c",
    "train_type.max_resample_rounds",
    "train_type.sampling.max_new_tokens",
    "train_type.sampling.temperature",
    "train_type.sampling.top_k",
    "train_type.sampling.top_p",
    "train_type.optimizer.lr",
    "train_type.optimizer.betas",
    "train_type.optimizer.weight_decay",
    "train_type.scheduler.warmup_steps",
    "train_type.scheduler.min_lr_ratio",
    "model.hidden_size",
    "model.intermediate_size",
    "model.num_hidden_layers",
    "model.num_attention_heads",
    "model.num_key_value_heads",
    "model.max_position_embeddings",
    "model.rope_theta",
    "model.rms_norm_eps",
    "model.initializer_range",
    "model.vocab_size",
    "task.num_digits",
    "task.num_digits_b",
    "task.eval_fraction",
    "reward.accuracy_threshold",
    "reward.overlong_buffer",
    "reward.overlong_penalty",
    "infra.nnodes",
    "infra.node_rank",
    "infra.num_threads",
    "infra.nproc_per_node",
    "infra.gpu.devices",
]
GRPO_KEYS = ["train_type.adv_eps"]
PPO_KEYS = [
    "train_type.ppo_gamma",
    "train_type.ppo_gae_lambda",
    "train_type.ppo_vf_coef",
    "train_type.value_clip",
    "train_type.entropy_coef",
    "critic.optimizer.lr",
    "critic.optimizer.betas",
    "critic.optimizer.weight_decay",
]

FLOATS = st.one_of(
    st.sampled_from([math.nan, math.inf, -math.inf, 1e308, -1e308, 1e-320, 0.0, -0.0, 0.5]),
    st.floats(allow_nan=False, allow_infinity=False, width=64),
    st.floats(min_value=-2, max_value=2),
)
INTS = st.one_of(
    st.integers(min_value=-3, max_value=16),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.sampled_from([2**31, 2**53, 2**63, 2**64, 10**8, 10**12, -(2**63)]),
)
STRINGS = st.one_of(
    st.sampled_from(
        ["abc", "", " ", "1e8", "nan", "90m", "auto", "all", "none", "null", "x" * 300]
    ),
    st.text(alphabet="abcdefgh0123456789_-.", max_size=12),
)
SCALARS = st.one_of(INTS, FLOATS, STRINGS, st.booleans(), st.none())
# values near the shipped ones, so that a good share of the cases validate and get built
PLAUSIBLE = st.one_of(
    st.integers(min_value=0, max_value=8),
    st.floats(min_value=0, max_value=1),
    st.sampled_from([0.9, 0.99, 1e-3, 1e-6, 10000.0, 2, 4, 16, 64, "90m", "auto", 1.5]),
)
VALUES = st.one_of(
    PLAUSIBLE,
    PLAUSIBLE,
    SCALARS,
    SCALARS,
    st.lists(st.one_of(INTS, FLOATS, st.booleans()), max_size=4),
    st.dictionaries(st.sampled_from(["a", "b"]), INTS, max_size=2),
)


def render(value: object) -> str:
    """``value`` as a Hydra override value (its grammar: ``nan``, ``inf``, quoted strings)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, list):
        return "[" + ",".join(render(v) for v in value) + "]"
    assert isinstance(value, dict)
    return "{" + ",".join(f"{k}:{render(v)}" for k, v in value.items()) + "}"


@st.composite
def override_sets(draw: st.DrawFn, ppo: bool) -> list[str]:
    keys = COMMON_KEYS + (PPO_KEYS if ppo else GRPO_KEYS)
    chosen = draw(st.lists(st.sampled_from(keys), min_size=1, max_size=2, unique=True))
    overrides = ["train_type=online_ppo"] if ppo else []
    return overrides + [f"{key}={render(draw(VALUES))}" for key in chosen]


def parameter_count(model: LlamaConfig) -> int:
    per_layer = 4 * model.hidden_size**2 + 3 * model.hidden_size * model.intermediate_size
    return model.num_hidden_layers * per_layer + 2 * model.vocab_size * model.hidden_size


def build_what_the_run_builds_first(cfg: DictConfig) -> None:
    """What the trainer builds from the config before its first step, in miniature: anything
    that raises here would have been a traceback after validation."""
    tt = cfg.train_type
    seed_everything(cfg.seed)
    make_generator(cfg.seed + 1 + 7919 * 7, torch.device("cpu"))
    make_generator(cfg.seed + 2, torch.device("cpu"))
    if cfg.trainer.max_duration is not None:
        parse_duration(cfg.trainer.max_duration)
    container = OmegaConf.to_container(cfg.model)
    assert isinstance(container, dict)
    runtime = ("_target_", "gradient_checkpointing", "lora")  # not LlamaConfig fields
    kwargs = {k: v for k, v in container.items() if k not in runtime}
    config = LlamaConfig(**kwargs)
    parameters: list[torch.nn.Parameter] = [torch.nn.Parameter(torch.zeros(2))]
    if parameter_count(config) <= 2_000_000:
        parameters = list(LlamaForCausalLM(config).parameters())
    optimizer = instantiate(tt.optimizer)(parameters)
    scheduler = instantiate(tt.scheduler)(optimizer, total_steps=cfg.trainer.total_steps)
    for _ in range(3):
        optimizer.step()
        scheduler.step()
    assert all(math.isfinite(lr) for lr in scheduler.get_last_lr())
    instantiate(tt.sampling)
    if cfg.critic.name != "none":
        instantiate(cfg.critic.optimizer)([torch.nn.Parameter(torch.zeros(2))])
    task = instantiate(cfg.task)
    task.train_problems(cfg.seed, 0, min(tt.prompts_per_step, 64))
    task.eval_problems(min(cfg.trainer.eval_prompts, 64))


# examples per train_type from the Hypothesis profile (tests/conftest.py): 50 in CI, 250 with
# HYPOTHESIS_PROFILE=deep (~0.4 s each: one compose, then the checks)
FUZZ = settings(
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def check_case(overrides: list[str]) -> None:
    try:
        cfg = check_run_config(overrides)
    except ConfigError as err:
        message = str(err)
        assert message.strip() and len(message.splitlines()) == 1, (overrides, message)
        return
    build_what_the_run_builds_first(cfg)


@FUZZ
@given(override_sets(ppo=False))
def test_fuzzed_grpo_overrides_validate_and_build_or_are_one_line(overrides: list[str]) -> None:
    check_case(overrides)


def test_cli_a_fuzzed_valid_config_runs(tmp_path) -> None:
    seed = random.Random(0).randrange(1000)
    args = ["debug=quick", f"seed={seed}", "trainer.total_steps=2", "train_type.kl_coef=0.5"]
    result = run_train([*args, "train_type.scheduler.min_lr_ratio=1.0"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Traceback" not in result.stderr


# after the run above: under -n 2, xdist hands each worker one of the two fuzz tests
@FUZZ
@given(override_sets(ppo=True))
def test_fuzzed_ppo_overrides_validate_and_build_or_are_one_line(overrides: list[str]) -> None:
    check_case(overrides)


# the CLI on a few fuzz-like values: one stderr line and exit 2, or a run that completes
CLI_CASES = [
    ["train_type.optimizer.betas=[0.9,inf]"],
    ["train_type.sampling.top_k=1e400"],
    ["model.rope_theta='abc'"],
    ["trainer.eval_every=-0.0"],
    ["-m", "seed=0,-1"],
    ["infra.nproc_per_node=[1,2]"],
]


@pytest.mark.parametrize("args", CLI_CASES, ids=" ".join)
def test_cli_fuzz_cases_end_in_one_line_and_exit_2(tmp_path, args: list[str]) -> None:
    result = run_train_in_process(args, cwd=tmp_path)  # train.py's main (tests/train_runs.py)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("astrai: config error: ")
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
