"""An episode as the model saw it, where a user looks (issue 58): ``python -m astrai.generate
--show-tokens`` prints each episode's tokens after its turns, and a run with an environment logs
its rollout samples from step 1 as those views (``training.sample_log``)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tests.train_runs import run_train_in_process

from astrai import generate as generate_cli
from astrai.generation_engine import Transcript, episode_report
from astrai.tasks.base import Problem


def test_episode_report_puts_each_view_under_its_episode_line() -> None:
    problems = [Problem(prompt="1*2=", answer="2", text="1*2=")] * 2
    played = [
        Transcript("a: '2'  reward 1.000, solved", 1.0, True, "<bos>1*2=[[2<eos>]]"),
        Transcript("a: '3'  reward 0.000, done", 0.0, False, "<bos>1*2=[[3<eos>]]"),
    ]
    assert episode_report(problems, played, scored=False) == [
        "'1*2=' -> a: '2'  reward 1.000, solved",
        "'1*2=' -> a: '3'  reward 0.000, done",
    ]
    assert episode_report(problems, played, scored=True, views=True) == [
        "'1*2=' -> a: '2'  reward 1.000, solved",
        "<bos>1*2=[[2<eos>]]",
        "",
        "'1*2=' -> a: '3'  reward 0.000, done",
        "<bos>1*2=[[3<eos>]]",
        "",
        "# mean reward 0.500, accuracy 0.500",
    ]


@pytest.mark.slow  # ~5 s: a training run first
def test_generate_shows_tokens_and_the_run_logged_its_episodes_from_step_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "run"
    args = ["debug=quick", "experiment=calculator", "trainer.total_steps=2", "trainer.eval_every=2"]
    result = run_train_in_process([*args, f"hydra.run.dir={run_dir}"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]

    assert generate_cli.main([str(run_dir), "47*86=", "--show-tokens"]) == 0
    out = capsys.readouterr().out.splitlines()
    line, view, blank = out[2:5]
    assert line.startswith("'47*86=' -> a: '") and blank == "" and len(out) == 5
    assert view.startswith("<bos>") and "47*86=" in view.split("[[")[0]
    # the marked spans are the turns the line calls sampled (``a:``), special tokens kept
    turns = line.split(" -> ", 1)[1].split("  reward ")[0].split(" | ")
    said = [ast.literal_eval(part[3:]) for part in turns if part.startswith("a: ")]
    marked = re.findall(r"\[\[(.*?)\]\]", view)
    assert [span.replace("<eos>", "") for span in marked] == said
    replies = [ast.literal_eval(part[5:]) for part in turns if part.startswith("env: ")]
    assert all(reply in view for reply in replies)

    # logged at step 1 (logger.samples_every is 10): each row the episode as the model saw it
    events = EventAccumulator(str(run_dir / "tb"), size_guidance={"tensors": 0})
    events.Reload()
    tables = {e.step: e.tensor_proto.string_val[0].decode()
              for e in events.Tensors("samples/rollout/text_summary")}  # fmt: skip
    assert sorted(tables) == [1]
    rows = tables[1].splitlines()[2:]
    assert rows and all(row.split("` | `")[1].startswith("<bos>") for row in rows)
    assert all(re.search(r"\[\[.+\]\]", row) for row in rows)  # the sampled spans marked
