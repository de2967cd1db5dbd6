"""A checkpoint knows what it is: its step against its directory name and ``total_steps``, and
the fingerprint of the setup that wrote it, checked by resume and ``verify`` alike."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import save_file
from tests.helpers import compose_config

from astrai.checkpoints import io
from astrai.checkpoints.__main__ import main as checkpoints_cli
from astrai.checkpoints.identity import (
    FINGERPRINT_KEYS,
    check_checkpoint_identity,
    model_fingerprint,
    saved_fingerprint,
)
from astrai.checkpoints.layout import CheckpointError, list_checkpoints, stale_temporaries
from astrai.metrics.writers import MetricsFileError, read_metrics_for_resume
from astrai.models.llama import LlamaConfig
from astrai.training.resume import check_metrics_for_resume
from astrai.training.run import Run

TRAIN = str(Path(__file__).resolve().parents[2] / "train.py")
QUICK = ["debug=quick", "trainer.total_steps=2", "ckpt.every_steps=1", "ckpt.keep_last=3"]

FINGERPRINT: dict[str, Any] = {
    "train_type": "online_grpo",
    "model": {"hidden_size": 64, "num_hidden_layers": 1, "vocab_size": 48},
    "task": {"_target_": "astrai.tasks.arithmetic.AdditionTask", "num_digits": 1},
    "seed": 0,
    "world_size": 1,
    "parallel": "ddp",
}


def write_checkpoint_dir(root: Path, name: str, **state: Any) -> Path:
    """A hand-built complete GRPO checkpoint ``root/name`` (and the run's reference next to it)
    whose ``trainer_state.json`` holds ``state`` over sound defaults."""
    path = root / name
    path.mkdir(parents=True)
    weights = {"w": torch.ones(2, 2)}
    save_file(weights, str(path / "model.safetensors"))
    save_file(weights, str(root / "reference.safetensors"))
    (path / "config.json").write_text(json.dumps({"hidden_size": 64}))
    (path / "tokenizer.json").write_text("{}")
    torch.save({"state": {}}, path / "optimizer.pt")
    torch.save({"last_epoch": 0}, path / "scheduler.pt")
    (path / "config.yaml").write_text("trainer:\n  total_steps: 20\n")
    full = {
        "train_type": "online_grpo",
        "step": 6,
        "total_steps": 20,
        "fingerprint": FINGERPRINT,
        "policy_version": 6,
        "initial_metrics": {},
        "rng": {},
    }
    full.update(state)
    (path / "trainer_state.json").write_text(
        json.dumps({k: v for k, v in full.items() if v != ...})
    )
    return path


TAMPERED = [  # (directory, step, expected problem)
    ("step_6", 4, "step 4 does not match its directory step_6"),
    ("step_100", 100, "step 100 is beyond trainer.total_steps=20"),
    ("step_6", -5, "step -5 is negative"),
    ("step_6", "6", "missing or invalid 'step' ('6')"),
]


def refusal(checkpoint: Path, *args: Any) -> str:
    with pytest.raises(CheckpointError) as err:
        check_checkpoint_identity(
            checkpoint, io.load_json(checkpoint / "trainer_state.json"), *args
        )
    return str(err.value)


@pytest.mark.parametrize(("name", "step", "problem"), TAMPERED)
def test_a_tampered_step_is_refused_in_one_line_naming_the_file(
    tmp_path: Path, name: str, step: Any, problem: str
) -> None:
    checkpoint = write_checkpoint_dir(tmp_path, name, step=step)
    message = refusal(checkpoint, 20, FINGERPRINT)
    assert message == f"{checkpoint / 'trainer_state.json'}: {problem}"


@pytest.mark.parametrize(("name", "step", "problem"), TAMPERED)
def test_verify_refuses_a_tampered_step_with_the_line_resume_prints(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, step: Any, problem: str
) -> None:
    checkpoint = write_checkpoint_dir(tmp_path, name, step=step)
    expected = refusal(checkpoint, 20)
    assert checkpoints_cli(["verify", str(checkpoint)]) == 2
    assert capsys.readouterr().err == f"astrai: checkpoint error: {expected}\n"
    # the run dir's verify refuses it too
    assert checkpoints_cli(["verify", str(tmp_path)]) == 2


def test_verify_takes_total_steps_from_the_run_config_of_an_older_checkpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    checkpoint = write_checkpoint_dir(tmp_path, "step_30", step=30, total_steps=...)
    assert checkpoints_cli(["verify", str(checkpoint)]) == 2
    assert "step 30 is beyond trainer.total_steps=20" in capsys.readouterr().err


def test_verify_accepts_a_sound_checkpoint_and_prints_its_fingerprint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    checkpoint = write_checkpoint_dir(tmp_path, "step_6")
    assert checkpoints_cli(["verify", str(checkpoint)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"OK    {checkpoint} (online_grpo)"
    assert json.loads(out[1].split("fingerprint: ", 1)[1]) == FINGERPRINT


def test_a_different_setup_is_refused_naming_each_key_and_both_values(tmp_path: Path) -> None:
    checkpoint = write_checkpoint_dir(tmp_path, "step_6")
    current = {
        **FINGERPRINT,
        "train_type": "online_ppo",
        "seed": 3,
        "model": {**FINGERPRINT["model"], "hidden_size": 128},
    }
    message = refusal(checkpoint, 20, current)
    assert "\n" not in message
    assert message.startswith(f"{checkpoint / 'trainer_state.json'}: checkpoint step_6 was ")
    assert 'train_type="online_grpo", this run "online_ppo"' in message
    assert "model.hidden_size=64, this run 128" in message
    assert "seed=0, this run 3" in message
    assert "ckpt.allow_changes=[model,seed,train_type]" in message


def test_allow_changes_accepts_the_listed_keys_only(tmp_path: Path) -> None:
    checkpoint = write_checkpoint_dir(tmp_path, "step_6")
    state = io.load_json(checkpoint / "trainer_state.json")
    current = {**FINGERPRINT, "seed": 3, "task": {"_target_": "x"}}
    assert check_checkpoint_identity(checkpoint, state, 20, current, ["seed", "task"]) is None
    with pytest.raises(CheckpointError, match=r"task\._target_=.*this run \"x\""):
        check_checkpoint_identity(checkpoint, state, 20, current, ["seed"])
    with pytest.raises(CheckpointError, match="ckpt.allow_changes: unknown key.*total_steps"):
        check_checkpoint_identity(checkpoint, state, 20, current, ["total_steps"])


def test_total_steps_is_not_part_of_the_fingerprint(tmp_path: Path) -> None:
    checkpoint = write_checkpoint_dir(tmp_path, "step_6")
    state = io.load_json(checkpoint / "trainer_state.json")
    assert "total_steps" not in FINGERPRINT_KEYS
    assert check_checkpoint_identity(checkpoint, state, 500, FINGERPRINT) is None


def test_a_checkpoint_without_fingerprint_resumes_with_a_warning(tmp_path: Path) -> None:
    checkpoint = write_checkpoint_dir(tmp_path, "step_6", fingerprint=..., total_steps=...)
    state = io.load_json(checkpoint / "trainer_state.json")
    assert saved_fingerprint(state) == (
        {"train_type": "online_grpo", "world_size": 1, "parallel": "ddp"},
        False,
    )
    warning = check_checkpoint_identity(checkpoint, state, 20, FINGERPRINT)
    assert warning is not None and "\n" not in warning
    assert "model, task, seed, device not checked" in warning
    # what an old checkpoint does record is still compared: its world size and train type
    message = refusal(checkpoint, 20, {**FINGERPRINT, "world_size": 2})
    assert "world_size=1, this run 2" in message


def test_a_two_process_resume_of_a_one_process_checkpoint_is_one_line(tmp_path: Path) -> None:
    checkpoint = write_checkpoint_dir(tmp_path, "step_6")
    message = refusal(checkpoint, 20, {**FINGERPRINT, "world_size": 2})
    assert "\n" not in message
    assert "world_size=1, this run 2" in message and "allow_changes=[world_size]" in message


# --- resume of real checkpoints, in process -------------------------------------------------


def test_resume_refuses_a_tampered_step_and_a_ppo_checkpoint_as_grpo(tmp_path: Path) -> None:
    Run(compose_config(["train_type=online_ppo", *QUICK]), tmp_path).fit()
    root = tmp_path / "checkpoints"
    state_file = root / "step_2" / "trainer_state.json"
    state = json.loads(state_file.read_text())
    assert state["fingerprint"]["train_type"] == "online_ppo"
    assert state["fingerprint"]["world_size"] == 1 and state["total_steps"] == 2

    # a PPO checkpoint resumed as GRPO would drop the critic: refused before anything is loaded
    with pytest.raises(CheckpointError) as err:
        Run(compose_config(QUICK), tmp_path)
    assert 'train_type="online_ppo", this run "online_grpo"' in str(err.value)
    assert "\n" not in str(err.value)
    # a shorter run than the checkpoint's step
    with pytest.raises(CheckpointError, match="step 2 is beyond trainer.total_steps=1"):
        Run(compose_config(["train_type=online_ppo", *QUICK, "trainer.total_steps=1"]), tmp_path)
    # step 1 written into step_2/: incomplete, so ckpt.resume=auto takes step_1 (as list, prune
    # and verify see it), and naming it is refused
    state_file.write_text(json.dumps({**state, "step": 1}))
    assert Run(compose_config(["train_type=online_ppo", *QUICK]), tmp_path).started.state.step == 1
    with pytest.raises(CheckpointError, match="step 1 does not match its directory step_2"):
        Run(
            compose_config(["train_type=online_ppo", *QUICK, f"ckpt.resume={root / 'step_2'}"]),
            tmp_path,
        )
    state_file.write_text(json.dumps(state))
    # a longer run resumes (total_steps is not in the fingerprint), as may an allowed change
    longer = Run(
        compose_config(["train_type=online_ppo", *QUICK, "trainer.total_steps=5"]), tmp_path
    )
    assert longer.started.state.step == 2
    allowed = Run(compose_config([*QUICK, "ckpt.allow_changes=[train_type]"]), tmp_path)
    assert allowed.started.state.step == 2 and allowed.parts.critic is None


# --- bad files -----------------------------------------------------------------------------


class _Payload:
    pass


def test_a_pickled_object_is_refused_without_weights_only_advice(tmp_path: Path) -> None:
    path = tmp_path / "optimizer.pt"
    torch.save({"x": _Payload()}, path)
    with pytest.raises(CheckpointError) as err:
        io.load_torch(path)
    message = str(err.value)
    assert "weights_only" not in message and "\n" not in message
    assert message.startswith(f"{path}: unreadable torch file (holds objects other than tensors")
    assert "_Payload" in message
    path.write_bytes(b"garbage")
    with pytest.raises(CheckpointError) as err:
        io.load_torch(path)
    assert "weights_only" not in str(err.value) and "\n" not in str(err.value)


def test_non_finite_weights_are_refused_naming_the_tensor(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    checkpoint = write_checkpoint_dir(tmp_path, "step_6")
    model = checkpoint / "model.safetensors"
    save_file({"a": torch.ones(2), "b": torch.tensor([1.0, float("nan")])}, str(model))
    with pytest.raises(CheckpointError, match=r"model\.safetensors: tensor 'b' holds non-finite"):
        io.load_tensors(model)
    assert checkpoints_cli(["verify", str(checkpoint)]) == 1
    assert "tensor 'b' holds non-finite values" in capsys.readouterr().out


def test_prune_never_leaves_a_partly_deleted_step_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for step in (1, 2, 3):
        write_checkpoint_dir(tmp_path, f"step_{step}", step=step)

    def killed_mid_delete(path: Path) -> None:
        (Path(path) / "model.safetensors").unlink()
        raise KeyboardInterrupt  # as if killed after the first file

    monkeypatch.setattr("astrai.checkpoints.io.shutil.rmtree", killed_mid_delete)
    with pytest.raises(KeyboardInterrupt):
        io.prune_checkpoints(tmp_path, keep_last=1)
    assert [info.step for info in list_checkpoints(tmp_path)] == [2, 3]
    assert [p.name.split(".tmp-")[0] for p in stale_temporaries(tmp_path)] == [".step_1"]


# --- metrics.jsonl on resume ----------------------------------------------------------------


def test_a_malformed_metrics_row_is_one_line_naming_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 0, "a": 1.0}\n{"step": 1, "a": "x"}\n{"step": 2, "a": 2}\n')
    with pytest.raises(MetricsFileError, match=rf"{path} line 2: malformed row \('a' is 'x'"):
        read_metrics_for_resume(path)
    with pytest.raises(CheckpointError, match=rf"{path} line 2: malformed row"):
        check_metrics_for_resume(tmp_path)
    path.write_bytes(b'{"step": 0}\n\xff\xfe\n')
    with pytest.raises(MetricsFileError, match="line 2: malformed row \\(not UTF-8\\)"):
        read_metrics_for_resume(path)
    # a torn last line (killed mid-write) is dropped, as before
    path.write_text('{"step": 0, "a": 1.0}\n{"step": 1, "a"')
    assert read_metrics_for_resume(path) == [{"step": 0.0, "a": 1.0}]


# --- the command line ------------------------------------------------------------------------


@pytest.mark.slow  # ~6 s: train.py and verify as subprocesses (the checks run in-process above)
def test_train_py_refuses_a_tampered_checkpoint_as_verify_does(tmp_path: Path) -> None:
    """The one subprocess test: train.py and verify print the same single line, exit 2.
    (``ckpt.resume=auto`` skips the checkpoint as incomplete: ``test_agreement.py``.)"""
    run_dir = tmp_path / "run"
    checkpoint = write_checkpoint_dir(run_dir / "checkpoints", "step_2", step=-5)
    state_file = checkpoint / "trainer_state.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("HYDRA_FULL_ERROR", None)
    train = subprocess.run(
        [sys.executable, TRAIN, *QUICK, f"hydra.run.dir={run_dir}", f"ckpt.resume={checkpoint}"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    expected = f"astrai: checkpoint error: {state_file}: step -5 is negative\n"
    assert (train.returncode, train.stderr) == (2, expected), train.stdout + train.stderr
    verify = subprocess.run(
        [sys.executable, "-m", "astrai.checkpoints", "verify", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert (verify.returncode, verify.stderr) == (2, expected)


@pytest.mark.slow  # ~12 s: two real train.py runs
def test_train_py_refuses_a_ppo_checkpoint_resumed_as_grpo(tmp_path: Path) -> None:
    """Refused, and the run dir stays the PPO run's: its checkpoints and its Hydra record
    (``.hydra/``, which Hydra rewrites before the job starts) are as they were."""
    run_dir = tmp_path / "run"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("HYDRA_FULL_ERROR", None)

    def train(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, TRAIN, *QUICK, *args, f"hydra.run.dir={run_dir}"],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip

    first = train("train_type=online_ppo")
    assert first.returncode == 0, first.stderr[-3000:]
    files = [p for p in run_dir.rglob("*") if p.is_file() and p.parent.name != "tb"]
    # train.log gains the refused start's lines; the lock file names its latest holder
    before = {p: p.read_bytes() for p in files if p.name not in ("train.log", ".astrai.lock")}
    assert run_dir / ".hydra" / "config.yaml" in before
    resumed = train()
    assert resumed.returncode == 2, resumed.stdout + resumed.stderr
    assert len(resumed.stderr.splitlines()) == 1
    assert resumed.stderr.startswith("astrai: checkpoint error: ")
    assert 'train_type="online_ppo", this run "online_grpo"' in resumed.stderr
    assert {p: p.read_bytes() for p in before} == before
    assert sorted(p.name for p in (run_dir / ".hydra").iterdir()) == sorted(
        p.name for p in before if p.parent.name == ".hydra"
    )


@pytest.mark.parametrize("attention_bias", [False, True])
def test_a_model_fingerprinted_before_issue_33s_fields_still_matches(attention_bias: bool) -> None:
    """A checkpoint's model fingerprint written before ``head_dim``, ``qk_norm``,
    ``rope_scaling`` and ``model_type`` were fields equals the same model's today, so such a run
    resumes; a model that uses one of them does not match it."""
    old = {
        "vocab_size": 48, "hidden_size": 64, "intermediate_size": 256, "num_hidden_layers": 1,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64,
        "rope_theta": 10000.0, "rms_norm_eps": 1e-6, "tie_word_embeddings": True,
        "attention_bias": attention_bias,
    }  # fmt: skip
    today = dataclasses.asdict(LlamaConfig(**old, initializer_range=0.02))
    assert today["model_type"] == ("qwen2" if attention_bias else "llama")
    assert model_fingerprint(today) == model_fingerprint(old) == old
    for changed in ({"head_dim": 32}, {"model_type": "mistral"}):
        if attention_bias and "model_type" in changed:
            continue  # mistral has no biases: not a valid config
        other = dataclasses.asdict(LlamaConfig(**{**old, **changed}))
        assert model_fingerprint(other) != model_fingerprint(old)
