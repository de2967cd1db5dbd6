# Docker targets, included by the Makefile (which defines PYTHON, BIN, STAMP and ARGS).
# docker-build is the only target that builds the image; every other target uses astrai:latest,
# except docker-serve, which runs vLLM's pinned image (compose.yaml, service server).
COMPOSE := docker compose -f docker/compose.yaml
# host folders mounted at /data /models /outputs (infra.mounts in conf/infra/docker.yaml)
DOCKER_MOUNTS ?= data models outputs
# trainer containers: `compose run` makes one-off containers, found by their compose labels
DOCKER_TRAINERS := --filter label=com.docker.compose.project=astrai \
	--filter label=com.docker.compose.service=trainer
KEEP ?=
CLEAN_DIRS ?= outputs multirun
LOG_TAIL ?= all
STOP_TIME ?=
# docker-serve: from the command line only (`:=` ignores a MODEL, PORT or NAME in the environment;
# ASTRAI_SERVE_PORT / ASTRAI_SERVE_NAME there still apply through compose.yaml)
MODEL :=
PORT :=
NAME :=

.PHONY: docker-build docker-preflight docker-train docker-logs docker-stop docker-clean docker-serve

docker-build: ## build the image astrai:latest with your uid/gid (the only target that builds)
	ASTRAI_UID=$$(id -u) ASTRAI_GID=$$(id -g) $(COMPOSE) build trainer

docker-preflight: ## check Docker, Compose v2, NVIDIA runtime, the mounts and the image
	mkdir -p $(DOCKER_MOUNTS)
	$(PYTHON) docker/preflight.py --gpus $(addprefix --mount ,$(DOCKER_MOUNTS))

docker-train: $(STAMP) docker-preflight ## train in the container; overrides via ARGS="..."
	$(BIN)/python train.py -m hydra/launcher=docker infra=docker $(ARGS)

docker-logs: ## follow the logs of the running trainer container(s)
	@ids="$$(docker ps -q $(DOCKER_TRAINERS))" || exit 1; \
	set -- $$ids; \
	if [ $$# -eq 0 ]; then echo "docker-logs: no running astrai trainer container" >&2; exit 1; fi; \
	if [ $$# -eq 1 ]; then exec docker logs --follow --tail $(LOG_TAIL) "$$1"; fi; \
	for id in "$$@"; do \
		docker logs --follow --tail $(LOG_TAIL) "$$id" 2>&1 | \
			while IFS= read -r line; do printf '[%s] %s\n' "$$id" "$$line"; done & \
	done; \
	wait

docker-stop: ## stop trainers gracefully: SIGTERM, checkpoint, exit 0 (STOP_TIME=s to override)
	@ids="$$(docker ps -q $(DOCKER_TRAINERS))" || exit 1; \
	if [ -z "$$ids" ]; then echo "docker-stop: no running astrai trainer container"; exit 0; fi; \
	grace="$(STOP_TIME)"; \
	if [ -z "$$grace" ]; then \
		grace="$$(docker inspect --format '{{with .Config.StopTimeout}}{{.}}{{end}}' $$ids \
			| grep -E '^[0-9]+$$' | sort -n | tail -n 1)"; \
	fi; \
	grace="$${grace:-300}"; \
	echo "docker-stop: SIGTERM to" $$ids "- up to $${grace}s to finish the step and checkpoint"; \
	docker stop --time "$$grace" $$ids

docker-clean: $(STAMP) ## keep only the newest KEEP=N checkpoints of every run in outputs/ multirun/
	@if [ -z "$(KEEP)" ]; then \
		echo "docker-clean: say how many checkpoints to keep per run: make docker-clean KEEP=N" >&2; \
		exit 2; \
	fi; \
	if [ -n "$$(docker ps -q $(DOCKER_TRAINERS) 2>/dev/null)" ]; then \
		echo "docker-clean: trainer containers are running (make docker-stop first)" >&2; exit 1; \
	fi; \
	for top in $(CLEAN_DIRS); do \
		[ -d "$$top" ] && find "$$top" -type d -name checkpoints -prune; \
	done | sort | while IFS= read -r ckpt; do \
		$(BIN)/python -m astrai.checkpoints prune "$${ckpt%/checkpoints}" --keep $(KEEP) --force \
			|| exit 1; \
	done

# No $(STAMP) and no preflight: it needs no Python and no astrai image, only vLLM's pinned one.
# An empty CUDA_VISIBLE_DEVICES (it would hide every GPU) is unset; a non-empty one selects GPUs.
docker-serve: ## serve an exported model with vLLM on 127.0.0.1: MODEL=<dir> [PORT=8000 NAME=astrai]
	@model='$(MODEL)'; \
	if [ -z "$$model" ]; then \
		echo "docker-serve: say which exported model to serve: make docker-serve MODEL=<dir>" \
			"(python -m astrai.export <checkpoint dir> <dir> writes one)" >&2; exit 2; \
	fi; \
	if [ ! -d "$$model" ]; then \
		echo "docker-serve: MODEL=$$model is not a directory" >&2; exit 2; \
	fi; \
	if [ ! -f "$$model/config.json" ]; then \
		echo "docker-serve: MODEL=$$model has no config.json, so it is not a Hugging Face export" \
			"(python -m astrai.export <checkpoint dir> <dir> writes one)" >&2; exit 2; \
	fi; \
	ASTRAI_SERVE_MODEL="$$(CDPATH= cd -- "$$model" && pwd -P)" || exit 2; \
	export ASTRAI_SERVE_MODEL; \
	[ -n "$${CUDA_VISIBLE_DEVICES:-}" ] || unset CUDA_VISIBLE_DEVICES; \
	$(if $(PORT),export ASTRAI_SERVE_PORT='$(PORT)';) \
	$(if $(NAME),export ASTRAI_SERVE_NAME='$(NAME)';) \
	echo "docker-serve: $$ASTRAI_SERVE_MODEL on http://127.0.0.1:$${ASTRAI_SERVE_PORT:-8000}/v1"; \
	exec $(COMPOSE) --profile serve up server
