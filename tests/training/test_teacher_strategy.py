"""Models by role (issue 60): a strategy that requires a ``teacher`` is its module
(``tests/training/toy_teacher_strategy.py``) and a YAML this test writes on Hydra's search path,
nothing registered anywhere; ``build_run`` loads the teacher from ``teacher.path`` (an astrai
checkpoint or a Hugging Face directory) and ``prepare`` receives it by name.

The teacher written first is the run's own initial policy (``build_run`` of the same config):
step 1's π_old (``engine.old_logprobs=recompute``: the trainer's forward) and the teacher are
then one computation on the same weights, so the teacher KL is exactly 0; a teacher with its
logits made 8× sharper reads far above it."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
from tests.helpers import compose_config
from tests.train_runs import QUICK, run_train_in_process

from astrai.checkpoints import io
from astrai.config.errors import ConfigError
from astrai.models.llama import LlamaForCausalLM
from astrai.models.pretrained import save_policy_dir
from astrai.models.tokenizer import CharTokenizer
from astrai.training.build import build_run

TOY_YAML = """\
# a toy algorithm outside conf/: its class, the knobs every strategy takes, its own knob
defaults:
  - /sampling@sampling: default
  - /optimizer@optimizer: adamw
  - /scheduler@scheduler: warmup_constant
  - _self_

_target_: tests.training.toy_teacher_strategy.ToyTeacherStrategy
group_size: 2
prompts_per_step: 4
ppo_epochs: 1
minibatches: 1
micro_batch_size: null
score_tokens: null
update_tokens: null
clip_eps: 0.2
kl_coef: 0.0
kl_estimator: k3
advantage: teacher_reverse_kl
loss_agg: token_mean
clip_eps_low: null
clip_eps_high: null
clip_ratio_c: null
ratio_level: token
mask_truncated: false
filter_groups: false
max_resample_rounds: 0
max_policy_lag: 0
teacher_coef: 1.0           # the toy's own knob: the weight of the teacher's reverse-KL reward
"""


def _search_path(tmp_path: Path) -> str:
    conf = tmp_path / "myconf"
    (conf / "train_type").mkdir(parents=True, exist_ok=True)
    (conf / "train_type" / "toy_teacher.yaml").write_text(TOY_YAML)
    return f"hydra.searchpath=[file://{conf}]"


def _initial_policy(tmp_path: Path) -> tuple[LlamaForCausalLM, CharTokenizer]:
    """The policy a default ``debug=quick`` run starts from: ``build_run`` of its config."""
    parts = build_run(compose_config(QUICK, validate=False), tmp_path / "built")
    assert isinstance(parts.tokenizer, CharTokenizer)
    return parts.policy, parts.tokenizer


def _write_checkpoint(policy: LlamaForCausalLM, tokenizer: CharTokenizer, step_dir: Path) -> Path:
    """An astrai checkpoint dir of ``policy``: what ``load_policy`` reads of one."""
    step_dir.mkdir(parents=True)
    (step_dir / "config.json").write_text(json.dumps(dataclasses.asdict(policy.config)))
    io.save_module(policy, step_dir / "model.safetensors")
    tokenizer.save(step_dir)
    return step_dir


def _teacher_kl(tmp_path: Path, teacher: Path) -> list[dict[str, float]]:
    run = tmp_path / "run"
    args = [
        *QUICK,
        _search_path(tmp_path),
        "train_type=toy_teacher",
        f"teacher.path={teacher}",
        "engine.old_logprobs=recompute",  # π_old: the trainer's own forward, as the teacher's
        f"hydra.run.dir={run}",
        "logger.tensorboard=false",
        "ckpt.every_steps=0",
    ]
    result = run_train_in_process(args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").open()]
    return [row for row in rows if "toy/teacher_kl" in row]


def test_a_teacher_with_the_initial_weights_reads_a_kl_of_exactly_0_at_step_1(
    tmp_path: Path,
) -> None:
    policy, tokenizer = _initial_policy(tmp_path)
    hf_dir = tmp_path / "teacher_hf"
    hf_dir.mkdir()
    save_policy_dir(policy, tokenizer, hf_dir)  # a Hugging Face directory (its tokenizer.json)
    steps = _teacher_kl(tmp_path, hf_dir)
    assert [row["step"] for row in steps] == [1, 2]
    assert steps[0]["toy/teacher_kl"] == 0.0
    assert steps[0]["rollout/logprob_diff_max"] < 1e-4  # the sampler's π_old was close too


def test_another_teacher_reads_a_kl_well_above_0(tmp_path: Path) -> None:
    policy, tokenizer = _initial_policy(tmp_path)
    with torch.no_grad():
        policy.model.norm.weight.mul_(8.0)  # every logit 8× sharper: another distribution
    steps = _teacher_kl(tmp_path, _write_checkpoint(policy, tokenizer, tmp_path / "step_7"))
    assert [row["step"] for row in steps] == [1, 2]
    assert all(row["toy/teacher_kl"] > 0.1 for row in steps), steps


def test_a_teacher_strategy_without_teacher_path_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError,
        match=r"^train_type=toy_teacher needs a teacher: set teacher.path to a Hugging Face "
        r"model directory or an astrai checkpoint \(got teacher.path=null\)$",
    ):
        compose_config([*QUICK, _search_path(tmp_path), "train_type=toy_teacher"])


def test_a_teacher_is_refused_where_the_strategy_uses_none(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError, match=r"^train_type=online_grpo uses no teacher: leave teacher.path null"
    ):
        compose_config([*QUICK, f"teacher.path={tmp_path}"])


def test_a_teacher_with_another_vocabulary_is_one_line(tmp_path: Path) -> None:
    policy, _ = _initial_policy(tmp_path)
    reversed_alphabet = CharTokenizer(CharTokenizer().alphabet[::-1])
    teacher = _write_checkpoint(policy, reversed_alphabet, tmp_path / "step_3")
    overrides = [*QUICK, _search_path(tmp_path), "train_type=toy_teacher"]
    with pytest.raises(
        ConfigError,
        match=r"^teacher.path: the teacher's tokenizer is not the policy's \(id 3 is '\?', the "
        r"policy's '0'\); a teacher must share the policy's vocabulary$",
    ):
        compose_config([*overrides, f"teacher.path={teacher}"])
    # the same check where the run is built without validation (its one line, not a traceback)
    cfg = compose_config([*overrides, f"teacher.path={teacher}"], validate=False)
    with pytest.raises(ConfigError, match=r"^teacher.path: the teacher's tokenizer is not"):
        build_run(cfg, tmp_path / "unvalidated")
