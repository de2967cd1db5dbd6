"""docker/preflight.py against fake ``docker`` executables: every check, its one-line failure, and
the order of the checks. Each fake is a bash script first on PATH that logs its arguments."""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from tests.launcher.fake_docker import checkout_source_hash

REPO_ROOT = Path(__file__).resolve().parents[2]
PREFLIGHT = REPO_ROOT / "docker" / "preflight.py"
COMPOSE_FILE = REPO_ROOT / "docker" / "compose.yaml"

NO_DOCKER = None  # `fake=NO_DOCKER`: no docker executable on PATH at all
INSPECT = "image inspect --format {{.Id}} {{json .Config.Labels}}"  # the image check's command


def image_reply(source: str | None) -> Reply:
    """``docker image inspect``'s answer for an image labelled with ``source`` (None: none)."""
    labels = None if source is None else {"astrai.source_hash": source, "other": "x"}
    return Reply(out=f"sha256:0123abcd {json.dumps(labels)}")


INFO_NVIDIA = {"ServerVersion": "28.2.2", "Runtimes": {"runc": {}, "nvidia": {"path": "nvidia"}}}
INFO_RUNC_ONLY = {"ServerVersion": "28.2.2", "Runtimes": {"runc": {}}}
DAEMON_DOWN = (
    "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. "
    "Is the docker daemon running?"
)


@dataclass
class Reply:
    """What the fake prints for one command: exit status, stdout, stderr."""

    rc: int = 0
    out: str = ""
    err: str = ""

    def shell(self) -> str:
        return f"reply {self.rc} {shlex.quote(self.out)} {shlex.quote(self.err)}"


@dataclass
class FakeDocker:
    info: Reply = field(default_factory=lambda: Reply(out=json.dumps(INFO_NVIDIA)))
    compose_version: Reply = field(
        default_factory=lambda: Reply(out="Docker Compose version v2.40.3")
    )
    compose_config: Reply = field(default_factory=Reply)
    image_inspect: Reply = field(default_factory=lambda: image_reply(checkout_source_hash()))

    def script(self, log: Path) -> str:
        # the JSON-format arguments arrive literally, e.g. `info --format {{json .}}`
        return f"""#!/bin/bash
printf '%s\\n' "$*" >> {shlex.quote(str(log))}
reply() {{ [ -n "$2" ] && printf '%s\\n' "$2"; [ -n "$3" ] && printf '%s\\n' "$3" >&2; exit "$1"; }}
case "$*" in
  "info --format {{{{json .}}}}") {self.info.shell()} ;;
  "compose version") {self.compose_version.shell()} ;;
  "compose -f "*" config --quiet") {self.compose_config.shell()} ;;
  "{INSPECT} "*) {self.image_inspect.shell()} ;;
  *) printf 'fake docker: unexpected command: %s\\n' "$*" >&2; exit 99 ;;
esac
"""


@dataclass
class Result:
    rc: int
    stdout: str
    stderr: str
    calls: list[str]

    def failed_with(self, reason: str) -> bool:
        """Exit 1, nothing on stdout, exactly one stderr line ``preflight: ...reason...``."""
        lines = self.stderr.splitlines()
        return (
            self.rc == 1
            and self.stdout == ""
            and len(lines) == 1
            and lines[0].startswith("preflight: ")
            and reason in lines[0]
        )


HEALTHY = FakeDocker()  # engine up, Compose v2, NVIDIA runtime, image present (never mutated)


@pytest.fixture
def preflight(tmp_path: Path):
    """Run preflight.py (stdlib only: ``-I -S``, no site-packages) with a fake docker, or with
    no docker at all (``fake=NO_DOCKER``)."""

    def _run(
        *args: str, fake: FakeDocker | None = HEALTHY, env: dict[str, str] | None = None
    ) -> Result:
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir(exist_ok=True)
        log = tmp_path / "docker-calls.log"
        log.write_text("")
        if fake is not None:
            docker = bin_dir / "docker"
            docker.write_text(fake.script(log))
            docker.chmod(0o755)
            path = f"{bin_dir}{os.pathsep}/usr/bin{os.pathsep}/bin"
        else:
            path = str(bin_dir)  # an empty folder: no docker anywhere on PATH
        run_env = {"PATH": path, "HOME": str(tmp_path), **(env or {})}
        result = subprocess.run(
            [sys.executable, "-I", "-S", str(PREFLIGHT), *args],
            env=run_env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=30,
        )
        return Result(result.returncode, result.stdout, result.stderr, log.read_text().splitlines())

    return _run


def test_all_checks_pass_in_order(preflight, tmp_path: Path) -> None:
    mounts = [tmp_path / "data", tmp_path / "outputs"]
    for mount in mounts:
        mount.mkdir()
    args = ["--gpus", "--compose-file", str(COMPOSE_FILE)]
    result = preflight(*args, *(f"--mount={m}" for m in mounts))
    assert (result.rc, result.stdout, result.stderr) == (0, "preflight: ok\n", "")
    # exactly these commands, in this order: nothing builds, pulls or runs a container
    assert result.calls == [
        "info --format {{json .}}",
        "compose version",
        f"compose -f {COMPOSE_FILE} config --quiet",
        f"{INSPECT} astrai:latest",
    ]
    assert all(not any(m.iterdir()) for m in mounts)  # nothing created in the mounts


def test_the_cpu_files_and_another_image(preflight) -> None:
    # what the launcher passes for a CPU job: both compose files, merged; its own image; no GPU
    cpu_file = COMPOSE_FILE.with_name("compose.cpu.yaml")
    files = ["--compose-file", str(COMPOSE_FILE), "--compose-file", str(cpu_file)]
    result = preflight(*files, "--image", "registry.example/astrai:v2")
    assert (result.rc, result.stdout) == (0, "preflight: ok\n"), result
    assert result.calls == [
        "info --format {{json .}}",
        "compose version",
        f"compose -f {COMPOSE_FILE} -f {cpu_file} config --quiet",
        f"{INSPECT} registry.example/astrai:v2",
    ]


def test_default_compose_file_is_the_one_next_to_the_script(preflight) -> None:
    result = preflight()
    assert result.rc == 0, result.stderr
    assert f"compose -f {COMPOSE_FILE} config --quiet" in result.calls


def test_no_docker_cli(preflight) -> None:
    result = preflight("--gpus", fake=NO_DOCKER)
    assert result.failed_with("docker CLI not found on PATH"), result
    assert result.calls == []


@pytest.mark.parametrize(
    "info",
    [
        Reply(rc=1, out='{"ServerVersion":""}', err=DAEMON_DOWN),  # CLI 23+: exit 1
        Reply(out=json.dumps({"ServerErrors": [DAEMON_DOWN]})),  # older CLIs: exit 0
    ],
    ids=["exit-1", "server-errors"],
)
def test_engine_down(preflight, info: Reply) -> None:
    result = preflight("--gpus", fake=FakeDocker(info=info))
    assert result.failed_with(f"Docker engine not reachable: {DAEMON_DOWN}"), result
    assert result.calls == ["info --format {{json .}}"]  # stops at the first failure


def test_engine_permission_denied_names_the_cause(preflight) -> None:
    denied = (
        "permission denied while trying to connect to the Docker daemon socket at "
        "unix:///var/run/docker.sock: Get ...: dial unix /var/run/docker.sock: connect: "
        "permission denied"
    )
    result = preflight(fake=FakeDocker(info=Reply(rc=1, err=f"{denied}\nmore detail\n")))
    assert result.failed_with("Docker engine not reachable: permission denied while"), result


def test_compose_plugin_missing(preflight) -> None:
    missing = Reply(rc=1, err="docker: unknown command: docker compose\n\nRun 'docker --help'")
    result = preflight(fake=FakeDocker(compose_version=missing))
    assert result.failed_with("Docker Compose v2 not found"), result
    assert "unknown command: docker compose" in result.stderr
    assert result.calls == ["info --format {{json .}}", "compose version"]


@pytest.mark.parametrize(
    "output, version",
    [
        ("docker-compose version 1.29.2, build 5becea4c", "1.29.2"),
        ("Docker Compose version 1.0.35", "1.0.35"),
    ],
)
def test_compose_v1_is_refused(preflight, output: str, version: str) -> None:
    result = preflight(fake=FakeDocker(compose_version=Reply(out=output)))
    assert result.failed_with(f"Docker Compose {version} found, v2 needed"), result


def test_compose_version_unreadable(preflight) -> None:
    result = preflight(fake=FakeDocker(compose_version=Reply(out="something else")))
    assert result.failed_with("cannot read the Compose version"), result


def test_compose_file_that_does_not_render(preflight) -> None:
    bad = Reply(rc=1, err="validating compose.yaml: services.trainer additional properties 'x'")
    result = preflight(fake=FakeDocker(compose_config=bad))
    assert result.failed_with("does not render: validating compose.yaml"), result


def test_a_render_error_keeps_the_lines_that_name_the_key(preflight) -> None:
    # Compose's first line is generic; the key and the cause follow, after a blank line
    err = (
        "decoding failed due to the following error(s):\n\n"
        "'services[trainer].stop_grace_period' time: missing unit in duration \"600\""
    )
    result = preflight(fake=FakeDocker(compose_config=Reply(rc=1, err=err)))
    assert result.failed_with(
        "does not render: decoding failed due to the following error(s): | "
        "'services[trainer].stop_grace_period' time: missing unit in duration \"600\""
    ), result


def test_missing_compose_file(preflight, tmp_path: Path) -> None:
    result = preflight("--compose-file", str(tmp_path / "nope.yaml"))
    assert result.failed_with(f"compose file {tmp_path / 'nope.yaml'} not found"), result


def test_gpus_without_nvidia_runtime(preflight) -> None:
    fake = FakeDocker(info=Reply(out=json.dumps(INFO_RUNC_ONLY)))
    result = preflight("--gpus", fake=fake)
    assert result.failed_with("--gpus: the Docker engine has no NVIDIA runtime"), result
    assert not any(call.startswith("image") for call in result.calls)
    # the same engine passes when no GPU is asked for
    assert preflight(fake=fake).rc == 0


def test_gpus_through_cdi_devices(preflight) -> None:
    info = {**INFO_RUNC_ONLY, "DiscoveredDevices": [{"Source": "cdi", "ID": "nvidia.com/gpu=0"}]}
    result = preflight("--gpus", fake=FakeDocker(info=Reply(out=json.dumps(info))))
    assert (result.rc, result.stdout) == (0, "preflight: ok\n"), result


def test_missing_mount(preflight, tmp_path: Path) -> None:
    present, missing = tmp_path / "data", tmp_path / "models"
    present.mkdir()
    result = preflight("--mount", str(present), "--mount", str(missing))
    assert result.failed_with(f"mount {missing} does not exist"), result
    assert not missing.exists()  # preflight creates nothing
    assert not any(call.startswith("image") for call in result.calls)


def test_mount_that_is_a_file(preflight, tmp_path: Path) -> None:
    (tmp_path / "outputs").write_text("")
    result = preflight("--mount", str(tmp_path / "outputs"))
    assert result.failed_with(f"mount {tmp_path / 'outputs'} is not a folder"), result


# The container runs as ASTRAI_UID:ASTRAI_GID with no supplementary groups: preflight reads the
# mode bits for those numbers. 1234 owns none of tmp_path's folders, whoever runs the tests.
@pytest.mark.parametrize(
    "mode, same_group, writable",
    [
        (0o555, False, False),  # read-only for everyone
        (0o755, True, False),  # group member, but only the owner may write
        (0o775, True, True),  # writable through the group
        (0o775, False, False),  # other users may not write
        (0o777, False, True),  # world-writable
        (0o776, False, False),  # others may write but not enter
    ],
    ids=lambda v: oct(v) if isinstance(v, int) and not isinstance(v, bool) else str(v),
)
def test_mount_writable_by_container_user(
    preflight, tmp_path: Path, mode: int, same_group: bool, writable: bool
) -> None:
    mount = tmp_path / "outputs"
    mount.mkdir()
    mount.chmod(mode)
    st = mount.stat()
    assert st.st_uid != 1234
    gid = st.st_gid if same_group else next(g for g in (5678, 5679) if g != st.st_gid)
    env = {"ASTRAI_UID": "1234", "ASTRAI_GID": str(gid)}
    result = preflight("--mount", str(mount), env=env)
    if writable:
        assert (result.rc, result.stdout) == (0, "preflight: ok\n"), result
    else:
        expected = f"mount {mount} is not writable by the container user 1234:{gid}"
        assert result.failed_with(expected), result
        assert stat.filemode(stat.S_IFDIR | mode) in result.stderr
    assert list(mount.iterdir()) == []


@pytest.mark.parametrize(
    ("mode", "readable"),
    [(0o555, True), (0o751, False)],
    ids=lambda v: oct(v) if isinstance(v, int) and not isinstance(v, bool) else str(v),
)
def test_a_read_only_mount_needs_to_be_readable_only(
    preflight, tmp_path: Path, mode: int, readable: bool
) -> None:
    """/data and /models are mounted read-only (issue 32): a shared dataset folder the
    container user cannot write passes as a --read-mount; one it cannot list fails."""
    data = tmp_path / "data"
    data.mkdir()
    data.chmod(mode)
    env = {
        "ASTRAI_UID": "1234",
        "ASTRAI_GID": str(next(g for g in (5678, 5679) if g != data.stat().st_gid)),
    }
    result = preflight("--read-mount", str(data), env=env)
    if readable:
        assert (result.rc, result.stdout) == (0, "preflight: ok\n"), result
    else:
        assert result.failed_with(f"mount {data} is not readable by the container user 1234:"), (
            result
        )
    # the same folder as a written mount: 0o555 is refused there
    written = preflight("--mount", str(data), env=env)
    assert written.rc != 0 and "is not writable" in written.stderr


def test_container_uid_must_be_a_number(preflight, tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    result = preflight("--mount", str(tmp_path / "data"), env={"ASTRAI_UID": "alice"})
    assert result.failed_with("ASTRAI_UID must be a number, not 'alice'"), result


def test_missing_image(preflight) -> None:
    missing = Reply(rc=1, err="Error response from daemon: No such image: astrai:latest")
    result = preflight("--gpus", fake=FakeDocker(image_inspect=missing))
    expected = "image astrai:latest not found; build it with `make docker-build`"
    assert result.failed_with(expected), result
    assert result.calls[-1] == f"{INSPECT} astrai:latest"


def test_an_image_built_from_other_code_is_refused(preflight) -> None:
    """``make docker-build`` labels the image with the code's hash; a reward, task or conf/
    change since then would be validated on the host and run old in the container."""
    stale = FakeDocker(image_inspect=image_reply("0" * 64))
    result = preflight("--gpus", fake=stale)
    assert result.failed_with("image astrai:latest was built from other code than this"), result
    assert "make docker-build" in result.stderr


def test_an_image_without_the_label_passes_with_a_warning(preflight) -> None:
    result = preflight("--gpus", fake=FakeDocker(image_inspect=image_reply(None)))
    assert (result.rc, result.stdout) == (0, "preflight: ok\n"), result
    assert result.stderr == (
        "preflight: warning: image astrai:latest has no astrai.source_hash label (not built by "
        "`make docker-build`): it may run other code than this checkout's\n"
    )
