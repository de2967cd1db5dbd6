"""The device plan, table-driven: every combination of GPU selection, planner, process count and
inherited ``CUDA_VISIBLE_DEVICES``, with the expected plan written out."""

from __future__ import annotations

import pytest

from astrai.config.devices import DevicePlan as P
from astrai.config.devices import parse_cuda_visible_devices, plan_devices
from astrai.config.errors import ConfigError

# the inherited CUDA_VISIBLE_DEVICES and the device count torch reports under it (mocked):
# unset on a 4-GPU machine; set to 3 of them, in a custom order; empty (CUDA then shows none)
INHERITED = {"unset": (None, 4), "set": ("2,3,1", 3), "empty": ("", 0)}
ONE_PER_GPU = "one GPU per process"

# (infra.gpu.devices, infra.nproc_per_node, inherited) -> the plan of `python train.py` on the
# host with infra.device=auto: P(device, processes, local_devices, child CUDA_VISIBLE_DEVICES,
# child infra.gpu.devices), or the error. One process trains in place: nothing is narrowed, it
# uses the first selected GPU. Several narrow a list (composed with the inherited value: with
# "2,3,1", index 1 is physical GPU 3) and tell the workers "all"; with "all" the workers see
# what the launcher sees. Empty: no GPU is visible, so auto means CPU.
HOST = [
    ("all", 1, "unset", P("cuda", 1, (0,), None, "all")),
    ("all", 2, "unset", P("cuda", 2, (0, 1), None, "all")),
    ([0], 1, "unset", P("cuda", 1, (0,), None, (0,))),
    ([0], 2, "unset", ONE_PER_GPU),
    ([1], 1, "unset", P("cuda", 1, (1,), None, (1,))),
    ([1], 2, "unset", ONE_PER_GPU),
    ([1, 0], 1, "unset", P("cuda", 1, (1,), None, (1, 0))),
    ([1, 0], 2, "unset", P("cuda", 2, (0, 1), "1,0", "all")),
    ([0, 2], 1, "unset", P("cuda", 1, (0,), None, (0, 2))),
    ([0, 2], 2, "unset", P("cuda", 2, (0, 1), "0,2", "all")),
    ("all", 1, "set", P("cuda", 1, (0,), None, "all")),
    ("all", 2, "set", P("cuda", 2, (0, 1), None, "all")),  # workers inherit "2,3,1"
    ([0], 1, "set", P("cuda", 1, (0,), None, (0,))),
    ([0], 2, "set", ONE_PER_GPU),
    ([1], 1, "set", P("cuda", 1, (1,), None, (1,))),
    ([1], 2, "set", ONE_PER_GPU),
    ([1, 0], 1, "set", P("cuda", 1, (1,), None, (1, 0))),
    ([1, 0], 2, "set", P("cuda", 2, (0, 1), "3,2", "all")),
    ([0, 2], 1, "set", P("cuda", 1, (0,), None, (0, 2))),
    ([0, 2], 2, "set", P("cuda", 2, (0, 1), "2,1", "all")),
    ("all", 1, "empty", P("cpu", 1, (), None, "all")),
    ("all", 2, "empty", P("cpu", 2, (), None, "all")),
    ([0], 1, "empty", P("cpu", 1, (), None, (0,))),
    ([0], 2, "empty", P("cpu", 2, (), None, (0,))),
    ([1], 1, "empty", P("cpu", 1, (), None, (1,))),
    ([1], 2, "empty", P("cpu", 2, (), None, (1,))),
    ([1, 0], 1, "empty", P("cpu", 1, (), None, (1, 0))),
    ([1, 0], 2, "empty", P("cpu", 2, (), None, (1, 0))),
    ([0, 2], 1, "empty", P("cpu", 1, (), None, (0, 2))),
    ([0, 2], 2, "empty", P("cpu", 2, (), None, (0, 2))),
    # auto: one process per selected GPU
    ("all", "auto", "unset", P("cuda", 4, (0, 1, 2, 3), None, "all")),
    ("all", "auto", "set", P("cuda", 3, (0, 1, 2), None, "all")),
    ([1], "auto", "unset", P("cuda", 1, (1,), None, (1,))),
    ([1, 0], "auto", "set", P("cuda", 2, (0, 1), "3,2", "all")),
    ([0, 2], "auto", "empty", P("cpu", 1, (), None, (0, 2))),
]

# (infra.gpu.devices, infra.nproc_per_node) -> the Docker launcher's plan for the container,
# the same whatever the host's CUDA_VISIBLE_DEVICES and GPU count (compose reserves the engine's
# GPUs; the host's variable never reaches it). A list is always narrowed, in order, and the
# container told "all"; infra.device=auto is decided in the container (device None).
CONTAINER = [
    ("all", 1, P(None, 1, (0,), None, "all")),
    ("all", 2, P(None, 2, (0, 1), None, "all")),
    ("all", "auto", P(None, None, None, None, "all")),  # the container counts its GPUs
    ([0], 1, P(None, 1, (0,), "0", "all")),
    ([0], 2, ONE_PER_GPU),
    ([1], 1, P(None, 1, (0,), "1", "all")),  # the container's cuda:0 is physical GPU 1
    ([1], 2, ONE_PER_GPU),
    ([1, 0], 1, P(None, 1, (0,), "1,0", "all")),
    ([1, 0], 2, P(None, 2, (0, 1), "1,0", "all")),
    ([1, 0], "auto", P(None, 2, (0, 1), "1,0", "all")),
    ([0, 2], 1, P(None, 1, (0,), "0,2", "all")),
    ([0, 2], 2, P(None, 2, (0, 1), "0,2", "all")),
]

# a process that already is local rank r (elastic worker, torchrun rank, the process in the
# container): it narrows nothing; rank r uses local_devices[r]
WORKER = [
    ("all", "unset", P("cuda", 4, (0, 1, 2, 3), None, "all")),
    ([1, 0], "unset", P("cuda", 2, (1, 0), None, (1, 0))),  # torchrun with a list
    ([2], "set", P("cuda", 1, (2,), None, (2,))),  # physical GPU 1
    ([1, 0], "empty", P("cpu", 1, (), None, (1, 0))),
]


def _plan(devices: object, nproc: object, inherited: str, where: str, device: str = "auto") -> P:
    cvd, count = INHERITED[inherited]
    return plan_devices(
        device, devices, nproc, cuda_visible_devices=cvd, cuda_count=count, where=where
    )


def _check(expected: P | str, plan_of) -> None:  # noqa: ANN001
    if isinstance(expected, str):
        with pytest.raises(ConfigError, match=expected):
            plan_of()
        return
    plan = plan_of()
    assert plan == expected
    assert plan.cuda_visible_devices != ""  # never the empty string
    assert plan.narrows == (plan.cuda_visible_devices is not None)
    if plan.narrows:  # whoever narrows tells the child "all"
        assert plan.gpu_devices == "all"


@pytest.mark.parametrize(("devices", "nproc", "inherited", "expected"), HOST)
def test_host_plan(devices: object, nproc: object, inherited: str, expected: P | str) -> None:
    _check(expected, lambda: _plan(devices, nproc, inherited, "host"))


@pytest.mark.parametrize("inherited", INHERITED)
@pytest.mark.parametrize(("devices", "nproc", "expected"), CONTAINER)
def test_container_plan(devices: object, nproc: object, expected: P | str, inherited: str) -> None:
    _check(expected, lambda: _plan(devices, nproc, inherited, "container"))


@pytest.mark.parametrize(("devices", "inherited", "expected"), WORKER)
def test_worker_plan(devices: object, inherited: str, expected: P) -> None:
    _check(expected, lambda: _plan(devices, "auto", inherited, "worker"))


def test_a_container_told_all_after_narrowing_uses_what_it_sees() -> None:
    # The container of a [1] job: CUDA_VISIBLE_DEVICES=1 shows it one GPU; told "all", its
    # single process takes cuda:0. Told [1] again (the old launcher), it would ask for cuda:1.
    outside = plan_devices(
        "auto", [1], 1, cuda_visible_devices=None, cuda_count=None, where="container"
    )
    inside = plan_devices(
        "auto",
        outside.gpu_devices,
        1,
        cuda_visible_devices=outside.cuda_visible_devices,
        cuda_count=1,
        where="worker",
    )
    assert inside.rank_device(0) == 0
    # [1, 0]: two processes, rank r on the container's cuda:r = physical GPU [1, 0][r]
    outside = plan_devices(
        "auto", [1, 0], "auto", cuda_visible_devices=None, cuda_count=None, where="container"
    )
    inside = plan_devices(
        "auto",
        outside.gpu_devices,
        "auto",
        cuda_visible_devices=outside.cuda_visible_devices,
        cuda_count=2,
        where="worker",
    )
    assert [inside.rank_device(r) for r in range(2)] == [0, 1]


@pytest.mark.parametrize(
    ("device", "devices", "nproc", "inherited", "where", "message"),
    [
        # an index beyond the visible GPUs: one line naming infra.gpu.devices
        ("auto", [4], 1, "unset", "host", r"infra\.gpu\.devices=\[4\] selects GPU 4, but only 4"),
        ("auto", [0, 3], 2, "set", "host", r"selects GPU 3, but only 3 GPU\(s\) are visible"),
        ("cuda", [3], 1, "set", "worker", r"GPU 3, .*of CUDA_VISIBLE_DEVICES=2,3,1"),
        ("cuda", "all", 1, "empty", "host", r"infra\.device=cuda but no CUDA device is visible"),
        ("cuda", "all", 1, "empty", "worker", "CUDA_VISIBLE_DEVICES is empty"),
        ("auto", "all", 5, "unset", "host", r"infra\.nproc_per_node=5 but there are 4 GPU"),
        ("tpu", "all", 1, "unset", "host", r"infra\.device must be auto, cpu or cuda"),
        ("auto", [], 1, "unset", "container", r"infra\.gpu\.devices must be 'all', 'none'"),
        ("auto", "None", 1, "unset", "host", r"infra\.gpu\.devices must be 'all', 'none'"),
        ("auto", [1, 1], 1, "unset", "container", r"infra\.gpu\.devices has duplicates"),
        ("auto", "all", 0, "unset", "container", r"infra\.nproc_per_node must be 'auto'"),
    ],
)
def test_errors_name_the_key(
    device: str, devices: object, nproc: object, inherited: str, where: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=message) as err:
        _plan(devices, nproc, inherited, where, device)
    assert "\n" not in str(err.value)


def test_cpu_and_cuda_devices() -> None:
    # infra.device=cpu: no GPU is planned, whatever is visible
    assert _plan([1, 0], "auto", "unset", "host", "cpu") == P("cpu", 1, (), None, (1, 0))
    assert _plan([1, 0], 2, "unset", "container", "cpu") == P("cpu", 2, (), None, (1, 0))
    # infra.device=cuda in a container: known, unlike auto
    assert _plan([1], 1, "unset", "container", "cuda") == P("cuda", 1, (0,), "1", "all")


@pytest.mark.parametrize("where", ["host", "worker", "container"])
@pytest.mark.parametrize("inherited", INHERITED)
def test_none_is_the_cpu_everywhere(where: str, inherited: str) -> None:
    # infra.gpu.devices=none: the CPU even with 4 visible GPUs, nothing narrowed, and a child
    # (a worker, the container) is told "none" again
    assert _plan("none", "auto", inherited, where) == P("cpu", 1, (), None, "none")
    assert _plan("none", 2, inherited, where, "cpu") == P("cpu", 2, (), None, "none")
    with pytest.raises(ConfigError, match=r"^infra\.device=cuda but infra\.gpu\.devices=none"):
        _plan("none", 1, inherited, where, "cuda")


def test_rank_device() -> None:
    plan = _plan([1, 0], "auto", "unset", "worker")
    assert [plan.rank_device(r) for r in range(2)] == [1, 0]
    with pytest.raises(ConfigError, match="infra.gpu.devices selects 2 GPU"):
        plan.rank_device(2)
    assert _plan("all", 1, "empty", "worker").rank_device(3) is None  # CPU


def test_inherited_cuda_visible_devices() -> None:
    assert parse_cuda_visible_devices(None) is None
    assert parse_cuda_visible_devices("") == []
    assert parse_cuda_visible_devices("GPU-a, GPU-b") == ["GPU-a", "GPU-b"]
    # uuids compose like indices: [1] of "GPU-a,GPU-b" is GPU-b
    plan = plan_devices(
        "auto", [1, 0], 2, cuda_visible_devices="GPU-a,GPU-b", cuda_count=2, where="host"
    )
    assert plan.cuda_visible_devices == "GPU-b,GPU-a"
    # an empty value hides every GPU, whatever count is claimed: CPU, never passed on
    plan = plan_devices("auto", "all", 1, cuda_visible_devices="", cuda_count=4, where="host")
    assert plan == P("cpu", 1, (), None, "all")
