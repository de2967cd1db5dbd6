"""Episodes through the real trainer (issue 50's acceptance). Faults in a user's environment
cost their episodes, never the run: a step that hangs, one that raises and one that floods 1 MB
of text each fail one masked episode, counted in ``env/*``, while training goes on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.episode_envs import TWO_TURNS
from tests.helpers import compose_config

from astrai.training.run import Run

JOB = [
    "debug=quick",
    "env=custom",
    "env._target_=tests.episode_envs.Faulty",
    "env.parser=none",
    "env.max_turns=3",
    "env.step_timeout_s=0.2",
    "trainer.total_steps=3",
    "trainer.eval_every=3",
    "train_type.prompts_per_step=8",
    "train_type.group_size=2",
    "ckpt.every_steps=0",
]


@pytest.mark.slow  # ~1.2 s: the fast suite's budget (tests/rollout/test_episodes.py: the runner)
def test_hung_raising_and_flooding_steps_each_cost_their_episode(tmp_path: Path) -> None:
    trainer = Run(compose_config(JOB), tmp_path)
    trainer.fit()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2, 3]
    problems = [trainer.parts.task.train_problems(trainer.parts.cfg.seed, i, 8) for i in range(3)]
    for row, batch in zip(rows[1:], problems, strict=True):
        # every prompt of a row starting with 1, 2 or 3 fails both its episodes; 1 hangs
        faulty = sum(p.text[0] in "123" for p in batch) / len(batch)
        hung = sum(p.text[0] == "1" for p in batch) / len(batch)
        assert row["env/failed"] == faulty, (row, [p.text for p in batch])
        assert row["env/timeouts"] == hung
    assert any(r["env/failed"] > 0 for r in rows[1:])
    assert any(r["env/timeouts"] > 0 for r in rows[1:])
    # the draw holds every kind of fault (hang, raise, flood): each was survived
    assert {"1", "2", "3"} <= {p.text[0] for batch in problems for p in batch}
    assert trainer.started.state.step == 3


def test_recomputed_old_logprobs_agree_with_the_sampler_on_sampled_tokens(tmp_path: Path) -> None:
    """``engine.old_logprobs=recompute`` on episodes: the mismatch statistics are over the
    sampled tokens (an observation's behaviour logprob is no sample's), so the trainer's π_old
    agrees with the torch sampler's logprobs as it does on one-turn responses."""
    cfg = compose_config(["debug=quick", *TWO_TURNS, "engine.old_logprobs=recompute"])
    trainer = Run(cfg, tmp_path)
    trainer.fit()
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "rollout/logprob_diff_max" in r]
    assert [r["step"] for r in steps] == [1, 2]
    assert all(r["rollout/logprob_diff_max"] < 1e-5 for r in steps), steps
    assert all(r["rollout/observation_token_frac"] > 0 for r in steps)
