"""The copies of the torch pool: one batched op per state tensor, no per-call temporaries.

Every copy moves rows ``src[k]`` of one set of tensors (live state, snapshot
storage or intermediate buffers, each viewed as ``[..., rows, row]``) into
rows ``dst[k]`` of another, decided on the host from the row ids alone:

- the destination rows form a range (in any order): one ``index_select``
  straight into a ``narrow`` view of them;
- else the source rows form a range: one ``index_copy_`` from a ``narrow``
  view of them;
- else the rows are gathered into a scratch buffer kept between calls and
  sized to the most rows copied so far, then scattered: two ops per tensor,
  and nothing allocated once the buffer is big enough.

Index tensors are built from ``array.array`` through ``torch.frombuffer``
(no per-element Python work in torch), and off the CPU they travel from
pinned memory with ``non_blocking=True``: nothing here waits for the device.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import Final

import torch

__all__ = ["Copier", "row_views"]


class Copier:
    """Moves rows between sets of same-shaped row views, one batched op (or two) per tensor."""

    def __init__(self, row_shapes: Sequence[torch.Tensor], batch_dim: int) -> None:
        self._dim = batch_dim
        device = row_shapes[0].device
        self._device = device
        self._to_device = device.type != "cpu"
        # One flat buffer per state tensor, in its row-view dtype; grown, never shrunk.
        self._scratch: list[torch.Tensor] = [
            torch.empty(0, dtype=t.dtype, device=device) for t in row_shapes
        ]

    def move(
        self,
        sources: Sequence[torch.Tensor],
        targets: Sequence[torch.Tensor],
        src: list[int],
        dst: list[int],
    ) -> None:
        """For every tensor pair, copy row ``src[k]`` of the source into row ``dst[k]``."""
        dim, count = self._dim, len(src)
        first, order = _as_range(dst, src)
        if first is not None:
            (index,) = self._indices(order)
            for source, target in zip(sources, targets, strict=True):
                torch.index_select(source, dim, index, out=target.narrow(dim, first, count))
            return
        first, order = _as_range(src, dst)
        if first is not None:
            (index,) = self._indices(order)
            for source, target in zip(sources, targets, strict=True):
                target.index_copy_(dim, index, source.narrow(dim, first, count))
            return
        src_index, dst_index = self._indices(src, dst)
        for i, (source, target) in enumerate(zip(sources, targets, strict=True)):
            gathered = self._scratch_for(i, source, count)
            torch.index_select(source, dim, src_index, out=gathered)
            target.index_copy_(dim, dst_index, gathered)

    def _scratch_for(self, i: int, like: torch.Tensor, count: int) -> torch.Tensor:
        """A contiguous ``like``-shaped view with ``count`` rows, over the kept buffer."""
        shape = list(like.shape)
        shape[self._dim] = count
        numel = 1
        for size in shape:
            numel *= size
        buffer = self._scratch[i]
        if buffer.numel() < numel:
            buffer = self._scratch[i] = torch.empty(numel, dtype=like.dtype, device=self._device)
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


def _as_range(rows: list[int], other: list[int]) -> tuple[int | None, list[int]]:
    """``(first, other in row order)`` when ``rows`` are a range in any order, else ``(None, [])``.

    Rows are unique (the batch checks refuse a row twice), so rows spanning
    exactly ``len(rows)`` values are a range. ``other`` is reordered here,
    beside the test, so the view and the indices cannot disagree.
    """
    first = min(rows)
    count = len(rows)
    if max(rows) - first + 1 != count:
        return None, []
    if rows == list(range(first, first + count)):
        return first, other
    order = [0] * count
    for row, value in zip(rows, other, strict=True):
        order[row - first] = value
    return first, order


_ROW_DTYPES: Final = (torch.int64, torch.int32, torch.int16, torch.uint8)


def row_views(tensors: Sequence[torch.Tensor], batch_dim: int) -> list[torch.Tensor]:
    """The tensors as ``[*lead, rows, row]`` of one wide integer dtype, if they all allow it.

    The copies then move a few wide integers per row instead of many small
    floats: bitwise the same. Falls back to the tensors themselves when one
    cannot be flattened into a view (a strided live tensor, say).
    """
    lead = batch_dim + 1
    try:
        rows = [t.view(*t.shape[:lead], -1) for t in tensors]
    except RuntimeError:
        return list(tensors)
    row_bytes = rows[0].shape[-1] * tensors[0].element_size()
    for dtype in _ROW_DTYPES:
        width = torch.empty((), dtype=dtype).element_size()
        if row_bytes == 0 or row_bytes % width:
            continue
        try:
            return [r.view(dtype) for r in rows]
        except RuntimeError:
            continue
    return rows
