"""``host_snapshot``: a copy of a checkpoint's state that training cannot change, which
``torch.save`` writes as it writes the original."""

from __future__ import annotations

import io
from collections import OrderedDict

import torch
from torch import nn

from astrai.checkpoints.snapshot import HostBuffers, host_snapshot


def _saved(state: object) -> bytes:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.getvalue()


def _state() -> dict:
    """A module's state dict (an ``OrderedDict`` with ``_metadata``), an AdamW state after one
    step (``step`` tensors, moments), views of one storage, an empty tensor, plain values."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.randn(5, 3)).sum().backward()
    optimizer.step()
    base = torch.arange(12.0)
    return {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "views": [base, base[2:5], base.view(3, 4).t()],
        "empty": [torch.empty(0), torch.empty(0, dtype=torch.int64)],
        "plain": (3, 0.5, "x", None, [True]),
    }


def test_torch_save_writes_the_same_bytes_for_the_snapshot() -> None:
    state = _state()
    snapshot = host_snapshot(state)
    assert _saved(snapshot) == _saved(state)
    assert type(snapshot["model"]) is OrderedDict
    assert snapshot["model"]._metadata == state["model"]._metadata  # type: ignore[attr-defined]


def test_changing_the_state_in_place_leaves_the_snapshot() -> None:
    state = _state()
    expected = _saved(state)
    snapshot = host_snapshot(state)
    for tensor in [*state["model"].values(), state["views"][0]]:
        tensor.add_(1)
    for moments in state["optimizer"]["state"].values():
        for tensor in moments.values():
            tensor.mul_(3).add_(1)
    state["optimizer"]["param_groups"][0]["lr"] = 9.0
    state["plain"][4].append(False)
    assert _saved(state) != expected
    assert _saved(snapshot) == expected  # the values of the snapshot's moment


def test_views_share_one_copied_storage_at_their_offsets() -> None:
    state = _state()
    base, part, transposed = host_snapshot(state)["views"]
    assert part.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()
    assert transposed.untyped_storage().data_ptr() == base.untyped_storage().data_ptr()
    assert base.untyped_storage().data_ptr() != state["views"][0].untyped_storage().data_ptr()
    assert (part.storage_offset(), part.tolist()) == (2, [2.0, 3.0, 4.0])
    assert transposed.stride() == (1, 4) and torch.equal(transposed, state["views"][2])


def test_parameters_and_gradient_flags_are_kept() -> None:
    weight = nn.Parameter(torch.ones(2))
    leaf = torch.zeros(3, requires_grad=True)
    snapshot = host_snapshot({"weight": weight, "leaf": leaf, "ints": torch.arange(3)})
    assert type(snapshot["weight"]) is nn.Parameter and snapshot["weight"].requires_grad
    assert snapshot["leaf"].requires_grad and not snapshot["ints"].requires_grad
    with torch.no_grad():
        weight.add_(1)
    assert snapshot["weight"].tolist() == [1.0, 1.0]


def test_host_buffers_hand_the_last_snapshots_memory_to_the_next() -> None:
    buffers = HostBuffers()
    state = {"a": torch.ones(4), "b": torch.zeros(3, dtype=torch.int64)}  # 16, 24 bytes
    first = host_snapshot(state, buffers)
    pointers = {k: t.untyped_storage().data_ptr() for k, t in first.items()}
    buffers.reuse()  # the first snapshot is no longer read
    state["a"].add_(1)
    second = host_snapshot(state, buffers)
    assert {k: t.untyped_storage().data_ptr() for k, t in second.items()} == pointers
    assert second["a"].tolist() == [2.0] * 4 and second["b"].tolist() == [0, 0, 0]
    # a size the next snapshot does not take again is let go, not kept for ever
    buffers.reuse()
    host_snapshot({"c": torch.ones(3)}, buffers)
    buffers.reuse()
    third = host_snapshot(state, buffers)
    assert third["a"].untyped_storage().data_ptr() not in pointers.values()
