"""The default jobs are bitwise what they were before issue 19's algorithm options: a 3-step
GRPO and PPO run's final weights against digests recorded with the code before that change
(commit f9fd9d5, torch 2.13.0 CPU, one intra-op thread)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import torch
from tests.helpers import compose_config

from astrai.training.trainer import Trainer

SMALL = [
    "debug=quick",
    "trainer.total_steps=3",
    "trainer.eval_every=3",
    "train_type.prompts_per_step=4",
    "train_type.group_size=4",
    "train_type.minibatches=2",
    "logger.tensorboard=false",
]

# sha256 of every parameter's bytes (state_dict order), recorded before the change
DIGESTS = {
    "online_grpo": "afb5d0d3d3e396c9553b0a0271159ca7a11708051b60488a6607258e629f535f",
    "online_ppo": "043ed3dfc99a17027bf4b790239843c0a367dbca10bfff1349999d0f364c731b",
}


def weights_digest(*models: torch.nn.Module) -> str:
    digest = hashlib.sha256()
    for model in models:
        for name, tensor in model.state_dict().items():
            digest.update(name.encode())
            digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def run_digest(train_type: str, run_dir: Path) -> str:
    trainer = Trainer(compose_config([f"train_type={train_type}", *SMALL]), run_dir)
    trainer.fit()
    models = [trainer.policy] + ([trainer.critic] if trainer.critic is not None else [])
    return weights_digest(*models)


@pytest.mark.parametrize("train_type", sorted(DIGESTS))
def test_default_job_weights_are_bitwise_unchanged(train_type: str, tmp_path: Path) -> None:
    assert torch.get_num_threads() == 1  # tests/conftest.py: the digests were made with one
    assert run_digest(train_type, tmp_path) == DIGESTS[train_type]
