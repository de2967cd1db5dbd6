"""Every call ``engine=vllm`` makes, against the installed vLLM build's own signatures
(``make test-vllm``): the recording stand-in's sequences (``tests/rollout/test_vllm_recorded.py``'s,
CUDA and CPU, driven through the same helpers) are replayed, each call bound to the real
function's signature, and each ``vllm.LLM`` keyword is an engine argument of this release
(issue 49)."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
from typing import Any

import pytest
from tests import recording_vllm

pytestmark = pytest.mark.vllm


def _real(name: str) -> Any:
    module, path = recording_vllm.REAL[name]
    value: Any = importlib.import_module(module)
    for part in path.split("."):
        value = getattr(value, part)
    return value


def _recorded_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, tuple, dict]]:
    """Every call the recorded tests make (each test clears ``CALLS`` as it goes)."""
    calls: list[tuple[str, tuple, dict]] = []
    record = recording_vllm._record

    def keep(name: str, *args: Any, **kwargs: Any) -> None:
        calls.append((name, args, kwargs))
        record(name, *args, **kwargs)

    monkeypatch.setattr(recording_vllm, "_record", keep)
    # the sequences of tests/rollout/test_vllm_recorded.py: CUDA (two steps), the CPU, exact
    for cuda, knobs, steps in ((True, {}, 2), (False, {}, 1), (True, {"exact": True}, 1)):
        with monkeypatch.context() as patch:
            engine = recording_vllm.engine_on(patch, cuda, **knobs)
            for _ in range(steps):
                recording_vllm.one_step(engine, recording_vllm.small_policy())
            engine.close()
    return calls


def test_every_call_binds_to_the_installed_builds_signature(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = _recorded_calls(monkeypatch)
    seen = {name for name, _, _ in calls}
    assert seen >= {
        "LLM", "LLM.generate", "LLM.sleep", "LLM.wake_up", "LLM.collective_rpc",
        "reload_weights", "empty_cache",
    }  # fmt: skip
    from vllm.engine.arg_utils import EngineArgs

    engine_args = {f.name for f in dataclasses.fields(EngineArgs)}
    for name, args, kwargs in calls:
        if name == "repack_tied_lm_head":
            continue  # the CPU build's quant method (the vLLM lane's CPU runs exercise it)
        real = _real(name)
        if name == "LLM":  # LLM(model, **kwargs) hands its keywords to EngineArgs
            unknown = sorted(set(kwargs) - engine_args)
            assert not unknown, f"vllm.LLM keywords this release lacks: {unknown}"
            continue
        if name == "TokensPrompt":  # a TypedDict
            assert set(kwargs) <= set(real.__annotations__), kwargs
            continue
        if name == "SamplingParams":  # a msgspec struct: its fields are its keywords
            assert set(kwargs) <= set(real.__struct_fields__), sorted(kwargs)
            continue
        if name == "reload_weights":
            kwargs = {**kwargs, "weights_iterator": iter(())}
        if name == "LLM.collective_rpc":  # a method of the worker, the CPU build's included
            from vllm.v1.worker.cpu_worker import CPUWorker
            from vllm.v1.worker.gpu_worker import Worker

            assert callable(getattr(Worker, args[0])) and issubclass(CPUWorker, Worker), args
        signature = inspect.signature(real)
        self_first = next(iter(signature.parameters), None) == "self"
        signature.bind(*((None,) if self_first else ()), *args, **kwargs)


@pytest.mark.slow
def test_gpu_check_engine_runs_what_the_cpu_can_and_skips_the_rest_by_name(tmp_path) -> None:
    """``make gpu-check --only engine`` in CPU mode (vLLM's CPU build): the sync and LoRA checks
    run and pass; the CUDA-only ones are skipped, each by name."""
    import json
    import subprocess
    import sys

    from astrai.paths import REPO_ROOT

    summary = tmp_path / "summary.json"
    done = subprocess.run(
        [sys.executable, str(REPO_ROOT / "bench/gpu_check.py"), "--device", "cpu", "--quick",
         "--only", "engine", "--summary", str(summary)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    statuses = {c["name"]: c["status"] for c in json.loads(summary.read_text())["checks"]}
    assert statuses == {
        "engine-vllm-speed": "SKIP",
        "engine-vllm-sync": "PASS",
        "engine-vllm-sleep": "SKIP",
        "engine-vllm-learns": "SKIP",
        "engine-vllm-lora": "PASS",
        "engine-lag-stream": "SKIP",
    }
    skips = [line for line in done.stdout.splitlines() if line.startswith("SKIP")]
    assert len(skips) == 4 and all("CUDA only" in line for line in skips)
