"""RoPE scalings against transformers' ``modeling_rope_utils`` (the reference), and a model with
each scaling against transformers' model with it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import transformers
from tests.hf_models import LLAMA3_ROPE, save_tiny_hf_model
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from astrai.models.pretrained import load_pretrained_policy
from astrai.models.rope import RopeScalingError, normalize_rope_scaling, rope_frequencies
from astrai.models.tokenizer import CharTokenizer
from astrai.rollout.collect import left_pad

HEAD_DIM, THETA, MAX_POSITIONS = 16, 5e5, 128
SCALINGS = {
    "linear": {"rope_type": "linear", "factor": 4.0},
    "llama3": LLAMA3_ROPE,
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32},
    "yarn-options": {
        "rope_type": "yarn",
        "factor": 2.0,
        "beta_fast": 16.0,
        "beta_slow": 2.0,
        "attention_factor": 1.25,
        "truncate": False,
    },
}


def _transformers_config(scaling: dict[str, object]) -> transformers.LlamaConfig:
    return transformers.LlamaConfig(
        hidden_size=HEAD_DIM * 4,
        num_attention_heads=4,
        max_position_embeddings=MAX_POSITIONS,
        rope_parameters={**scaling, "rope_theta": THETA},
    )


@pytest.mark.parametrize("name", SCALINGS)
def test_frequencies_equal_transformers(name: str) -> None:
    scaling = normalize_rope_scaling(SCALINGS[name])
    inv_freq, amplitude = rope_frequencies(HEAD_DIM, THETA, scaling, MAX_POSITIONS)
    config = _transformers_config(SCALINGS[name])
    expected, expected_amplitude = ROPE_INIT_FUNCTIONS[str(SCALINGS[name]["rope_type"])](config)
    assert torch.allclose(inv_freq, expected, rtol=1e-6, atol=0)
    assert amplitude == pytest.approx(expected_amplitude, rel=1e-12)
    # and a scaling changes something: a test that ignored it would fail here
    plain, _ = rope_frequencies(HEAD_DIM, THETA, None)
    assert (inv_freq - plain).abs().max() > 1e-3 * plain.max()


@pytest.mark.parametrize("name", ["linear", "yarn"])
def test_scaled_models_match_transformers(name: str, tmp_path: Path) -> None:
    """A whole model with the scaling (cos/sin amplitude included) matches transformers'."""
    directory = save_tiny_hf_model(tmp_path, "llama")
    config = transformers.AutoConfig.from_pretrained(str(directory))
    config.rope_parameters = {**SCALINGS[name], "rope_theta": config.rope_parameters["rope_theta"]}
    config.save_pretrained(str(directory))
    ours = load_pretrained_policy(str(directory)).eval()
    theirs = transformers.AutoModelForCausalLM.from_pretrained(str(directory)).eval()
    ids, mask = left_pad(CharTokenizer(), ["3+4=", "12+9=", "reverse: abcdefghij="])
    with torch.no_grad():
        ours_logits = ours(ids, mask).logits[mask]
        reference = theirs(input_ids=ids, attention_mask=mask.long()).logits[mask]
    assert (ours_logits - reference).abs().max() <= 1e-5


@pytest.mark.parametrize(
    ("scaling", "needle"),
    [
        ({"rope_type": "dynamic", "factor": 2.0}, "rope_type 'dynamic'.*each sequence's length"),
        ({"rope_type": "yarn"}, "needs 'factor'"),
        ({"rope_type": "llama3", **{k: v for k, v in LLAMA3_ROPE.items() if k != "rope_type"},
          "high_freq_factor": 0.5}, "high_freq_factor .* must exceed"),
        ({"rope_type": "yarn", "factor": 2.0, "truncate": "yes"}, "truncate must be true or"),
        ({"rope_type": "yarn", "factor": 2.0, "mscale": 0.7}, "key 'mscale'"),
    ],
)  # fmt: skip
def test_bad_scalings_name_the_key(scaling: dict[str, object], needle: str) -> None:
    with pytest.raises(RopeScalingError, match=needle):
        normalize_rope_scaling(scaling)
