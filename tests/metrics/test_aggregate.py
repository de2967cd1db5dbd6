"""MetricMeans: weighted running means of per-minibatch scalars, by hand."""

from __future__ import annotations

import pytest
import torch

from astrai.metrics.aggregate import MetricMeans


def test_weighted_means_by_hand() -> None:
    means = MetricMeans()
    means.update({"loss": torch.tensor(2.0), "acc": 0.5}, weight=1.0)
    means.update({"loss": torch.tensor(4.0), "acc": 1.0}, weight=3.0)
    # loss: (2*1 + 4*3) / 4 = 3.5; acc: (0.5*1 + 1*3) / 4 = 0.875
    assert means.compute() == {"loss": 3.5, "acc": 0.875}
    assert MetricMeans().compute() == {}


def test_a_nan_is_left_out_with_a_warning() -> None:
    means = MetricMeans()
    means.update({"kl": 1.0}, weight=2.0)
    means.update({"kl": float("nan")}, weight=5.0)  # no check here: that would wait for a GPU
    means.update({"kl": 4.0}, weight=1.0)
    with pytest.warns(UserWarning, match="kl: a NaN value was left out of its mean"):
        assert means.compute() == {"kl": 2.0}  # (1*2 + 4*1) / 3


def test_sums_stay_on_the_metric_device_until_compute() -> None:
    means = MetricMeans()
    means.update({"loss": torch.tensor(2.0, device="meta")})  # no data: any read would fail
    assert means._sums[("loss",)].device.type == "meta"


def test_updates_with_other_names_are_summed_per_name() -> None:
    means = MetricMeans()
    means.update({"loss": 1.0, "acc": 0.0})
    means.update({"loss": 3.0})  # another set of names: its own sums, merged by name
    means.update({"acc": 1.0, "loss": 5.0})  # another order: another set too
    # loss: (1 + 3 + 5) / 3 = 3; acc: (0 + 1) / 2 = 0.5
    assert means.compute() == {"loss": 3.0, "acc": 0.5}
