"""``model.lora``: a LoRA run trains its adapters alone, scores the reference with them off (no
second copy), shares the frozen trunk with the PPO critic, checkpoints what changed and resumes
bitwise; checkpoints of the other kind or of another base are refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from tests.constructed_rewards import ALTERNATING
from tests.helpers import compose_config

from astrai.checkpoints.layout import (
    ADAPTER_CONFIG_FILE,
    ADAPTER_MODEL_FILE,
    MODEL_FILE,
    REFERENCE_FILE,
    CheckpointError,
)
from astrai.checkpoints.policy import load_checkpoint_policy
from astrai.models.lora import adapter_parameters, base_fingerprint, has_adapters
from astrai.training.run import Run

QUICK = [
    "debug=quick",
    "trainer.total_steps=4",
    "trainer.eval_every=2",
    "train_type.minibatches=2",
    "ckpt.every_steps=2",
    "train_type.optimizer.lr=1.0e-2",  # adapters move visibly in 4 steps
    # rewards vary within every group by construction: a random model's answers may all score
    # 0, and then only weight decay and the KL term's noise would move the adapters
    *ALTERNATING,
]
LORA = ["model.lora.rank=4", "model.lora.alpha=8"]
PPO = ["train_type=online_ppo", "critic=value_model"]
NOISY = ("time/", "perf/")


def _trainer(run_dir: Path, *extra: str) -> Run:
    return Run(compose_config([*QUICK, *LORA, *extra]), run_dir)


def _records(run_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in row.items() if not k.startswith(NOISY)} for row in rows]


def _base_state(trainer: Run) -> dict[str, torch.Tensor]:
    adapters = {name for name, _ in adapter_parameters(trainer.parts.policy)}
    return {
        name.replace(".base_layer", ""): tensor.clone()
        for name, tensor in trainer.parts.policy.state_dict().items()
        if name not in adapters and "lora_" not in name
    }


@pytest.mark.parametrize("extra", [[], PPO], ids=["grpo", "ppo"])
def test_only_the_adapters_train_and_the_reference_is_the_base(
    tmp_path: Path, extra: list[str]
) -> None:
    trainer = _trainer(tmp_path, *extra)
    trained = {id(p) for group in trainer.parts.optimizer.param_groups for p in group["params"]}
    assert trained == {id(p) for _, p in adapter_parameters(trainer.parts.policy)}
    base_before = _base_state(trainer)
    ids = torch.tensor([[1, 5, 9, 12, 3]], device=trainer.parts.device)
    with torch.no_grad():
        base_logits = trainer.parts.policy(ids).logits  # B = 0: the adapters add nothing yet
    trainer.fit()
    for name, tensor in _base_state(trainer).items():  # the base never moves
        assert torch.equal(tensor, base_before[name]), name
    with torch.no_grad():
        reference = trainer.parts.reference(ids).logits
        policy = trainer.parts.policy(ids).logits
    assert torch.equal(reference, base_logits)  # the reference is the base, bit for bit
    assert (policy - reference).abs().max() > 1e-3  # ... and the adapters did learn
    # a view of the policy, not a copy: it holds no tensor of its own
    assert {p.data_ptr() for p in trainer.parts.reference.parameters()} <= {
        p.data_ptr() for p in trainer.parts.policy.parameters()
    }


def test_the_critic_trains_its_own_adapters_on_the_policy_trunk(tmp_path: Path) -> None:
    trainer = _trainer(tmp_path, *PPO)
    critic, policy = trainer.parts.critic, trainer.parts.policy
    assert critic is not None and has_adapters(critic)
    trainable = {name for name, p in critic.named_parameters() if p.requires_grad}
    assert {"value_head.weight", "value_head.bias"} <= trainable
    assert all("lora_" in name for name in trainable - {"value_head.weight", "value_head.bias"})
    # the frozen trunk is the policy's own memory: embeddings, norms, base linears
    shared = critic.model.layers[0].self_attn.q_proj.base_layer.weight
    assert shared is policy.model.layers[0].self_attn.q_proj.base_layer.weight
    assert critic.model.embed_tokens.weight is policy.model.embed_tokens.weight
    critic_lora = critic.model.layers[0].self_attn.q_proj.lora_A["default"].weight
    assert critic_lora is not policy.model.layers[0].self_attn.q_proj.lora_A["default"].weight
    trained = {
        id(p) for group in trainer.parts.critic_optimizer.param_groups for p in group["params"]
    }
    assert trained == {id(p) for p in critic.parameters() if p.requires_grad}


@pytest.fixture(scope="module", params=["grpo", "ppo"])
def straight_and_resumed(request, tmp_path_factory) -> tuple[Run, Run, Path, Path]:  # noqa: ANN001
    extra = PPO if request.param == "ppo" else []
    straight_dir = tmp_path_factory.mktemp("straight")
    straight = _trainer(straight_dir, *extra)
    straight.fit()
    resumed_dir = tmp_path_factory.mktemp("resumed")
    _trainer(resumed_dir, *extra).fit(until=2)
    resumed = _trainer(resumed_dir, *extra)
    assert resumed.started.state.resumed_from == resumed_dir / "checkpoints" / "step_2"
    resumed.fit()
    return straight, resumed, straight_dir, resumed_dir


def _assert_equal_states(a: dict, b: dict, where: str) -> None:
    assert a.keys() == b.keys(), where
    for key in a:
        if isinstance(a[key], torch.Tensor):
            assert torch.equal(a[key], b[key]), f"{where}.{key}"
        elif isinstance(a[key], dict):
            _assert_equal_states(a[key], b[key], f"{where}.{key}")
        else:
            assert a[key] == b[key], f"{where}.{key}"


def test_a_resumed_lora_run_equals_the_straight_one_bitwise(straight_and_resumed) -> None:  # noqa: ANN001
    straight, resumed, straight_dir, resumed_dir = straight_and_resumed
    _assert_equal_states(
        straight.parts.policy.state_dict(), resumed.parts.policy.state_dict(), "policy"
    )
    _assert_equal_states(
        straight.parts.optimizer.state_dict(), resumed.parts.optimizer.state_dict(), "optimizer"
    )
    if straight.parts.critic is not None:
        _assert_equal_states(
            straight.parts.critic.state_dict(), resumed.parts.critic.state_dict(), "critic"
        )
        _assert_equal_states(
            straight.parts.critic_optimizer.state_dict(),
            resumed.parts.critic_optimizer.state_dict(),
            "critic_optimizer",
        )
    assert _records(resumed_dir) == _records(straight_dir)


def test_a_lora_checkpoint_holds_what_changed(straight_and_resumed) -> None:  # noqa: ANN001
    straight, _, straight_dir, _ = straight_and_resumed
    checkpoint = straight_dir / "checkpoints" / "step_4"
    assert (checkpoint / ADAPTER_MODEL_FILE).is_file() and (
        checkpoint / ADAPTER_CONFIG_FILE
    ).is_file()
    assert not (checkpoint / MODEL_FILE).exists()  # no copy of the base weights ...
    assert not (checkpoint.parent / REFERENCE_FILE).exists()  # ... nor of the reference
    state = json.loads((checkpoint / "trainer_state.json").read_text())
    base = state["adapters"]["base"]
    assert base["path"] is None  # model=tiny: built from its config and the seed
    assert state["adapters"]["lora"]["rank"] == 4
    assert state["fingerprint"]["adapters"]["base_sha256"] == base["sha256"]
    # the merged policy a user loads (generate, export) computes the adapter model's logits
    loaded = load_checkpoint_policy(straight_dir)
    assert not has_adapters(loaded.policy)
    ids = torch.tensor([[1, 5, 9, 12, 3]])  # loaded on the CPU; the run's on its own device
    on_run = ids.to(straight.parts.device)
    with torch.no_grad():
        expected = straight.parts.policy(on_run).logits.cpu()
        torch.testing.assert_close(loaded.policy(ids).logits, expected, rtol=0, atol=1e-5)
        if straight.parts.critic is not None:
            assert loaded.critic is not None
            values = straight.parts.critic(on_run).cpu()
            torch.testing.assert_close(loaded.critic(ids), values, rtol=0, atol=1e-5)
    # the loader rebuilt the same base: its fingerprint is the recorded one
    assert (
        base_fingerprint(straight.parts.reference.policy) != base["sha256"]
    )  # adapters now inside
    if straight.parts.critic is not None:  # the critic file is its adapters and head, not a trunk
        critic_state = torch.load(checkpoint / "value_model.pt", weights_only=True)
        assert all("lora_" in name or name.startswith("value_head.") for name in critic_state)


@pytest.mark.slow  # ~3 s; the kind and base refusals: tests/e2e/test_lora_workflow.py
def test_other_lora_settings_are_refused_on_resume(tmp_path: Path) -> None:
    _trainer(tmp_path, "trainer.total_steps=2").fit()
    with pytest.raises(CheckpointError, match=r"adapters\.lora\.alpha=8\.0, this run 16\.0"):
        _trainer(tmp_path, "model.lora.alpha=16")


# the memory knobs (tests/training/test_memory.py) with adapters: PPO's sequences are 16 prompts
# x 1 (no shared prompt in a scoring part), AdamW's eps above the small gradients (an ulp's sign
# flip stays an ulp), as there
KNOB_BASE = [
    *LORA,
    "debug=quick",
    "train_type.group_size=4",
    "train_type.minibatches=2",
    "train_type.kl_coef=0.1",
    "+train_type.optimizer.eps=1e-2",
    *ALTERNATING,  # a gradient by construction: the bound on ``moved`` below is not decay's
]
KNOB_SHAPE = {
    "grpo": [],
    "ppo": [*PPO, "train_type.group_size=1", "train_type.prompts_per_step=16"],
}


@pytest.mark.slow  # ~3 s each (4): two trainers, two steps
@pytest.mark.parametrize("algo", ["grpo", "ppo"])
@pytest.mark.parametrize(
    "knob", [["train_type.micro_batch_size=3"], ["model.gradient_checkpointing=true"]]
)
def test_memory_knobs_make_the_same_lora_update(tmp_path: Path, algo: str, knob: list[str]) -> None:
    extra = [*KNOB_SHAPE[algo], *(["+critic.optimizer.eps=1e-2"] if algo == "ppo" else [])]
    states = []
    for name, overrides in (("plain", []), ("knob", knob)):
        trainer = Run(compose_config([*KNOB_BASE, *extra, *overrides]), tmp_path / name)
        for _ in range(2):
            trainer.train_step()
        critic = trainer.parts.critic.state_dict() if trainer.parts.critic is not None else {}
        critic = {f"critic.{name}": tensor for name, tensor in critic.items()}
        states.append({**trainer.parts.policy.state_dict(), **critic})
    plain, other = states
    # the policy's adapters moved (B starts at zero) well past the bound below
    moved = max(t.abs().max() for n, t in plain.items() if "lora_B" in n and "critic" not in n)
    assert moved > 3e-5
    for name, value in plain.items():
        torch.testing.assert_close(other[name], value, atol=1e-6, rtol=0, msg=name)


@pytest.mark.slow  # ~3 s
def test_bf16_trains_the_adapters_in_float32(tmp_path: Path) -> None:
    trainer = _trainer(tmp_path, *PPO, "infra.precision=bf16", "ckpt.every_steps=0")
    summary = trainer.fit()
    losses = [float(v) for k, v in summary.items() if str(k).startswith("loss/")]
    assert losses and all(torch.isfinite(torch.tensor(losses)))
    assert all(p.dtype == torch.float32 for _, p in adapter_parameters(trainer.parts.policy))
    moments = [s["exp_avg"] for s in trainer.parts.optimizer.state.values()]
    assert moments and all(m.dtype == torch.float32 for m in moments)
