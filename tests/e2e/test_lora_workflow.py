"""``model.lora`` end to end on a tiny random Hugging Face model: ``train.py`` trains adapters,
``astrai.export --adapter`` writes the directory ``peft.PeftModel.from_pretrained`` loads onto
the transformers base (logits equal astrai's), the merged export loads in transformers,
``astrai.generate`` answers from the adapter checkpoint, and bad LoRA setups are one line, exit 2.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
import torch
from tests.constructed_rewards import ALTERNATING
from tests.helpers import run_main
from tests.hf_models import save_tiny_hf_model
from tests.train_runs import QUICK, run_train_in_process

from astrai.checkpoints import io
from astrai.export import main as export_main
from astrai.generate import main as generate_main
from astrai.models.lora import (
    LoraSettings,
    adapter_state_dict,
    apply_lora,
    load_adapter_state_dict,
    read_adapter_weights,
)
from astrai.models.pretrained import load_pretrained_policy

PARITY = 1e-5  # max |logit difference| in float32
LORA = ["model.lora.rank=4", "model.lora.alpha=8", "train_type.optimizer.lr=1.0e-2"]
IDS = torch.tensor([[1, 7, 9, 12, 3, 22, 5]])


def _train(args: list[str], cwd: Path) -> None:
    result = run_train_in_process(args, cwd=cwd)
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_tiny_hf_model(tmp_path_factory.mktemp("hf") / "llama-tiny", "llama")


@pytest.fixture(scope="module")
def lora_run(hf_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two GRPO steps with rank-4 adapters on the tiny Llama (its checkpoint at step 2). The
    reward alternates within every group by construction: the random model's answers to the
    addition task may all score 0 (they did on an Intel AVX-512 machine, seeds 0-2), leaving
    every advantage 0 and ``lora_B`` at exactly 0."""
    cwd = tmp_path_factory.mktemp("lora")
    run_dir = cwd / "run"
    model = ["model=hf", f"model.path={hf_dir}", *LORA]
    _train([*model, *QUICK, *ALTERNATING, f"hydra.run.dir={run_dir}"], cwd)
    return run_dir


def _astrai_adapter_logits(hf_dir: Path, checkpoint: Path) -> torch.Tensor:
    """astrai's own model with the checkpoint's adapters injected (not merged)."""
    state = json.loads((checkpoint / "trainer_state.json").read_text())
    policy = load_pretrained_policy(str(hf_dir))
    apply_lora(policy, LoraSettings(**state["adapters"]["lora"]))
    tensors = read_adapter_weights(io.load_tensors(checkpoint / "adapter_model.safetensors"))
    load_adapter_state_dict(policy, tensors)
    assert any(
        name.endswith("lora_B.weight") and tensor.abs().max() > 0
        for name, tensor in adapter_state_dict(policy).items()
    )  # trained: B left zero would make every comparison below trivial
    with torch.no_grad():
        return policy.eval()(IDS).logits


def test_peft_loads_the_adapter_export_with_astrai_logits(
    hf_dir: Path, lora_run: Path, tmp_path: Path
) -> None:
    import peft
    import transformers

    out = tmp_path / "adapter"
    result = run_main(export_main, [str(lora_run), str(out), "--adapter"])
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in out.iterdir()) == [
        "adapter_config.json",
        "adapter_model.safetensors",
    ]
    config = json.loads((out / "adapter_config.json").read_text())
    # portable: the base folder's name, not this machine's path (--base-model names a Hub id)
    assert config["base_model_name_or_path"] == hf_dir.name
    assert config["r"] == 4 and config["lora_alpha"] == 8
    base = transformers.AutoModelForCausalLM.from_pretrained(str(hf_dir))
    model = peft.PeftModel.from_pretrained(base, str(out)).eval()
    with torch.no_grad():
        theirs = model(IDS).logits
    ours = _astrai_adapter_logits(hf_dir, lora_run / "checkpoints" / "step_2")
    torch.testing.assert_close(ours, theirs, rtol=0, atol=PARITY)
    # and the merged export transformers loads computes the same
    merged = tmp_path / "merged"
    assert run_main(export_main, [str(lora_run), str(merged)]).returncode == 0
    plain = transformers.AutoModelForCausalLM.from_pretrained(str(merged)).eval()
    with torch.no_grad():
        torch.testing.assert_close(plain(IDS).logits, theirs, rtol=0, atol=PARITY)


@pytest.mark.slow  # ~4 s: an export and two generate runs
def test_generate_answers_from_the_adapter_checkpoint(lora_run: Path, tmp_path: Path) -> None:
    """The adapter checkpoint's greedy answers are the merged export's (which transformers
    and PEFT agree on, above)."""
    merged = tmp_path / "merged"
    assert run_main(export_main, [str(lora_run), str(merged)]).returncode == 0
    prompts = ["3+4=", "12+9=", "7+7="]
    from_run = run_main(
        generate_main, [str(lora_run), *prompts, "--no-chat-template", "--max-new-tokens", "6"]
    )
    from_export = run_main(
        generate_main, [str(merged), *prompts, "--no-chat-template", "--max-new-tokens", "6"]
    )
    assert from_run.returncode == 0 and from_export.returncode == 0, from_run.stderr
    answers = [line for line in from_run.stdout.splitlines() if not line.startswith("#")]
    assert len(answers) == 3
    assert answers == [x for x in from_export.stdout.splitlines() if not x.startswith("#")]


def test_export_adapter_of_a_full_run_is_one_line(tmp_path: Path) -> None:
    run_dir = tmp_path / "full"
    _train([*QUICK, f"hydra.run.dir={run_dir}"], tmp_path)
    result = run_main(export_main, [str(run_dir), str(tmp_path / "out"), "--adapter"])
    assert result.returncode == 2 and "not a LoRA checkpoint" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def _refused(args: list[str], cwd: Path, needle: str) -> None:
    result = run_train_in_process(args, cwd=cwd)
    assert result.returncode == 2, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], result.stderr[-2000:]
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        (["model.lora.rank=0"], "model.lora.rank must be a positive integer (got 0)"),
        (["model.lora.rank=-2"], "model.lora.rank must be a positive integer (got -2)"),
        (
            ["model.lora.rank=4", "model.lora.target_modules=[q_proj,qkv]"],
            "model.lora.target_modules: no linear module named 'qkv'",
        ),
        (["model.lora.rank=4", "model.lora.dropout=1.5"], "model.lora.dropout must be in [0, 1)"),
    ],
)
def test_bad_lora_configs_are_one_line_exit_2(
    tmp_path: Path, overrides: list[str], needle: str
) -> None:
    _refused([*QUICK, *overrides, f"hydra.run.dir={tmp_path / 'run'}"], tmp_path, needle)
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_lora_without_peft_names_the_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "peft", None)  # `import peft` raises ImportError
    _refused(
        [*QUICK, "model.lora.rank=4", f"hydra.run.dir={tmp_path / 'run'}"],
        tmp_path,
        "model.lora needs peft, which is not installed: pip install 'astrai[lora]'",
    )


@pytest.mark.slow  # ~8 s: two runs and three refused starts
def test_resuming_onto_another_base_or_kind_is_one_line(hf_dir: Path, tmp_path: Path) -> None:
    base = tmp_path / "base"
    shutil.copytree(hf_dir, base)
    lora_dir, full_dir = tmp_path / "lora", tmp_path / "full"
    model = ["model=hf", f"model.path={base}"]
    _train([*model, *LORA, *QUICK, f"hydra.run.dir={lora_dir}"], tmp_path)
    _train([*model, *QUICK, f"hydra.run.dir={full_dir}"], tmp_path)
    longer = ["trainer.total_steps=4"]
    # a full run's checkpoint resumed with adapters, and the reverse
    _refused(
        [*model, *LORA, *QUICK, *longer, f"hydra.run.dir={full_dir}"],
        tmp_path,
        "a full fine-tuning checkpoint (whole weights, no adapters) cannot be resumed",
    )
    _refused(
        [*model, *QUICK, *longer, f"hydra.run.dir={lora_dir}"],
        tmp_path,
        "a LoRA checkpoint (adapters of rank 4) cannot be resumed as full fine-tuning",
    )
    # the base replaced by another model at the same path
    shutil.rmtree(base)
    save_tiny_hf_model(base, "llama", seed=1)
    _refused(
        [*model, *LORA, *QUICK, *longer, f"hydra.run.dir={lora_dir}"],
        tmp_path,
        "adapters were trained on another base model",
    )
    assert sorted(p.name for p in (lora_dir / "checkpoints").iterdir()) == ["step_2"]


@pytest.mark.slow  # ~15 s: four jobs
def test_rank_and_alpha_sweep_as_a_multirun(tmp_path: Path) -> None:
    """``python train.py -m model.lora.rank=2,4 model.lora.alpha=4,8``: four jobs, each with the
    adapters it asked for, and ``astrai.report`` lists the two knobs."""
    from astrai.report.__main__ import main as report_main

    sweep = tmp_path / "sweep"
    args = ["-m", "model.lora.rank=2,4", "model.lora.alpha=4,8", *QUICK]
    result = run_train_in_process([*args, f"hydra.sweep.dir={sweep}"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    grid = [(2, 4), (2, 8), (4, 4), (4, 8)]
    for job, (rank, alpha) in enumerate(grid):
        config = json.loads(
            (sweep / str(job) / "checkpoints/step_2/adapter_config.json").read_text()
        )
        assert (config["r"], config["lora_alpha"]) == (rank, alpha)
    report = run_main(report_main, [str(sweep)])
    assert report.returncode == 0, report.stderr
    assert report.stdout.splitlines()[1].split()[:3] == ["job", "rank", "alpha"]
