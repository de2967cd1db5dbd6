"""The ranks of a multi-process run agree on whether, and why, to stop at a step: each rank's
own reason (a signal, the time budget, ``trainer.stop_at``) is reduced across ranks, so all
stop at the same step with the same reason (``training.stopping`` notices the reasons)."""

from __future__ import annotations

# in priority order; "stop_at": the run's metrics reached ``trainer.stop_at`` (training.loop)
STOP_REASONS = ("SIGTERM", "SIGINT", "max_duration", "stop_at")


def agreed_stop_reason(reason: str | None) -> str | None:
    """Every rank stops at the same step: if any rank was signalled (or ran out of time), all
    stop, with the first reason in ``STOP_REASONS`` order that any rank saw."""
    code = 0.0 if reason is None else float(len(STOP_REASONS) - STOP_REASONS.index(reason))
    from astrai.distributed import all_reduce_max  # torch: not needed to catch a signal early

    agreed = int(all_reduce_max(code))
    return None if agreed == 0 else STOP_REASONS[len(STOP_REASONS) - agreed]
