"""The Llama-style policy: HF parameter names, padding invariance, KV-cache parity (generic and
fast decode path), init."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from astrai.models.decode import Decoder, packed_qkv, rope_table
from astrai.models.kv_cache import KVCache
from astrai.models.llama import (
    LlamaConfig,
    LlamaForCausalLM,
    RotaryEmbedding,
    position_ids_from_mask,
)


def test_parameter_names_follow_hugging_face_llama(tiny_model: LlamaForCausalLM) -> None:
    names = set(tiny_model.state_dict())
    expected = {
        "model.embed_tokens.weight",
        "model.layers.0.self_attn.q_proj.weight",
        "model.layers.0.self_attn.k_proj.weight",
        "model.layers.0.self_attn.v_proj.weight",
        "model.layers.0.self_attn.o_proj.weight",
        "model.layers.0.mlp.gate_proj.weight",
        "model.layers.0.mlp.up_proj.weight",
        "model.layers.0.mlp.down_proj.weight",
        "model.layers.0.input_layernorm.weight",
        "model.layers.0.post_attention_layernorm.weight",
        "model.layers.1.mlp.down_proj.weight",
        "model.norm.weight",
        "lm_head.weight",
    }
    assert expected <= names
    assert len(names) == 2 + 9 * 2 + 1  # embed, lm_head, 9 per layer × 2 layers, final norm
    # grouped-query attention: 4 query heads, 2 key/value heads of dim 16
    assert tiny_model.model.layers[0].self_attn.k_proj.weight.shape == (32, 64)


def test_tied_embeddings_share_storage() -> None:
    tied = LlamaForCausalLM(LlamaConfig(tie_word_embeddings=True))
    untied = LlamaForCausalLM(LlamaConfig(tie_word_embeddings=False))
    assert tied.lm_head.weight is tied.model.embed_tokens.weight
    assert untied.lm_head.weight is not untied.model.embed_tokens.weight
    assert untied.num_parameters() - tied.num_parameters() == 48 * 64


def test_init_is_normal_with_initializer_range() -> None:
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(hidden_size=128, intermediate_size=512))
    std = model.model.layers[0].mlp.up_proj.weight.std().item()
    assert std == pytest.approx(0.02, rel=0.05)
    assert torch.equal(model.model.norm.weight, torch.ones(128))


def test_fresh_model_does_not_copy_its_input(tokenizer) -> None:  # noqa: ANN001
    # PyTorch's default N(0, 1) embedding init with tied weights predicts the input token;
    # the normal(0, 0.02) init must not.
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig()).eval()
    ids = torch.arange(3, 48)[None]

    def copy_prob() -> float:
        probs = model(ids).logits.softmax(-1)
        return probs[0].gather(-1, ids[0][:, None]).mean().item()

    assert copy_prob() < 0.1  # near uniform (1/48 ≈ 0.02)
    torch.nn.init.normal_(model.model.embed_tokens.weight, std=1.0)  # PyTorch's default
    assert copy_prob() > 0.5


def test_position_ids_from_mask() -> None:
    mask = torch.tensor([[False, False, True, True, True], [True, True, True, True, True]])
    expected = torch.tensor([[0, 0, 0, 1, 2], [0, 1, 2, 3, 4]])
    assert torch.equal(position_ids_from_mask(mask), expected)


def test_left_padded_row_scores_like_unpadded_row(tiny_model: LlamaForCausalLM) -> None:
    ids = torch.tensor([[1, 7, 9, 4, 12]])
    alone = tiny_model(ids).logits.log_softmax(-1)
    padded_ids = torch.cat([torch.zeros(1, 3, dtype=torch.long), ids], dim=1)
    mask = torch.tensor([[False] * 3 + [True] * 5])
    padded = tiny_model(padded_ids, attention_mask=mask).logits.log_softmax(-1)
    torch.testing.assert_close(padded[:, 3:], alone, atol=1e-5, rtol=0)
    # and inside a batch next to a longer row
    other = torch.tensor([[1, 5, 5, 6, 7, 8, 9, 10]])
    batch = torch.cat([padded_ids, other])
    batch_mask = torch.cat([mask, torch.ones(1, 8, dtype=torch.bool)])
    batched = tiny_model(batch, attention_mask=batch_mask).logits.log_softmax(-1)
    torch.testing.assert_close(batched[:1, 3:], alone, atol=1e-5, rtol=0)


def test_incremental_forward_with_cache_matches_full_forward(
    tiny_model: LlamaForCausalLM,
) -> None:
    ids = torch.tensor([[0, 0, 1, 4, 5, 6, 7], [1, 8, 9, 10, 11, 12, 13]])
    mask = torch.tensor([[False, False] + [True] * 5, [True] * 7])
    full = tiny_model(ids, attention_mask=mask)
    cache = tiny_model.new_cache(2, 7)
    first = tiny_model(ids[:, :4], attention_mask=mask[:, :4], cache=cache)
    steps = [first.logits]
    for t in range(4, 7):
        out = tiny_model(ids[:, t : t + 1], attention_mask=mask[:, : t + 1], cache=cache)
        steps.append(out.logits)
    torch.testing.assert_close(torch.cat(steps, dim=1), full.logits, atol=1e-5, rtol=0)
    assert cache.length == 7


def test_a_bf16_cache_under_autocast_gives_the_same_logits(
    tiny_model: LlamaForCausalLM,
) -> None:
    """Under bf16 autocast attention casts cached keys and values to bf16 anyway: a bf16 cache
    (half the memory; what a bf16 run is told to make, ``models.precision``) gives bitwise the
    logits of a float32 one. The dtype is an argument: autocast alone does not change it."""
    ids = torch.tensor([[0, 0, 1, 4, 5, 6, 7], [1, 8, 9, 10, 11, 12, 13]])
    mask = torch.tensor([[False, False] + [True] * 5, [True] * 7])
    assert tiny_model.new_cache(2, 7).keys[0].dtype == torch.float32
    logits = {}
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        assert tiny_model.new_cache(2, 7).keys[0].dtype == torch.float32
        half = tiny_model.new_cache(2, 7, torch.bfloat16)
        assert half.keys[0].dtype == half.values[0].dtype == torch.bfloat16
        config = tiny_model.config
        full = KVCache(
            config.num_hidden_layers, 2, config.num_key_value_heads, 7, config.head_dim,
            torch.float32, torch.device("cpu"),
        )  # fmt: skip
        for name, cache in (("bf16", half), ("fp32", full)):
            steps = [tiny_model(ids[:, :4], attention_mask=mask[:, :4], cache=cache).logits]
            for t in range(4, 7):
                out = tiny_model(ids[:, t : t + 1], attention_mask=mask[:, : t + 1], cache=cache)
                steps.append(out.logits)
            logits[name] = torch.cat(steps, dim=1)
    assert torch.equal(logits["bf16"], logits["fp32"])


def test_forward_returns_final_hidden_states(tiny_model: LlamaForCausalLM) -> None:
    ids = torch.tensor([[1, 4, 5]])
    out = tiny_model(ids)
    assert out.hidden_states.shape == (1, 3, 64)
    torch.testing.assert_close(tiny_model.lm_head(out.hidden_states), out.logits)


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"hidden_size": -3}, "model.hidden_size"),
        ({"num_attention_heads": 3}, "model.num_attention_heads"),
        ({"num_key_value_heads": 3}, "model.num_key_value_heads"),
        ({"vocab_size": 0}, "model.vocab_size"),
        ({"head_dim": 0}, "model.head_dim"),
        ({"head_dim": 7}, "model.head_dim"),
        ({"model_type": "gemma3"}, "model.model_type 'gemma3' is not supported"),
        ({"model_type": "qwen3"}, "model.model_type 'qwen3' is .*qk_norm=True"),
        ({"attention_bias": True, "qk_norm": True}, "no supported model family"),
        ({"rope_scaling": {"rope_type": "ntk"}}, "model.rope_scaling: rope_type 'ntk'"),
    ],
)
def test_bad_config_names_the_key(kwargs: dict, key: str) -> None:
    with pytest.raises(ValueError, match=key):
        LlamaConfig(**kwargs)


def test_cache_overflow_is_an_error(tiny_model: LlamaForCausalLM) -> None:
    cache = tiny_model.new_cache(1, 2)
    with pytest.raises(ValueError, match="KV cache overflow"):
        tiny_model(torch.tensor([[1, 2, 3]]), cache=cache)


# Qwen3's switches (q/k norms, a head_dim that is not hidden / heads) and scaled RoPE (yarn's
# cos/sin amplitude too) go through the fast path as well
QWEN3 = {"qk_norm": True, "head_dim": 24}
YARN = {"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8}}


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"num_key_value_heads": 4}, {"attention_bias": True}, QWEN3, YARN],
    ids=["gqa", "mha", "bias", "qwen3", "yarn"],
)
def test_decoder_steps_match_full_forward(kwargs: dict) -> None:
    # the fast one-token path (inference, CPU, float32) step by step against one full forward:
    # a left-padded row, a row whose tokens stop counting midway (as the sampler masks the rows
    # that finished) and a row that pads a masked token between real ones; the buffer is longer
    # than the sequence, so both the filled-slice and the whole-buffer attention run, the latter
    # with unwritten slots
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(initializer_range=0.2, **kwargs)).eval()
    if kwargs.get("attention_bias"):
        with torch.no_grad():
            for layer in model.model.layers:
                for name in ("q_proj", "k_proj", "v_proj"):
                    getattr(layer.self_attn, name).bias.normal_(std=0.5)
    if kwargs.get("qk_norm"):  # away from their all-ones init, so a skipped norm shows
        with torch.no_grad():
            for layer in model.model.layers:
                layer.self_attn.q_norm.weight.uniform_(0.5, 1.5)
                layer.self_attn.k_norm.weight.uniform_(0.5, 1.5)
    ids = torch.randint(3, 48, (3, 12))
    mask = torch.ones(3, 12, dtype=torch.bool)
    mask[0, :3] = False
    mask[1, 8:] = False
    mask[2, 6] = False
    full = model(ids, attention_mask=mask).logits
    with torch.inference_mode():
        cache = model.new_cache(3, 16)
        buffer = torch.zeros(3, 16, dtype=torch.bool)
        buffer[:, :4] = mask[:, :4]
        steps = [model(ids[:, :4], attention_mask=buffer[:, :4], cache=cache).logits]
        assert Decoder.applies(model, cache, "fp32")
        assert not Decoder.applies(model, cache, "bf16")  # told, not read from autocast
        decoder = Decoder(model, cache, buffer)
        for t in range(4, 12):
            buffer[:, t] = mask[:, t]  # the column of the token fed next, as the sampler does
            steps.append(decoder.step(ids[:, t : t + 1])[:, None])
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=0)
    assert cache.length == 12
    # with autograd on, the fast path does not apply
    assert not Decoder.applies(model, cache, "fp32")


def test_decoder_checks_its_mask_and_the_cache(tiny_model: LlamaForCausalLM) -> None:
    with torch.inference_mode():
        cache = tiny_model.new_cache(1, 3)
        tiny_model(torch.tensor([[1, 2]]), cache=cache)
        with pytest.raises(ValueError, match=r"attention_mask is \(1, 2\), not \(1, 3\)"):
            Decoder(tiny_model, cache, torch.ones(1, 2, dtype=torch.bool))
        decoder = Decoder(tiny_model, cache, torch.ones(1, 3, dtype=torch.bool))
        decoder.step(torch.tensor([[3]]))
        with pytest.raises(ValueError, match="KV cache overflow"):
            decoder.step(torch.tensor([[4]]))
    with pytest.raises(ValueError, match="needs a CPU float32 model without autograd"):
        Decoder(tiny_model, cache, torch.ones(1, 3, dtype=torch.bool))


def test_rope_table_rows_are_counts_of_attended_tokens(tiny_model: LlamaForCausalLM) -> None:
    # row i holds position max(i - 1, 0): i tokens attended so far, the last at position i - 1
    rotary = tiny_model.model.rotary_emb
    table = rope_table(tiny_model, 41)
    cos, sin = rotary(torch.tensor([[0], [0], [17], [39]]))
    expected = torch.cat((cos, torch.cat((-sin[..., :8], sin[..., 8:]), dim=-1)), dim=-1)
    assert torch.equal(table[[0, 1, 18, 40]], expected[:, 0, 0])


def _left_padded_mask(lengths: list[int], width: int) -> torch.Tensor:
    return torch.stack([torch.arange(width) >= width - n for n in lengths])


@pytest.mark.parametrize(
    "position_ids",
    [
        torch.arange(7)[None],  # one unpadded row
        position_ids_from_mask(_left_padded_mask([5, 9, 1, 0], 9)),  # left padding, empty row
        position_ids_from_mask(_left_padded_mask([3, 70], 70))[:, 69:],  # a KV-cache step, > 64
        torch.tensor([[0, 0, 0, 1, 2], [200, 201, 202, 203, 204]]),  # beyond the first table
    ],
)
def test_cached_rope_table_is_bitwise_the_computed_values(position_ids: torch.Tensor) -> None:
    rotary = RotaryEmbedding(head_dim=16, theta=10000.0)
    computed = rotary(position_ids)
    bound = int(position_ids.max()) + 1
    for max_position in (bound, bound + 300):  # a table grown past the bound reads the same
        cached = rotary(position_ids, max_position=max_position)
        assert (
            cached[0].shape
            == computed[0].shape
            == (*position_ids.shape[:1], 1, position_ids.shape[1], 16)
        )
        assert torch.equal(cached[0], computed[0]) and torch.equal(cached[1], computed[1])


def test_rope_table_is_built_once_and_rebuilt_only_when_outgrown() -> None:
    rotary = RotaryEmbedding(head_dim=16, theta=10000.0)
    first = rotary.table(10)
    assert first[0].shape == (64, 16)  # at least 64 rows
    assert rotary.table(64)[0] is first[0]  # reused, not recomputed
    grown = rotary.table(65)
    assert grown[0].shape == (128, 16) and torch.equal(grown[0][:64], first[0])
    rotary.inv_freq = rotary.inv_freq.double()  # a new dtype: a new table
    with torch.inference_mode():  # built under inference mode, it is still an ordinary tensor
        rebuilt = rotary.table(5)[0]
    assert rebuilt.dtype == torch.float64 and not rebuilt.is_inference()


def test_model_forward_with_cached_rope_matches_computed(tiny_model: LlamaForCausalLM) -> None:
    torch.manual_seed(1)
    mask = _left_padded_mask([4, 11, 7], 11)
    ids = torch.randint(0, tiny_model.config.vocab_size, mask.shape)
    with torch.no_grad():
        cached = tiny_model(ids, attention_mask=mask).logits  # positions from the mask: cached
        computed = tiny_model(ids, mask, position_ids=position_ids_from_mask(mask)).logits
    assert torch.equal(cached, computed)


def test_packed_projections_are_q_k_v_with_scaled_queries() -> None:
    torch.manual_seed(0)
    attn = LlamaForCausalLM(LlamaConfig(attention_bias=True)).model.layers[0].self_attn
    with torch.no_grad():
        for name in ("q_proj", "k_proj", "v_proj"):
            getattr(attn, name).bias.normal_()
        weight, bias = packed_qkv(attn)
        x = torch.randn(2, 64)
        expected = torch.cat([attn.q_proj(x) / 4.0, attn.k_proj(x), attn.v_proj(x)], dim=-1)
        torch.testing.assert_close(F.linear(x, weight, bias), expected)
