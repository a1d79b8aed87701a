"""The copies of the torch pool: one batched op per state tensor, no per-call temporaries.

A batch of rows is copied one of two ways, decided on the host from the row
ids alone:

- the rows form a range (in any order): the live side is a ``narrow`` view,
  and the slot indices are permuted into row order - one op per tensor;
- the rows are scattered: they are gathered into (or scattered out of) a
  scratch buffer kept between calls and sized to the most rows copied so
  far - two ops per tensor, and nothing allocated once the buffer is big
  enough.

Index tensors are built from ``array.array`` through ``torch.frombuffer``
(no per-element Python work in torch), and off the CPU they travel from
pinned memory with ``non_blocking=True``: nothing here waits for the device.
"""

from __future__ import annotations

from array import array

import torch

__all__ = ["Copier"]


class Copier:
    """Copies rows between live state views and their snapshot storage views."""

    def __init__(
        self, pairs: tuple[tuple[torch.Tensor, torch.Tensor], ...], batch_dim: int
    ) -> None:
        self._pairs = pairs
        self._dim = batch_dim
        device = pairs[0][0].device
        self._device = device
        self._to_device = device.type != "cpu"
        # One flat buffer per state tensor, in its row-view dtype; grown, never shrunk.
        self._scratch: list[torch.Tensor] = [
            torch.empty(0, dtype=live.dtype, device=device) for live, _ in pairs
        ]

    def save(self, rows: list[int], flat: list[int]) -> None:
        """Copy live row ``rows[k]`` into storage row ``flat[k]``, for every state tensor."""
        dim = self._dim
        first, order = _as_range(rows, flat)
        if first is not None:
            (slots,) = self._indices(order)
            for live, storage in self._pairs:
                storage.index_copy_(dim, slots, live.narrow(dim, first, len(rows)))
            return
        row_index, slot_index = self._indices(rows, flat)
        for i, (live, storage) in enumerate(self._pairs):
            gathered = self._scratch_for(i, live, len(rows))
            torch.index_select(live, dim, row_index, out=gathered)
            storage.index_copy_(dim, slot_index, gathered)

    def restore(self, rows: list[int], flat: list[int]) -> None:
        """Copy storage row ``flat[k]`` into live row ``rows[k]``, for every state tensor."""
        dim = self._dim
        first, order = _as_range(rows, flat)
        if first is not None:  # gather straight into the live rows: one pass
            (slots,) = self._indices(order)
            for live, storage in self._pairs:
                torch.index_select(storage, dim, slots, out=live.narrow(dim, first, len(rows)))
            return
        row_index, slot_index = self._indices(rows, flat)
        for i, (live, storage) in enumerate(self._pairs):
            gathered = self._scratch_for(i, live, len(rows))
            torch.index_select(storage, dim, slot_index, out=gathered)
            live.index_copy_(dim, row_index, gathered)

    def _scratch_for(self, i: int, live: torch.Tensor, count: int) -> torch.Tensor:
        """A contiguous ``live``-shaped view with ``count`` rows, over the kept buffer."""
        shape = list(live.shape)
        shape[self._dim] = count
        numel = 1
        for size in shape:
            numel *= size
        buffer = self._scratch[i]
        if buffer.numel() < numel:
            buffer = self._scratch[i] = torch.empty(numel, dtype=live.dtype, device=self._device)
        return buffer[:numel].view(shape)

    def _indices(self, *columns: list[int]) -> list[torch.Tensor]:
        """The columns as int64 index tensors on the device: one host buffer, one transfer."""
        host = array("q", columns[0])
        for column in columns[1:]:
            host.extend(column)
        tensor = torch.frombuffer(host, dtype=torch.int64)
        if self._to_device:
            tensor = tensor.pin_memory().to(self._device, non_blocking=True)
        if len(columns) == 1:
            return [tensor]
        count = len(columns[0])
        return [tensor[k * count : (k + 1) * count] for k in range(len(columns))]


def _as_range(rows: list[int], flat: list[int]) -> tuple[int | None, list[int]]:
    """``(first, slots in row order)`` when ``rows`` are a range in any order, else ``(None, [])``.

    Rows are unique (the batch check refuses a row twice), so rows spanning
    exactly ``len(rows)`` values are a range. The slot list is reordered
    here, beside the test, so the view and the indices cannot disagree.
    """
    first = min(rows)
    count = len(rows)
    if max(rows) - first + 1 != count:
        return None, []
    if rows == list(range(first, first + count)):
        return first, flat
    order = [0] * count
    for row, slot in zip(rows, flat, strict=True):
        order[row - first] = slot
    return first, order
