"""``engine=vllm`` beside the trainer on one device, as TRL's colocate mode runs it (issue 59),
against the recording stand-in (``tests/recording_vllm.py``): the engine sleeps as soon as a
step is sampled (the scoring passes and the update get its memory), wakes after emptying
PyTorch's cache, and while awake its ``gpu_memory_utilization`` is left out of the ``auto``
pass budgets; each rank's engine has its own seed; episodes fit the engine's
``max_model_len``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from tests import recording_vllm
from tests.helpers import compose_config
from tests.scripted_engine import GREEDY, TOKENIZER, Scripted
from tests.train_runs import QUICK

from astrai.models.pass_memory import engine_share, token_budget
from astrai.rollout.engines import in_process_vllm
from astrai.rollout.engines.engine import torch_engine
from astrai.rollout.engines.vllm_settings import VLLMEngineConfig, llm_kwargs, resolve
from astrai.rollout.episodes.env_spec import env_spec
from astrai.rollout.episodes.rollout import engine_positions, play_episodes
from astrai.tasks.arithmetic import ProductTask

CPU = torch.device("cpu")
GIB = 2**30
# an 80 GiB device, 1 KiB per token: ``auto`` takes a quarter of what the engine leaves
ALONE = 20 * 2**20  # 0.25 × 80 GiB / 1 KiB
BESIDE_THE_ENGINE = 14 * 2**20  # 0.25 × (80 − 0.3 × 80) GiB / 1 KiB


def _auto_budget() -> int | None:
    return token_budget("auto", 1024, CPU, memory=80 * GIB)


def test_the_engine_sleeps_once_the_step_is_sampled_before_the_scoring_passes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """One step of a real Trainer: the engine's calls and the trainer's passes in order."""
    from astrai.training.run import Run

    recording_vllm.install(monkeypatch)
    recording_vllm.on_cuda(monkeypatch)
    cfg = compose_config([*QUICK, "engine=vllm", "logger.tensorboard=false"])
    trainer = Run(cfg, tmp_path)
    shares: dict[str, float] = {}

    def recorded(name: str, method: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            recording_vllm.CALLS.append((name, (), {}))
            shares[name] = engine_share(CPU)  # the engine's share while the pass runs
            return method(*args, **kwargs)

        return call

    monkeypatch.setattr(trainer.trainer, "prepare", recorded("prepare", trainer.trainer.prepare))
    monkeypatch.setattr(trainer.trainer, "update", recorded("update", trainer.trainer.update))
    try:
        assert engine_share(CPU) == 0.3  # awake since its start: gpu_memory_utilization
        recording_vllm.CALLS.clear()
        trainer.train_step()
        assert recording_vllm.names() == [
            "LLM.generate",  # the rollout
            "LLM.sleep",  # at once: nothing samples again before the weight sync
            "prepare",  # π_old / reference scoring, with the engine's memory
            "update",
            "empty_cache",
            "LLM.wake_up",  # weights
            "LLM.collective_rpc",
            "reload_weights",
            "LLM.reset_prefix_cache",
            "empty_cache",
            "LLM.wake_up",  # KV cache
        ]
        assert shares == {"prepare": 0.0, "update": 0.0}
        assert engine_share(CPU) == 0.3  # awake again for the next rollout and evaluation
    finally:
        trainer.close()
    assert engine_share(CPU) == 0.0


def test_auto_budgets_leave_out_the_share_of_an_awake_engine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert _auto_budget() == ALONE
    engine = recording_vllm.engine_on(monkeypatch, cuda=True)
    try:
        assert _auto_budget() == BESIDE_THE_ENGINE  # awake from its start
        engine.before_update()
        assert _auto_budget() == ALONE  # asleep: its memory is the trainer's
        engine.sync_weights(recording_vllm.engine_weights(recording_vllm.small_policy()))
        assert _auto_budget() == BESIDE_THE_ENGINE
        # a number set by hand is the user's: left as it is
        assert token_budget(5000, 1024, CPU) == 5000
    finally:
        engine.close()
    assert _auto_budget() == ALONE


def test_each_rank_s_engine_draws_its_own_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(in_process_vllm, "rank", lambda: 3)  # rank 3 of a torchrun job of 4
    monkeypatch.setattr(in_process_vllm, "world_size", lambda: 4)
    engine = recording_vllm.engine_on(monkeypatch, cuda=True, seed=7)
    engine.close()
    (_, _, init), *_ = recording_vllm.CALLS
    assert init["seed"] == 7 + 3  # TRL seeds each colocated engine with its process index
    assert init["distributed_executor_backend"] == "external_launcher"
    settings = resolve(VLLMEngineConfig(seed=7), True)
    assert llm_kwargs(settings, "/m", 64)["seed"] == 7  # one process: engine.seed itself


def test_the_engine_s_max_model_len_bounds_episodes(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = recording_vllm.engine_on(monkeypatch, cuda=False, max_model_len=40)
    default = recording_vllm.engine_on(monkeypatch, cuda=False)
    try:
        assert _auto_budget() == ALONE  # on the CPU an engine holds no share of the device
        assert engine.max_model_len == 40 and default.max_model_len == 64  # the positions
        assert engine_positions(engine, 64) == 40 and engine_positions(default, 64) == 64
        policy = recording_vllm.small_policy()
        assert engine_positions(torch_engine(policy, TOKENIZER), 64) == 64
    finally:
        engine.close()
        default.close()


class ShortEngine(Scripted):
    """A scripted engine that holds ``max_model_len`` tokens per request."""

    def __init__(self, script: list[list[str]], max_model_len: int) -> None:
        super().__init__(script)
        self.limit = max_model_len

    @property
    def max_model_len(self) -> int | None:
        return self.limit


def test_an_episode_stops_where_the_engine_s_requests_end() -> None:
    calculator = "astrai.envs.calculator.Calculator"
    spec = env_spec({"_target_": calculator, "parser": "calc_line", "workers": "thread"})
    assert spec is not None
    (problem,) = ProductTask().train_problems(0, 0, 1)
    a, b = ProductTask().operands(problem.text)
    product = str(a * b)
    opening = len(TOKENIZER.encode(problem.text))
    # room for the opening and the tool call ("c" + stop), not for the calculator's reply: a
    # request holds the episode so far + max_new_tokens (6); the model's positions (64) would
    # let the episode answer in a second turn
    limit = opening + 2 + GREEDY.max_new_tokens
    engine = ShortEngine([["c"], [product]], limit)
    (episode,) = play_episodes(engine, TOKENIZER, spec, [problem], 1, GREEDY, 64, None, 0, CPU)
    assert episode.truncated and len(episode.tokens.ids) == opening + 2
    assert all(len(p) + GREEDY.max_new_tokens <= limit for call in engine.prompts for p in call)
