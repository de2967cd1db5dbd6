"""``distill=opd`` through the real trainer, one step each (``Run.train_step`` in-process):

- a teacher with the policy's own initial weights scores through the update's own forwards
  (``engine.old_logprobs=recompute``), so it reads π_old exactly: ``distill/reverse_kl`` 0.0,
  ``loss/distill`` 0.0, and under k1 with ``use_task_reward=false`` no learning signal at all;
- several teachers (MOPD): each row scored by the teacher its ``teacher`` column names, the
  per-teacher metrics equal to a hand count and an independent scoring of those rows;
- the teachers' SHA-256 in the checkpoint fingerprint: a resume with other teacher weights is
  refused in one line, the same weights at another path resume.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from tests.helpers import compose_config
from tests.training.distill_helpers import (
    ADD_ROWS,
    EVAL_ROWS,
    ONE_STEP,
    REV_ROWS,
    initial_policy,
    one_step,
    routed_dataset,
    with_teacher_paths,
    write_teacher,
)

from astrai.algorithms.distillation import LOSS_ESTIMATORS, DistillSettings
from astrai.checkpoints.layout import CheckpointError
from astrai.config.distill_checks import distill_metric_names
from astrai.metrics.names import distill_metrics
from astrai.models.llama import LlamaForCausalLM
from astrai.models.lora import base_fingerprint
from astrai.models.scoring import response_logprobs
from astrai.rollout.rollout import Rollout
from astrai.training.distillation import Distiller, Teacher
from astrai.training.run import Run

Teachers = dict[str, tuple[Path, LlamaForCausalLM]]


@pytest.fixture(scope="module")
def teachers(tmp_path_factory: pytest.TempPathFactory) -> Teachers:
    """Name -> (checkpoint dir, model): ``same``, the policy's initial weights (seed 0);
    ``add`` and ``rev``, the initial weights of seeds 1 and 2 (the policy's shape)."""
    root = tmp_path_factory.mktemp("teachers")
    out = {}
    for name, seed in (("same", 0), ("add", 1), ("rev", 2)):
        policy, tokenizer = initial_policy(root / f"built_{name}", [f"seed={seed}"])
        out[name] = (write_teacher(policy, tokenizer, root / name / "step_0"), policy)
    return out


def _distill_names(metrics: dict[str, float]) -> set[str]:
    return {name for name in metrics if name.startswith("distill/") or name == "loss/distill"}


@pytest.mark.parametrize(
    ("train_type", "estimator"),
    [("online_grpo", "k1"), ("online_grpo", "k3"), ("online_grpo", "forward_topk"),
     ("online_ppo", "k1")],
)  # fmt: skip
def test_a_teacher_with_the_initial_weights_reads_exactly_pi_old(
    tmp_path: Path, teachers: Teachers, train_type: str, estimator: str
) -> None:
    cfg = compose_config(
        [*ONE_STEP, f"train_type={train_type}", "distill=opd", f"distill.estimator={estimator}",
         f"teacher.path={teachers['same'][0]}"]
    )  # fmt: skip
    metrics, rollout = one_step(cfg, tmp_path / "run")
    assert rollout.teacher_logprobs is not None
    # one computation on the same weights: bitwise the trainer's π_old
    assert torch.equal(rollout.teacher_logprobs, rollout.logprobs)
    assert metrics["distill/reverse_kl"] == 0.0
    mask = rollout.valid_action_mask()
    expected_logprob = rollout.logprobs[mask].double().mean().item()
    assert metrics["distill/teacher_logprob"] == pytest.approx(expected_logprob, rel=1e-6)
    assert expected_logprob < -1.0  # a random policy: the check above is not of zeros
    names = {"distill/reverse_kl", "distill/teacher_logprob"}
    if estimator in ("k3", "forward_topk"):
        names.add("loss/distill")
        assert metrics["loss/distill"] == 0.0  # the update's first forward is π_old's
    assert _distill_names(metrics) == names
    assert names == distill_metrics(estimator, (), LOSS_ESTIMATORS) == distill_metric_names(cfg)
    _assert_no_signal_from_k1(train_type, estimator, metrics, rollout)


def _assert_no_signal_from_k1(
    train_type: str, estimator: str, metrics: dict[str, float], rollout: Rollout
) -> None:
    """Under k1 with ``use_task_reward=false`` (the default) the task's rewards, which vary,
    are left out and the teacher's reward is 0 at every token: no signal to learn from."""
    if estimator != "k1":
        return
    assert rollout.rewards.std(dim=1).max() > 0  # GRPO alone would give advantages here
    if train_type == "online_grpo":
        assert rollout.advantages is not None
        assert torch.equal(rollout.advantages, torch.zeros_like(rollout.advantages))
    else:  # PPO: GAE's token rewards (kl_coef 0: the teacher's alone)
        assert metrics["rollout/token_reward_mean"] == 0.0


# --- several teachers (MOPD) ----------------------------------------------------------------


def _scored_by(
    model: LlamaForCausalLM, rollout: Rollout, rows: list[int], temperature: float
) -> torch.Tensor:
    """``[len(rows), G, R]`` ``model``'s logprobs of the sampled tokens of prompts ``rows``,
    scored here (prompts shared through a KV cache: not the distiller's forward)."""
    part = rollout.take(rows)
    prompt_ids, prompt_mask = part.flat_prompts()
    with torch.no_grad():
        logprobs, _ = response_logprobs(
            model, prompt_ids, prompt_mask, part.flat("response_ids"),
            part.flat("response_mask"), temperature,
        )  # fmt: skip
    return logprobs.view(part.response_ids.shape)


def test_each_row_is_scored_by_its_own_teacher_and_logged_under_its_name(
    tmp_path: Path, teachers: Teachers
) -> None:
    data = routed_dataset(tmp_path / "data")
    paths = {name: str(teachers[name][0]) for name in ("add", "rev")}
    # 16 tokens: some of the random policy's responses end early (EOS), so a teacher's share
    # of the tokens is not its share of the rows
    cfg = with_teacher_paths(
        [*ONE_STEP, "distill=opd", "train_type.sampling.max_new_tokens=16", *data], paths
    )
    metrics, rollout = one_step(cfg, tmp_path / "run")
    teacher_of = {row["prompt"]: row["teacher"] for row in [*ADD_ROWS, *REV_ROWS, *EVAL_ROWS]}
    rows = {name: [i for i, p in enumerate(rollout.prompts) if teacher_of[p] == name]
            for name in paths}  # fmt: skip
    assert rows["add"] and rows["rev"]  # the step holds both kinds of rows
    assert rollout.valid is None and rollout.sampled_mask is None  # every response token counts
    mask = rollout.response_mask
    assert mask.sum(-1).min() < mask.shape[-1]  # some response ended early
    total = int(mask.sum())
    temperature = float(cfg.train_type.sampling.temperature)
    kls, fracs = {}, {}
    for name, index in rows.items():
        model = teachers[name][1]
        mine = _scored_by(model, rollout, index, temperature)
        own = mask[index]
        assert rollout.teacher_logprobs is not None
        torch.testing.assert_close(rollout.teacher_logprobs[index], mine, rtol=0, atol=1e-5)
        other = _scored_by(
            teachers["rev" if name == "add" else "add"][1], rollout, index, temperature
        )
        assert (other - mine)[own].abs().mean() > 1e-2  # another teacher would read otherwise
        kls[name] = ((rollout.logprobs[index] - mine)[own]).double().mean().item()
        fracs[name] = int(own.sum()) / total
        assert metrics[f"distill/token_frac/{name}"] == pytest.approx(fracs[name], abs=1e-6)
        assert metrics[f"distill/reverse_kl/{name}"] == pytest.approx(kls[name], abs=1e-6)
    assert sum(metrics[f"distill/token_frac/{name}"] for name in rows) == pytest.approx(1, abs=1e-6)
    assert 0 < fracs["add"] < 1
    whole = sum(fracs[name] * kls[name] for name in rows)  # the token-weighted mean of the two
    assert metrics["distill/reverse_kl"] == pytest.approx(whole, abs=1e-6)
    assert _distill_names(metrics) == distill_metric_names(cfg) == {
        "distill/reverse_kl", "distill/teacher_logprob", "distill/reverse_kl/add",
        "distill/reverse_kl/rev", "distill/token_frac/add", "distill/token_frac/rev",
    }  # fmt: skip


# --- the teachers in the checkpoint fingerprint -----------------------------------------------


def _recorded_teacher(run_dir: Path, step: int) -> dict:
    state = run_dir / "checkpoints" / f"step_{step}" / "trainer_state.json"
    return json.loads(state.read_text())["fingerprint"]["teacher"]


def _distill_run(run_dir: Path, teacher: Path, total_steps: int) -> Run:
    overrides = [*ONE_STEP, "distill=opd", f"teacher.path={teacher}", "ckpt.every_steps=1",
                 f"trainer.total_steps={total_steps}", "trainer.eval_every=3"]  # fmt: skip
    return Run(compose_config(overrides), run_dir)


def test_a_resume_with_other_teacher_weights_is_refused_and_a_moved_teacher_resumes(
    tmp_path: Path, teachers: Teachers
) -> None:
    run_dir = tmp_path / "run"
    teacher, model = teachers["add"]
    sha = base_fingerprint(model)
    first = _distill_run(run_dir, teacher, 2)
    try:
        first.fit()
    finally:
        first.close()
    assert _recorded_teacher(run_dir, 2) == {
        "teacher": {"path": str(teacher.resolve()), "sha256": sha}
    }
    other_sha = base_fingerprint(teachers["rev"][1])
    assert other_sha != sha
    message = (
        f"{run_dir}/checkpoints/step_2/trainer_state.json: checkpoint step_2 was written by a "
        f'different setup: teacher.teacher.sha256="{sha}", this run "{other_sha}" (resume with '
        f"the same settings, or allow a deliberate change with ckpt.allow_changes=[teacher])"
    )
    with pytest.raises(CheckpointError, match="^" + re.escape(message) + "$"):
        _distill_run(run_dir, teachers["rev"][0], 3)
    moved = shutil.copytree(teacher, tmp_path / "moved" / "step_0")
    resumed = _distill_run(run_dir, moved, 3)
    try:
        assert resumed.started.state.step == 2
        resumed.fit()
        assert resumed.started.state.step == 3
    finally:
        resumed.close()
    assert _recorded_teacher(run_dir, 3) == {
        "teacher": {"path": str(moved.resolve()), "sha256": sha}
    }
    steps = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").open()]
    assert [s for s in steps if s > 0] == [1, 2, 3]


def test_the_banner_names_the_estimator_and_each_teacher_with_its_hash() -> None:
    """``Distiller.describe``: the start banner's ``distill:`` line (``training.announce``)."""
    settings = DistillSettings("k1", 0.5, 32, False, None, None, None)
    one = Teacher(torch.nn.Linear(1, 1), "/runs/t", "1a2b3c4d5e6f")
    distiller = Distiller(settings, {"teacher": one}, None, torch.device("cpu"), False)
    assert distiller.describe() == (
        "distill: k1 (coef 0.5), the task's reward left out; teacher: /runs/t (sha256 1a2b3c4d)"
    )
    other = Teacher(torch.nn.Linear(1, 1), "/runs/r", "99887766aa")
    routed = Distiller(
        DistillSettings("k3", 1.0, 32, True, None, None, None),
        {"add": one, "rev": other},
        lambda text: "add",
        torch.device("cpu"),
        False,
    )
    assert routed.describe() == (
        "distill: k3 (coef 1), added to the task's reward; teacher by task.teacher_key: "
        "add /runs/t (sha256 1a2b3c4d), rev /runs/r (sha256 99887766)"
    )
