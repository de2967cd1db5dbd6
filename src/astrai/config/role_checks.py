"""The models a strategy requires (``Strategy.requires``) against the ones the config gives,
and the teacher's tokenizer against the policy's: one line naming the key to set.

A role is given by its own config: ``reference`` always (the frozen initial policy),
``critic`` by ``critic=value_model``, ``teacher`` by ``teacher.path`` (a Hugging Face model
directory, an astrai checkpoint or a run dir: ``training.roles``). A role the strategy does not
require must not be configured either (a critic or teacher that nothing reads is a mistake,
said at once rather than trained or loaded for nothing).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig

from astrai.checkpoints.layout import CheckpointError
from astrai.checkpoints.policy import read_tokenizer_and_config
from astrai.config.errors import ConfigError, require
from astrai.config.train_type_checks import strategy_class_of
from astrai.models.llama import LlamaConfig
from astrai.models.tokenizer import Tokenizer


@dataclass(frozen=True)
class RoleSource:
    """How a run's config gives a role: ``given`` (whether it does), ``setting`` (what the
    config says now), ``use`` / ``unset`` (the fix when it is missing / not needed)."""

    given: Callable[[DictConfig], bool]
    setting: Callable[[DictConfig], str]
    use: str
    unset: str


ROLES: dict[str, RoleSource | None] = {
    "reference": None,  # always built: the KL anchor, saved with every run's checkpoints
    "critic": RoleSource(
        given=lambda cfg: cfg.critic.name != "none",
        setting=lambda cfg: f"critic={cfg.critic.name}",
        use="use critic=value_model",
        unset="use critic=none",
    ),
    "teacher": RoleSource(
        given=lambda cfg: bool(teacher_sources(cfg)),
        setting=lambda cfg: _teacher_setting(cfg),
        use="set teacher.path to a Hugging Face model directory or an astrai checkpoint",
        unset="leave teacher.path null, or distill from it with distill=opd",
    ),
}


def teacher_path(cfg: DictConfig) -> str | None:
    """``teacher.path`` (None where unset, or in a config saved before the key existed)."""
    teacher = cfg.get("teacher")
    return None if teacher is None else teacher.get("path")


# the one teacher of ``teacher.path``: its name in the fingerprint and the metrics
SINGLE_TEACHER = "teacher"


def teacher_sources(cfg: DictConfig) -> dict[str, str]:
    """Name -> path of the run's teachers: ``teacher.paths``, else ``{"teacher":
    teacher.path}``, else none."""
    node = cfg.get("teacher")
    if node is None:
        return {}
    paths = node.get("paths")
    if paths is not None:
        return {str(name): str(path) for name, path in paths.items()}
    path = node.get("path")
    return {} if path is None else {SINGLE_TEACHER: str(path)}


def _teacher_setting(cfg: DictConfig) -> str:
    teacher = cfg.get("teacher")
    if teacher is not None and teacher.get("paths") is not None:
        return f"teacher.paths={dict(teacher.paths)}"
    return f"teacher.path={teacher_path(cfg) or 'null'}"


def distilling(cfg: DictConfig) -> bool:
    """``distill=opd`` (or another distillation than ``none``)."""
    node = cfg.get("distill")
    return node is not None and node.get("name") != "none"


def required_roles(cfg: DictConfig) -> tuple[str, ...]:
    """The roles the run builds models for: ``train_type``'s ``Strategy.requires``, and the
    teacher under ``distill=opd``."""
    requires = strategy_class_of(cfg.train_type).requires
    if distilling(cfg) and "teacher" not in requires:
        return (*requires, "teacher")
    return requires


def check_roles(cfg: DictConfig) -> None:
    """Every role ``train_type`` requires is configured, and no other: e.g.
    ``train_type=online_ppo needs a critic: use critic=value_model (got critic=none)``."""
    strategy = strategy_class_of(cfg.train_type)
    requires = required_roles(cfg)
    who = f"distill={cfg.distill.name}" if distilling(cfg) else f"train_type={strategy.name}"
    unknown = [role for role in strategy.requires if role not in ROLES]
    require(
        not unknown,
        f"train_type={strategy.name} requires a model astrai does not build: "
        f"{unknown[0] if unknown else ''} (the roles: {', '.join(ROLES)})",
    )
    for role, source in ROLES.items():
        if source is None:
            continue
        needed, given = role in requires, source.given(cfg)
        needer = f"train_type={strategy.name}" if role in strategy.requires else who
        require(
            given or not needed,
            f"{needer} needs a {role}: {source.use} (got {source.setting(cfg)})",
        )
        require(
            needed or not given,
            f"train_type={strategy.name} uses no {role}: {source.unset} "
            f"(got {source.setting(cfg)})",
        )


def validate_teacher(cfg: DictConfig, tokenizer: Tokenizer, model: LlamaConfig) -> None:
    """Each teacher path (``teacher.path``, ``teacher.paths``): a model whose tokenizer is the
    policy's (``tokenizer``) and whose vocabulary its logits cover (``model``); read without
    its weights."""
    teacher = cfg.get("teacher")
    several = None if teacher is None else teacher.get("paths")
    if several is not None:
        require(
            teacher_path(cfg) is None,
            "teacher.path and teacher.paths are both set: one teacher (path) or several (paths)",
        )
    for name, path in teacher_sources(cfg).items():
        key = "teacher.path" if several is None else f"teacher.paths.{name}"
        try:
            teacher_tokenizer, config = read_tokenizer_and_config(Path(path))
        except (OSError, ValueError, CheckpointError) as err:
            raise ConfigError(f"{key}: {' '.join(str(err).split())}") from None
        check_same_vocabulary(teacher_tokenizer, config, tokenizer, model, key)


def check_same_vocabulary(
    teacher: Tokenizer,
    teacher_config: LlamaConfig,
    policy: Tokenizer,
    policy_config: LlamaConfig,
    key: str = "teacher.path",
) -> None:
    """The teacher scores the policy's token ids: the same ids must mean the same text (size,
    stop tokens, each id's text) and its logits must cover the policy's vocabulary."""
    difference = vocabulary_difference(teacher, policy)
    if difference is None and teacher_config.vocab_size != policy_config.vocab_size:
        difference = (
            f"its vocab_size is {teacher_config.vocab_size}, the policy's "
            f"{policy_config.vocab_size}"
        )
    require(
        difference is None,
        f"{key}: the teacher's tokenizer is not the policy's ({difference}); a teacher "
        "must share the policy's vocabulary",
    )


def vocabulary_difference(a: Tokenizer, b: Tokenizer) -> str | None:
    """How tokenizer ``a`` differs from ``b``, in words: its size, its stop ids, or the text of
    an id (``token_text``: the vocabulary entry, so astrai's character tokenizer and its
    Hugging Face export read the same); None when they agree."""
    if a.vocab_size != b.vocab_size:
        return f"{a.vocab_size} ids, the policy's {b.vocab_size}"
    if tuple(a.stop_ids) != tuple(b.stop_ids):
        return f"stop ids {tuple(a.stop_ids)}, the policy's {tuple(b.stop_ids)}"
    for token_id in range(a.vocab_size):
        text_a, text_b = _token_text(a, token_id), _token_text(b, token_id)
        if text_a != text_b:
            return f"id {token_id} is {text_a!r}, the policy's {text_b!r}"
    return None


def _token_text(tokenizer: Tokenizer, token_id: int) -> str | None:
    """The vocabulary entry of ``token_id`` (a tokenizer without ``token_text``: its decode)."""
    token_text = getattr(tokenizer, "token_text", None)
    return token_text(token_id) if token_text is not None else tokenizer.decode([token_id])
