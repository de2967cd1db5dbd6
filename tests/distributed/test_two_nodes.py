"""Two nodes, one run: two ``python train.py infra.nnodes=2 infra.node_rank=0|1`` launchers
rendezvous on 127.0.0.1 as two machines would (torch elastic's c10d rendezvous at
``infra.rdzv_endpoint``), one worker each, and train one job in one shared run dir. Their
training equals the same job's on one node with two processes, which equals one process over
the same global batch (``test_data_parallel.py``, 1e-6); SIGTERM to node 0 stops both nodes
with a checkpoint, and the two nodes started again resume it exactly."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from tests.helpers import free_port
from tests.train_runs import TRAIN, checkpoint_weights, last_logged_step, run_train

STEPS = 24
JOB = [
    "train_type=online_ppo",  # the critic's update and checkpoint too
    "infra.device=cpu",
    "debug=quick",
    f"trainer.total_steps={STEPS}",
    "trainer.eval_every=8",
    "ckpt.every_steps=0",  # the stop's checkpoint and the last step's only
]


def start_nodes(run_dir: Path, cwd: Path) -> list[subprocess.Popen]:
    """Node 0 and node 1, one process each, on a fresh rendezvous port; stdout piped."""
    rendezvous = [
        "infra.nnodes=2",
        "infra.nproc_per_node=1",
        f"infra.rdzv_endpoint=127.0.0.1:{free_port()}",
        "infra.rdzv_id=two-nodes",
        f"hydra.run.dir={run_dir}",
    ]
    env = {k: v for k, v in os.environ.items() if k not in ("HYDRA_FULL_ERROR", "RANK")}
    env["OMP_NUM_THREADS"] = "1"
    return [
        subprocess.Popen(
            [sys.executable, TRAIN, *JOB, *rendezvous, f"infra.node_rank={node}"],
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # a session each, as on two machines
        )
        for node in (0, 1)
    ]


def finish(nodes: list[subprocess.Popen]) -> list[str]:
    """Both nodes' output once they end (killed after 240 s)."""
    try:
        return [node.communicate(timeout=240)[0] for node in nodes]
    finally:
        for node in nodes:
            node.kill()


def final_weights(run_dir: Path) -> tuple[dict, dict]:
    final = run_dir / "checkpoints" / f"step_{STEPS}"
    value = torch.load(final / "value_model.pt", weights_only=True)
    return checkpoint_weights(final / "model.safetensors"), value


@pytest.mark.slow  # ~60 s on 2 cores: three 2-process launches
def test_two_nodes_train_as_one_node_and_a_sigterm_to_node_0_resumes_exactly(
    tmp_path: Path,
) -> None:
    one_node = tmp_path / "one_node"
    result = run_train([*JOB, "infra.nproc_per_node=2", f"hydra.run.dir={one_node}"], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]

    run_dir = tmp_path / "two_nodes"
    nodes = start_nodes(run_dir, tmp_path)
    deadline = time.monotonic() + 240
    while last_logged_step(run_dir) < 2 and time.monotonic() < deadline:
        if any(node.poll() is not None for node in nodes):
            pytest.fail("a node ended before the stop:\n" + "\n".join(finish(nodes))[-4000:])
        time.sleep(0.05)
    nodes[0].send_signal(signal.SIGTERM)  # node 0's launcher only: node 1 hears it from the run
    outputs = finish(nodes)
    assert [node.returncode for node in nodes] == [0, 0], "\n".join(outputs)[-4000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    k = summary["step"]
    assert summary["stopped"] == "SIGTERM" and 2 <= k < STEPS, summary
    assert summary["checkpoint"] == str(run_dir / "checkpoints" / f"step_{k}")
    state = json.loads((run_dir / "checkpoints" / f"step_{k}" / "trainer_state.json").read_text())
    assert state["world_size"] == 2 and len(state["rng_per_rank"]) == 2  # one rank per node
    assert f"stopped (SIGTERM): {k} steps" in outputs[0]
    # node 0's rank 0 owns the dir: node 1 wrote no .hydra/ of its own (its overrides would
    # have replaced node 0's) and no second job log
    overrides = (run_dir / ".hydra" / "overrides.yaml").read_text()
    assert "infra.node_rank=0" in overrides and "infra.node_rank=1" not in overrides

    outputs = finish(start_nodes(run_dir, tmp_path))  # trainer.resume=auto on both nodes
    summary = json.loads((run_dir / "summary.json").read_text())
    assert (summary["step"], summary["stopped"]) == (STEPS, None), "\n".join(outputs)[-4000:]
    steps = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").open()]
    assert steps == list(range(STEPS + 1))  # resumed at k + 1: no step twice, none lost

    # the same job's training, bitwise: the ranks, their streams and the reduction are the same
    for ours, theirs in zip(final_weights(run_dir), final_weights(one_node), strict=True):
        assert ours.keys() == theirs.keys() and all(torch.equal(ours[n], theirs[n]) for n in ours)
