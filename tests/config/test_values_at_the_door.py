"""Values typed at the door (issue 45, part 4): a ``config.json`` key of the wrong JSON type,
LoRA's rank and alpha, the correction band and the parameter bound with adapters are refused
before anything is built, in one line naming the key (``python train.py``: exit 2, no run dir)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
from tests.helpers import compose_config
from tests.hf_models import save_tiny_hf_model
from tests.train_runs import run_train_in_process

from astrai.config import lora_checks
from astrai.config.compose import check_run_config
from astrai.config.errors import ConfigError
from astrai.models.hf_config import READ_KEY_TYPES, READ_KEYS


@pytest.fixture(scope="module")
def hf_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny untied Llama directory (two layers, 64 wide) with the character tokenizer."""
    return save_tiny_hf_model(tmp_path_factory.mktemp("hf") / "model", tied=False)


def edited_copy(source: Path, target: Path, **changes: object) -> Path:
    """``source`` copied to ``target`` with ``config.json``'s keys set to ``changes``."""
    target.mkdir()
    for path in source.iterdir():
        (target / path.name).write_bytes(path.read_bytes())
    config = json.loads((source / "config.json").read_text())
    (target / "config.json").write_text(json.dumps({**config, **changes}))
    return target


def test_every_key_read_has_a_type() -> None:
    assert set(READ_KEY_TYPES) == READ_KEYS


CONFIG_JSON_CASES = {
    # a string: bool("false") is True, and the trained lm_head would be dropped as tied
    "tie_word_embeddings_string": (
        {"tie_word_embeddings": "false"},
        "tie_word_embeddings must be true or false (got 'false')",
    ),
    "rms_norm_eps_null": ({"rms_norm_eps": None}, "rms_norm_eps must be a finite number > 0"),
    "vocab_size_null": ({"vocab_size": None}, "vocab_size must be a positive integer (got None)"),
    "heads_list": (
        {"num_attention_heads": [2]},
        "num_attention_heads must be a positive integer (got [2])",
    ),
    "head_dim_float": (
        {"head_dim": 1e6},
        "head_dim must be null or a positive integer (got 1000000.0)",
    ),
    "rope_theta_string": ({"rope_theta": "1e4"}, "rope_theta must be a finite number > 0"),
    "attention_bias_string": ({"attention_bias": "true"}, "attention_bias must be true or false"),
}


@pytest.mark.parametrize("case", list(CONFIG_JSON_CASES))
def test_a_config_json_value_of_the_wrong_type_names_the_key_and_file(
    case: str, hf_model: Path, tmp_path: Path
) -> None:
    changes, message = CONFIG_JSON_CASES[case]
    model = edited_copy(hf_model, tmp_path / "model", **changes)
    with pytest.raises(ConfigError) as caught:
        compose_config(["model=hf", f"model.path={model}"])
    assert str(caught.value).startswith(f"model.path: {model / 'config.json'}: "), caught.value
    assert message in str(caught.value)


def test_a_head_dim_the_weights_do_not_have_is_refused_before_building(
    hf_model: Path, tmp_path: Path
) -> None:
    """``head_dim: 1000000`` (an integer): a 1.5e9-parameter model used to be built for 38 s
    before the weights' shapes disagreed; the safetensors header is read first."""
    model = edited_copy(hf_model, tmp_path / "model", head_dim=1_000_000)
    start = time.monotonic()
    message = (
        f"model.path: {model / 'model.safetensors'}: model.layers.0.self_attn.k_proj.weight has "
        "shape (32, 64), config.json says (2000000, 64)"
    )
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        compose_config(["model=hf", f"model.path={model}"])
    assert time.monotonic() - start < 10


def test_the_string_false_is_exit_2_in_one_line_and_no_run_dir(
    hf_model: Path, tmp_path: Path
) -> None:
    model = edited_copy(hf_model, tmp_path / "model", tie_word_embeddings="false")
    run_dir = tmp_path / "run"
    result = run_train_in_process(
        ["model=hf", f"model.path={model}", f"hydra.run.dir={run_dir}"], tmp_path
    )
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("astrai: config error: model.path: ") and "tie_word_embeddings" in line
    assert not run_dir.exists()


# ---------------------------------------------------------------- LoRA and the correction band

LORA = ["model.lora.rank=4"]
BAND = ["engine.old_logprobs=recompute", "engine.correction=token_truncate"]
BOUND_CASES = {
    "alpha_inf": ([*LORA, "model.lora.alpha=inf"], "model.lora.alpha must be in (0, 100000]"),
    "alpha_nan": ([*LORA, "model.lora.alpha=nan"], "model.lora.alpha must be in (0, 100000]"),
    "alpha_huge": ([*LORA, "model.lora.alpha=1e300"], "model.lora.alpha must be in (0, 100000]"),
    "rank_float": (["model.lora.rank=1e7"], "model.lora.rank=1e7: Value '10000000.0' of type"),
    # tiny: 64 wide, k/v 32 wide; the widest min(in, out) of its linears is 64
    "rank_past_the_widths": (["model.lora.rank=10000000"], "model.lora.rank must be in [1, 64]"),
    "correction_high_huge": (
        [*BAND, "engine.correction_high=1e300"],
        "engine.correction_high must be null or in (1, 10000.0]",
    ),
    "correction_high_inf": (
        [*BAND, "engine.correction_high=inf"],
        "engine.correction_high must be null or in (1, 10000.0]",
    ),
}


@pytest.mark.parametrize("case", list(BOUND_CASES))
def test_lora_and_correction_bounds_name_the_key(case: str) -> None:
    overrides, message = BOUND_CASES[case]
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}"):
        check_run_config(overrides)  # what python train.py checks: overrides, then values


def test_the_largest_rank_and_band_pass() -> None:
    compose_config(["model.lora.rank=64", "model.lora.alpha=100000"])
    compose_config([*BAND, "engine.correction_high=10000"])


def test_the_parameter_bound_counts_the_adapters(monkeypatch: pytest.MonkeyPatch) -> None:
    """tiny's base has 64,704 parameters; adapters on its 7 linears add 1,408 per rank
    (q, o: 64 + 64; k, v: 64 + 32; gate, up, down: 64 + 256)."""
    monkeypatch.setattr(lora_checks, "MAX_PARAMETERS", 100_000)
    compose_config(["model.lora.rank=4"])  # 5,632 adapter parameters: 70,336 in all
    message = r"model parameters with model\.lora's adapters \(90,112 of them\) \(154,816\)"
    with pytest.raises(ConfigError, match=message):
        compose_config(["model.lora.rank=64"])
    compose_config(["model.lora.rank=64", "trainer.allow_large=true"])


@pytest.mark.parametrize("case", ["alpha_inf", "correction_high_huge"])
def test_a_bound_is_exit_2_in_one_line_and_no_run_dir(case: str, tmp_path: Path) -> None:
    overrides, message = BOUND_CASES[case]
    run_dir = tmp_path / "run"
    result = run_train_in_process([*overrides, f"hydra.run.dir={run_dir}"], tmp_path)
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"astrai: config error: {message}"), line
    assert not run_dir.exists()
