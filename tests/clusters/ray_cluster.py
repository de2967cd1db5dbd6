"""A real Ray cluster of two raylets on this host, for ``tests/clusters/test_ray.py``: a head
(1 CPU, node ``head``) and a second raylet (1 CPU, node ``node2``, a resource of the same name),
each started by Ray's own ``ray start`` (the venv's, keeping 127.0.0.1: ``RAY_START``) in a
session of its own, with free ports and a private temp dir, so nothing listens beyond loopback
and no other Ray on the machine is touched (a global ``ray stop`` would end them all). Stopping
signals only these sessions' processes and checks that all are gone; ``kill_raylet`` SIGKILLs
one node's raylet, as a lost machine."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.helpers import free_port, free_ports

BIN = Path(sys.executable).parent  # the venv: the raylets and their workers run its Python
# hydra-ray-launcher apart, --no-deps: it pins cloudpickle<3 (pyproject.toml's ray extra)
INSTALL = "pip install -e '.[ray]' && pip install --no-deps hydra-ray-launcher==1.2.2"
HEAD, SECOND = "head", "node2"
HOST = "127.0.0.1"
WORKER_PORTS = 8  # ports each raylet may give its workers (--worker-port-list)
# ``ray start`` (ray.scripts.scripts.main, what the venv's ``ray`` runs) with one change: 127.0.0.1
# stays 127.0.0.1. Ray replaces it by the machine's address wherever it is given (--node-ip-address,
# --address: ray._private.services.resolve_ip_for_localhost) and then listens on every interface;
# with 127.0.0.1 as the node's address it listens on loopback only. A head keeps 127.0.0.1 with
# RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 too, but a second raylet refuses to start with that set.
RAY_START = (
    "import sys; import ray._private.services as services; "
    "services.resolve_ip_for_localhost = lambda host: host; "
    "from ray.scripts.scripts import main; sys.argv[0] = 'ray'; sys.exit(main())"
)
# A driver's ray.init(address="127.0.0.1:<port>") resolves the address too; with this variable Ray
# takes 127.0.0.1 as this machine's address (ray._private.services.get_node_ip_address)
DRIVER_LOOPBACK = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}


NEEDED = {"ray": "ray", "hydra_plugins.hydra_ray_launcher": "hydra-ray-launcher"}


def ray_skip_reason() -> str | None:
    """Why the Ray tests cannot run here, or None: they need ray and hydra-ray-launcher, both in
    pyproject's ``ray`` extra, and astrai's Ray launcher (installed with ./launchers)."""
    missing = [dist for module, dist in NEEDED.items() if not _importable(module)]
    if missing:
        return f"needs {' and '.join(missing)}: {INSTALL} (make install-dev does both)"
    if not _importable("hydra_plugins.astrai_ray_launcher"):
        return "needs astrai's Ray launcher: make install (it reinstalls ./launchers)"
    return None


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # its parent package is missing
        return False


@dataclass
class RayNode:
    """One ``ray start``: its node name and the session (the ``ray start`` process's id) that
    its daemons and workers share."""

    name: str
    sid: int


@dataclass
class RayCluster:
    """A running cluster: ``address`` (``127.0.0.1:<GCS port>``), ``temp_dir`` (Ray's sessions
    and logs), ``env`` (the raylets' environment; a driver runs with ``driver_env()``) and its
    nodes by name."""

    address: str
    temp_dir: Path
    env: dict[str, str]
    nodes: dict[str, RayNode] = field(default_factory=dict)

    def driver_env(self) -> dict[str, str]:
        """The environment of a driver (``python train.py -m hydra/launcher=ray_cluster``)."""
        return {**self.env, **DRIVER_LOOPBACK, "RAY_ADDRESS": self.address}


def _raylet_env() -> dict[str, str]:
    """The raylets' environment, which their workers (the sweep's jobs) inherit: one thread each
    (tiny jobs side by side on 2 cores), nothing downloaded, no other cluster's address, and no
    request beyond loopback. Even with usage stats off, the head's dashboard process asks the
    cloud metadata address (169.254.169.254, metadata.google.internal) which cloud it runs on
    (ray._common.usage.usage_lib.get_cluster_config_to_report) and posts "disabled" to
    usage-stats.ray.io: Python's HTTP clients are sent to a closed loopback port instead (Ray's
    gRPC ignores these variables: RAY_grpc_enable_http_proxy is off)."""
    drop = ("RAY_ADDRESS", "OMP_NUM_THREADS", "HYDRA_FULL_ERROR")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    nowhere = f"http://{HOST}:{free_port()}"  # nothing listens: refused at once
    env.update(
        OMP_NUM_THREADS="1",
        RAY_USAGE_STATS_ENABLED="0",
        RAY_USAGE_STATS_REPORT_URL=f"{nowhere}/",
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    for name in ("http_proxy", "https_proxy", "all_proxy"):
        env[name] = env[name.upper()] = nowhere
    env["no_proxy"] = env["NO_PROXY"] = "127.0.0.1,localhost,::1"  # Ray's own agents
    return env


def _node_ports(head: bool) -> list[str]:
    """Every port a ``ray start`` opens, chosen free, so two clusters on one host never meet on
    Ray's defaults (6379, 8265, 10001, 52365, ...)."""
    ports = free_ports(6 + WORKER_PORTS + 2)
    flags = [
        f"--node-manager-port={ports[0]}",
        f"--object-manager-port={ports[1]}",
        f"--dashboard-agent-listen-port={ports[2]}",
        f"--dashboard-agent-grpc-port={ports[3]}",
        f"--metrics-export-port={ports[4]}",
        f"--runtime-env-agent-port={ports[5]}",
        "--worker-port-list=" + ",".join(map(str, ports[6 : 6 + WORKER_PORTS])),
    ]
    if head:
        flags += [f"--ray-client-server-port={ports[-2]}", f"--dashboard-port={ports[-1]}"]
    return flags


def start_node(cluster: RayCluster, name: str, head: bool = False) -> RayNode:
    """``ray start`` one node of 1 CPU named ``name`` (with a resource of that name) in a new
    session; returns once the command has started its daemons and ended."""
    flags = ["--num-cpus=1", f"--node-name={name}", f"--resources={json.dumps({name: 1})}"]
    flags += [f"--node-ip-address={HOST}", *_node_ports(head)]
    if head:
        port = cluster.address.rpartition(":")[2]
        flags += ["--head", f"--port={port}", f"--temp-dir={cluster.temp_dir}"]
        flags += ["--include-dashboard=false", "--disable-usage-stats"]
    else:
        flags.append(f"--address={cluster.address}")
    process = subprocess.Popen(
        [sys.executable, "-c", RAY_START, "start", *flags],
        env=cluster.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its daemons keep this session: stopped by it, and only them
    )
    cluster.nodes[name] = RayNode(name, process.pid)
    out, _ = process.communicate(timeout=120)
    if process.returncode != 0:
        raise RuntimeError(f"ray start ({name}) exited {process.returncode}:\n{out[-3000:]}")
    return cluster.nodes[name]


def session_processes(sid: int) -> dict[int, str]:
    """The live processes of session ``sid`` (zombies left out): pid -> command name. A node's
    daemons share the session of its ``ray start``; its workers too, though each leads a process
    group of its own."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # ended meanwhile
        name, _, rest = stat.partition("(")[2].rpartition(")")
        state, _, _, session = rest.split()[:4]
        if state != "Z" and int(session) == sid:
            found[int(entry.name)] = name
    return found


def _signal_all(pids: dict[int, str], signum: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):  # ended meanwhile
            os.kill(pid, signum)


def stop_node(node: RayNode, grace_s: float = 5.0) -> None:
    """SIGTERM every process of the node's session, SIGKILL what is left after ``grace_s``;
    raises unless all have ended."""
    for signum, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
        _signal_all(session_processes(node.sid), signum)
        deadline = time.monotonic() + wait_s
        while session_processes(node.sid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if not session_processes(node.sid):
            return
    raise RuntimeError(f"node {node.name}: still running {session_processes(node.sid)}")


def kill_raylet(cluster: RayCluster, name: str) -> int:
    """SIGKILL node ``name``'s raylet, as a machine lost (its workers notice and end); returns
    its pid once it has ended."""
    processes = session_processes(cluster.nodes[name].sid)
    raylets = [pid for pid, comm in processes.items() if comm == "raylet"]
    assert len(raylets) == 1, f"node {name}: raylets {raylets} among {processes}"
    os.kill(raylets[0], signal.SIGKILL)
    deadline = time.monotonic() + 10
    while raylets[0] in session_processes(cluster.nodes[name].sid):
        assert time.monotonic() < deadline, f"raylet {raylets[0]} still running"
        time.sleep(0.1)
    return raylets[0]


def restart_node(cluster: RayCluster, name: str) -> RayNode:
    """Node ``name`` anew: what is left of it stopped, then a new ``ray start`` of that name."""
    stop_node(cluster.nodes[name])
    return start_node(cluster, name)


def node_jobs(cluster: RayCluster, name: str, sweep_dir: Path) -> set[int]:
    """The jobs of ``sweep_dir`` that node ``name`` runs now: the job dirs its processes hold
    files open in (a job's ``train.log``, at least)."""
    jobs = set()
    for pid in session_processes(cluster.nodes[name].sid):
        try:
            targets = [os.readlink(fd) for fd in Path(f"/proc/{pid}/fd").iterdir()]
        except OSError:
            continue  # ended, or its files changed meanwhile
        for target in targets:
            job, _, _ = target.removeprefix(f"{sweep_dir}/").partition("/")
            if target.startswith(f"{sweep_dir}/") and job.isdigit():
                jobs.add(int(job))
    return jobs


def _leftovers(cluster: RayCluster) -> dict[int, str]:
    """Processes of the cluster's sessions, and any other naming its temp dir."""
    found = {}
    for node in cluster.nodes.values():
        found.update(session_processes(node.sid))
    for entry in Path("/proc").iterdir():
        try:
            cmdline = (entry / "cmdline").read_bytes() if entry.name.isdigit() else b""
        except OSError:
            continue
        if str(cluster.temp_dir).encode() in cmdline and int(entry.name) != os.getpid():
            found[int(entry.name)] = cmdline.split(b"\0")[0].decode(errors="replace")
    return found


@contextlib.contextmanager
def ray_cluster() -> Iterator[RayCluster]:
    """A head and a second raylet, both of 1 CPU; afterwards every process of theirs stopped
    (checked) and the temp dir removed. The temp dir is short: Ray's socket paths inside it
    must fit in 107 bytes, which a pytest tmp_path does not leave room for."""
    temp_dir = Path(tempfile.mkdtemp(prefix="astrai-ray-"))
    cluster = RayCluster(f"{HOST}:{free_port()}", temp_dir, _raylet_env())
    try:
        start_node(cluster, HEAD, head=True)
        start_node(cluster, SECOND)
        yield cluster
    finally:
        try:
            for name in (SECOND, HEAD):  # the second raylet before the head it reports to
                if name in cluster.nodes:
                    stop_node(cluster.nodes[name])
        finally:
            leftovers = _leftovers(cluster)
            shutil.rmtree(temp_dir, ignore_errors=True)
        assert not leftovers, f"Ray processes left running: {leftovers}"
