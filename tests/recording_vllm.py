"""A recording stand-in for the ``vllm`` package: every call ``rollout.engines.in_process_vllm``
makes is appended to ``CALLS`` as ``(name, args, kwargs)``, with answers shaped as vLLM's, so the
engine's per-step call sequence on CUDA (sleep mode, sync, prefix-cache reset, generate) is checked
without a GPU or vLLM; ``torch.cuda.empty_cache`` is recorded too (``empty_cache``), and the
worker methods ``LLM.collective_rpc`` runs (``reload_weights``) under their own names.
``tests/engine/test_vllm_calls.py`` binds each recorded call to the signature of the installed
vLLM build, so the stand-in cannot drift from the real API.

``install(monkeypatch)`` puts the stand-in's modules into ``sys.modules``."""

from __future__ import annotations

import importlib.machinery
import sys
import types
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch

from astrai.models.llama import LlamaConfig, LlamaForCausalLM
from astrai.models.merged_weights import engine_weights
from astrai.models.tokenizer import CharTokenizer
from astrai.rollout.collect import left_pad
from astrai.rollout.engines import in_process_vllm
from astrai.rollout.engines.sampler import SamplingConfig
from astrai.rollout.engines.seeded_vllm import SeededVLLM
from astrai.rollout.engines.vllm_settings import VLLMEngineConfig, resolve

CALLS: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
# the name of each recorded call -> where the real one is (module, attribute path)
REAL = {
    "LLM": ("vllm", "LLM.__init__"),
    "LLM.generate": ("vllm", "LLM.generate"),
    "LLM.sleep": ("vllm", "LLM.sleep"),
    "LLM.wake_up": ("vllm", "LLM.wake_up"),
    "LLM.reset_prefix_cache": ("vllm", "LLM.reset_prefix_cache"),
    "LLM.collective_rpc": ("vllm", "LLM.collective_rpc"),
    "SamplingParams": ("vllm", "SamplingParams"),
    "TokensPrompt": ("vllm.inputs", "TokensPrompt"),
    # the worker's reload_weights(*args, **kwargs) hands its arguments to the model runner's
    # inside vLLM's config context: the model runner's signature is the one they must fit
    "reload_weights": ("vllm.v1.worker.gpu_model_runner", "GPUModelRunner.reload_weights"),
    "shutdown": ("vllm.v1.engine.core_client", "InprocClient.shutdown"),
    "empty_cache": ("torch.cuda", "empty_cache"),
}


def _record(name: str, *args: Any, **kwargs: Any) -> None:
    CALLS.append((name, args, kwargs))


@dataclass
class Logprob:
    logprob: float


@dataclass
class Completion:
    index: int
    token_ids: list[int]
    logprobs: list[dict[int, Logprob]] = field(default_factory=list)


@dataclass
class RequestOutput:
    outputs: list[Completion]


class SamplingParams:
    def __init__(self, **kwargs: Any) -> None:
        _record("SamplingParams", **kwargs)
        self.n = kwargs.get("n", 1)
        self.max_tokens = kwargs.get("max_tokens", 16)


class _Worker:
    """The worker ``LLM.collective_rpc`` calls methods of (vLLM's ``Worker``)."""

    def __init__(self) -> None:
        self.model_runner = _ModelRunner()

    def reload_weights(self, **kwargs: Any) -> None:
        names = [name for name, _ in kwargs["weights_iterator"]]
        _record("reload_weights", weights_iterator=names, **{
            k: v for k, v in kwargs.items() if k != "weights_iterator"
        })  # fmt: skip


class _ModelRunner:
    def get_model(self) -> Any:
        method = types.SimpleNamespace(
            process_weights_after_loading=lambda head: _record("repack_tied_lm_head")
        )
        return types.SimpleNamespace(lm_head=types.SimpleNamespace(quant_method=method))


class _EngineCore:
    def shutdown(self) -> None:
        _record("shutdown")


class LLM:
    def __init__(self, **kwargs: Any) -> None:
        _record("LLM", **kwargs)
        self._worker = _Worker()
        executor = types.SimpleNamespace(driver_worker=types.SimpleNamespace(worker=self._worker))
        self.llm_engine = types.SimpleNamespace(model_executor=executor, engine_core=_EngineCore())

    def generate(self, prompts: Any, sampling_params: Any, **kwargs: Any) -> list[RequestOutput]:
        _record("LLM.generate", prompts, sampling_params, **kwargs)
        answers = []
        for params in sampling_params:
            ids = [3] * params.max_tokens  # a response of max_tokens tokens, logprob -0.5 each
            completions = [
                Completion(i, ids, [{3: Logprob(-0.5)} for _ in ids]) for i in range(params.n)
            ]
            answers.append(RequestOutput(completions))
        return answers

    def sleep(self, level: int = 1) -> None:
        _record("LLM.sleep", level=level)

    def wake_up(self, tags: list[str] | None = None) -> None:
        _record("LLM.wake_up", tags=tags)

    def reset_prefix_cache(self) -> bool:
        _record("LLM.reset_prefix_cache")
        return True

    def collective_rpc(
        self,
        method: str,
        timeout: float | None = None,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> list[Any]:
        _record("LLM.collective_rpc", method, timeout=timeout, args=args, kwargs=kwargs)
        return [getattr(self._worker, method)(*args, **(kwargs or {}))]


def TokensPrompt(**kwargs: Any) -> dict[str, Any]:  # noqa: N802 (vLLM's name: a TypedDict)
    _record("TokensPrompt", **kwargs)
    return dict(kwargs)


def install(monkeypatch: pytest.MonkeyPatch) -> None:
    """The stand-in as ``vllm``, ``vllm.inputs`` and ``vllm.platforms`` (a CUDA platform), and
    ``torch.cuda.empty_cache`` recorded."""
    CALLS.clear()
    root = types.ModuleType("vllm")
    # importlib.util.find_spec("vllm") (SeededVLLM.check) reads a module's spec
    root.__spec__ = importlib.machinery.ModuleSpec("vllm", None)
    root.LLM = LLM  # type: ignore[attr-defined]
    root.SamplingParams = SamplingParams  # type: ignore[attr-defined]
    inputs = types.ModuleType("vllm.inputs")
    inputs.TokensPrompt = TokensPrompt  # type: ignore[attr-defined]
    platforms = types.ModuleType("vllm.platforms")
    platforms.current_platform = types.SimpleNamespace(is_cpu=lambda: False)  # type: ignore[attr-defined]
    for name, module in (("vllm", root), ("vllm.inputs", inputs), ("vllm.platforms", platforms)):
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: _record("empty_cache"))


def on_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    """``engine=vllm``'s knobs resolved as on CUDA, whatever the policy's device (the CPU's
    policy stands for a GPU's): CUDA's defaults, sleep mode on."""
    monkeypatch.setattr(
        in_process_vllm,
        "resolve",
        lambda config, _cuda, precision: resolve(config, True, precision),
    )


def names() -> list[str]:
    """The recorded calls' names, without the request objects each ``generate`` builds."""
    return [name for name, _, _ in CALLS if name not in ("SamplingParams", "TokensPrompt")]


SAMPLING = SamplingConfig(max_new_tokens=3, temperature=1.0)


def small_policy() -> LlamaForCausalLM:
    """A 1-layer model with 2 heads of 32 (a size vLLM's CPU kernel has)."""
    return LlamaForCausalLM(LlamaConfig(num_hidden_layers=1, num_attention_heads=2,
                                        num_key_value_heads=1))  # fmt: skip


def engine_on(monkeypatch: pytest.MonkeyPatch, cuda: bool, **knobs: Any) -> SeededVLLM:
    """``engine=vllm`` on the stand-in, its knobs resolved as on CUDA (``cuda``: the policy's
    device decides, so the CPU's policy stands for a GPU's) or on the CPU."""
    install(monkeypatch)
    if cuda:
        on_cuda(monkeypatch)
    torch.manual_seed(0)
    return SeededVLLM(VLLMEngineConfig(**knobs), small_policy(), CharTokenizer(), "bf16")


def one_step(engine: SeededVLLM, policy: LlamaForCausalLM) -> None:
    """One RL step's engine calls, in the trainer's order (``Trainer.run_step``)."""
    tokenizer = CharTokenizer()
    ids, mask = left_pad(tokenizer, ["1+2=", "3+4="])
    engine.sample(ids, mask, 2, SAMPLING, tokenizer.stop_ids, torch.Generator().manual_seed(1))
    engine.before_update()
    engine.after_update()
    engine.sync_weights(engine_weights(policy))
