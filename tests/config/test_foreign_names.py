"""TRL's and verl's names (and distillation's from Tinker, NeMo-RL and slime) point at astrai's
keys: the table, its doc and the did-you-mean."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from tests.helpers import compose_config

from astrai.config.compose import check_overrides
from astrai.config.errors import ConfigError
from astrai.config.foreign_names import FOREIGN_NAMES, foreign_name
from astrai.config.keys import known_keys, unknown_key_message

REPO = Path(__file__).resolve().parents[2]
# the configs whose keys the table may name: the default (GRPO), and PPO's critic and knobs with a
# local Hugging Face model (model.path), your own data (task.train_path, task.teacher_key) and
# on-policy distillation's keys (distill.*)
DEFAULT: list[str] = []
OTHERS = ["train_type=online_ppo", "model=hf", "task=dataset", "distill=opd"]
SOURCES = {"TRL", "verl", "Tinker", "NeMo-RL", "slime"}


def _known(overrides: list[str]) -> list[str]:
    return known_keys(compose_config(overrides, validate=False))


def test_every_mapped_key_exists_in_a_composed_config() -> None:
    known = {*_known(DEFAULT), *_known(OTHERS)}
    missing = {name: entry.key for name, entry in FOREIGN_NAMES.items() if entry.key not in known}
    assert missing == {}
    # a foreign name is never astrai's own key: that override would just work
    assert set(FOREIGN_NAMES).isdisjoint(known)
    assert {entry.source for entry in FOREIGN_NAMES.values()} == SOURCES


def test_every_foreign_name_points_at_its_key_in_one_line() -> None:
    default, others = _known(DEFAULT), _known(OTHERS)
    for name, entry in FOREIGN_NAMES.items():
        message = unknown_key_message(name, others if "online_ppo" in entry.note else default)
        assert entry.key in message and "\n" not in message, name


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (  # the last part under its parent wins (it used to suggest train_type.scheduler)
            ["train_type.lr=1e-4"],
            "train_type.lr is not a config key (did you mean train_type.optimizer.lr?)",
        ),
        (
            ["num_generations=8"],
            "num_generations is TRL's name: astrai's key is train_type.group_size",
        ),
        (
            ["+train_type.num_generations=8"],  # composed, then check_known_keys
            "train_type.num_generations is not a config key; num_generations is TRL's name: "
            "astrai's key is train_type.group_size",
        ),
    ],
)
def test_check_overrides_names_astrais_key(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        check_overrides(overrides)
    assert str(err.value) == message


@pytest.mark.parametrize(
    ("key", "overrides", "message"),
    [
        (  # the policy's learning rate, not the critic's (shorter) one
            "lr",
            OTHERS,
            "lr is not a config key (did you mean train_type.optimizer.lr?)",
        ),
        (  # TRL's KL coefficient, not a typo of train_type.optimizer.betas
            "beta",
            [],
            "beta is TRL's name: astrai's key is train_type.kl_coef (GRPOConfig's KL "
            "coefficient; the beta of TRL's distillation trainers (the generalised JSD's mix: 0 "
            "forward KL, 1 reverse) has no key: distill.estimator chooses the divergence)",
        ),
        (  # a distillation knob: its key exists under distill=opd only
            "kl_penalty_coef",
            [],
            "kl_penalty_coef is Tinker's name: astrai's key is distill.coef",
        ),
        (
            "distillation.distillation_loss.loss_mode",
            [],
            "distillation.distillation_loss.loss_mode is verl's name: astrai's key is "
            "distill.estimator (k1 and k3 as named, forward_kl_topk is forward_topk; no other "
            "mode)",
        ),
        (
            "actor_rollout_ref.actor.ppo_mini_batch_size",
            [],
            "actor_rollout_ref.actor.ppo_mini_batch_size is verl's name: astrai's key is "
            "train_type.minibatches (a number of optimizer steps per pass, not a number of "
            "prompts per step)",
        ),
    ],
)
def test_unknown_key_message_prefers_the_policy_and_the_table(
    key: str, overrides: list[str], message: str
) -> None:
    assert unknown_key_message(key, _known(overrides)) == message


def test_a_dotted_name_is_found_by_its_longest_end() -> None:
    assert foreign_name("actor_rollout_ref.rollout.n") == (
        "actor_rollout_ref.rollout.n",
        FOREIGN_NAMES["actor_rollout_ref.rollout.n"],
    )
    assert foreign_name("x.actor_rollout_ref.rollout.n") is not None
    assert foreign_name("train_type.learning_rate") == (
        "learning_rate",
        FOREIGN_NAMES["learning_rate"],
    )
    assert foreign_name("rollout.n") is None and foreign_name("n") is None
    # astrai's own task.teacher_key (under another task) is not taken for verl's
    assert foreign_name("task.teacher_key") is None


def _doc_table() -> dict[str, tuple[str, str, str]]:
    """docs/configuration.md's table of foreign names: name -> (source, key, note)."""
    text = (REPO / "docs" / "configuration.md").read_text()
    section = text.split("## Names from TRL, verl and others", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        match = re.fullmatch(r"`([^`]+)`", cells[0]) if len(cells) == 4 else None
        if match:
            rows[match[1]] = (cells[1], cells[2].strip("`"), cells[3])
    return rows


def test_the_docs_table_is_the_module_table() -> None:
    expected = {
        name: (entry.source, entry.key, entry.note) for name, entry in FOREIGN_NAMES.items()
    }
    assert _doc_table() == expected


def test_a_foreign_name_added_to_an_open_map_names_astrais_key() -> None:
    from astrai.config.compose import _new_key_message

    override = "train_type.optimizer.learning_rate=1e-4"  # the optimizer's keyword arguments
    message = _new_key_message(override, "train_type.optimizer.learning_rate", _known([]))
    assert message == (
        f"{override} adds the key learning_rate to train_type.optimizer: learning_rate is TRL's "
        f"name: astrai's key is train_type.optimizer.lr. A new key needs + (+{override})"
    )
