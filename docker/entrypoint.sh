#!/bin/sh
# astrai container entrypoint: the trainer, with the job's Hydra overrides as arguments
# (`docker compose run --rm trainer <overrides> hydra.run.dir=<job dir>`).
# exec: python replaces this shell, so SIGTERM from `docker stop` (forwarded by tini, PID 1 with
# compose's `init: true`) reaches the trainer, which finishes its step, checkpoints and exits 0.
set -eu
exec python /workspace/train.py "$@"
