"""Checks of the loggers before anything is built: a mistyped option of ``logger=[...]`` is one
line listing the loggers; a selected optional logger (``logger.wandb``, ``logger.mlflow``) whose
package is not installed is one line naming the extra to install; and what its library would
refuse only once it starts is refused here, naming the key: a W&B mode or tag W&B refuses, an
MLflow tracking URI of a scheme MLflow has no store for, a SQLite store that cannot be written
(MLflow would retry it for a minute and a half, printing a warning at each try).
Packages are looked up, never imported: importing them costs seconds and starts threads."""

from __future__ import annotations

import difflib
import importlib.metadata
import importlib.util
import os
import urllib.parse
from pathlib import Path

from omegaconf import DictConfig

from astrai.config.errors import require
from astrai.paths import CONFIG_DIR

WANDB_MODES = ("online", "offline", "disabled")
WANDB_MAX_TAG_LEN = 64  # W&B refuses a tag that is empty or longer (wandb.Settings.run_tags)
# what each optional logger imports, and the extra of pyproject.toml that installs it; MLflow's
# default store (a SQLite file) needs SQLAlchemy and Alembic, which the extra adds
LOGGER_PACKAGES: dict[str, tuple[str, ...]] = {
    "wandb": ("wandb",),
    "mlflow": ("mlflow", "sqlalchemy", "alembic"),
}
# the tracking URI schemes MLflow 3 has a store for (mlflow.tracking._tracking_service.utils,
# _register_tracking_stores; a test compares them with the installed MLflow's registry):
# servers, and the SQLAlchemy databases as ``<database>[+<driver>]://``. Its Unity Catalog
# schemes only raise "not supported"; its file store (``file:`` or a bare path) refuses to start
# unless MLFLOW_ALLOW_FILE_STORE is set (``FILE_STORE_SCHEMES``).
MLFLOW_SERVER_SCHEMES = ("http", "https", "databricks")
MLFLOW_DATABASES = ("sqlite", "postgresql", "mysql", "mssql")
MLFLOW_FILE_STORE_SCHEMES = ("", "file")
MLFLOW_STORE_PLUGINS = "mlflow.tracking_store"  # entry points of packages adding schemes
SQLITE_HEADER = b"SQLite format 3\x00"  # the first bytes of every SQLite database file


def is_installed(package: str) -> bool:
    """Whether ``package`` can be imported here (``find_spec``: nothing is imported)."""
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):  # a broken or half-removed install
        return False


def selected_loggers(logger: DictConfig) -> list[str]:
    """The optional loggers the config selects (``logger.<name>`` not null), in a fixed order."""
    return [name for name in LOGGER_PACKAGES if logger.get(name) is not None]


def logger_options() -> list[str]:
    """The options of the ``logger`` group: the YAML files of ``conf/logger/``, sorted."""
    return sorted(path.stem for path in (Path(CONFIG_DIR) / "logger").glob("*.yaml"))


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


def _chosen_loggers(override: str) -> list[str]:
    """The option names a ``logger=...`` override chooses (``[a,b]``, ``a``, a sweep's
    ``a,[a,b]``), as Hydra's override grammar reads them; [] when it does not parse."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        (parsed,) = OverridesParser.create().parse_overrides([override])
    except HydraException:
        return []  # Hydra's own message says what is wrong with its syntax
    swept = list(parsed.sweep_string_iterator()) if parsed.is_sweep_override() else []
    values: list[object] = [*swept] if swept else [parsed.value()]
    names: list[str] = []
    for value in values:
        if value is None:  # logger=null: Hydra's to judge
            continue
        if isinstance(value, str) and value.startswith("["):  # a list, as the sweep spells it
            names += [part.strip() for part in value.strip("[]").split(",") if part.strip()]
        else:
            names += [str(v) for v in (value if isinstance(value, list) else [value])]
    return names


def unknown_logger_message(overrides: list[str]) -> str | None:
    """``logger=[tensorboard,wandbb]``: one line naming the option that is not a logger, the
    closest one, and every logger; None when every ``logger=`` override chooses known ones.
    (Hydra's own error for an option in a list does not list the options.)"""
    options = logger_options()
    for override in overrides:
        if override.partition("=")[0].lstrip("+") != "logger":
            continue
        for name in _chosen_loggers(override):
            if name in options:
                continue
            close = difflib.get_close_matches(name, options, n=1, cutoff=0.6)
            hint = f" (did you mean {close[0]}?)" if close else ""
            return (
                f"{override}: {name!r} is not a logger{hint}; the loggers are "
                f"{', '.join(options)}, as one or a list: 'logger=[tensorboard,wandb]'"
            )
    return None


def validate_logger_backends(logger: DictConfig) -> None:
    """Each selected optional logger can start: its packages are installed, and its settings
    are ones its library accepts (``validate_wandb_settings``, ``validate_mlflow_settings``)."""
    for name in selected_loggers(logger):
        missing = [p for p in LOGGER_PACKAGES[name] if not is_installed(p)]
        require(
            not missing,
            f"logger={name} needs the {' and '.join(missing)} package"
            f"{'s' if len(missing) > 1 else ''}: pip install 'astrai[{name}]'",
        )
    if logger.get("wandb") is not None:
        validate_wandb_settings(logger.wandb)
    if logger.get("mlflow") is not None:
        validate_mlflow_settings(logger.mlflow)


def validate_wandb_settings(wandb: DictConfig) -> None:
    """``logger.wandb.mode`` is one W&B knows; each of ``logger.wandb.tags`` is 1 to 64
    characters (W&B's rule: it refuses the run otherwise, with a pydantic traceback)."""
    require(
        wandb.mode is None or wandb.mode in WANDB_MODES,
        f"logger.wandb.mode must be one of {', '.join(WANDB_MODES)} or null (got {wandb.mode!r})",
    )
    for index, tag in enumerate(wandb.tags or []):
        text = str(tag)
        require(
            0 < len(text) <= WANDB_MAX_TAG_LEN,
            f"logger.wandb.tags[{index}] must be 1 to {WANDB_MAX_TAG_LEN} characters, as W&B "
            f"requires (got {len(text)}: {text[:20] + '...' if len(text) > 20 else text!r})",
        )


def mlflow_scheme(uri: str) -> str:
    """The scheme MLflow picks its store by: ``postgresql+psycopg2://`` -> ``postgresql``;
    a path (no scheme) -> ``""``."""
    scheme = urllib.parse.urlparse(uri).scheme.lower()
    database = scheme.partition("+")[0]
    return database if database in MLFLOW_DATABASES else scheme


def mlflow_store_schemes() -> list[str]:
    """The schemes an MLflow tracking URI may have here: MLflow's own, and those of installed
    store plugins (entry points of ``mlflow.tracking_store``, looked up, not loaded)."""
    plugins = [e.name for e in importlib.metadata.entry_points(group=MLFLOW_STORE_PLUGINS)]
    return [*MLFLOW_SERVER_SCHEMES, *MLFLOW_DATABASES, *sorted(set(plugins))]


def file_store_allowed() -> bool:
    """MLflow 3 opens a file store only with ``MLFLOW_ALLOW_FILE_STORE`` true (its own rule)."""
    return os.environ.get("MLFLOW_ALLOW_FILE_STORE", "").strip().lower() in ("true", "1")


def validate_mlflow_settings(mlflow: DictConfig) -> None:
    """``logger.mlflow.tracking_uri`` (null: the run dir's SQLite store) names a store MLflow
    has: a known scheme, a file store only where MLflow allows one, and a SQLite file that can
    be created or written (``sqlite_store_problem``)."""
    uri = mlflow.tracking_uri
    if uri is None:
        return
    key = "logger.mlflow.tracking_uri"
    text = str(uri)
    scheme = mlflow_scheme(text)
    if scheme in MLFLOW_FILE_STORE_SCHEMES:
        require(
            file_store_allowed(),
            f"{key}={text}: MLflow 3 refuses a file store (set MLFLOW_ALLOW_FILE_STORE=true to "
            f"use one); use a database, e.g. sqlite:///{Path(text.removeprefix('file:')).name}"
            ".db, or a server (http://...)",
        )
        return
    schemes = mlflow_store_schemes()
    require(
        scheme in schemes,
        f"{key}={text}: MLflow has no store for the scheme {scheme!r} (it takes "
        f"{', '.join(s + '://' for s in schemes)}, e.g. sqlite:///<path>.db or http://<host>:5000)",
    )
    if scheme == "sqlite":
        problem = sqlite_store_problem(text)
        require(problem is None, f"{key}={text}: {problem}")


def sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite://`` URI as SQLAlchemy reads it (``sqlite:///rel.db``
    relative to the working directory, ``sqlite:////abs.db`` absolute); None for an in-memory
    database (``sqlite://``, ``sqlite:///:memory:``)."""
    path = uri.partition("://")[2].partition("?")[0]
    path = path[1:] if path.startswith("/") else path  # the separator after the host part
    if path in ("", ":memory:"):
        return None
    return Path(path)


def sqlite_store_problem(uri: str) -> str | None:
    """Why MLflow could not open the SQLite store ``uri`` (its folder cannot be made or
    written, the file is not a writable database), in words; None when it can. MLflow makes
    the missing folders itself, so the nearest existing one must be a writable folder."""
    path = sqlite_path(uri)
    if path is None:
        return None
    if path.exists():
        if not path.is_file():
            return f"{path} is not a file"
        if not os.access(path, os.R_OK | os.W_OK):
            return f"{path} cannot be written"
        with path.open("rb") as file:
            head = file.read(len(SQLITE_HEADER))
        if head and head != SQLITE_HEADER:
            return f"{path} is not a SQLite database"
        return None
    folder = path.absolute().parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        return f"its folder cannot be made: {folder} is not a folder"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"its folder {folder} cannot be written"
    return None
