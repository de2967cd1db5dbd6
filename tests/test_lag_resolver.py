"""The lag settings are read from a config in one resolver only (issue 60), and what it resolves
is what a validated config, and a run's saved ``config.yaml``, record.

The rule the source test checks, over every module under ``src/astrai`` parsed with ``ast``:
a lag key (``astrai.policy_lag.LAG_KEYS``: ``max_policy_lag``, ``old_logprobs``,
``correction``, ``correction_low``, ``correction_high``) is read from a config only in
``src/astrai/policy_lag.py`` (``lag_plan``, the resolver). Elsewhere none of these reads:

- by its name as a string, on anything (only a config is read by a key's name):
  ``x["<key>"]``, or a lookup (``LOOKUPS``) given the key or a dotted path ending in it:
  ``x.get("<key>", ...)``, ``getattr(x, "<key>")``,
  ``OmegaConf.select(cfg, "train_type.max_policy_lag")``; a key named in a message or as the
  label of a check (``check_number(value, "engine.correction_low", ...)``) is no read;
- as an attribute of a config node: ``<node>.<key>`` read (not assigned) where ``<node>`` is
  a name or attribute called as configs are (``CONFIG_NODES``: ``cfg``, ``engine``,
  ``train_type``, ``tt``, ...), e.g. ``cfg.train_type.max_policy_lag``, ``engine.correction``.

Allowed by the rule's shape: the schema's field definitions (annotations, not reads),
writing a resolved value into a config (``config.lag_checks.record_lag_plan``: an
assignment), parameters and attributes of other objects that share a key's name
(``plan.max_policy_lag``, ``batch.old_logprobs``, ``plan.configured.correction``)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml
from tests.helpers import compose_config
from tests.train_runs import QUICK, run_train_in_process

from astrai.policy_lag import AUTO, LAG_KEYS, lag_plan

SRC = Path(__file__).resolve().parents[1] / "src" / "astrai"
RESOLVER = SRC / "policy_lag.py"
# the names a config node goes by in src/ (a variable, a parameter, an attribute)
CONFIG_NODES = frozenset(
    {"cfg", "config", "engine", "train_type", "tt", "node", "options", "job", "job_config", "run"}
)
# the calls that look a key up by its name (a mapping's, OmegaConf's, an object's)
LOOKUPS = frozenset({"get", "pop", "setdefault", "select", "getattr"})


def _receiver(node: ast.expr) -> str | None:
    """The name an attribute's object ends in: ``cfg`` in ``cfg.x``, ``engine`` in
    ``trainer.cfg.engine.x``; None for a call or a subscript."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def _called(func: ast.expr) -> str | None:
    """``get`` for ``x.get(...)``, ``getattr`` for ``getattr(...)``."""
    return func.attr if isinstance(func, ast.Attribute) else _receiver(func)


def _string(node: ast.expr) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _names_a_key(text: str | None) -> bool:
    """``"max_policy_lag"`` or a dotted path ending in a key (``"engine.correction"``)."""
    return text is not None and text.split(".")[-1] in LAG_KEYS and " " not in text


def lag_reads(source: str) -> list[tuple[int, str]]:
    """``(line, code)`` of every read of a lag key from a config in ``source`` (the rule in
    the module's docstring)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        hit = False
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            hit = node.attr in LAG_KEYS and _receiver(node.value) in CONFIG_NODES
        elif isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            hit = _names_a_key(_string(node.slice))
        elif isinstance(node, ast.Call) and _called(node.func) in LOOKUPS:
            hit = any(_names_a_key(_string(arg)) for arg in node.args)
        if hit:
            found.append((node.lineno, ast.unparse(node)))
    return found


def test_the_rule_catches_each_kind_of_read_and_spares_the_rest() -> None:
    reads = """
cfg.train_type.max_policy_lag
tt.max_policy_lag
trainer.cfg.engine.old_logprobs
engine.correction_high
cfg.engine.get("correction", "auto")
node["old_logprobs"]
getattr(tt, "max_policy_lag")
OmegaConf.select(cfg, "train_type.max_policy_lag")
"""
    assert [line for line, _ in lag_reads(reads)] == list(range(2, 10))
    spared = """
plan.max_policy_lag
batch.old_logprobs
plan.configured.correction
engine.old_logprobs = plan.old_logprobs
def check(max_policy_lag: int) -> None: ...
class EngineConfig:
    old_logprobs: str = MISSING
log.info("engine.correction is set")
check_number(low, "engine.correction_low", 0, 1)
"""
    assert lag_reads(spared) == []


def test_the_lag_settings_are_read_from_a_config_in_the_resolver_only() -> None:
    modules = sorted(SRC.rglob("*.py"))
    assert RESOLVER in modules and len(modules) > 100
    outside = {
        f"{path.relative_to(SRC.parent)}:{line}: {code}"
        for path in modules
        if path != RESOLVER
        for line, code in lag_reads(path.read_text(encoding="utf-8"))
    }
    assert not outside, "read lag settings through astrai.policy_lag.lag_plan:\n" + "\n".join(
        sorted(outside)
    )
    # the resolver reads every one of them (the rule is not about keys nobody reads)
    here = [code for _, code in lag_reads(RESOLVER.read_text(encoding="utf-8"))]
    assert {key for key in LAG_KEYS for code in here if repr(key) in code} == set(LAG_KEYS)


@pytest.mark.parametrize(
    ("overrides", "recorded"),
    [
        ([], ("bypass", "none")),
        (["train_type.max_policy_lag=1"], ("recompute", "token_truncate")),
        (["engine.old_logprobs=recompute"], ("recompute", "none")),
        (["train_type.max_policy_lag=1", "engine.correction=icepop"], ("recompute", "icepop")),
    ],
)
def test_a_validated_config_records_the_resolved_choices(
    overrides: list[str], recorded: tuple[str, str]
) -> None:
    from astrai.config.validate import validate_config

    raw = compose_config(["debug=quick", *overrides], validate=False)
    cfg = compose_config(["debug=quick", *overrides])
    assert (cfg.engine.old_logprobs, cfg.engine.correction) == recorded
    plan = lag_plan(raw)
    assert (plan.old_logprobs, plan.correction) == recorded  # the resolver's own choice
    validate_config(cfg)  # again: idempotent
    assert (cfg.engine.old_logprobs, cfg.engine.correction) == recorded
    assert AUTO not in (cfg.engine.old_logprobs, cfg.engine.correction)


def _recorded(path: Path) -> tuple[str, str]:
    engine = yaml.safe_load(path.read_text())["engine"]
    return engine["old_logprobs"], engine["correction"]


def test_a_runs_saved_config_records_what_ran_and_an_auto_one_still_resumes(
    tmp_path: Path,
) -> None:
    run_dir = tmp_path / "run"
    args = [*QUICK, "train_type.max_policy_lag=1", f"hydra.run.dir={run_dir}"]
    args.append("logger.tensorboard=false")
    result = run_train_in_process(args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    last = run_dir / "checkpoints" / "step_2" / "config.yaml"
    for path in (run_dir / "config.yaml", last):  # the run dir's and the checkpoint's
        assert _recorded(path) == ("recompute", "token_truncate")
    # Hydra's own record keeps what was asked for
    assert _recorded(run_dir / ".hydra" / "config.yaml") == (AUTO, AUTO)
    # a checkpoint written before the plan was recorded says auto: it resumes all the same
    # (the engine node is in no fingerprint, and the resumed run resolves its own config)
    last.write_text(last.read_text().replace("recompute", AUTO).replace("token_truncate", AUTO))
    assert _recorded(last) == (AUTO, AUTO)
    result = run_train_in_process([*args, "trainer.total_steps=3"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "resumed from " in (run_dir / "train.log").read_text()
    resumed = run_dir / "checkpoints" / "step_3" / "config.yaml"
    assert _recorded(resumed) == ("recompute", "token_truncate")
