"""A real Slurm cluster of two nodes on this one host, for ``tests/clusters/test_slurm.py``:
munged, slurmctld and two slurmd (nodes ``n1`` and ``n2``, 2 CPUs each, partition ``debug``),
all in one private folder with their own ports, config, state, logs and pid files.

``SlurmCluster(folder)`` is a context manager: it starts them, waits until both nodes are idle,
gives the environment a client or a job needs (``env``: ``SLURM_CONF``), and on exit cancels
its jobs, shuts Slurm down, kills what of its own daemons is still alive (by their pid files,
munged's too) and checks that none of its processes is left. ``skip_reason()`` says why it
cannot run here (binaries missing, not root), for ``pytest.skip``.

Needs root (Slurm's daemons run as ``SlurmUser=root``) and Debian's ``slurm-wlm`` and ``munge``
(written against 22.05). Every address the config names is 127.0.0.1, so nothing beyond this
host is reached; slurmctld and slurmd listen on their free ports on every interface (Slurm has
no setting to bind one)."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from tests.helpers import free_ports

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "srun", "scontrol", "sinfo", "squeue", "scancel")
MUNGE_KEY = Path("/etc/munge/munge.key")
INSTALL = "apt-get install slurm-wlm munge"
NODES = ("n1", "n2")
CPUS_PER_NODE = 2
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
CRED_EXPIRE_S = 5


def skip_reason() -> str | None:
    """Why a local Slurm cluster cannot start here, or None when it can."""
    missing = [name for name in (*DAEMONS, *CLIENTS) if shutil.which(name) is None]
    if missing:
        return f"Slurm/munge not installed ({', '.join(missing)} missing): {INSTALL}"
    if not MUNGE_KEY.is_file():
        return f"no munge key at {MUNGE_KEY}: {INSTALL} (the package creates one)"
    if os.geteuid() != 0:
        return "needs root: the local Slurm cluster's daemons run as SlurmUser=root"
    return None


def launcher_skip_reason() -> str | None:
    """Why ``hydra/launcher=submitit_slurm`` cannot run here, or None when it can."""
    if importlib.util.find_spec("hydra_plugins.hydra_submitit_launcher") is None:
        return "hydra-submitit-launcher not installed: pip install hydra-submitit-launcher"
    return None


def cluster_env(conf: Path) -> dict[str, str]:
    """The environment of this cluster's clients, which ``sbatch`` and ``srun`` pass on to the
    jobs: this process's, without the variables of a process group or a Slurm job it may be
    in, plus ``SLURM_CONF``, one intra-op thread per task (two cores, up to four tasks) and
    ``MASTER_ADDR``: the nodes' names (``n1``, ``n2``) resolve nowhere, so a job's rendezvous
    address is this host's (on a real cluster astrai takes the job's first node, which does)."""
    drop = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "HYDRA_FULL_ERROR")
    env = {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("SLURM_")}
    env.update(SLURM_CONF=str(conf), OMP_NUM_THREADS="1", MASTER_ADDR="127.0.0.1")
    return env


def slurm_conf(folder: Path, ports: dict[str, int]) -> str:
    """The cluster's ``slurm.conf``: ``ports`` maps ``slurmctld`` and each node to its port."""
    host = socket.gethostname()
    lines = [
        "ClusterName=astraitest",
        "SlurmctldHost=localhost(127.0.0.1)",
        f"SlurmctldPort={ports['slurmctld']}",
        f"SlurmdPort={ports[NODES[0]]}",
        "AuthType=auth/munge",
        # a requeued job waits cred_expire + 1 s before it may start again (120 s by default)
        f"AuthInfo=socket={folder / 'munge.socket'},cred_expire={CRED_EXPIRE_S}",
        "CredType=cred/munge",
        "SlurmUser=root",
        "SlurmdUser=root",
        f"StateSaveLocation={folder / 'state'}",
        f"SlurmdSpoolDir={folder / 'spool-%n'}",
        f"SlurmctldPidFile={folder / 'slurmctld.pid'}",
        f"SlurmdPidFile={folder / 'slurmd-%n.pid'}",
        f"SlurmctldLogFile={folder / 'slurmctld.log'}",
        f"SlurmdLogFile={folder / 'slurmd-%n.log'}",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU",
        "SchedulerType=sched/backfill",
        # a job that became eligible (a requeued one) starts within a second, not at the
        # next of the default 60 s passes
        "SchedulerParameters=sched_interval=1,bf_interval=1",
        "JobCompType=jobcomp/none",
        "AccountingStorageType=accounting_storage/none",
        "JobAcctGatherType=jobacct_gather/none",
        "MpiDefault=none",
        "ReturnToService=2",
        "SlurmdParameters=config_overrides",
        "KillWait=10",
        "MailProg=/bin/true",
    ]
    lines += [
        f"NodeName={node} NodeHostname={host} NodeAddr=127.0.0.1 Port={ports[node]} "
        f"CPUs={CPUS_PER_NODE} State=UNKNOWN"
        for node in NODES
    ]
    nodes = ",".join(NODES)
    lines.append(f"PartitionName=debug Nodes={nodes} Default=YES MaxTime=INFINITE State=UP")
    return "\n".join(lines) + "\n"


class SlurmCluster:
    """munged + slurmctld + one slurmd per node in ``folder`` (see the module docstring)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.conf = folder / "slurm.conf"
        self.env = cluster_env(self.conf)
        self.daemon_pids: dict[str, int] = {}  # pid-file name -> pid, once started

    def __enter__(self) -> SlurmCluster:
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / "state").mkdir(exist_ok=True)
        try:
            self._start()
        except BaseException:
            with contextlib.suppress(AssertionError):  # the start's error is the one to see
                self.stop()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def _start(self) -> None:
        key = self.folder / "munge.key"
        shutil.copyfile(MUNGE_KEY, key)
        key.chmod(0o600)
        self._daemon(
            "munged", "--force", f"--socket={self.folder / 'munge.socket'}",
            f"--key-file={key}", f"--pid-file={self.folder / 'munged.pid'}",
            f"--log-file={self.folder / 'munged.log'}", f"--seed-file={self.folder / 'munge.seed'}",
        )  # fmt: skip
        self._wait_for(lambda: (self.folder / "munge.socket").exists(), "munged's socket")
        ports = dict(zip(("slurmctld", *NODES), free_ports(1 + len(NODES)), strict=True))
        self.conf.write_text(slurm_conf(self.folder, ports))
        self._daemon("slurmctld", "-f", str(self.conf))
        for node in NODES:
            self._daemon("slurmd", "-f", str(self.conf), "-N", node)
        self._wait_for(lambda: self.node_states() == dict.fromkeys(NODES, "idle"), "idle nodes")
        self.daemon_pids = self.pids()

    def _daemon(self, *command: str) -> None:
        """Start a daemon (it forks into the background; its pid file names it)."""
        done = subprocess.run(command, env=self.env, capture_output=True, text=True, timeout=30)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)}: exit {done.returncode}: {done.stderr}")

    def _wait_for(self, condition: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not condition():
            if time.monotonic() > deadline:
                raise RuntimeError(f"no {what} after {START_TIMEOUT_S:.0f} s: {self.logs()}")
            time.sleep(0.2)

    def run(self, *command: str, check: bool = True, cwd: Path | None = None) -> str:
        """A Slurm client command against this cluster (in ``cwd``); its stdout."""
        done = subprocess.run(
            command, cwd=cwd, env=self.env, capture_output=True, text=True, timeout=60
        )
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)}: exit {done.returncode}: {done.stderr}")
        return done.stdout

    def node_states(self) -> dict[str, str]:
        """Node name -> state (``idle``, ``mixed``, ``alloc``, ``down*``...); {} if unreachable."""
        out = self.run("sinfo", "-h", "-N", "-o", "%N %T", check=False)
        return dict(line.split() for line in out.splitlines() if len(line.split()) == 2)

    def job(self, job_id: str) -> dict[str, str]:
        """``scontrol show job``'s fields of one job (``JobState``, ``Restarts``...)."""
        out = self.run("scontrol", "--oneliner", "show", "job", job_id)
        return dict(field.split("=", 1) for field in out.split() if "=" in field)

    def wait_job(self, job_id: str, timeout: float, **fields: str) -> dict[str, str]:
        """Wait until ``job_id``'s fields have the values given (``JobState="COMPLETED"``)."""
        deadline = time.monotonic() + timeout
        while any((job := self.job(job_id)).get(k) != v for k, v in fields.items()):
            if time.monotonic() > deadline:
                raise AssertionError(f"job {job_id} not {fields} after {timeout:.0f} s: {job}")
            time.sleep(0.2)
        return job

    def logs(self) -> str:
        """The tail of every daemon log, for a failure's message."""
        tails = [
            f"--- {log.name}:\n" + "\n".join(log.read_text(errors="replace").splitlines()[-15:])
            for log in sorted(self.folder.glob("*.log"))
        ]
        return "\n".join(tails)

    def pids(self) -> dict[str, int]:
        """Pid-file name -> pid of each of this cluster's daemons that is alive."""
        alive = {}
        for pid_file in self.folder.glob("*.pid"):
            try:
                pid = int(pid_file.read_text().split()[0])
            except (OSError, ValueError, IndexError):
                continue
            if self.owns(pid):
                alive[pid_file.name] = pid
        return alive

    def owns(self, pid: int) -> bool:
        """Whether ``pid`` is a live process of this cluster: its environment names the
        cluster's config, as the daemons' (started with ``env``) and their jobs' do; so a pid
        file outliving its daemon never names someone else's process."""
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            return False
        if stat.rsplit(")", 1)[-1].split()[0] == "Z":  # exited, not yet reaped by init
            return False
        return f"SLURM_CONF={self.conf}".encode() in environ

    def job_processes(self) -> list[int]:
        """Live processes of this cluster that no pid file names (its jobs' tasks and steps)."""
        daemons = set(self.daemon_pids.values()) | set(self.pids().values())
        return [
            int(entry.name)
            for entry in Path("/proc").iterdir()
            if entry.name.isdigit() and int(entry.name) not in daemons | {os.getpid()}
            if self.owns(int(entry.name))
        ]

    def stop(self) -> None:
        """Cancel the jobs, shut Slurm down, then kill (SIGTERM, later SIGKILL) what of its
        own daemons is still alive, and any process of its jobs left; raises when one had to
        be killed that way or survived it."""
        if self.conf.is_file():
            self.run("scancel", "--user", "root", check=False)
            deadline = time.monotonic() + STOP_TIMEOUT_S
            while self.run("squeue", "-h", check=False).strip():
                if time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            self.run("scontrol", "shutdown", check=False)
        daemons = {**self.daemon_pids, **self.pids()}  # a pid file may be gone by now
        for name in ("slurm", "munged"):  # munged last: slurmctld's shutdown still signs
            self._stop_pids([pid for f, pid in daemons.items() if f.startswith(name)])
        (self.folder / "munge.key").unlink(missing_ok=True)  # no copy of the secret left behind
        strays = self.job_processes()
        self._stop_pids(strays)
        left = {**self.pids(), **{f"job {pid}": pid for pid in self.job_processes()}}
        assert not left, f"processes of the cluster in {self.folder} survived: {left}"
        assert not strays, f"processes of the cluster's jobs outlived Slurm: {strays} (killed)"

    def _stop_pids(self, pids: list[int]) -> None:
        """SIGTERM ``pids``, then SIGKILL those of them alive after a few seconds."""
        for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
            pids = [pid for pid in pids if self.owns(pid)]
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):  # it has just exited
                    os.kill(pid, sig)
            deadline = time.monotonic() + wait
            while any(self.owns(pid) for pid in pids) and time.monotonic() < deadline:
                time.sleep(0.1)
