# Docker targets, included by the Makefile (which defines PYTHON, BIN, STAMP and ARGS).
# docker-build is the only target that builds the image; every other target uses astrai:latest,
# except docker-serve, which runs vLLM's pinned image (compose.yaml, service server).
COMPOSE := docker compose -f docker/compose.yaml
# whose containers docker-logs/-stop/-clean see: yours (the launcher labels every container
# astrai.user=<uid> of who launched it), never other users' on a shared engine; OWNER=<uid> on
# the command line for another user's
OWNER := $(shell id -u)
# your trainer containers: `compose run` makes one-off containers, found by their labels
DOCKER_TRAINERS := --filter label=com.docker.compose.project=astrai \
	--filter label=com.docker.compose.service=trainer --filter label=astrai.user=$(OWNER)
# the container user, and the image's non-root user: yours unless set (e.g. ASTRAI_UID=1000 as
# root); docker-build and docker-train must agree, so both read these
ASTRAI_UID ?= $(shell id -u)
ASTRAI_GID ?= $(shell id -g)
KEEP ?=
CLEAN_DIRS ?= outputs multirun
LOG_TAIL ?= all
STOP_TIME ?=
# From the command line only (`:=` ignores them in the environment):
# NAME: docker-train/-logs/-stop/-status: the job's name (run dir outputs/NAME, container
#   astrai-<user>-NAME; the same command resumes it); docker-serve: the served model's name
# GPUS: all (default) | none (the CPU, no GPU reservation) | 0,2 (these GPUs)
# DETACH=1: docker-train starts the container and returns (needs NAME)
# MODEL, PORT: docker-serve (ASTRAI_SERVE_PORT / ASTRAI_SERVE_NAME in the environment still
#   apply through compose.yaml)
NAME :=
GPUS :=
DETACH :=
MODEL :=
PORT :=
# what NAME, GPUS and DETACH add to a launch, before ARGS
DOCKER_JOB := $(if $(GPUS),infra.gpu.devices=$(if $(filter all none,$(GPUS)),$(GPUS),[$(GPUS)])) \
	$(if $(NAME),hydra.launcher.job_name=$(NAME)) $(if $(DETACH),hydra.launcher.detach=true)
DOCKER_LAUNCH := $(BIN)/python train.py -m hydra/launcher=docker infra=docker
# your containers of job NAME (running or kept), else your running trainers
DOCKER_SELECT := $(if $(NAME),-a --filter label=astrai.job=$(NAME),)

.PHONY: docker-build docker-preflight docker-train docker-status docker-logs docker-stop \
	docker-clean docker-serve

docker-build: ## build the image astrai:latest with your uid/gid (the only target that builds)
	source_hash="$$($(PYTHON) docker/source_hash.py)" && \
		ASTRAI_UID=$(ASTRAI_UID) ASTRAI_GID=$(ASTRAI_GID) ASTRAI_SOURCE_HASH="$$source_hash" \
		$(COMPOSE) build trainer

docker-preflight: $(STAMP) ## check engine, Compose v2, GPUs, mounts and image for a job (GPUS= ARGS=)
	ASTRAI_UID=$(ASTRAI_UID) ASTRAI_GID=$(ASTRAI_GID) $(DOCKER_LAUNCH) \
		hydra.launcher.preflight_only=true $(DOCKER_JOB) $(ARGS)

docker-train: $(STAMP) ## train in the container [NAME=exp1 GPUS=none DETACH=1 ARGS="..."]
	ASTRAI_UID=$(ASTRAI_UID) ASTRAI_GID=$(ASTRAI_GID) $(DOCKER_LAUNCH) $(DOCKER_JOB) $(ARGS)

docker-status: $(STAMP) ## astrai containers, and named jobs with step, eval/accuracy, state
	@$(BIN)/python docker/status.py $(or $(STATUS_DIRS),outputs)

docker-logs: ## follow the logs of your running trainer(s), or of job NAME=... (also when ended)
	@ids="$$(docker ps -q $(DOCKER_SELECT) $(DOCKER_TRAINERS))" || exit 1; \
	set -- $$ids; \
	if [ $$# -eq 0 ]; then \
		echo "docker-logs: no $(if $(NAME),container of job $(NAME),running astrai trainer container) of user $(OWNER)" >&2; \
		exit 1; \
	fi; \
	if [ $$# -eq 1 ]; then exec docker logs --follow --tail $(LOG_TAIL) "$$1"; fi; \
	for id in "$$@"; do \
		docker logs --follow --tail $(LOG_TAIL) "$$id" 2>&1 | \
			while IFS= read -r line; do printf '[%s] %s\n' "$$id" "$$line"; done & \
	done; \
	wait

docker-stop: ## stop your trainers (or job NAME=...): SIGTERM, checkpoint, exit 0 (STOP_TIME=s)
	@ids="$$(docker ps -q $(if $(NAME),--filter label=astrai.job=$(NAME)) $(DOCKER_TRAINERS))" \
		|| exit 1; \
	if [ -z "$$ids" ]; then \
		echo "docker-stop: no running $(if $(NAME),container of job $(NAME),astrai trainer container) of user $(OWNER)"; \
		exit 0; \
	fi; \
	grace="$(STOP_TIME)"; \
	if [ -z "$$grace" ]; then \
		grace="$$(docker inspect --format '{{with .Config.StopTimeout}}{{.}}{{end}}' $$ids \
			| grep -E '^[0-9]+$$' | sort -n | tail -n 1)"; \
	fi; \
	grace="$${grace:-300}"; \
	echo "docker-stop: SIGTERM to" $$ids "- up to $${grace}s to finish the step and checkpoint"; \
	docker stop -t "$$grace" $$ids

docker-clean: $(STAMP) ## keep only the newest KEEP=N checkpoints of every run in outputs/ multirun/
	@if [ -z "$(KEEP)" ]; then \
		echo "docker-clean: say how many checkpoints to keep per run: make docker-clean KEEP=N" >&2; \
		exit 2; \
	fi; \
	if [ -n "$$(docker ps -q $(DOCKER_TRAINERS) 2>/dev/null)" ]; then \
		echo "docker-clean: your trainer containers are running (make docker-stop first)" >&2; exit 1; \
	fi; \
	for top in $(CLEAN_DIRS); do \
		[ -d "$$top" ] && find "$$top" -type d -name checkpoints -prune; \
	done | sort | while IFS= read -r ckpt; do \
		$(BIN)/python -m astrai.checkpoints prune "$${ckpt%/checkpoints}" --keep $(KEEP) --force \
			|| exit 1; \
	done

# No $(STAMP) and no preflight: it needs no Python and no astrai image, only vLLM's pinned one.
# An empty CUDA_VISIBLE_DEVICES (it would hide every GPU) is unset; a non-empty one selects GPUs.
# The server runs as ASTRAI_UID:ASTRAI_GID (yours), in a compose project of your own
# (astrai-serve-<uid>), so two users' servers never replace each other's container.
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
	export ASTRAI_UID=$(ASTRAI_UID) ASTRAI_GID=$(ASTRAI_GID); \
	echo "docker-serve: $$ASTRAI_SERVE_MODEL on http://127.0.0.1:$${ASTRAI_SERVE_PORT:-8000}/v1"; \
	exec $(COMPOSE) -p astrai-serve-$(OWNER) --profile serve up server
