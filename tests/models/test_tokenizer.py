"""The character tokenizer: ids, specials, files."""

from __future__ import annotations

import pytest

from astrai.models.tokenizer import TOKENIZER_FILE, CharTokenizer


def test_encode_decode_round_trip() -> None:
    tok = CharTokenizer("ab+")
    assert tok.vocab_size == 6
    assert tok.encode("ba+") == [1, 4, 3, 5]  # <bos>=1, then a=3, b=4, +=5
    assert tok.encode("ba", add_bos=False) == [4, 3]
    assert tok.decode([1, 4, 3, 5, 2, 0, 0]) == "ba+"  # specials dropped


def test_default_vocabulary_matches_tiny_model() -> None:
    assert CharTokenizer().vocab_size == 48


def test_unknown_character_names_it() -> None:
    with pytest.raises(ValueError, match="'#'"):
        CharTokenizer().encode("1#2")


def test_save_and_load(tmp_path) -> None:  # noqa: ANN001
    tok = CharTokenizer("xyz")
    path = tok.save(tmp_path)
    assert path.name == TOKENIZER_FILE
    loaded = CharTokenizer.load(tmp_path)
    assert loaded.alphabet == "xyz"
    assert loaded.encode("zy") == tok.encode("zy")


def test_load_missing_or_corrupt_file_names_it(tmp_path) -> None:  # noqa: ANN001
    with pytest.raises(FileNotFoundError, match=TOKENIZER_FILE):
        CharTokenizer.load(tmp_path)
    (tmp_path / TOKENIZER_FILE).write_text("{not json")
    with pytest.raises(ValueError, match=TOKENIZER_FILE):
        CharTokenizer.load(tmp_path)


def test_repeated_alphabet_is_rejected() -> None:
    with pytest.raises(ValueError, match="repeated"):
        CharTokenizer("aab")
