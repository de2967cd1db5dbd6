"""KV-cache sampler: cache parity, behaviour logprobs vs trainer re-scoring, masks and padding."""

from __future__ import annotations

import pytest
import torch

from astrai.models.llama import LlamaConfig, LlamaForCausalLM
from astrai.models.scoring import response_logprobs
from astrai.models.tokenizer import CharTokenizer
from astrai.rollout.collect import left_pad
from astrai.rollout.engines import sampler
from astrai.rollout.engines.sampler import SamplingConfig, _choose, _filter_logits, generate

PROMPTS = ["3+5=", "12+7=", "rev 123=", "9+9="]


def _prompts(tokenizer: CharTokenizer) -> tuple[torch.Tensor, torch.Tensor]:
    return left_pad(tokenizer, PROMPTS)


def test_left_pad_layout(tokenizer: CharTokenizer) -> None:
    ids, mask = left_pad(tokenizer, ["1+2=", "12+34="])
    assert ids.shape == (2, 7)  # <bos> + 6 characters
    assert mask[0].tolist() == [False, False, True, True, True, True, True]
    assert ids[0, 2].item() == tokenizer.bos_id
    assert mask[1].all()


def test_cached_and_uncached_greedy_decoding_agree(
    tiny_model: LlamaForCausalLM, tokenizer: CharTokenizer
) -> None:
    ids, mask = _prompts(tokenizer)
    cfg = SamplingConfig(max_new_tokens=12, temperature=0.0)
    cached = generate(tiny_model, ids, mask, cfg, tokenizer.eos_id, tokenizer.pad_id)
    full = generate(tiny_model, ids, mask, cfg, tokenizer.eos_id, tokenizer.pad_id, use_cache=False)
    assert torch.equal(cached.response_ids, full.response_ids)
    assert torch.equal(cached.response_mask, full.response_mask)
    torch.testing.assert_close(cached.logprobs, full.logprobs, atol=1e-5, rtol=0)


def test_sampled_tokens_agree_with_and_without_cache(
    tiny_model: LlamaForCausalLM, tokenizer: CharTokenizer
) -> None:
    ids, mask = _prompts(tokenizer)
    cfg = SamplingConfig(max_new_tokens=10, temperature=0.7, top_k=20, top_p=0.9)
    outs = [
        generate(
            tiny_model, ids, mask, cfg, tokenizer.eos_id, tokenizer.pad_id,
            generator=torch.Generator().manual_seed(3), use_cache=use_cache,
        )
        for use_cache in (True, False)
    ]  # fmt: skip
    assert torch.equal(outs[0].response_ids, outs[1].response_ids)


@pytest.mark.parametrize("temperature", [1.0, 0.6, 1.7])
def test_behaviour_logprobs_match_trainer_rescoring(
    tokenizer: CharTokenizer, temperature: float
) -> None:
    # the contract is for a run's policy, so the model has the training init (std 0.02): the
    # 10x init of the ``tiny_model`` fixture makes logits so large that float32 rounding alone
    # (the KV-cache steps and the full forward reduce in different orders) reaches 1.3e-5 on
    # some CPUs (AMX), against 5e-7 here
    torch.manual_seed(0)
    tiny_model = LlamaForCausalLM(LlamaConfig(num_hidden_layers=2)).eval()
    ids, mask = _prompts(tokenizer)
    ids, mask = ids.repeat_interleave(8, 0), mask.repeat_interleave(8, 0)
    cfg = SamplingConfig(max_new_tokens=10, temperature=temperature, top_k=30)
    gen = generate(
        tiny_model, ids, mask, cfg, tokenizer.eos_id, tokenizer.pad_id,
        generator=torch.Generator().manual_seed(0),
    )  # fmt: skip
    rescored, _ = response_logprobs(
        tiny_model, ids, mask, gen.response_ids, gen.response_mask, temperature
    )
    assert gen.response_mask.any(-1).all()
    diff = (rescored - gen.logprobs).abs().max().item()
    assert diff < 1e-5
    # a different temperature on the trainer side would not match: the check can fail
    wrong, _ = response_logprobs(
        tiny_model, ids, mask, gen.response_ids, gen.response_mask, temperature * 2
    )
    assert (wrong - gen.logprobs).abs().max().item() > 1e-2


def test_uniform_head_samples_eos_and_pads_after_it(tokenizer: CharTokenizer) -> None:
    # zero LM head -> uniform over 48 tokens; with 200 rows × 6 steps some rows hit EOS early
    model = LlamaForCausalLM(LlamaConfig(tie_word_embeddings=False)).eval()
    with torch.no_grad():
        model.lm_head.weight.zero_()
    ids, mask = left_pad(tokenizer, ["1+1="] * 200)
    gen = generate(model, ids, mask, SamplingConfig(max_new_tokens=6), tokenizer.eos_id,
                   tokenizer.pad_id, generator=torch.Generator().manual_seed(0))  # fmt: skip
    lengths = gen.response_mask.sum(-1)
    stopped = lengths < 6
    assert stopped.any() and (~stopped).any()
    last = gen.response_ids.gather(1, (lengths - 1)[:, None]).squeeze(1)
    assert (last[stopped] == tokenizer.eos_id).all()
    assert (gen.response_ids[~gen.response_mask] == tokenizer.pad_id).all()
    # uniform distribution: every behaviour logprob is log(1/48)
    expected = torch.full_like(gen.logprobs, -torch.log(torch.tensor(48.0)).item())
    torch.testing.assert_close(gen.logprobs[gen.response_mask], expected[gen.response_mask])


def test_top_k_and_top_p_filtering() -> None:
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    top2 = _filter_logits(logits, top_k=2, top_p=1.0)
    assert torch.isinf(top2[0, 2:]).all() and torch.isfinite(top2[0, :2]).all()
    # nucleus 0.7: 0.5 alone < 0.7, 0.5 + 0.3 >= 0.7 -> keep the first two
    nucleus = _filter_logits(logits, top_k=0, top_p=0.7)
    assert torch.isfinite(nucleus[0, :2]).all() and torch.isinf(nucleus[0, 2:]).all()
    # nucleus 0.5: the first token alone reaches it
    assert torch.isfinite(_filter_logits(logits, 0, 0.5)[0]).sum().item() == 1


@pytest.mark.parametrize("top_k", [0, 3])
def test_sampling_draws_from_the_filtered_distribution(top_k: int) -> None:
    # 200k draws from one row: every frequency within 5 sigma of its probability, filtered
    # tokens never drawn; the same generator state draws the same tokens
    logits = torch.tensor([[2.0, 1.0, 0.5, 0.0, -1.0, -3.0]])
    cfg = SamplingConfig(max_new_tokens=8, temperature=1.0, top_k=top_k)
    probs = _filter_logits(logits, top_k, 1.0).softmax(-1)[0]
    n = 200_000
    many = logits.expand(n, -1)
    drawn = _choose(many, cfg, torch.Generator().manual_seed(7))
    freq = torch.bincount(drawn, minlength=6).double() / n
    sigma = (probs.double() * (1 - probs.double()) / n).sqrt()
    assert ((freq - probs.double()).abs() <= 5 * sigma + 1e-12).all(), (freq, probs)
    if top_k:
        assert (freq[top_k:] == 0).all()
    again = _choose(many, cfg, torch.Generator().manual_seed(7))
    assert torch.equal(drawn, again)


def test_generation_is_ordinary_tensors_for_autograd(
    tiny_model: LlamaForCausalLM, tokenizer: CharTokenizer
) -> None:
    # sampling runs under inference mode; what it returns must still enter the trainer's graph
    ids, mask = _prompts(tokenizer)
    gen = generate(tiny_model, ids, mask, SamplingConfig(max_new_tokens=4), tokenizer.eos_id,
                   tokenizer.pad_id, generator=torch.Generator().manual_seed(0))  # fmt: skip
    assert not any(t.is_inference() for t in (gen.response_ids, gen.response_mask, gen.logprobs))
    scale = torch.ones((), requires_grad=True)
    (gen.logprobs * scale * gen.response_mask).sum().backward()  # mul saves its operands
    assert scale.grad is not None


def test_sampling_runs_without_autograd(
    tiny_model: LlamaForCausalLM, tokenizer: CharTokenizer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # (grad mode, inference mode) at each forward and fast decoding step: inference mode unless
    # FSDP shards the model, which also keeps every step on the module forward
    modes: list[tuple[str, bool, bool]] = []

    def record(kind: str) -> None:
        modes.append((kind, torch.is_grad_enabled(), torch.is_inference_mode_enabled()))

    tiny_model.register_forward_pre_hook(lambda *_: record("forward"))
    step = sampler.Decoder.step
    monkeypatch.setattr(sampler.Decoder, "step", lambda *a: record("fast") or step(*a))
    ids, mask = _prompts(tokenizer)
    cfg = SamplingConfig(max_new_tokens=3, temperature=0.0)
    generate(tiny_model, ids, mask, cfg, eos_id=-1, pad_id=tokenizer.pad_id)
    assert modes == [("forward", False, True)] + [("fast", False, True)] * 2
    monkeypatch.setattr(sampler, "is_fsdp", lambda model: True)
    modes.clear()
    generate(tiny_model, ids, mask, cfg, eos_id=-1, pad_id=tokenizer.pad_id)
    assert modes == [("forward", False, False)] * 3


def test_non_finite_logits_fail_loudly_when_sampling(tokenizer: CharTokenizer) -> None:
    model = LlamaForCausalLM(LlamaConfig()).eval()
    with torch.no_grad():
        model.model.norm.weight.fill_(float("nan"))
    ids, mask = left_pad(tokenizer, ["1+1="])
    with pytest.raises(RuntimeError, match="NaN"):
        generate(model, ids, mask, SamplingConfig(max_new_tokens=2), tokenizer.eos_id,
                 tokenizer.pad_id)  # fmt: skip


def test_zero_new_tokens(tiny_model: LlamaForCausalLM, tokenizer: CharTokenizer) -> None:
    ids, mask = _prompts(tokenizer)
    gen = generate(tiny_model, ids, mask, SamplingConfig(max_new_tokens=0), 1, 0)
    assert gen.response_ids.shape == gen.response_mask.shape == gen.logprobs.shape == (4, 0)
    assert gen.response_ids.dtype == torch.long and gen.response_mask.dtype == torch.bool


def test_zero_rows(tiny_model: LlamaForCausalLM) -> None:
    ids, mask = torch.zeros(0, 5, dtype=torch.long), torch.ones(0, 5, dtype=torch.bool)
    gen = generate(tiny_model, ids, mask, SamplingConfig(max_new_tokens=3), 1, 0)
    assert gen.response_ids.shape == gen.response_mask.shape == gen.logprobs.shape == (0, 0)


def test_rows_stop_at_any_of_several_end_ids(tokenizer: CharTokenizer) -> None:
    """An instruct model's end of turn beside its EOS (``Tokenizer.stop_ids``): a row stops at
    whichever comes first, and ``ended_with_eos`` counts both."""
    from astrai.rollout.rollout import ended_with_eos

    model = LlamaForCausalLM(LlamaConfig(tie_word_embeddings=False)).eval()
    with torch.no_grad():
        model.lm_head.weight.zero_()  # uniform over 48 tokens
    stop = (tokenizer.eos_id, 7)
    ids, mask = left_pad(tokenizer, ["1+1="] * 300)
    gen = generate(model, ids, mask, SamplingConfig(max_new_tokens=6), stop, tokenizer.pad_id,
                   generator=torch.Generator().manual_seed(0))  # fmt: skip
    lengths = gen.response_mask.sum(-1)
    last = gen.response_ids.gather(1, (lengths - 1)[:, None]).squeeze(1)
    stopped = lengths < 6
    assert set(last[stopped].tolist()) == set(stop)  # both end rows, nothing else does
    body = gen.response_ids.masked_fill(~gen.response_mask, -1)
    body[torch.arange(len(lengths)), lengths - 1] = -1  # each row's last token aside
    assert not torch.isin(body, torch.tensor(stop)).any()  # no row runs past an end id
    ended = ended_with_eos(gen.response_ids, gen.response_mask, stop)
    assert torch.equal(ended, torch.isin(last, torch.tensor(stop)))
    assert torch.equal(
        ended_with_eos(gen.response_ids, gen.response_mask, tokenizer.eos_id),
        last == tokenizer.eos_id,
    )
