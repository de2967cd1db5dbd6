"""``verify`` runs the checks resume runs (issue 45, part 3): on every damaged part of a
checkpoint (in-flight rollouts, a LoRA checkpoint's adapter config and base), ``verify`` and a
resume of the same checkpoint both refuse with the same one line naming the file, or both
accept; ``export --adapter`` refuses what resume refuses.

Fast lane: checkpoints written by the helpers (``checkpoint_dirs``) and the checks resume runs
called as it calls them (``resolve_resume``, the restore's identity check and in-flight load).
Slow lane: the same table on checkpoints of real 2-step runs, resumed by a real ``Trainer``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from tests.checkpoints.checkpoint_dirs import (
    GROUP,
    PROMPTS,
    copy_run,
    edit_in_flight,
    edit_json,
    edit_rollout,
    edit_state,
    strategy_named,
    write_base,
    write_lag_checkpoint,
    write_lora_checkpoint,
)
from tests.helpers import compose_config, run_main

from astrai.checkpoints.__main__ import main as checkpoints_cli
from astrai.checkpoints.identity import check_checkpoint_identity
from astrai.checkpoints.in_flight import ROLLOUT_FIELDS, RunShape
from astrai.checkpoints.layout import CheckpointError, CheckpointInfo
from astrai.checkpoints.verify import verify_checkpoint
from astrai.distributed import DistContext
from astrai.export import main as export_main
from astrai.models.lora import base_fingerprint
from astrai.models.pretrained import load_pretrained_policy
from astrai.rollout.rollout import Rollout
from astrai.training.resume import resolve_resume
from astrai.training.sampling.in_flight import in_flight_batches

STEP = 2  # every template's checkpoint: step_2, the lag run's holding step 3's rollout


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """{"lag": a run dir whose step_2 holds step 3's rollout, "lora": a LoRA run dir with
    its base at ``<its parent>/base``}, written by the helpers (milliseconds)."""
    lag = tmp_path_factory.mktemp("lag") / "run"
    write_lag_checkpoint(lag / "checkpoints", STEP)
    lora = tmp_path_factory.mktemp("lora") / "run"
    write_lora_checkpoint(lora / "checkpoints", STEP, lora.parent / "base")
    return {"lag": lag, "lora": lora}


def _copy(templates: dict[str, Path], kind: str, tmp_path: Path) -> Path:
    """A copy of the ``kind`` template's run dir (a LoRA run's base beside it, and its
    checkpoint pointed at that copy); returns the copy's step_2."""
    run_dir = tmp_path / "run"
    step_dir = copy_run(templates[kind], run_dir) / f"step_{STEP}"
    if kind == "lora":
        base = shutil.copytree(templates[kind].parent / "base", tmp_path / "base")
        adapters = _state(step_dir)["adapters"]
        adapters["base"]["path"] = str(base)
        edit_state(step_dir, adapters=adapters)
        edit_json(step_dir / "adapter_config.json", base_model_name_or_path=str(base))
    return step_dir


def _state(step_dir: Path) -> dict:
    return json.loads((step_dir / "trainer_state.json").read_text())


def _resume_checks(step_dir: Path, shape: RunShape | None = None) -> str | None:
    """What resume refuses of ``step_dir`` before its first step (its one line; None when it
    starts), short of building the models: ``resolve_resume``, then the restore's identity
    check (this run's base: the one at the recorded path) and its in-flight check for this run's
    batch (``shape``, default: the one the checkpoint was sampled with)."""
    state = _state(step_dir)
    lora = state.get("adapters")
    try:
        point = resolve_resume(
            str(step_dir),
            step_dir.parents[1],
            strategy_named(state["train_type"]),
            adapters=lora is not None,
        )
        current = dict(state["fingerprint"])
        if lora is not None:
            base = base_fingerprint(load_pretrained_policy(lora["base"]["path"]))
            current["adapters"] = {"lora": lora["lora"], "base_sha256": base}
        check_checkpoint_identity(step_dir, state, 20, current)
        shape = shape or RunShape(1, PROMPTS, GROUP)
        assert point is not None
        cpu = torch.device("cpu")
        in_flight_batches(point.in_flight, step_dir, point.record, shape, DistContext(), cpu)
    except CheckpointError as err:
        return str(err)
    return None


def _rollout(step_dir: Path, edit: Callable[[dict], object]) -> None:
    edit_rollout(step_dir, lambda record: edit(record["rollout"]))


def _set(name: str, value: object) -> Callable[[dict], None]:
    return lambda rollout: rollout.__setitem__(name, value)


def _nan_at_first_token(name: str) -> Callable[[dict], None]:
    def damage(rollout: dict) -> None:
        rollout[name][0, 0, 0] = math.nan  # every response has at least its first token

    return damage


# id: (template, damage to the copy's step_2, the file the refusal names, a phrase of it);
# None: an intact checkpoint, which both accept
ROWS: dict[str, tuple[str, Callable[[Path], None] | None, str, str]] = {
    "intact (lag)": ("lag", None, "", ""),
    "foreign object": (
        "lag",
        lambda d: edit_in_flight(d, lambda _: {"weights": torch.zeros(2)}),
        "in_flight.pt",
        "not astrai's in-flight rollouts",
    ),
    "per_rank not lists": (
        "lag",
        lambda d: edit_in_flight(d, lambda _: {"per_rank": "x"}),
        "in_flight.pt",
        "not astrai's in-flight rollouts",
    ),
    "bogus rollout key": (
        "lag",
        lambda d: _rollout(d, _set("bogus", torch.zeros(1))),
        "in_flight.pt",
        "fields differ from a Rollout's (missing [], unknown ['bogus'])",
    ),
    "missing rollout key": (
        "lag",
        lambda d: _rollout(d, lambda rollout: rollout.pop("rewards")),
        "in_flight.pt",
        "missing ['rewards']",
    ),
    "step does not follow": (
        "lag",
        lambda d: edit_rollout(d, lambda record: record.__setitem__("step", 7)),
        "in_flight.pt",
        "is for step 7, the checkpoint's next steps start at 3",
    ),
    "tensor cut short": (
        "lag",
        lambda d: _rollout(
            d, lambda rollout: rollout.__setitem__("logprobs", rollout["logprobs"][..., :-1])
        ),
        "in_flight.pt",
        "'logprobs' has shape",
    ),
    "rewards cut short": (
        "lag",
        lambda d: _rollout(
            d, lambda rollout: rollout.__setitem__("rewards", rollout["rewards"][:1])
        ),
        "in_flight.pt",
        "'rewards' has shape",
    ),
    "NaN reward": (
        "lag",
        lambda d: _rollout(d, lambda rollout: rollout["rewards"].view(-1)[0].fill_(math.nan)),
        "in_flight.pt",
        "'rewards' holds non-finite values",
    ),
    "NaN logprob": (
        "lag",
        lambda d: _rollout(d, _nan_at_first_token("logprobs")),
        "in_flight.pt",
        "'logprobs' holds non-finite values on response tokens",
    ),
    "empty per-rank list": (
        "lag",
        lambda d: edit_in_flight(d, lambda loaded: loaded.__setitem__("per_rank", [[]])),
        "in_flight.pt",
        "rank 0 holds 0 in-flight rollout(s), trainer_state.json counts 1",
    ),
    "count says two": (
        "lag",
        lambda d: edit_state(d, in_flight=2),
        "in_flight.pt",
        "rank 0 holds 1 in-flight rollout(s), trainer_state.json counts 2",
    ),
    "count without the file": (
        "lag",
        lambda d: edit_state(d, extra_files=[]),
        "trainer_state.json",
        "counts 1 in-flight rollout(s) but lists no in_flight.pt",
    ),
    "two ranks' rollouts": (
        "lag",
        lambda d: edit_in_flight(d, lambda loaded: loaded["per_rank"].append([])),
        "in_flight.pt",
        "in-flight rollouts of 2 rank(s)",
    ),
    "intact (lora)": ("lora", None, "", ""),
    "adapter_config alpha edited": (
        "lora",
        lambda d: edit_json(d / "adapter_config.json", lora_alpha=1),
        "adapter_config.json",
        "lora_alpha=1 (trained with model.lora.alpha=8",
    ),
    "adapter_config rank edited": (
        "lora",
        lambda d: edit_json(d / "adapter_config.json", r=2),
        "adapter_config.json",
        "r=2 (trained with model.lora.rank=4)",
    ),
    "base changed": (
        "lora",
        lambda d: write_base(d.parents[2] / "base", seed=1),
        "trainer_state.json",
        "adapters were trained on another base model",
    ),
}


def _assert_agree(step_dir: Path, row: str, refused: str | None) -> None:
    """``verify`` (in-process and its CLI) says of ``step_dir`` what resume said (``refused``)."""
    _, damage, file, phrase = ROWS[row]
    verdict = verify_checkpoint(CheckpointInfo(STEP, step_dir))
    cli = run_main(checkpoints_cli, ["verify", str(step_dir)])
    if damage is None:
        assert refused is None and verdict.ok and cli.returncode == 0, (refused, verdict, cli)
        return
    assert refused is not None and "\n" not in refused, row
    assert refused.startswith(f"{step_dir / file}: ") and phrase in refused, refused
    lines = [*verdict.problems, *filter(None, [verdict.refusal])]
    assert not verdict.ok and cli.returncode in (1, 2)
    fails = [line for line in cli.stdout.splitlines() if line.startswith("FAIL")]
    if row == "base changed":  # resume compares this run's base, verify the recorded one
        [line] = lines
        head = refused.split(" (recorded weights")[0]
        assert line.startswith(head) and f"the base at {step_dir.parents[2] / 'base'}" in line
    else:
        assert refused in lines, (refused, lines)  # the very line
    assert len(fails) == 1 and fails[0].endswith(f": {lines[0]}")


@pytest.mark.parametrize("row", list(ROWS))
def test_verify_and_resume_agree(written: dict[str, Path], tmp_path: Path, row: str) -> None:
    step_dir = _copy(written, ROWS[row][0], tmp_path)
    damage = ROWS[row][1]
    if damage is not None:
        damage(step_dir)
    _assert_agree(step_dir, row, _resume_checks(step_dir))


def test_rollout_fields_are_the_rollouts() -> None:
    """``checkpoints`` may not import ``rollout``: its copy of the field names is pinned."""
    assert {f.name for f in dataclasses.fields(Rollout)} == ROLLOUT_FIELDS


SHAPES = [
    (
        RunShape(1, 2 * PROMPTS, GROUP),
        "train_type.prompts_per_step=4",
        f"sampled {PROMPTS} prompt(s) per rank, this run's train_type.prompts_per_step="
        f"{2 * PROMPTS} gives {2 * PROMPTS}: resume with train_type.prompts_per_step={PROMPTS} "
        "(what it was sampled with)",
    ),
    (
        RunShape(1, PROMPTS, 2 * GROUP),
        "train_type.group_size=4",
        f"sampled {GROUP} response(s) per prompt, this run's train_type.group_size={2 * GROUP}: "
        f"resume with train_type.group_size={GROUP}",
    ),
]


@pytest.mark.parametrize(("shape", "override", "phrase"), SHAPES, ids=["prompts", "group"])
def test_another_batch_shape_is_refused_naming_the_key(
    written: dict[str, Path], tmp_path: Path, shape: RunShape, override: str, phrase: str
) -> None:
    """The in-flight rollout is the old shape: trained first, it would be another batch than
    the config says; refused (the checkpoint itself is fine: verify accepts it)."""
    step_dir = _copy(written, "lag", tmp_path)
    refused = _resume_checks(step_dir, shape)
    assert refused == f"{step_dir / 'in_flight.pt'}: rank 0's in-flight rollout 0: {phrase}"
    assert verify_checkpoint(CheckpointInfo(STEP, step_dir)).ok


# --- export --adapter refuses what resume and the merged export refuse -----------------------


@pytest.mark.parametrize("row", ["adapter_config alpha edited", "base changed"])
def test_export_adapter_refuses_what_resume_refuses(
    written: dict[str, Path], tmp_path: Path, row: str
) -> None:
    _, damage, file, phrase = ROWS[row]
    step_dir = _copy(written, "lora", tmp_path)
    assert damage is not None
    damage(step_dir)
    out = tmp_path / "out"
    result = run_main(export_main, [str(step_dir), str(out), "--adapter"])
    assert result.returncode == 2 and not out.exists()
    [line] = result.stderr.splitlines()
    assert f"{step_dir / file}: " in line and phrase in line, line


def test_export_adapter_of_an_intact_checkpoint(written: dict[str, Path], tmp_path: Path) -> None:
    step_dir = _copy(written, "lora", tmp_path)
    result = run_main(export_main, [str(step_dir), str(tmp_path / "out"), "--adapter"])
    assert result.returncode == 0, result.stderr
    exported = json.loads((tmp_path / "out" / "adapter_config.json").read_text())
    recorded = json.loads((step_dir / "adapter_config.json").read_text())
    base = Path(recorded["base_model_name_or_path"])
    assert base.is_absolute()  # the checkpoint keeps where this machine loaded it from
    # the export is portable: the base folder's name (its config.json has no _name_or_path)
    assert exported == {**recorded, "base_model_name_or_path": base.name}
    assert (tmp_path / "out" / "adapter_model.safetensors").read_bytes() == (
        step_dir / "adapter_model.safetensors"
    ).read_bytes()


def test_export_adapter_names_the_base_it_is_told_or_the_bases_own_name(
    written: dict[str, Path], tmp_path: Path
) -> None:
    step_dir = _copy(written, "lora", tmp_path)
    told = run_main(
        export_main,
        [str(step_dir), str(tmp_path / "told"), "--adapter", "--base-model", "Qwen/Qwen3-0.6B"],
    )
    assert told.returncode == 0, told.stderr
    config = json.loads((tmp_path / "told" / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == "Qwen/Qwen3-0.6B"
    without_adapter = run_main(
        export_main, [str(step_dir), str(tmp_path / "x"), "--base-model", "a"]
    )
    assert without_adapter.returncode == 2 and "--adapter" in without_adapter.stderr
    assert not (tmp_path / "x").exists()


def test_portable_base_name_prefers_the_bases_own_hub_name(tmp_path: Path) -> None:
    from astrai.export import portable_base_name

    base = tmp_path / "qwen-local-copy"
    base.mkdir()
    assert portable_base_name(str(base)) == "qwen-local-copy"  # no config.json
    (base / "config.json").write_text(json.dumps({"_name_or_path": "Qwen/Qwen3-0.6B"}))
    assert portable_base_name(str(base)) == "Qwen/Qwen3-0.6B"
    assert portable_base_name(str(base), "org/other") == "org/other"
    (base / "config.json").write_text(json.dumps({"_name_or_path": "/home/me/qwen"}))
    assert portable_base_name(str(base)) == "qwen-local-copy"  # never a local absolute path


# --- slow lane: checkpoints of real runs, resumed by a real Trainer ---------------------------

QUICK = [
    "debug=quick",
    "trainer.total_steps=4",
    "trainer.eval_every=100",
    "ckpt.every_steps=0",
    "logger.tensorboard=false",
    f"train_type.prompts_per_step={PROMPTS}",
    f"train_type.group_size={GROUP}",
]
LAG = [
    *QUICK,
    "train_type.max_policy_lag=1",
    "engine.old_logprobs=recompute",
    "engine.correction=token_truncate",
]
LORA = [*QUICK, "model=hf", "model.chat_template=false", "model.lora.rank=4", "model.lora.alpha=8"]


def _overrides(kind: str, run_dir: Path) -> list[str]:
    return LAG if kind == "lag" else [*LORA, f"model.path={run_dir.parent / 'base'}"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``written``'s two run dirs, written by real 2-step runs."""
    from astrai.training.run import Run

    runs = {}
    for kind in ("lag", "lora"):
        run_dir = tmp_path_factory.mktemp(kind) / "run"
        if kind == "lora":
            write_base(run_dir.parent / "base", seed=0)
        trainer = Run(compose_config(_overrides(kind, run_dir)), run_dir)
        trainer.fit(until=STEP)
        trainer.close()
        runs[kind] = run_dir
    return runs


def _trainer_refusal(kind: str, step_dir: Path, *extra: str) -> str | None:
    """What a real resume of ``step_dir`` refuses (its one line), None when it starts."""
    from astrai.training.run import Run

    run_dir = step_dir.parents[1]
    cfg = compose_config([*_overrides(kind, run_dir), f"ckpt.resume={step_dir}", *extra])
    try:
        trainer = Run(cfg, run_dir)
    except CheckpointError as err:
        return str(err)
    trainer.close()
    return None


@pytest.mark.slow  # ~15 s: two 2-step runs, a Trainer built per row
@pytest.mark.parametrize("row", list(ROWS))
def test_verify_and_a_real_resume_agree(trained: dict[str, Path], tmp_path: Path, row: str) -> None:
    kind, damage = ROWS[row][:2]
    step_dir = _copy(trained, kind, tmp_path)
    if damage is not None:
        damage(step_dir)
    _assert_agree(step_dir, row, _trainer_refusal(kind, step_dir))


@pytest.mark.slow  # a 2-step run and a Trainer each
@pytest.mark.parametrize(("shape", "override", "phrase"), SHAPES, ids=["prompts", "group"])
def test_a_real_resume_with_another_batch_shape_is_refused(
    trained: dict[str, Path], tmp_path: Path, shape: RunShape, override: str, phrase: str
) -> None:
    step_dir = _copy(trained, "lag", tmp_path)
    refused = _trainer_refusal("lag", step_dir, override)
    assert refused == f"{step_dir / 'in_flight.pt'}: rank 0's in-flight rollout 0: {phrase}"


@pytest.mark.slow  # PEFT merges the adapters
@pytest.mark.parametrize("row", ["adapter_config alpha edited", "base changed"])
def test_the_merged_export_refuses_the_same(
    trained: dict[str, Path], tmp_path: Path, row: str
) -> None:
    _, damage, file, phrase = ROWS[row]
    step_dir = _copy(trained, "lora", tmp_path)
    assert damage is not None
    damage(step_dir)
    out = tmp_path / "out"
    result = run_main(export_main, [str(step_dir), str(out)])
    assert result.returncode == 2 and not out.exists()
    [line] = result.stderr.splitlines()
    assert f"{step_dir / file}: " in line and phrase in line, line


@pytest.mark.slow  # a real train.py process: 8-18 s on 2 busy cores
def test_train_py_refuses_nan_rewards_in_flight_with_verify_s_line(
    trained: dict[str, Path], tmp_path: Path
) -> None:
    """The issue's run trained step 11 and died at step 12 on "NaN probabilities": now the
    start refuses, exit 2, with the line ``verify`` prints."""
    from tests.train_runs import run_train

    step_dir = _copy(trained, "lag", tmp_path)
    ROWS["NaN reward"][1](step_dir)  # type: ignore[misc]
    run_dir = step_dir.parents[1]
    result = run_train([*LAG, f"hydra.run.dir={run_dir}", f"ckpt.resume={step_dir}"], tmp_path)
    [line] = verify_checkpoint(CheckpointInfo(STEP, step_dir)).problems
    assert (result.returncode, result.stderr) == (2, f"astrai: checkpoint error: {line}\n"), (
        result.stderr[-2000:]
    )
