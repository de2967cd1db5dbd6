"""The "Your own model" workflow through the real CLIs: ``train.py model=hf``, then
``python -m astrai.export`` and ``astrai.generate`` (its ``main``, in-process) on what it
wrote."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import transformers  # the hf extra; `make test` installs it
from tests.helpers import run_main
from tests.hf_models import copy_with_added_token, save_tiny_hf_model
from tests.train_runs import QUICK, run_train_in_process

from astrai.checkpoints.policy import load_checkpoint_policy
from astrai.export import main as export_main
from astrai.generate import main as generate_main


def _module(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def _generate(args: list[str]) -> subprocess.CompletedProcess:
    """``python -m astrai.generate args``, in-process (``main``); tests/e2e/test_generate.py runs
    the real entry point."""
    return run_main(generate_main, args)


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_hf_model(tmp_path_factory.mktemp("hf") / "qwen2-tiny", "qwen2")


@pytest.fixture(scope="module")
def ppo_run(hf_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two PPO steps on the Qwen2-style checkpoint (left with its checkpoint)."""
    cwd = tmp_path_factory.mktemp("ppo")
    run_dir = cwd / "run"
    # a KL penalty in the reward: non-zero returns even at task reward 0, so the critic learns
    args = ["model=hf", f"model.path={hf_dir}", "train_type=online_ppo", "train_type.kl_coef=0.1"]
    args += QUICK
    result = run_train_in_process([*args, f"hydra.run.dir={run_dir}"], cwd=cwd)  # train.py's main
    assert result.returncode == 0, result.stderr[-3000:]
    return run_dir


def test_training_starts_from_the_pretrained_weights(hf_dir: Path, ppo_run: Path) -> None:
    from safetensors.torch import load_file

    reference = load_file(str(ppo_run / "checkpoints" / "reference.safetensors"))
    source = load_file(str(hf_dir / "model.safetensors"))
    assert set(reference) == set(source)  # tied lm_head stored once, as save_pretrained does
    for name, tensor in source.items():
        assert torch.equal(reference[name], tensor), name
    checkpoint = ppo_run / "checkpoints" / "step_2"
    assert (checkpoint / "tokenizer_config.json").is_file()  # the model's tokenizer travels
    summary = json.loads((ppo_run / "summary.json").read_text())
    assert summary["step"] == 2
    rows = [json.loads(line) for line in (ppo_run / "metrics.jsonl").read_text().splitlines()]
    assert all(torch.isfinite(torch.tensor(r["loss/policy"])) for r in rows if "loss/policy" in r)


def test_export_cli_writes_policy_and_critic_transformers_load(
    hf_dir: Path, ppo_run: Path, tmp_path: Path
) -> None:
    out = tmp_path / "export"
    result = _module(["astrai.export", str(ppo_run), str(out)], cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["wrote", str(out), "wrote", str(out / "critic")]
    # the source model's generation_config.json, carried by the checkpoint, is kept
    generation = json.loads((out / "generation_config.json").read_text())
    assert generation == json.loads((hf_dir / "generation_config.json").read_text())
    assert not (out / "critic" / "generation_config.json").exists()  # it generates nothing
    trained = load_checkpoint_policy(ppo_run)
    assert trained.critic is not None
    ids = torch.tensor(
        [trained.tokenizer.encode_prompt("3+4="), trained.tokenizer.encode_prompt("9+9=")]
    )
    policy = transformers.AutoModelForCausalLM.from_pretrained(str(out)).eval()
    assert type(policy).__name__ == "Qwen2ForCausalLM"
    critic = transformers.AutoModelForTokenClassification.from_pretrained(str(out / "critic"))
    with torch.no_grad():
        expected_logits = trained.policy(ids).logits
        expected_values = trained.critic(ids)
        assert torch.allclose(policy(input_ids=ids).logits, expected_logits, atol=1e-4, rtol=0)
        values = critic.eval()(input_ids=ids).logits[..., 0]
        assert torch.allclose(values, expected_values, atol=1e-4, rtol=0)
    assert expected_values.abs().max() > 0  # the head was trained away from its zero init


def test_export_refuses_an_existing_output_and_names_it(ppo_run: Path, tmp_path: Path) -> None:
    out = tmp_path / "taken"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    result = run_main(export_main, [str(ppo_run), str(out)])  # in-process; the real one: above
    assert result.returncode == 2
    assert (
        result.stderr.strip()
        == f"astrai.export: {out} already exists; choose a new output directory"
    )
    assert [p.name for p in out.iterdir()] == ["keep.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]  # no temporaries left


def test_export_of_an_incomplete_checkpoint_fails_cleanly(ppo_run: Path, tmp_path: Path) -> None:
    import shutil

    broken = tmp_path / "step_2"
    shutil.copytree(ppo_run / "checkpoints" / "step_2", broken)
    (broken / "model.safetensors").unlink()
    result = run_main(export_main, [str(broken), str(tmp_path / "out")])  # in-process
    assert result.returncode == 2
    assert "model.safetensors: file is missing" in result.stderr
    assert not (tmp_path / "out").exists()


def test_generate_cli_scores_task_prompts(ppo_run: Path, tmp_path: Path) -> None:
    result = _generate([str(ppo_run), "--task", "addition", "--n", "4"])
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"# {ppo_run / 'checkpoints' / 'step_2'}"
    assert lines[1] == "# task addition (the run's), max_new_tokens 4, greedy, fp32"
    answers = lines[2:6]
    assert len(answers) == 4 and all(" -> " in a and "  reward " in a for a in answers)
    rewards = [float(a.rsplit("reward ", 1)[1]) for a in answers]
    assert lines[6].startswith(f"# mean reward {sum(rewards) / 4:.3f}, accuracy ")


def test_generate_cli_answers_free_prompts_from_an_hf_dir(hf_dir: Path, tmp_path: Path) -> None:
    args = [str(hf_dir), "1+1=", "2+2=", "--n", "3", "--temperature", "1"]
    result = _generate([*args, "--max-new-tokens", "5"])
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()[2:]
    assert [line.split(" -> ")[0] for line in lines] == ["'1+1='"] * 3 + ["'2+2='"] * 3
    # greedy equals transformers' greedy answer
    greedy = _generate([str(hf_dir), "1+1=", "--max-new-tokens", "5"])
    model = transformers.AutoModelForCausalLM.from_pretrained(str(hf_dir)).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(hf_dir))
    ids = tokenizer("1+1=", return_tensors="pt").input_ids
    out = model.generate(ids, max_new_tokens=5, do_sample=False, eos_token_id=2, pad_token_id=0)
    text = tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
    assert greedy.stdout.splitlines()[1] == "# max_new_tokens 5, greedy, fp32"
    assert greedy.stdout.splitlines()[2] == f"'1+1=' -> {text.strip()!r}"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["/nonexistent/run", "1+1="], "no checkpoint or model directory at /nonexistent/run"),
        (
            ["{hf}", "--task", "nope"],
            "--task takes an embedded task (addition, hidden_number, products, reverse",
        ),
        (["{hf}", "--task", "dataset"], "not 'dataset'"),
        (["{hf}", "1+1=", "--device", "banana"], "--device banana: not a torch device"),
        (["{hf}", "1+1=", "--device", "meta"], "--device meta: use cpu or cuda[:N]"),
    ],
)
def test_generate_cli_bad_input_exits_2(
    hf_dir: Path, tmp_path: Path, args: list[str], needle: str
) -> None:
    args = [a.replace("{hf}", str(hf_dir)) for a in args]
    result = _generate(args)
    assert result.returncode == 2
    assert needle in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_generate_cli_refuses_a_tokenizer_larger_than_the_model(
    hf_dir: Path, tmp_path: Path
) -> None:
    # "abc" becomes id 48 of a 48-row embedding: before the check, an IndexError in
    # torch.embedding (a device-side assert on CUDA)
    grown = copy_with_added_token(hf_dir, tmp_path / "grown")
    result = _generate([str(grown), "abc"])
    assert result.returncode == 2
    assert result.stderr == (
        f"astrai.generate: {grown / 'tokenizer.json'}: the tokenizer has 49 ids but "
        "config.json's vocab_size is 48 (the model's embedding rows); resize the model's "
        "embeddings or remove the added tokens\n"
    )


@pytest.mark.slow  # three refused starts through train.py's main, in-process
def test_config_errors_name_the_model_directory_or_file(hf_dir: Path, tmp_path: Path) -> None:
    no_tokenizer = tmp_path / "no-tokenizer"
    no_tokenizer.mkdir()
    for name in ("config.json", "model.safetensors"):
        (no_tokenizer / name).write_bytes((hf_dir / name).read_bytes())
    cases = {
        "model=hf": "model.path must name a local Hugging Face model directory",
        "model=hf model.path=/nonexistent/model": "model.path: no model directory at /nonexistent",
        f"model=hf model.path={no_tokenizer}": (
            f"tokenizer file not found: {no_tokenizer}/tokenizer.json"
        ),
    }
    work = tmp_path / "work"
    work.mkdir()
    for override, needle in cases.items():
        result = run_train_in_process(override.split(), cwd=work)
        assert result.returncode == 2, override
        assert result.stderr.strip().startswith("astrai: config error: ")
        assert needle in result.stderr, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
    assert list(work.iterdir()) == []  # nothing written
