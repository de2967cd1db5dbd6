"""What a ``_target_`` names, imported: the one way every plug point (``engine``, ``env``,
``reward``, ``train_type``) turns ``module.attribute`` into the object, with one-line errors
that name the config key.

A plug point is a class or function found by its import path, never by a name registered
somewhere: a new engine, environment, reward or algorithm is its module and its YAML.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

# what user code may raise while its module is imported, beside ``Exception``: a module that
# calls ``sys.exit()`` (or is interrupted) is a broken plug-in, said in one line
IMPORT_EXITS: tuple[type[BaseException], ...] = (SystemExit, KeyboardInterrupt, GeneratorExit)
IMPORT_FAILURES: tuple[type[BaseException], ...] = (Exception, *IMPORT_EXITS)


def import_target(
    target: object,
    key: str,
    kind: type | None = None,
    kind_text: str = "",
    error: type[Exception] = ValueError,
) -> Any:
    """The attribute ``target`` (``module.attribute``) names.

    Args:
        target: the import path, e.g. ``astrai.rollout.engines.engine.TorchEngine``.
        key: the config key that holds it (``engine._target_``), named by every error.
        kind: a class the attribute must be a subclass of (None: anything).
        kind_text: what ``kind`` is, in words, for its error (``an engine (...)``).
        error: the exception raised, with one line naming ``key`` (a ``ValueError`` subclass
            of the caller's layer, e.g. ``ConfigError``).
    """
    if not isinstance(target, str) or "." not in target.strip("."):
        raise error(f"{key} must name module.attribute (got {target!r})")
    module_name, _, name = target.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except IMPORT_FAILURES as err:  # a user's module may raise anything while it is imported
        raise error(
            f"{key} {target!r} cannot be imported: {_reason(err)}"
            f"{_search_path_hint(err, module_name)}"
        ) from None
    if not hasattr(module, name):
        raise error(f"{key} {target!r}: module {module_name!r} has no {name!r}")
    found = getattr(module, name)
    if kind is not None and not (isinstance(found, type) and issubclass(found, kind)):
        raise error(f"{key} {target!r} is not {kind_text or kind.__qualname__}")
    return found


def _reason(err: BaseException) -> str:
    """An import failure in words: an ``ImportError``'s own line (``No module named 'x'``),
    else the exception's type and first line (``SystemExit: 1``)."""
    text = str(err).splitlines()[0] if str(err) else ""
    if isinstance(err, ImportError) and text:
        return text
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def _search_path_hint(err: BaseException, module_name: str) -> str:
    """For the user's own module not found (not a module it imports): where Python looked and
    how to add its folder; empty otherwise."""
    missing = getattr(err, "name", None)
    if not isinstance(err, ModuleNotFoundError) or not missing:
        return ""
    if not (module_name == missing or module_name.startswith(f"{missing}.")):
        return ""  # found, but it imports something that is not installed
    file = f"{missing.replace('.', '/')}.py"
    if Path(file).is_file() or Path(missing.replace(".", "/"), "__init__.py").is_file():
        return f" ({file} is in the working directory, which is not on sys.path: PYTHONPATH=.)"
    return (
        f" (not on Python's search path: put the folder holding {file} on PYTHONPATH, e.g. "
        "PYTHONPATH=path/to/that/folder python train.py ...)"
    )
