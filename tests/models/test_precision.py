"""``infra.precision`` reaches sampling, evaluation and ``generate`` as an argument, never
through torch's ambient autocast state (issue 32, 9): a bf16 run's evaluation and ``generate``
on its checkpoint decode in bf16 as its rollouts do, and ``fp32`` means float32 even inside an
autocast the caller left on.

What a decode ran in is read off the KV caches it made (``models.llama.new_cache``, spied):
bfloat16 under bf16, float32 under fp32."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from tests.helpers import compose_config

import astrai.models.llama as llama
from astrai.generate import main as generate_main
from astrai.rollout.collect import collect_rollout
from astrai.training.evaluation import evaluate
from astrai.training.run import Run

QUICK = ["debug=quick", "logger.tensorboard=false"]


@pytest.fixture
def cache_dtypes(monkeypatch: pytest.MonkeyPatch) -> list[torch.dtype]:
    made: list[torch.dtype] = []
    original = llama.new_cache

    def spy(*args: object, **kwargs: object) -> llama.KVCache:
        cache = original(*args, **kwargs)  # type: ignore[arg-type]
        made.append(cache.keys[0].dtype)
        return cache

    monkeypatch.setattr(llama, "new_cache", spy)
    return made


@pytest.fixture(scope="module")
def trainer(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return Run(compose_config(QUICK), tmp_path_factory.mktemp("run"))


def test_evaluation_decodes_in_the_precision_it_is_told(
    trainer: Run, cache_dtypes: list[torch.dtype]
) -> None:
    problems = trainer.parts.eval_problems[:2]
    evaluate(
        trainer.parts.policy,
        trainer.parts.tokenizer,
        trainer.parts.reward,
        problems,
        4,
        precision="bf16",
    )
    assert cache_dtypes and set(cache_dtypes) == {torch.bfloat16}
    cache_dtypes.clear()
    with torch.autocast("cpu", dtype=torch.bfloat16):  # an autocast left on does not count
        evaluate(
            trainer.parts.policy,
            trainer.parts.tokenizer,
            trainer.parts.reward,
            problems,
            4,
            precision="fp32",
        )
    assert cache_dtypes and set(cache_dtypes) == {torch.float32}


def test_rollouts_sample_in_the_precision_they_are_told(
    trainer: Run, cache_dtypes: list[torch.dtype]
) -> None:
    problems = trainer.parts.task.train_problems(0, 0, 2)
    args = (
        trainer.parts.policy,
        trainer.parts.tokenizer,
        problems,
        2,
        trainer.parts.strategy.sampling,
    )
    collect_rollout(*args, trainer.parts.reward, 0, precision="bf16")
    assert cache_dtypes and set(cache_dtypes) == {torch.bfloat16}


def test_generate_decodes_a_bf16_runs_checkpoint_in_bf16(
    tmp_path: Path, cache_dtypes: list[torch.dtype], capsys: pytest.CaptureFixture
) -> None:
    run = tmp_path / "run"
    Run(compose_config([*QUICK, "trainer.total_steps=1"]), run).fit()
    cache_dtypes.clear()  # the run's own (fp32) decoding
    checkpoint = run / "checkpoints" / "step_1"
    # the same weights as a bf16 run's: its config says how its rollouts decoded
    config = checkpoint / "config.yaml"
    config.write_text(config.read_text().replace("precision: fp32", "precision: bf16"))
    assert generate_main([str(checkpoint), "1+2="]) == 0
    assert capsys.readouterr().out.splitlines()[1].endswith(", greedy, bf16")
    assert cache_dtypes and set(cache_dtypes) == {torch.bfloat16}
    cache_dtypes.clear()
    assert generate_main([str(checkpoint), "1+2=", "--precision", "fp32"]) == 0
    assert set(cache_dtypes) == {torch.float32}
