"""A stand-in for the Docker CLI (no engine runs on our machines): records its argv and
environment, then runs ``docker compose ... run ... trainer ARGS`` as ``python train.py ARGS`` on
this machine with the environment a container would get. Written to ``PATH`` by the tests."""

import json
import os
import subprocess
import sys
from pathlib import Path

RECORDS = "fake_docker_calls.jsonl"  # written into $DOCKER_CONFIG (the CLI variable we keep)
REPO = Path(__file__).resolve().parents[2]


def main(argv: list[str]) -> int:
    record_dir = Path(os.environ["DOCKER_CONFIG"])
    with open(record_dir / RECORDS, "a") as f:
        f.write(json.dumps({"argv": argv, "env": dict(os.environ)}) + "\n")
    if argv[:2] == ["image", "inspect"]:
        return 0 if os.environ.get("ASTRAI_IMAGE") != "missing:latest" else 1
    if argv[:1] != ["compose"] or "run" not in argv:
        print(f"fake docker: unsupported {argv}", file=sys.stderr)
        return 64
    args = argv[argv.index("run") + 1 :]
    passed: list[str] = []
    while args and args[0].startswith("-"):
        flag = args.pop(0)
        if flag in ("-e", "--volume", "-v"):
            value = args.pop(0)
            if flag == "-e":
                passed.append(value)
    args.pop(0)  # the service name
    # what compose would put into the container: the -e names, and the image's own ENV
    env = {name: os.environ[name] for name in passed if name in os.environ}
    env.update({"PATH": os.environ["PATH"], "OMP_NUM_THREADS": "1", "ASTRAI_IN_CONTAINER": "1"})
    return subprocess.call([sys.executable, str(REPO / "train.py"), *args], env=env, cwd=REPO)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
