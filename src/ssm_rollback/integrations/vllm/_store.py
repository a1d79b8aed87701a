"""The worker side's shared slots: copies of a prefix's blocks in host memory.

A slot holds, for every layer, the blocks that cover a prefix's ``length``
tokens (attention KV) or the request's state block (the SSM conv and ssm
state, which vLLM keeps as raw bytes in the same pool), and the ticket of
the save that wrote it. A load copies only when the slot holds the ticket it
names: a slot evicted or re-published since the match is never loaded.
"""

from __future__ import annotations

import attrs
import torch

from ._ops import SlotCopy

__all__ = ["LayerGroup", "SlotStore"]


@attrs.frozen
class LayerGroup:
    """One KV cache group: its layers, whether it holds SSM state, its block size in tokens."""

    layers: tuple[str, ...]
    ssm: bool
    block_size: int


@attrs.define
class _Slot:
    ticket: int
    length: int
    data: dict[str, torch.Tensor]


def _block_dim(tensor: torch.Tensor, num_blocks: int) -> int:
    for dim in (0, 1):
        if tensor.dim() > dim and tensor.shape[dim] == num_blocks:
            return dim
    raise ValueError(f"no block dimension of size {num_blocks} in shape {tuple(tensor.shape)}")


class SlotStore:
    """Shared slots and the engine's KV caches they copy from and into."""

    def __init__(
        self, groups: tuple[LayerGroup, ...], caches: dict[str, torch.Tensor], num_blocks: int
    ) -> None:
        self.groups = groups
        self.caches = caches
        self._dims = {name: _block_dim(t, num_blocks) for name, t in caches.items()}
        self._slots: dict[int, _Slot] = {}
        self.copy_ssm = True

    def ticket(self, slot: int) -> int | None:
        """The ticket slot ``slot`` holds, or ``None`` when empty."""
        held = self._slots.get(slot)
        return None if held is None else held.ticket

    def forget(self, slot: int) -> None:
        """Empty ``slot`` (nothing loads from it until the next save)."""
        self._slots.pop(slot, None)

    def save(self, copy: SlotCopy) -> None:
        """Copy the request's blocks for ``copy.length`` tokens into ``copy.slot``."""
        data: dict[str, torch.Tensor] = {}
        for group, ids in zip(self.groups, copy.block_ids, strict=True):
            picked = self._picked(group, ids, copy.length)
            for name in group.layers:
                cache, dim = self.caches[name], self._dims[name]
                data[name] = cache.index_select(dim, picked.to(cache.device)).to("cpu")
        self._slots[copy.slot] = _Slot(copy.ticket, copy.length, data)

    def load(self, copy: SlotCopy) -> bool:
        """Copy ``copy.slot`` into the request's blocks; ``False`` (nothing copied) if stale."""
        held = self._slots.get(copy.slot)
        if held is None or held.ticket != copy.ticket or held.length != copy.length:
            return False
        for group, ids in zip(self.groups, copy.block_ids, strict=True):
            if group.ssm and not self.copy_ssm:
                continue
            picked = self._picked(group, ids, copy.length)
            for name in group.layers:
                cache, dim = self.caches[name], self._dims[name]
                source = held.data[name]
                if source.shape[dim] != len(picked):
                    return False
                cache.index_copy_(dim, picked.to(cache.device), source.to(cache.device))
        return True

    @staticmethod
    def _picked(group: LayerGroup, ids: tuple[int, ...], length: int) -> torch.Tensor:
        # SSM state: the request's running state block, its last; attention: the blocks
        # covering the prefix.
        chosen = list(ids[-1:]) if group.ssm else list(ids[: -(-length // group.block_size)])
        return torch.tensor(chosen, dtype=torch.long)
