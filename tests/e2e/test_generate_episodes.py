"""``python -m astrai.generate`` on a checkpoint of a run with an environment: each prompt is
played as one episode through the run's episode runner, its turns printed (issue 50, part 6);
``--task`` plays the run's held-out rows and scores them as the run's evaluation did."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from tests.episode_envs import TWO_TURNS
from tests.train_runs import run_train_in_process

from astrai import generate as generate_cli


@pytest.mark.slow  # ~4 s: a training run first (the fast suite's budget)
def test_a_prompt_is_played_as_an_episode_of_the_run_s_environment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    args = ["debug=quick", "experiment=calculator", "trainer.total_steps=1", "trainer.eval_every=1"]
    result = run_train_in_process([*args, f"hydra.run.dir={run_dir}"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    status = generate_cli.main([str(run_dir), "47*86=", "33*40="])
    out = capsys.readouterr().out.splitlines()
    assert status == 0
    assert out[1] == "# env astrai.envs.calculator.Calculator, max_new_tokens 8 a turn"
    episodes = out[2:]
    assert [line.split(" -> ")[0] for line in episodes] == ["'47*86='", "'33*40='"]
    for line in episodes:  # the random policy's turns, however many, then how it ended
        turns, ending = line.split(" -> ")[1].split("  reward ")
        assert turns.startswith("a: '") and all(
            part.startswith(("a: '", "env: '")) for part in turns.split(" | ")
        )
        assert ending.split(", ")[1] in ("solved", "truncated", "done"), line
    # --task: the run's held-out rows played as its evaluation plays them, greedy; the mean
    # reward and the share solved are the run's own eval/ metrics of that checkpoint
    logged = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[-1])
    n = OmegaConf.load(run_dir / "config.yaml").trainer.eval_prompts
    assert generate_cli.main([str(run_dir), "--task", "--n", str(n)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].startswith("# env astrai.envs.calculator.Calculator, task products")
    assert len(out) == 2 + n + 1 and all(" -> a: '" in line for line in out[2:-1])
    assert out[-1] == (
        f"# mean reward {logged['eval/reward_mean']:.3f}, accuracy {logged['eval/accuracy']:.3f}"
    )
    assert generate_cli.main([str(run_dir), "--task", "addition"]) == 2  # not its rows
    assert capsys.readouterr().err == (
        "astrai.generate: --task addition: a run of env=astrai.envs.calculator.Calculator "
        "plays its own task's episodes only (--task)\n"
    )


@pytest.mark.slow  # ~4 s: a training run first
def test_task_scores_the_held_out_episodes_as_the_run_s_evaluation_did(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An environment without a ``solved`` metric (``tests.episode_envs.TwoTurns``: rewards
    0, 0.25, 1 or 1.25 from the parity of the sampled text): solved is the reward reaching the
    run's ``accuracy_threshold``, and ``--task`` prints the run's logged eval/ numbers."""
    run_dir = tmp_path / "run"
    args = [
        "debug=quick",
        *TWO_TURNS,
        "trainer.total_steps=1",
        "trainer.eval_every=1",
        "trainer.eval_prompts=8",
    ]
    result = run_train_in_process([*args, f"hydra.run.dir={run_dir}"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    logged = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[-1])
    assert generate_cli.main([str(run_dir), "--task", "--n", "8"]) == 0
    out = capsys.readouterr().out.splitlines()
    rewards = [float(line.split("  reward ")[1].split(",")[0]) for line in out[2:-1]]
    assert len(rewards) == 8 and set(rewards) <= {0.0, 0.25, 1.0, 1.25}
    assert out[-1] == (
        f"# mean reward {logged['eval/reward_mean']:.3f}, accuracy {logged['eval/accuracy']:.3f}"
    )
    assert logged["eval/accuracy"] == sum(r >= 1.0 for r in rewards) / 8
