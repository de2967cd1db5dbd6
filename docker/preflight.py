"""Check that this host can run astrai in Docker, before a run starts (standard library only).

    python docker/preflight.py [--gpus] [--mount PATH ...] [--read-mount PATH ...]
        [--image astrai:latest] [--compose-file docker/compose.yaml ...]

Checks, in order, so that the first failure names the real cause: the docker CLI is on PATH; the
engine answers (``docker info``); Compose v2 is installed (``docker compose version``) and
renders the compose files (several: merged in order, as ``docker compose -f A -f B``); with
``--gpus``, the engine has the NVIDIA runtime (or NVIDIA CDI devices); every ``--mount`` path is
an existing folder the container user can write, every ``--read-mount`` path (mounted read-only:
``/data``, ``/models``) one it can read (nothing is created); the image exists and
holds this checkout's code (``docker/source_hash.py``; a warning for an image without the hash). The
first failure prints one line ``preflight: <reason>`` to stderr and exits 1; success prints
``preflight: ok``. The container user is ``ASTRAI_UID:ASTRAI_GID`` (default: this process's).
The Docker launcher runs this script before any container starts, with the image, mounts and
GPU need of the composed jobs.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

IMAGE = "astrai:latest"
DEFAULT_COMPOSE_FILE = Path(__file__).resolve().parent / "compose.yaml"
TIMEOUT_S = 30.0


class PreflightError(Exception):
    """One failed check; the message is the reason, on one line."""


def _one_line(text: str, limit: int = 200, lines: int = 1) -> str:
    """The first ``lines`` non-empty lines of ``text`` joined by `` | ``, whitespace collapsed,
    cut at ``limit``."""
    kept = [" ".join(line.split()) for line in text.splitlines() if line.strip()][:lines]
    joined = " | ".join(kept)
    return joined if len(joined) <= limit else joined[: limit - 3] + "..."


def _docker(docker: str, *args: str) -> subprocess.CompletedProcess[str]:
    command = [docker, *args]
    try:
        return subprocess.run(
            command, capture_output=True, text=True, timeout=TIMEOUT_S, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired as err:
        shown = " ".join(["docker", *args])
        raise PreflightError(f"`{shown}` did not answer within {TIMEOUT_S:.0f}s") from err
    except OSError as err:
        raise PreflightError(f"cannot run {docker}: {err.strerror or err}") from err


def _failure(result: subprocess.CompletedProcess[str], lines: int = 1) -> str:
    detail = _one_line(result.stderr, lines=lines) or _one_line(result.stdout, lines=lines)
    return detail or f"exit status {result.returncode}"


def check_cli() -> str:
    docker = shutil.which("docker")
    if docker is None:
        raise PreflightError("docker CLI not found on PATH (install Docker Engine)")
    return docker


def check_engine(docker: str) -> dict:
    """``docker info`` as a dict; raises when the engine does not answer."""
    result = _docker(docker, "info", "--format", "{{json .}}")
    if result.returncode != 0:
        raise PreflightError(f"Docker engine not reachable: {_failure(result)}")
    try:
        info = json.loads(result.stdout)
    except json.JSONDecodeError as err:
        raise PreflightError("`docker info` printed no JSON; is this the Docker CLI?") from err
    if not isinstance(info, dict):
        raise PreflightError("`docker info` printed no JSON object; is this the Docker CLI?")
    errors = info.get("ServerErrors")  # older CLIs exit 0 and report a missing daemon here
    if errors:
        raise PreflightError(f"Docker engine not reachable: {_one_line(str(errors[0]))}")
    return info


def check_compose(docker: str, compose_files: list[Path]) -> str:
    """The Compose version; raises unless it is v2 (or later) and renders ``compose_files``."""
    result = _docker(docker, "compose", "version")
    if result.returncode != 0:
        raise PreflightError(
            f"Docker Compose v2 not found (`docker compose version`: {_failure(result)}); "
            "install the docker-compose-plugin"
        )
    match = re.search(r"v?(\d+)\.(\d+)\.(\d+)", result.stdout)
    if match is None:
        raise PreflightError(
            f"cannot read the Compose version from `docker compose version`: "
            f"{_one_line(result.stdout) or 'no output'}"
        )
    version = ".".join(match.groups())
    if int(match.group(1)) < 2:
        raise PreflightError(f"Docker Compose {version} found, v2 needed (docker-compose-plugin)")
    for compose_file in compose_files:
        if not compose_file.is_file():
            raise PreflightError(f"compose file {compose_file} not found")
    files = [arg for path in compose_files for arg in ("-f", str(path))]
    result = _docker(docker, "compose", *files, "config", "--quiet")
    if result.returncode != 0:
        shown = " + ".join(str(path) for path in compose_files)
        # Compose heads its errors with a generic line ("decoding failed due to the following
        # error(s):"); the key and the cause come on the next ones
        detail = _failure(result, lines=3)
        raise PreflightError(f"{shown} does not render: {detail}")
    return version


def check_nvidia(info: dict) -> None:
    runtimes = info.get("Runtimes") or {}
    if "nvidia" in runtimes:
        return
    devices = info.get("DiscoveredDevices") or []  # CDI devices (Docker 28+, CDI enabled)
    if any(str(device.get("ID", "")).startswith("nvidia.com/gpu") for device in devices):
        return
    raise PreflightError(
        "--gpus: the Docker engine has no NVIDIA runtime (install the NVIDIA Container Toolkit, "
        "then `sudo nvidia-ctk runtime configure --runtime=docker` and restart Docker)"
    )


def container_ids() -> tuple[int, int]:
    """``ASTRAI_UID:ASTRAI_GID``, as compose runs the container; default: this process's."""
    ids = []
    for name, default in (("ASTRAI_UID", os.getuid()), ("ASTRAI_GID", os.getgid())):
        value = os.environ.get(name) or str(default)
        if not value.isdigit():
            raise PreflightError(f"{name} must be a number, not {value!r}")
        ids.append(int(value))
    return ids[0], ids[1]


def check_mount(path: Path, uid: int, gid: int, write: bool = True) -> None:
    """``path`` exists, is a folder and ``uid:gid`` may create files in it (``write``), or
    list and read it (a read-only mount).

    Mode bits only, as the container sees them: it runs with exactly ``uid:gid`` and no
    supplementary groups. ACLs are not read.
    """
    try:
        st = path.stat()
    except FileNotFoundError:
        raise PreflightError(f"mount {path} does not exist (create it: mkdir -p {path})") from None
    except OSError as err:
        raise PreflightError(f"mount {path} cannot be read: {err.strerror or err}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise PreflightError(f"mount {path} is not a folder")
    if write and os.statvfs(path).f_flag & os.ST_RDONLY:
        raise PreflightError(f"mount {path} is on a read-only file system")
    if uid == 0:
        return
    # (write or read, search) bits of the class the container user falls in
    if st.st_uid == uid:
        needed = (stat.S_IWUSR if write else stat.S_IRUSR) | stat.S_IXUSR
    elif st.st_gid == gid:
        needed = (stat.S_IWGRP if write else stat.S_IRGRP) | stat.S_IXGRP
    else:
        needed = (stat.S_IWOTH if write else stat.S_IROTH) | stat.S_IXOTH
    if st.st_mode & needed != needed:
        raise PreflightError(
            f"mount {path} is not {'writable' if write else 'readable'} by the container user "
            f"{uid}:{gid} (owner {st.st_uid}:{st.st_gid}, mode {stat.filemode(st.st_mode)})"
        )


def _source_hash_module() -> Any:
    """``docker/source_hash.py``, loaded by path (this script also runs isolated, ``-I``)."""
    path = Path(__file__).resolve().parent / "source_hash.py"
    spec = importlib.util.spec_from_file_location("astrai_source_hash", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check_image(docker: str, image: str) -> None:
    """The image exists and was built from this checkout's code (its ``astrai.source_hash``
    label, which ``make docker-build`` sets); an image built otherwise gets a warning line."""
    result = _docker(
        docker, "image", "inspect", "--format", "{{.Id}} {{json .Config.Labels}}", image
    )
    if result.returncode != 0:
        raise PreflightError(f"image {image} not found; build it with `make docker-build`")
    hashing = _source_hash_module()
    _, _, labels_json = result.stdout.strip().partition(" ")
    try:
        labels = json.loads(labels_json) if labels_json else None
    except json.JSONDecodeError:
        labels = None
    built = labels.get(hashing.LABEL) if isinstance(labels, dict) else None
    if built in (None, hashing.UNKNOWN):
        print(
            f"preflight: warning: image {image} has no {hashing.LABEL} label (not built by "
            "`make docker-build`): it may run other code than this checkout's",
            file=sys.stderr,
        )
        return
    if built != hashing.source_hash(Path(__file__).resolve().parents[1]):
        raise PreflightError(
            f"image {image} was built from other code than this checkout's (a Python file, "
            "conf/ or pyproject.toml changed since): the container would run the old code; "
            "rebuild it with `make docker-build` (the dependency layers stay cached)"
        )


def run_checks(
    gpus: bool,
    mounts: list[Path],
    compose_files: list[Path],
    image: str,
    read_mounts: tuple[Path, ...] = (),
) -> None:
    docker = check_cli()
    info = check_engine(docker)
    check_compose(docker, compose_files)
    if gpus:
        check_nvidia(info)
    uid, gid = container_ids()
    for mount in mounts:
        check_mount(mount, uid, gid)
    for mount in read_mounts:
        check_mount(mount, uid, gid, write=False)
    check_image(docker, image)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python docker/preflight.py", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--gpus", action="store_true", help="require the NVIDIA runtime")
    parser.add_argument(
        "--mount",
        action="append",
        default=[],
        type=Path,
        metavar="PATH",
        help="host folder the container writes to (repeatable)",
    )
    parser.add_argument(
        "--read-mount",
        action="append",
        default=[],
        type=Path,
        metavar="PATH",
        help="host folder mounted read-only, which the container reads (repeatable)",
    )
    parser.add_argument(
        "--compose-file",
        action="append",
        type=Path,
        metavar="FILE",
        help="compose file to render (repeatable; default: compose.yaml next to this script)",
    )
    parser.add_argument("--image", default=IMAGE, help=f"the trainer image (default {IMAGE})")
    args = parser.parse_args(argv)
    try:
        files = args.compose_file or [DEFAULT_COMPOSE_FILE]
        run_checks(args.gpus, args.mount, files, args.image, tuple(args.read_mount))
    except PreflightError as err:
        print(f"preflight: {err}", file=sys.stderr)
        return 1
    print("preflight: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
