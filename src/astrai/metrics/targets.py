"""Metric targets: ``trainer.stop_at`` ends a run once its metrics reach them.

A target maps a metric name to a bound: a number means "at least" (``eval/accuracy: 0.9``), a
string says which way (``">=0.9"``, ``"<=0.05"`` for a metric that falls, a loss say). A run
stops after the first step at which every target holds for its metric's latest logged value and
at least one of those metrics was logged at that step (so an evaluation's value, logged every
``trainer.eval_every`` steps, decides at the evaluation that reached it, and a resumed run
stops again only at a step that logs one of them). Lightning's ``EarlyStopping`` calls the
same idea ``stopping_threshold``; Hugging Face's ``EarlyStoppingCallback`` has none.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

STOP_AT_KEY = "trainer.stop_at"


@dataclass(frozen=True)
class MetricTarget:
    """``metric`` reaches ``bound``: ``value >= bound``, or ``value <= bound`` (``at_most``)."""

    metric: str
    bound: float
    at_most: bool = False

    def met(self, value: float) -> bool:
        return value <= self.bound if self.at_most else value >= self.bound

    def __str__(self) -> str:
        return f"{self.metric} {'<=' if self.at_most else '>='} {self.bound:g}"


def parse_targets(node: Mapping[str, object] | None, key: str = STOP_AT_KEY) -> list[MetricTarget]:
    """``{metric: bound}`` (a ``trainer.stop_at`` node) -> its targets, in the order given.

    Raises:
        ValueError: naming ``key.<metric>`` for a bound that is not a finite number or a
            string ``">=x"`` / ``"<=x"``, and ``key`` for a node that is not a mapping.
    """
    if node is None:
        return []
    if not isinstance(node, Mapping):
        raise ValueError(
            f"{key} must be a mapping of metric -> target, e.g. {key}={{eval/accuracy:0.9}} "
            f"(got {node!r})"
        )
    return [_parse_target(str(metric), bound, f"{key}.{metric}") for metric, bound in node.items()]


def _parse_target(metric: str, bound: object, where: str) -> MetricTarget:
    at_most = False
    value: object = bound
    if isinstance(bound, str):
        text = bound.strip()
        at_most = text.startswith("<=")
        value = text[2:] if text.startswith(("<=", ">=")) else text
    try:
        if isinstance(value, bool):  # true/false are not bounds, though float(True) is 1.0
            raise ValueError
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(
            f"{where} must be a number (reached at or above it) or a string '>=x' / '<=x' "
            f"(got {bound!r})"
        ) from None
    if not math.isfinite(number):
        raise ValueError(f"{where} must be finite (got {bound!r})")
    return MetricTarget(metric, number, at_most)


def targets_reached(
    targets: list[MetricTarget],
    step_metrics: Mapping[str, float],
    latest: Mapping[str, float],
) -> dict[str, float] | None:
    """The targets' metric values when every target holds (``{metric: value}``), else None.

    Args:
        step_metrics: what this step logged; at least one target's metric must be among them.
        latest: every metric's latest logged value (this step's included).
    """
    if not targets or not any(t.metric in step_metrics for t in targets):
        return None
    values = {t.metric: latest.get(t.metric) for t in targets}
    for target in targets:
        value = values[target.metric]
        if value is None or not math.isfinite(value) or not target.met(value):
            return None
    return {name: float(value) for name, value in values.items() if value is not None}
