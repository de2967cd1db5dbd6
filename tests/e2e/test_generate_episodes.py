"""``python -m astrai.generate`` on a checkpoint of a run with an environment: each prompt is
played as one episode through the run's episode runner, its turns printed (issue 50, part 6)."""

from __future__ import annotations

from pathlib import Path

import pytest
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
    assert generate_cli.main([str(run_dir), "--task"]) == 2  # not built for episodes
    assert capsys.readouterr().err == (
        "astrai.generate: --task with a run of env=... is not built: give prompts\n"
    )
