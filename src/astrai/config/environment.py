"""What ``infra.environment`` may not set, and what the Docker CLI reads from the host.

The Docker launcher runs ``docker compose`` with an environment built from scratch: the Docker
CLI's own variables come from the host, the ``ASTRAI_*`` interpolation variables and
``CUDA_VISIBLE_DEVICES`` from the launcher, and ``infra.environment`` is forwarded into the
container with ``-e NAME``. A name in ``infra.environment`` is therefore also set for the Docker
CLI itself, so names the CLI, compose, the image, the launcher or the trainer rely on are refused
(``validate_config`` checks it, for ``python train.py`` as for the launcher).
"""

from __future__ import annotations

# The Docker CLI's own variables: taken from the host, never from the job's config.
DOCKER_CLI_VARIABLES = (
    "PATH",
    "HOME",
    "DOCKER_HOST",
    "DOCKER_CONFIG",
    "DOCKER_CONTEXT",
    "DOCKER_CERT_PATH",
    "DOCKER_TLS_VERIFY",
    "XDG_RUNTIME_DIR",
)

# Why each further name is refused in infra.environment.
RESERVED_NAMES = {
    **{name: "the Docker CLI reads it on the host" for name in DOCKER_CLI_VARIABLES},
    "CUDA_VISIBLE_DEVICES": "infra.gpu.devices selects the GPUs",
    "NVIDIA_VISIBLE_DEVICES": "compose reserves the GPUs; infra.gpu.devices selects them",
    "NVIDIA_DRIVER_CAPABILITIES": "the image sets it",
    "PYTHONPATH": "the image's python finds astrai through its install",
    "PYTHONHOME": "the image's python finds astrai through its install",
    "LD_LIBRARY_PATH": "the image's CUDA libraries come with torch",
    "LD_PRELOAD": "the image's CUDA libraries come with torch",
    "USER": "compose runs the container as the host user (ASTRAI_UID/ASTRAI_GID)",
    "RANK": "torchrun sets it",
    "LOCAL_RANK": "torchrun sets it",
    "WORLD_SIZE": "torchrun sets it",
    "LOCAL_WORLD_SIZE": "torchrun sets it",
    "GROUP_RANK": "torchrun sets it",
    "MASTER_ADDR": "torchrun sets it",
    "MASTER_PORT": "torchrun sets it",
}
RESERVED_PREFIXES = {
    "ASTRAI_": "the launcher and the image set the ASTRAI_* variables",
    "DOCKER_": "the Docker CLI reads it on the host",
    "COMPOSE_": "docker compose reads it on the host",
    "TORCHELASTIC_": "torchrun sets it",
}


def reserved_reason(name: str) -> str | None:
    """Why ``infra.environment`` may not set ``name``; None when it may."""
    if name in RESERVED_NAMES:
        return RESERVED_NAMES[name]
    for prefix, reason in RESERVED_PREFIXES.items():
        if name.startswith(prefix):
            return reason
    return None
