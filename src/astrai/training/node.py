"""Which machine ran a run: ``summary.json``'s ``node`` (issue 63), so a sweep whose launcher
spread its jobs over a cluster (Slurm, Ray) says where each one ran (``astrai.report``'s node
column)."""

from __future__ import annotations

import os
import socket
import sys


def node_name() -> str:
    """``slurm:<nodes>`` inside a Slurm job (``SLURM_JOB_NODELIST``: every node of the job, as
    Slurm writes it, ``n1`` or ``n[1-2]``), ``ray:<node>`` inside a Ray worker (the node's name,
    ``ray start --node-name``, or the first 12 characters of its id where the name is only its
    address, as two raylets on one host have), else this host's name."""
    slurm_nodes = os.environ.get("SLURM_JOB_NODELIST")
    if slurm_nodes:
        return f"slurm:{slurm_nodes}"
    ray = sys.modules.get("ray")  # a Ray worker has imported it; never imported here
    if ray is not None and ray.is_initialized():
        return f"ray:{_ray_node(ray)}"
    return socket.gethostname()


def _ray_node(ray: object) -> str:
    """This worker's Ray node: its name, or its id's first 12 characters."""
    node_id = ray.get_runtime_context().get_node_id()  # type: ignore[attr-defined]
    for node in ray.nodes():  # type: ignore[attr-defined]
        if node.get("NodeID") == node_id:
            name = node.get("NodeName")
            if name and name != node.get("NodeManagerAddress"):
                return str(name)
    return str(node_id)[:12]
