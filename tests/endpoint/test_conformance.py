"""Conformance (issue 62): the calculator played natively (``env=calculator``), by a black-box
agent through the endpoint (``experiment=calculator_agent``: ``examples/agent``) and as a
verifiers taskset (``experiment=calculator_verifiers``: ``examples/verifiers``) with the torch
engine and the same seed gives the same rollouts bit for bit (token ids, masks, rewards, token
scores, behaviour logprobs), so GRPO and PPO train the same weights.

The tiny model is random: each row's first turn starts with a forced ``c`` for half the rows
(``tests/forced_engine.py``; the model samples the rest of the turn, a malformed call the
environment answers ``e``), so calls, replies and second turns are in the episodes on every CPU,
and the other rows are the model's own.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

import pytest
import torch
from tests.forced_engine import ForcedFirstTurn
from tests.helpers import compose_config
from torch import Tensor

from astrai.models.llama import LlamaConfig, LlamaForCausalLM
from astrai.models.tokenizer import CharTokenizer
from astrai.rollout.engines.engine import NoKnobs, TorchEngine
from astrai.rollout.engines.sampler import SamplingConfig
from astrai.rollout.episodes.env_spec import env_spec
from astrai.rollout.episodes.rollout import collect_episodes
from astrai.rollout.rollout import Rollout
from astrai.tasks.base import Problem
from astrai.training.run import Run

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
LIMITS = {"parser": "calc_line", "max_turns": 3, "max_observation_tokens": 16, "workers": "thread"}
NATIVE = {"_target_": "astrai.envs.calculator.Calculator", **LIMITS}
# each way of playing: its env node, the same with the call credit off, its experiment, the
# override that turns the credit off there
PLAYERS = {
    "agent": (
        {"_target_": "astrai.endpoint.agent.AgentEnvironment", "agent": "calculator_agent.play",
         **LIMITS},
        {"agent_args": {"call_reward": 0.0}},
        "calculator_agent",
        "env.agent_args.call_reward=0",
    ),
    "verifiers": (  # the taskset's Env answers a call (the turn's text: parser none)
        {"_target_": "astrai.endpoint.verifiers_env.VerifiersEnvironment",
         "taskset": "calculator_taskset", "verifiers_max_turns": 3, **LIMITS, "parser": "none"},
        {"taskset_args": {"task": {"call_reward": 0.0}}},
        "calculator_verifiers",
        "env.taskset_args.task.call_reward=0",
    ),
    # OpenEnv's server in a process of its own; rewards per turn, as the native calculator's:
    # the call credit stays on (None) under PPO too
    "openenv": (
        {"_target_": "astrai.envs.openenv_env.OpenEnvEnvironment",
         "app": "calculator_server:app", "observation_role": "tool", "metric_keys": ["solved"],
         **LIMITS, "parser": "none"},
        None,
        "calculator_openenv",
        None,
    ),
}  # fmt: skip
PROBLEMS = [Problem("47*86=", "4042", "47*86="), Problem("35*62=", "2170", "35*62=")]


def _examples_on_path(player: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``examples/<player>`` importable here and in the processes this one starts (OpenEnv's
    server)."""
    monkeypatch.syspath_prepend(str(EXAMPLES / player))
    path = [str(EXAMPLES / player), os.environ.get("PYTHONPATH", "")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, path)))


def _rollout(node: dict, tokenizer: CharTokenizer) -> Rollout:
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig())
    spec = env_spec(node)
    assert spec is not None
    forced = [tokenizer.encode("c", add_bos=False) if row % 2 else [] for row in range(16)]
    engine = ForcedFirstTurn(TorchEngine(NoKnobs(), model, tokenizer), tokenizer, forced)
    sampling = SamplingConfig(max_new_tokens=8, temperature=1.0)
    generator = torch.Generator().manual_seed(3)
    return collect_episodes(model, tokenizer, PROBLEMS, 8, sampling, spec, 2, engine, generator)


@pytest.mark.slow  # ~3 s: 64 episodes each way through the torch sampler (fast-suite budget)
@pytest.mark.parametrize("player", sorted(PLAYERS))
def test_the_rollout_through_the_endpoint_is_the_native_one_bit_for_bit(
    player: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _examples_on_path(player, monkeypatch)
    node, no_credit, _, _ = PLAYERS[player]
    tokenizer = CharTokenizer()
    # the call credit off: every reward on the answer turn, the episode's last sampled token
    native = _rollout({**NATIVE, **({} if no_credit is None else {"call_reward": 0.0})}, tokenizer)
    agent = _rollout({**node, **(no_credit or {})}, tokenizer)
    for field in dataclasses.fields(Rollout):
        mine, theirs = getattr(agent, field.name), getattr(native, field.name)
        if isinstance(mine, torch.Tensor):
            assert torch.equal(mine, theirs), field.name
    assert agent.responses == native.responses
    # with it (0.5), the agent's episode reward is the native sum, on the last sampled token
    # (the native call credit sits on the call's turn: what PPO reads differs, GRPO's does not)
    native, agent = _rollout(NATIVE, tokenizer), _rollout(node, tokenizer)
    assert torch.equal(agent.rewards, native.rewards)
    assert torch.equal(agent.response_ids, native.response_ids)
    assert torch.allclose(agent.token_scores.sum(-1), native.token_scores.sum(-1))
    assert native.rewards.max() > 0  # some call credit was earned
    # calls were made and answered: "c" and what the model typed after it (a malformed call,
    # answered "e"; well-formed ones: tests/endpoint/test_agent_episodes.py), then more turns
    stats = native.episode_stats
    assert (stats["turns"] > 1).sum() >= 8 and stats["parse_errors"].sum() >= 8
    assert agent.episode_stats["failed"].sum() == 0


def _two_steps(overrides: list[str], run_dir: Path) -> tuple[list[dict[str, float]], list[Tensor]]:
    run = Run(compose_config(overrides), run_dir)
    try:
        metrics = [run.train_step(), run.train_step()]
        weights = [p.detach().clone() for p in run.parts.policy.parameters()]
    finally:
        run.close()
    return metrics, weights


# timings, and env/tool_errors: a metric the native calculator reports of itself (the agent
# reports none: a metric it returned would be env/<name> too)
TIMING = re.compile(r"^time/|_s$|per_s|throughput|memory|peak|mfu|^env/tool_errors$")
TWO_STEPS = ["trainer.total_steps=2", "train_type.prompts_per_step=4", "train_type.group_size=4",
             "train_type.minibatches=1", "logger.tensorboard=false", "ckpt.every_steps=0",
             "env.workers=thread"]  # fmt: skip


@pytest.mark.slow  # ~10 s: four in-process runs of two steps
@pytest.mark.parametrize("player", sorted(PLAYERS))
@pytest.mark.parametrize("train_type", ["online_grpo", "online_ppo"])
def test_grpo_and_ppo_train_the_same_weights_on_either_way_of_playing(
    train_type: str, player: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _examples_on_path(player, monkeypatch)
    _, _, experiment, no_credit = PLAYERS[player]
    # GRPO: the call credit (0.5) summed into the episode's reward. PPO reads each turn's reward
    # on its own token: the endpoint's lands on the last one, so the native calculator pays only
    # its answer turn here (call_reward 0), as the other way of playing
    native_reward, other_reward = (
        ([], [])
        if train_type == "online_grpo" or no_credit is None
        else (["env.call_reward=0"], [no_credit])
    )
    common = [f"train_type={train_type}", *TWO_STEPS]
    native = _two_steps(["experiment=calculator", *common, *native_reward], tmp_path / "native")
    agent = _two_steps([f"experiment={experiment}", *common, *other_reward], tmp_path / "other")
    for mine, theirs in zip(agent[0], native[0], strict=True):
        shared = {k for k in mine.keys() & theirs.keys() if not TIMING.search(k)}
        if player != "agent":  # the environment reads the calls (parser none): no parse errors
            shared.discard("env/parse_errors")
        assert {"loss/policy", "rollout/reward_mean", "policy/grad_norm", "env/turns"} <= shared
        assert {k: mine[k] for k in shared} == {k: theirs[k] for k in shared}
    assert all(torch.equal(a, b) for a, b in zip(agent[1], native[1], strict=True))
