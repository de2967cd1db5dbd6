"""The one vLLM warning ``engine=vllm`` silences (issue 59): "Chat template warmup failed" with
the traceback of a render that had no tokenizer (the engine runs with
``skip_tokenizer_init=True``); any other warm-up failure is still logged. The engine start
itself is checked on vLLM's CPU build (``tests/engine/test_vllm_start_and_reload.py``)."""

from __future__ import annotations

import logging

import pytest

from astrai.rollout.engines.vllm_start import quiet_tokenizerless_warmup

# vLLM 0.32.0's own words: vllm/renderers/base.py (get_tokenizer, warmup)
NO_TOKENIZER = ValueError("Tokenizer not available when `skip_tokenizer_init=True`")


def _warm_up_failing(error: Exception) -> None:
    """What ``BaseRenderer.warmup`` does when its render raises ``error``."""
    try:
        raise error
    except Exception:
        logging.getLogger("vllm.renderers.base").warning(
            "Chat template warmup failed", exc_info=True
        )


def test_only_the_tokenizerless_warmup_failure_is_dropped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    quiet_tokenizerless_warmup()
    quiet_tokenizerless_warmup()  # once per process: a second engine adds no second filter
    renderer = logging.getLogger("vllm.renderers.base")
    assert len(renderer.filters) == 1
    with caplog.at_level(logging.WARNING, logger="vllm"):
        _warm_up_failing(NO_TOKENIZER)
        assert caplog.records == []
        _warm_up_failing(ValueError("unbalanced '{%' in the template"))  # a real failure
        renderer.warning("another warning")
    logged = [(r.getMessage(), str(r.exc_info[1]) if r.exc_info else None) for r in caplog.records]
    assert logged == [
        ("Chat template warmup failed", "unbalanced '{%' in the template"),
        ("another warning", None),
    ]
