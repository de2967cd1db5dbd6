"""Unknown keys, Hydra's compose errors as one line, the preset slots, the schema group."""

from __future__ import annotations

import pytest
from tests.helpers import compose_config

from astrai.config.compose import check_overrides
from astrai.config.errors import ConfigError
from astrai.config.keys import check_known_keys, closest_key


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["+trainer.total_step=10"],
            "trainer.total_step is not a config key (did you mean trainer.total_steps?)",
        ),
        (["+total_steps=3"], "total_steps is not a config key (did you mean trainer.total_steps?)"),
        (
            ["train_type=online_ppo", "+train_type.ppo_gama=1"],
            "train_type.ppo_gama is not a config key (did you mean train_type.ppo_gamma?)",
        ),
        (
            ["+infra.gpu.device=0"],
            "infra.gpu.device is not a config key (did you mean infra.gpu.devices?)",
        ),
        (["+zzz=1"], "zzz is not a config key"),
    ],
)
def test_a_key_no_schema_defines_is_an_error(overrides: list[str], message: str) -> None:
    cfg = compose_config(overrides, validate=False)
    with pytest.raises(ConfigError) as err:
        check_known_keys(cfg)
    assert str(err.value) == message
    with pytest.raises(ConfigError) as err:  # validate_config runs the same check
        compose_config(overrides)
    assert str(err.value) == message


def test_open_maps_take_any_key() -> None:
    cfg = compose_config(
        [
            "+infra.environment.NCCL_P2P_DISABLE=1",  # extra environment variables
            "+train_type.optimizer.amsgrad=true",  # keyword arguments of torch.optim.AdamW
            "+reward.max_words=50",  # keyword arguments of the reward (conf/reward/custom.yaml)
        ],
        validate=False,
    )
    check_known_keys(cfg)  # raises nothing
    assert cfg.train_type.optimizer.amsgrad is True


def test_a_launchers_job_config_keeps_its_hydra_node() -> None:
    # the Docker launcher validates configs from load_sweep_config, which hold Hydra's node
    from omegaconf import OmegaConf, open_dict

    cfg = compose_config(["debug=quick"], validate=False)
    with open_dict(cfg):
        cfg.hydra = OmegaConf.create({"job": {"num": 0}})
    check_known_keys(cfg)  # raises nothing
    with open_dict(cfg):
        cfg.hydras = 1  # a typo next to it is still caught
    with pytest.raises(ConfigError, match=r"^hydras is not a config key"):
        check_known_keys(cfg)


def test_closest_key_prefers_a_sibling() -> None:
    known = ["trainer", "trainer.total_steps", "ckpt", "ckpt.steps"]
    assert closest_key("trainer.steps", known) == "trainer.total_steps"
    assert closest_key("total_steps", known) == "trainer.total_steps"
    assert closest_key("nothing_alike", known) is None


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["trainer.total_step=10"],
            "trainer.total_step is not a config key (did you mean trainer.total_steps?)",
        ),
        (
            ["train_type=nope"],
            "train_type=nope is not an option (choose from online_grpo, online_ppo)",
        ),
        (
            ["model=base_llama"],
            "model=base_llama is not an option (choose from hf, small, smollm2, tiny)",
        ),
        (
            ["trainer.total_steps=ten"],
            "trainer.total_steps=ten: Value 'ten' of type 'str' could not be converted to Integer",
        ),
        (
            ["train_type=online_ppo", "train_type.ppo_gama=1"],
            "train_type.ppo_gama is not a config key (did you mean train_type.ppo_gamma?)",
        ),
        (["trainer.total_steps=[1"], "no viable alternative at input '[1'"),
        (["+experiment=ppo_sweep"], "+experiment=ppo_sweep: drop the + (experiment=ppo_sweep)"),
        (["+debug=quick"], "+debug=quick: drop the + (debug=quick)"),
    ],
)
def test_check_overrides_gives_one_line(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        check_overrides(overrides)
    assert str(err.value) == message


def test_presets_need_no_plus_and_win_over_train_yaml() -> None:
    check_overrides(["experiment=ppo_sweep", "debug=quick", "hydra.run.dir=/tmp/x"])
    cfg = compose_config(["experiment=ppo_sweep", "debug=quick"], validate=False)
    assert cfg.train_type._target_ == "astrai.algorithms.ppo.PPOStrategy"  # the experiment
    assert cfg.trainer.total_steps == 2  # debug=quick, over train.yaml's 1200
    cfg = compose_config(["debug=quick", "trainer.total_steps=7"], validate=False)
    assert cfg.trainer.total_steps == 7  # the command line still wins
