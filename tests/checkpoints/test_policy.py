"""``load_policy`` on Hugging Face model directories: what it refuses before any sampling."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.hf_models import copy_with_added_token, save_tiny_hf_model

from astrai.checkpoints.policy import load_policy
from astrai.models.pretrained import ModelDirError


def test_a_tokenizer_larger_than_the_embedding_is_refused(tmp_path: Path) -> None:
    source = save_tiny_hf_model(tmp_path / "src")
    assert load_policy(source).tokenizer.vocab_size == 48  # the 48-row model loads as is
    grown = copy_with_added_token(source, tmp_path / "grown")
    assert json.loads((grown / "tokenizer.json").read_text())["added_tokens"][-1]["id"] == 48
    with pytest.raises(ModelDirError) as err:
        load_policy(grown)
    message = str(err.value)
    assert message.startswith(f"{grown / 'tokenizer.json'}: the tokenizer has 49 ids")
    assert "config.json's vocab_size is 48" in message and "\n" not in message
