"""The start banner, the per-evaluation line and the ignored-GPU warning: exact lines from given
facts, then through a real ``python train.py`` (console and ``train.log``)."""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

import pytest
from tests.helpers import compose_config
from tests.train_runs import QUICK, run_train_in_process

from astrai.config.devices import plan_devices
from astrai.config.env_checks import configured_env
from astrai.models.tokenizer import CharTokenizer
from astrai.rewards.build import build_reward
from astrai.rewards.config import reward_node
from astrai.rollout.collectors import CollectorFacts, CollectorParts, build_collector
from astrai.training.banner import (
    RunFacts,
    cpu_reason,
    format_banner,
    format_device,
    format_eval_line,
    ignored_gpu_warning,
)
from astrai.training.run import Run

CPU_RUN = RunFacts(
    run_dir="outputs/2026-01-01/12-00-00",
    train_type="online_grpo",
    task="addition",
    train_file=None,
    reward="partial",
    reward_terms=["partial_credit"],
    model="tiny",
    policy_parameters=64704,
    critic_parameters=None,
    device="cpu",
    local_devices=(),
    processes=1,
    nnodes=1,
    parallel="ddp",
    cpu_reason="no GPU visible",
    cuda_visible_devices=None,
    total_steps=1200,
    start_step=0,
    tensorboard=True,
    learning_rate=1e-3,
    critic_learning_rate=None,
    schedule="warmup_cosine (warmup_steps 0, min_lr_ratio 0.0) over 9,600 optimizer steps",
    critic_schedule=None,
)


def test_banner_of_a_default_cpu_run() -> None:
    assert format_banner(CPU_RUN) == [
        "astrai: online_grpo on addition, run dir outputs/2026-01-01/12-00-00",
        "  device: cpu, 1 process (no GPU visible)",
        "  model: tiny, 64,704 parameters",
        "  task: addition; reward: partial (partial_credit); 1,200 steps",
        "  lr: 0.001, warmup_cosine (warmup_steps 0, min_lr_ratio 0.0) over 9,600 optimizer steps",
        "  tensorboard --logdir outputs/2026-01-01/12-00-00/tb",
    ]


def test_banner_says_the_response_limit_and_the_task_split() -> None:
    """``max_new_tokens`` and the task's train / held-out prompt counts on the task line
    (issue 45: a limit shorter than the model's answers is the usual run that cannot learn)."""
    facts = dataclasses.replace(
        CPU_RUN, max_new_tokens=4, prompt_counts=(87, 13, True), evaluated_prompts=13
    )
    assert format_banner(facts)[3] == (
        "  task: addition (87 train / 13 eval prompts); reward: partial (partial_credit); "
        "1,200 steps, max_new_tokens 4"
    )
    # an estimated split (a sampled problem space), and fewer evaluated than held out
    facts = dataclasses.replace(
        facts, prompt_counts=(800_000, 200_000, False), evaluated_prompts=200, max_new_tokens=1024
    )
    assert format_banner(facts)[3] == (
        "  task: addition (~800,000 train / ~200,000 eval prompts, 200 evaluated); reward: "
        "partial (partial_credit); 1,200 steps, max_new_tokens 1,024"
    )
    # a dataset: its file, then its rows
    facts = dataclasses.replace(
        facts, task="dataset", train_file="data/train.jsonl", prompt_counts=(1000, 120, True)
    )
    assert format_banner(facts)[3].startswith(
        "  task: dataset, data/train.jsonl (1,000 train / 120 eval prompts); reward: "
    )


def test_task_splits_are_counted() -> None:
    """The counts the banner shows come from the task: addition's 100 problems hold 13 out
    (the salted hash of each prompt decides), a dataset counts its rows."""
    from astrai.tasks.arithmetic import AdditionTask
    from astrai.training.announce import task_prompt_counts

    addition = AdditionTask(num_digits=1, num_digits_b=None, eval_fraction=0.2)
    assert task_prompt_counts(addition) == (87, 13, True)
    assert len(addition.eval_problems(1000)) == 13
    wide = AdditionTask(num_digits=3, num_digits_b=None, eval_fraction=0.2)  # 10^6: sampled
    assert task_prompt_counts(wide) == (800_000, 200_000, False)
    assert task_prompt_counts(object()) is None  # a task that does not say: nothing shown


def test_banner_of_a_resumed_ppo_run_on_a_dataset_on_two_gpus() -> None:
    facts = dataclasses.replace(
        CPU_RUN,
        run_dir="runs/my run",
        train_type="online_ppo",
        task="dataset",
        train_file="data/train.jsonl",
        reward="math",
        reward_terms=["math"],
        model=None,  # outside Hydra
        critic_parameters=64769,
        device="cuda",
        local_devices=(0, 1),
        processes=2,
        cpu_reason=None,
        cuda_visible_devices="0,2",
        start_step=400,
        total_steps=1000,
        learning_rate=1e-6,
        critic_learning_rate=1e-5,
        critic_schedule="the policy's",
    )
    assert format_banner(facts) == [
        "astrai: online_ppo on dataset, run dir runs/my run",
        "  device: cuda:0-1, 2 processes (ddp; CUDA_VISIBLE_DEVICES=0,2)",
        "  model: policy, 64,704 parameters; critic: 64,769 parameters",
        "  task: dataset, data/train.jsonl; reward: math; 1,000 steps (resumed at step 400)",
        # a policy lr lowered for a pretrained model beside the critic's own: seen at start
        "  lr: policy 1e-06, critic 1e-05 (critic.optimizer.lr); warmup_cosine (warmup_steps 0, "
        "min_lr_ratio 0.0) over 9,600 optimizer steps; critic: the policy's",
        "  tensorboard --logdir 'runs/my run/tb'",  # quoted: ready to paste
    ]
    assert format_banner(dataclasses.replace(facts, tensorboard=False))[-1] == (
        "  tensorboard: off (logger.tensorboard=false)"
    )


def test_banner_of_an_episode_run_names_the_environment_not_the_reward_group() -> None:
    """Under ``env=...`` the environment scores the episodes: the task line says so (not the
    reward group's terms, which score nothing), ``max_new_tokens`` bounds each turn, and a line
    of its own names the environment, its parser and its limits (issue 58), as the episode
    collector describes itself (``Collector.facts``)."""
    line = "env: lookup_env.Lookup (parser hermes); max_turns 4, max_episode_tokens 4,096"
    mode = CollectorFacts(reward="the environment's", per_turn=True, line=line)
    facts = dataclasses.replace(CPU_RUN, task="dataset", max_new_tokens=48, collector=mode)
    lines = format_banner(facts)
    assert lines[3:5] == [
        "  task: dataset; reward: the environment's; 1,200 steps, max_new_tokens 48 a turn",
        f"  {line}",
    ]
    assert lines[5].startswith("  lr: ") and len(lines) == 7


def test_the_episode_collector_describes_the_composed_env_node() -> None:
    cfg = compose_config(["experiment=calculator"], validate=False)
    spec = configured_env(cfg.env)
    assert spec is not None
    parts = CollectorParts(CharTokenizer(), build_reward(reward_node(cfg.reward)), 64, env=spec)
    assert build_collector(cfg.collector, parts).facts() == CollectorFacts(
        "the environment's",
        True,
        "env: astrai.envs.calculator.Calculator (parser calc_line); max_turns 3, "
        "max_episode_tokens 1,024, step_timeout_s 10, workers process",
    )
    single = compose_config([], validate=False)  # env=single_turn: nothing beyond the reward
    parts = dataclasses.replace(parts, env=configured_env(single.env))
    assert build_collector(single.collector, parts).facts() == CollectorFacts()


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"cpu_reason": None}, "cpu, 1 process"),
        ({"processes": 2, "cpu_reason": "infra.gpu.devices=none"}, "cpu, 2 processes (ddp; "
         "infra.gpu.devices=none)"),
        ({"device": "cuda", "local_devices": (3,)}, "cuda:3, 1 process"),
        ({"device": "cuda", "local_devices": (0, 2)}, "cuda:0,2, 1 process"),
        (
            {"device": "cuda", "local_devices": tuple(range(8)), "processes": 16, "nnodes": 2,
             "parallel": "fsdp"},
            "cuda:0-7, 16 processes on 2 nodes (fsdp)",
        ),
    ],
)  # fmt: skip
def test_device_line(changes: dict, expected: str) -> None:
    assert format_device(dataclasses.replace(CPU_RUN, **changes)) == expected


def _infra(device: str = "auto", gpu_devices: object = "all", nproc: object = "auto") -> dict:
    return {"device": device, "gpu": {"devices": gpu_devices}, "nproc_per_node": nproc}


def _warning(infra: dict, overrides: list[str], cuda_count: int = 0) -> str | None:
    plan = plan_devices(
        infra["device"],
        infra["gpu"]["devices"],
        infra["nproc_per_node"],
        cuda_visible_devices=None,
        cuda_count=cuda_count,
        where="host",
    )
    return ignored_gpu_warning(infra, plan, overrides)


def test_ignored_gpu_warning_rule() -> None:
    listed = _warning(_infra(gpu_devices=[0, 2]), ["infra.gpu.devices=[0,2]"])
    assert listed == (
        "infra.gpu.devices=[0,2] ignored: no GPU is visible, training on the CPU (1 process); "
        "infra.gpu.devices=none trains on the CPU without this warning"
    )
    # a list from a config file counts as much as one from the command line
    assert _warning(_infra(gpu_devices=[1], nproc=2), []) == (
        "infra.gpu.devices=[1] ignored: no GPU is visible, training on the CPU (2 processes); "
        "infra.gpu.devices=none trains on the CPU without this warning"
    )
    assert _warning(_infra(), ["++infra.gpu.devices=all"]).startswith("infra.gpu.devices=all ")
    assert _warning(_infra(), []) is None  # the plain default on a CPU machine
    assert _warning(_infra(nproc=2), ["infra.nproc_per_node=2"]) is None  # 2 CPU processes
    assert _warning(_infra(gpu_devices="none"), ["infra.gpu.devices=none"]) is None
    assert _warning(_infra(device="cpu", gpu_devices=[0]), []) is None  # CPU on purpose
    assert _warning(_infra(gpu_devices=[0]), [], cuda_count=1) is None  # the GPU is used


def test_cpu_reason() -> None:
    def reason(infra: dict, cuda_count: int = 0) -> str | None:
        plan = plan_devices(
            infra["device"], infra["gpu"]["devices"], infra["nproc_per_node"],
            cuda_visible_devices=None, cuda_count=cuda_count, where="worker",
        )  # fmt: skip
        return cpu_reason(infra, plan)

    assert reason(_infra()) == "no GPU visible"
    assert reason(_infra(gpu_devices="none"), cuda_count=2) == "infra.gpu.devices=none"
    assert reason(_infra(device="cpu"), cuda_count=2) is None
    assert reason(_infra(), cuda_count=2) is None


def test_eval_line() -> None:
    metrics = {"rollout/reward_mean": 0.4123, "eval/accuracy": 0.375, "perf/step_s": 0.213}
    assert format_eval_line(50, 1200, metrics) == (
        "step 50/1200: reward 0.412, eval/accuracy 0.375, step 0.21s"
    )
    assert format_eval_line(0, 1200, {"eval/accuracy": 0.05}) == (
        "step 0/1200: eval/accuracy 0.050 (before training)"
    )


# --- through python train.py ----------------------------------------------------------------


def _messages(text: str, level: str = "INFO") -> list[str]:
    """The trainer's messages at ``level`` in Hydra's job-logging format (console, train.log)."""
    marker = f"[astrai.training.trainer][{level}] - "
    return [line.split(marker, 1)[1] for line in text.splitlines() if marker in line]


def test_train_py_logs_banner_eval_lines_and_the_gpu_warning(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    args = [
        *QUICK,
        "trainer.progress_bar=true",  # on, but stderr is no terminal here: no bar drawn
        "infra.gpu.devices=[0,2]",
        f"hydra.run.dir={run_dir}",
    ]
    # train.py's main in this process (tests/train_runs.py)
    result = run_train_in_process(args, cwd=tmp_path, extra_env={"CUDA_VISIBLE_DEVICES": ""})
    assert result.returncode == 0, result.stderr[-2000:]
    log = (run_dir / "train.log").read_text()
    banner = [
        f"astrai: online_grpo on addition, run dir {run_dir}",
        "  device: cpu, 1 process (no GPU visible)",
        "  model: tiny, 64,704 parameters",
        "  task: addition (87 train / 13 eval prompts, 8 evaluated); reward: partial "
        "(partial_credit); 2 steps, max_new_tokens 4",
        "  lr: 0.001, warmup_cosine (warmup_steps 0, min_lr_ratio 0.0) over 16 optimizer steps",
        f"  tensorboard --logdir {run_dir}/tb",
    ]
    warning = (
        "infra.gpu.devices=[0,2] ignored: no GPU is visible, training on the CPU "
        "(1 process); infra.gpu.devices=none trains on the CPU without this warning"
    )
    for text in (result.stdout, log):  # the console and train.log
        messages = _messages(text)
        assert messages[:6] == banner
        assert messages[6] == "step 0/2: eval/accuracy 0.000 (before training)"
        assert [m.split(":")[0] for m in messages[7:]] == ["step 1/2", "step 2/2"]
        assert all(", eval/accuracy " in m and m.endswith("s") for m in messages[7:])
        assert _messages(text, "WARNING") == [warning]  # once
    # tqdm's bar only on a terminal (tests/training/test_progress.py): no "\r" redraws here
    assert "eval_acc=" not in result.stderr
    assert "\r" not in result.stdout + result.stderr + log


def test_default_run_logs_no_warning(caplog: pytest.LogCaptureFixture, tmp_path: Path) -> None:
    cfg = compose_config([*QUICK, "trainer.total_steps=1"])
    with caplog.at_level(logging.INFO, logger="astrai"):
        Run(cfg, tmp_path, job_context=([], {"model": "tiny", "reward": "partial"})).fit()
    messages = [r.getMessage() for r in caplog.records if r.name == "astrai.training.trainer"]
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    assert messages[0] == f"astrai: online_grpo on addition, run dir {tmp_path}"
    assert messages[1].startswith("  device: ")  # cpu (no GPU visible), or this machine's GPU
    assert messages[2:6] == [
        "  model: tiny, 64,704 parameters",
        "  task: addition (87 train / 13 eval prompts, 8 evaluated); reward: partial "
        "(partial_credit); 1 step, max_new_tokens 4",
        "  lr: 0.001, warmup_cosine (warmup_steps 0, min_lr_ratio 0.0) over 8 optimizer steps",
        f"  tensorboard --logdir {tmp_path}/tb",
    ]
    assert [m.split(":")[0] for m in messages[6:]] == ["step 0/1", "step 1/1"]


def test_banner_says_what_a_lagging_run_trains_with() -> None:
    lagging = dataclasses.replace(CPU_RUN, policy_lag=(2, "recompute", "token_truncate"))
    lines = format_banner(lagging)
    assert lines[5] == (
        "  rollouts up to 2 updates behind the policy: π_old recomputed, token_truncate correction"
    )
    assert lines[6].startswith("  tensorboard") and len(lines) == 7


@pytest.mark.slow  # ~3 s: a lag-1 run through train.py's main
def test_max_policy_lag_alone_runs_and_announces_the_correction_it_chose(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    args = [*QUICK, "train_type.max_policy_lag=1", f"hydra.run.dir={run_dir}"]
    result = run_train_in_process(args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    messages = _messages((run_dir / "train.log").read_text())
    line = (
        "  rollouts up to 1 update behind the policy: π_old recomputed, token_truncate correction"
    )
    assert messages[5] == line
    rows = [json.loads(r) for r in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["step"] == 2 and rows[-1]["rollout/policy_lag"] == 1  # it did lag
    assert "rollout/is_ratio_max" in rows[-1]  # and recomputed π_old
    refused = run_train_in_process(
        [*QUICK, "train_type.max_policy_lag=1", "engine.old_logprobs=bypass"], cwd=tmp_path
    )
    [error] = refused.stderr.strip().splitlines()
    assert refused.returncode == 2 and "engine.old_logprobs=bypass" in error, error
