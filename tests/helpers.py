"""Helpers shared by tests: compose the real Hydra config from ``conf/``; wait for a running
``train.py`` to log; run a command-line module's ``main`` in-process; write a small Hugging Face
tokenizer directory locally; free ports on 127.0.0.1."""

from __future__ import annotations

import contextlib
import copy
import functools
import hashlib
import importlib.util
import io
import json
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import torch
from omegaconf import DictConfig

from astrai.algorithms.pass_plan import PassPlan
from astrai.config.compose import compose_train_config

__all__ = [
    "compose_config",
    "run_main",
    "script_module",
    "wait_for_rows",
    "weights_digest",
    "write_byte_level_tokenizer",
]


@functools.cache
def _hydra_config(overrides: tuple[str, ...], config_dir: str) -> DictConfig:
    """Hydra's composition of ``overrides`` (not validated), once per worker: a function of the
    overrides and the config files, so those are the key; a compose that raises is not
    cached."""
    return compose_train_config(list(overrides), validate=False)


def compose_config(overrides: list[str] | None = None, validate: bool = True) -> DictConfig:
    """``astrai.config.compose.compose_train_config``: the config ``python train.py overrides...``
    would run, validated like it unless ``validate`` is False. A Hydra compose costs ~0.15 s of
    CPU and the suites compose the same overrides many times: each call gets a fresh copy of
    one composition and is validated afresh (validation reads files and the environment). Not
    cached: a ``hydra.searchpath`` override (files a test writes and may rewrite)."""
    from astrai import paths
    from astrai.config.validate import validate_config

    if any("searchpath" in override for override in overrides or []):
        return compose_train_config(overrides, validate=validate)
    key = tuple(overrides or []), str(paths.CONFIG_DIR)
    cfg = copy.deepcopy(_hydra_config(*key))
    if validate:
        validate_config(cfg)
    return cfg


def wait_for_rows(
    process: subprocess.Popen, metrics: Path, rows: int = 3, timeout: float = 120
) -> None:
    """Wait until a running ``train.py`` has logged ``rows`` rows to ``metrics`` (fails if it
    exits or the time runs out first)."""
    deadline = time.monotonic() + timeout
    while not (metrics.is_file() and len(metrics.read_text().splitlines()) >= rows):
        assert process.poll() is None, f"train.py exited ({process.returncode}) before {rows} rows"
        assert time.monotonic() < deadline, f"no {rows} rows in {metrics} after {timeout} s"
        time.sleep(0.2)


@contextlib.contextmanager
def script_module(path: Path, name: str) -> Iterator[ModuleType]:
    """A script (``bench/*.py``, ``docker/*.py``: no package) imported as module ``name``,
    registered in ``sys.modules`` while in use, as its dataclasses need."""
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[name]


def run_main(main: Callable[[list[str]], int], args: list[str]) -> subprocess.CompletedProcess:
    """``main(args)`` of a ``python -m`` module, in this process (a child process costs a torch
    import per call): its exit status, stdout and stderr, as ``subprocess.run`` gives them."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(args)
        except SystemExit as exit_:  # argparse's usage errors
            code = exit_.code if isinstance(exit_.code, int) else 1
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


def write_byte_level_tokenizer(
    directory: Path, template: str | None, in_config: bool = False
) -> Path:
    """A small byte-level BPE tokenizer directory with ChatML specials (like SmolLM2's); the
    chat template in ``chat_template.jinja`` (transformers 5) or, ``in_config``, in
    ``tokenizer_config.json`` (4.x)."""
    from tokenizers import Tokenizer, decoders, pre_tokenizers
    from tokenizers.models import BPE

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {"<|endoftext|>": 0, "<|im_start|>": 1, "<|im_end|>": 2}
    vocab.update({c: i + 3 for i, c in enumerate(sorted(alphabet))})
    tokenizer = Tokenizer(BPE(vocab=vocab, merges=[]))
    tokenizer.add_special_tokens(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(directory / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<|im_start|>",
        "eos_token": "<|im_end|>",
        "unk_token": "<|endoftext|>",
    }
    if template is not None and in_config:
        config["chat_template"] = template
    elif template is not None:
        (directory / "chat_template.jinja").write_text(template)
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    return directory


def weights_digest(*models: torch.nn.Module) -> str:
    """sha256 of every tensor of ``models`` (state-dict order, names included)."""
    digest = hashlib.sha256()
    for model in models:
        for name, tensor in model.state_dict().items():
            digest.update(name.encode())
            digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def pass_plan(
    micro_batch_size: int | None = None,
    score_tokens: object = "auto",
    update_tokens: object = "auto",
    temperature: float = 1.0,
    trains_critic: bool = False,
) -> PassPlan:
    """The passes of one minibatch a step (``algorithms.pass_plan.PassPlan``) for a strategy
    built by hand, its ``prepare`` called directly: by default the budgets a run's ``auto``
    gives, and no ``micro_batch_size``."""
    return PassPlan(
        minibatches=1,
        micro_batch_size=micro_batch_size,
        score_tokens=score_tokens,
        update_tokens=update_tokens,
        temperature=temperature,
        trains_critic=trains_critic,
    )


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports free on 127.0.0.1 right now (bound together, so no two are
    the same; a server started next may still lose one to another process)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def free_port() -> int:
    """One TCP port free on 127.0.0.1 right now."""
    return free_ports(1)[0]
