"""Setting a key an open map does not hold yet (``infra.environment``, an optimizer's keyword
arguments, the reward's constructor arguments) needs Hydra's ``+``: the message says so, rather
than suggesting the map's own name back ("did you mean infra.environment?")."""

from __future__ import annotations

import re

import pytest

from astrai.config.compose import check_overrides
from astrai.config.errors import ConfigError


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["infra=docker", "infra.environment={K:v}"],
            "infra.environment={K:v} adds the key K to infra.environment: a new key needs + "
            "(+infra.environment={K:v})",
        ),
        (
            ["infra.environment.NCCL_DEBUG=INFO"],
            "infra.environment.NCCL_DEBUG=INFO adds the key NCCL_DEBUG to infra.environment: "
            "a new key needs + (+infra.environment.NCCL_DEBUG=INFO)",
        ),
        (  # a typo of a key the map has: named too
            ["train_type.optimizer.lrr=1"],
            "train_type.optimizer.lrr=1 adds the key lrr to train_type.optimizer: did you mean "
            "train_type.optimizer.lr? A new key needs + (+train_type.optimizer.lrr=1)",
        ),
    ],
)
def test_a_new_key_of_an_open_map_needs_a_plus(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        check_overrides(overrides)


def test_with_the_plus_it_composes() -> None:
    cfg = check_overrides(["infra=docker", "+infra.environment={K:v}"])
    assert dict(cfg.infra.environment) == {"K": "v"}


def test_a_typed_node_given_a_map_names_the_unknown_key_inside() -> None:
    """``trainer={total_step: 5}``: the key Hydra could not set is ``trainer.total_step``."""
    with pytest.raises(
        ConfigError,
        match=re.escape(
            "trainer.total_step is not a config key (did you mean trainer.total_steps?)"
        ),
    ):
        check_overrides(["trainer={total_step:5}"])


@pytest.mark.parametrize(
    "override",
    [
        # docs/your-own-model.md's own command, and the single-key form
        "model.chat_template_kwargs={enable_thinking: false}",
        "model.chat_template_kwargs.enable_thinking=false",
        "+model.chat_template_kwargs.enable_thinking=false",
    ],
)
def test_chat_template_kwargs_takes_a_map_without_a_plus(override: str) -> None:
    """``model.chat_template_kwargs`` is an open map (its keys are checked by the code that
    passes them to the template): the documented override composes as written."""
    cfg = check_overrides(["model=smollm2", override])
    assert dict(cfg.model.chat_template_kwargs) == {"enable_thinking": False}
    cfg = check_overrides(["model=hf", "model.path=/models/qwen3", override])
    assert dict(cfg.model.chat_template_kwargs) == {"enable_thinking": False}


def test_chat_template_kwargs_is_still_a_map_and_its_siblings_still_closed() -> None:
    with pytest.raises(ConfigError, match="Cannot assign int to Dict"):
        check_overrides(["model=smollm2", "model.chat_template_kwargs=5"])
    with pytest.raises(ConfigError, match="did you mean model.chat_template_kwargs"):
        check_overrides(["model=smollm2", "model.chat_template_kwarg={a: 1}"])


def test_the_documented_command_is_in_the_docs() -> None:
    from astrai.paths import REPO_ROOT

    text = " ".join((REPO_ROOT / "docs" / "your-own-model.md").read_text().split())
    assert "'model.chat_template_kwargs={enable_thinking: false}'" in text
