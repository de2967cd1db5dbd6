"""A host-memory copy of a checkpoint's state, taken at save time so that a background write
(``training.background_save``) writes what the state was then, whatever training does next.

``host_snapshot`` deep-copies nested containers and puts every tensor in a new host buffer: on
the CPU a copy (``.cpu()`` there is the same tensor), on a GPU a copy into pinned host memory
(one transfer per storage, then one synchronisation). Tensors that share a storage (views,
tied weights) still share one in the copy, with their offsets and strides, so ``torch.save``
writes the same bytes for the copy as for the original on the CPU; on a GPU the files record
the tensors as CPU tensors, which is what ``io.load_torch`` maps them to anyway.

``HostBuffers`` keeps one snapshot's host memory for the next: copying into memory already
mapped is several times faster than into fresh memory, whose every page faults on first touch
(1.2 GB on 2 cores: 0.1 s instead of 0.47 s).
"""

from __future__ import annotations

import copy
from typing import Any, TypeVar

import torch
from torch import nn

T = TypeVar("T")


class HostBuffers:
    """Host memory for snapshots, handed out again once the last snapshot is no longer read
    (``reuse``). It holds at most one snapshot's buffers: those the last one did not take
    again are let go, so tensors whose sizes change do not pile up."""

    def __init__(self) -> None:
        self._free: dict[tuple[int, bool], list[torch.Tensor]] = {}
        self._taken: list[torch.Tensor] = []

    def take(self, nbytes: int, pinned: bool) -> torch.Tensor:
        """A ``uint8`` host buffer of ``nbytes`` (page-locked if ``pinned``)."""
        free = self._free.get((nbytes, pinned))
        if free:
            buffer = free.pop()
        else:  # host memory whatever the state's device: that is the point
            buffer = torch.empty(nbytes, dtype=torch.uint8, device="cpu", pin_memory=pinned)
        self._taken.append(buffer)
        return buffer

    def reuse(self) -> None:
        """The buffers taken since the last call free for the next snapshot; the caller no
        longer reads what they hold."""
        self._free = {}
        for buffer in self._taken:
            self._free.setdefault((buffer.numel(), buffer.is_pinned()), []).append(buffer)
        self._taken = []


def host_snapshot(state: T, buffers: HostBuffers | None = None) -> T:
    """``state`` deep-copied with every plain tensor in it copied to host memory (into
    ``buffers``' memory when given).

    Containers keep their types and attributes (a module ``state_dict``'s ``OrderedDict`` and
    its ``_metadata``); tensors keep dtype, shape, strides, ``requires_grad`` and shared
    storages. A tensor of another kind (a subclass, a sparse tensor) is deep-copied where it is.
    """
    buffers = buffers or HostBuffers()
    storages: dict[tuple[str, int], torch.Tensor] = {}
    copies: dict[int, Any] = {}
    for tensor in _plain_tensors(state):
        if id(tensor) not in copies:
            copies[id(tensor)] = _host_tensor(tensor, storages, buffers)
    if any(key[0] == "cuda" for key in storages):
        # the copies are asynchronous (pinned memory): done before training changes the source
        torch.cuda.synchronize()
    return copy.deepcopy(state, memo=copies)


def _plain_tensors(value: Any) -> list[torch.Tensor]:
    """The strided ``Tensor``s and ``Parameter``s found through dicts, lists and tuples."""
    if isinstance(value, torch.Tensor):
        plain = type(value) in (torch.Tensor, nn.Parameter) and value.layout == torch.strided
        return [value] if plain else []
    if isinstance(value, dict):
        return [t for item in value.values() for t in _plain_tensors(item)]
    if isinstance(value, list | tuple):
        return [t for item in value for t in _plain_tensors(item)]
    return []


def _host_tensor(
    tensor: torch.Tensor, storages: dict[tuple[str, int], torch.Tensor], buffers: HostBuffers
) -> Any:
    """``tensor`` on a host copy of its whole storage (one copy per storage, shared through
    ``storages``), at the same offset and strides."""
    storage = tensor.untyped_storage()
    key = (tensor.device.type, storage.data_ptr())
    host = storages.get(key) if storage.nbytes() > 0 else None
    if host is None:
        source = torch.empty(0, dtype=torch.uint8, device=tensor.device).set_(storage)
        pinned = tensor.device.type == "cuda"
        host = buffers.take(storage.nbytes(), pinned)
        host.copy_(source, non_blocking=pinned)
        storages[key] = host
    copied = torch.empty(0, dtype=tensor.dtype, device="cpu").set_(
        host.untyped_storage(), tensor.storage_offset(), tensor.size(), tensor.stride()
    )
    if isinstance(tensor, nn.Parameter):
        return nn.Parameter(copied, requires_grad=tensor.requires_grad)
    return copied.requires_grad_(tensor.requires_grad)
