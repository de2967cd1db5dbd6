"""Checks of the optional loggers (``logger.wandb``, ``logger.mlflow``), before anything is
built: a selected one whose package is not installed is one line naming the extra to install.
Packages are looked up, never imported: importing them costs seconds and starts threads."""

from __future__ import annotations

import importlib.util

from omegaconf import DictConfig

from astrai.config.errors import require

WANDB_MODES = ("online", "offline", "disabled")
# what each optional logger imports, and the extra of pyproject.toml that installs it; MLflow's
# default store (a SQLite file) needs SQLAlchemy and Alembic, which the extra adds
LOGGER_PACKAGES: dict[str, tuple[str, ...]] = {
    "wandb": ("wandb",),
    "mlflow": ("mlflow", "sqlalchemy", "alembic"),
}


def is_installed(package: str) -> bool:
    """Whether ``package`` can be imported here (``find_spec``: nothing is imported)."""
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):  # a broken or half-removed install
        return False


def selected_loggers(logger: DictConfig) -> list[str]:
    """The optional loggers the config selects (``logger.<name>`` not null), in a fixed order."""
    return [name for name in LOGGER_PACKAGES if logger.get(name) is not None]


def unselected_logger_message(overrides: list[str]) -> str | None:
    """``logger.wandb.mode=offline`` without ``wandb`` among the loggers: ``logger.wandb`` is
    null, and OmegaConf cannot set a key under it (an ``AssertionError`` of its own). The
    message for the first such override; None when there is none."""
    for override in overrides:
        key = override.partition("=")[0].lstrip("+~")
        for name in LOGGER_PACKAGES:
            if key.startswith(f"logger.{name}."):
                return (
                    f"{key} is a key of logger={name}, which is not selected: add it to the "
                    f"loggers, e.g. 'logger=[tensorboard,{name}]'"
                )
    return None


def validate_logger_backends(logger: DictConfig) -> None:
    """Each selected optional logger has its packages installed; ``logger.wandb.mode`` is one
    W&B knows."""
    for name in selected_loggers(logger):
        missing = [p for p in LOGGER_PACKAGES[name] if not is_installed(p)]
        require(
            not missing,
            f"logger={name} needs the {' and '.join(missing)} package"
            f"{'s' if len(missing) > 1 else ''}: pip install 'astrai[{name}]'",
        )
    wandb = logger.get("wandb")
    if wandb is not None:
        require(
            wandb.mode is None or wandb.mode in WANDB_MODES,
            f"logger.wandb.mode must be one of {', '.join(WANDB_MODES)} or null "
            f"(got {wandb.mode!r})",
        )
