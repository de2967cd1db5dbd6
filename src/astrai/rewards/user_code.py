"""What a user's reward code may throw, and how astrai names it.

User code is user code: besides ``Exception`` it may call ``sys.exit()``, raise
``KeyboardInterrupt`` or ``GeneratorExit``. None of those may end a run silently (``sys.exit()``
would exit 0 with no checkpoint, no summary and no message), so the reward layer catches them
too: in the reward worker (``astrai.rewards.worker``), where config-built terms run, and in the
calling thread for inline terms. ``python train.py`` turns a real Ctrl-C into a stop request
(``catch_stop_signals``), never into ``KeyboardInterrupt`` (and a worker ignores SIGINT), so
one that comes out of a reward is the reward's own. astrai's own ``StopInterrupt`` (a stop
signal or the time budget abandoning the work, ``astrai.training.stopping``) and
``RewardCallAbandoned`` are ``BaseException``s that are none of these: they pass through.
"""

from __future__ import annotations

# what a reward may throw besides ``Exception`` (``StopInterrupt`` is not among them)
USER_EXITS: tuple[type[BaseException], ...] = (SystemExit, KeyboardInterrupt, GeneratorExit)
USER_ERRORS: tuple[type[BaseException], ...] = (Exception, *USER_EXITS)


def describe_failure(err: BaseException) -> str:
    """What a reward did, for a ``RewardError`` line: ``called sys.exit(3)``, ``raised
    KeyboardInterrupt``, ``failed`` (an ordinary exception, whose message follows)."""
    if isinstance(err, SystemExit):
        return f"called sys.exit({'' if err.code is None else repr(err.code)})"
    if isinstance(err, USER_EXITS):
        return f"raised {type(err).__name__}"
    return "failed"
