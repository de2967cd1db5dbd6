"""``summary.json``'s ``node``: where a run ran (the Ray branch runs on a real cluster in
tests/clusters/test_ray.py)."""

from __future__ import annotations

import socket
import sys

import pytest

from astrai.training.node import node_name


def test_a_slurm_job_names_its_nodes_else_the_host(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "ray", raising=False)
    monkeypatch.delenv("SLURM_JOB_NODELIST", raising=False)
    assert node_name() == socket.gethostname()
    monkeypatch.setenv("SLURM_JOB_NODELIST", "n[1-2]")
    assert node_name() == "slurm:n[1-2]"
