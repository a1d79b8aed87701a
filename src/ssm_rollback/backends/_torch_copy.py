"""The copies of the torch pool: one batched op per state tensor, one pass over the bytes.

Every copy moves rows ``src[k]`` of one ``RowSet`` (live state, snapshot
storage or intermediate buffers, each tensor viewed as ``[..., rows, row]``)
into rows ``dst[k]`` of another, decided on the host from the row ids alone:

- the destination rows form a range (in any order): one ``index_select``
  straight into a ``narrow`` view of them, on every device;
- else, on the CPU with one torch thread, for each tensor whose rows hold
  ``WIDE_ROW_BYTES`` or more: one ``torch._foreach_copy_`` over the rows'
  own views, kept between calls and taken in source-row order. Each byte
  is read once and written once. A gather into a scratch buffer and a
  scatter out of it move every byte twice: twice the memory traffic once
  the scratch outgrows the caches, which held such copies to about half
  the speed of a contiguous copy;
- else (narrower rows, more threads, or off the CPU): when the source rows
  form a range, one ``index_copy_`` from a ``narrow`` view of them;
  otherwise the rows are gathered into a scratch buffer kept between calls
  and scattered from it. Each of these ops splits its rows over the threads
  in one parallel region, where every row's own copy would open a region of
  its own: on a busy machine each such region waits for a time slice (two
  threads on two loaded cores made a random half of 1,024 rows up to 20
  times slower). On a GPU they stay single kernels, where ``_foreach_copy_``
  over the row views of a stacked ``[L, B, ...]`` tensor (not dense) would
  fall back to one copy kernel per row.

Index tensors are built from ``array.array`` through ``torch.frombuffer``
(no per-element Python work in torch), and off the CPU they travel from
pinned memory with ``non_blocking=True``: nothing here waits for the device.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from itertools import chain, pairwise
from typing import Final

import torch

__all__ = ["WIDE_ROW_BYTES", "Copier", "RowSet", "row_views"]


class RowSet:
    """One set of state tensors viewed as ``[*lead, rows, row]``, and each row's own view.

    The per-row views are what the CPU's single-pass copy hands to
    ``_foreach_copy_``. They are made once per tensor, on the first copy
    that needs them (one ``unbind``; about 2.5 us and 0.6 KB of host memory
    a view), and kept: made per call they would cost more than the copy of
    a small batch.
    """

    def __init__(self, tensors: Sequence[torch.Tensor], batch_dim: int) -> None:
        self.tensors: list[torch.Tensor] = list(tensors)
        self._dim = batch_dim
        self._rows: list[list[torch.Tensor] | None] = [None] * len(self.tensors)

    def rows(self, i: int) -> list[torch.Tensor]:
        """``rows(i)[r]``: row ``r`` of tensor ``i``, a view over its memory."""
        rows = self._rows[i]
        if rows is None:
            rows = self._rows[i] = list(self.tensors[i].unbind(self._dim))
        return rows


#: A tensor's rows go one by one (on one CPU thread) from this many bytes a
#: row. Below it the fixed cost of a row's own copy (about 1 us) outweighs
#: the second pass of the index ops, whose scratch then stays in the caches:
#: 512 of 1,024 rows broke even at about 6 KB a row on a 2.6 GHz Xeon.
WIDE_ROW_BYTES: Final = 8192


class Copier:
    """Moves rows between ``RowSet``s of same-shaped rows: one batched op per tensor (or two)."""

    def __init__(
        self, row_shapes: Sequence[torch.Tensor], batch_dim: int, *, per_row: bool | None = None
    ) -> None:
        """Copy scattered rows by ``_foreach_copy_`` for every tensor, or none, or by row width.

        ``per_row=True``: every tensor; ``False``: none; ``None`` (the
        default): on the CPU, the tensors whose rows hold ``WIDE_ROW_BYTES``
        or more, in calls made while torch runs one thread.
        """
        self._dim = batch_dim
        device = row_shapes[0].device
        self._device = device
        self._to_device = device.type != "cpu"
        self._auto = per_row is None
        if per_row is None:
            per_row = not self._to_device
            self._wide = [
                per_row and _row_bytes(t, batch_dim) >= WIDE_ROW_BYTES for t in row_shapes
            ]
        else:
            self._wide = [per_row] * len(row_shapes)
        self._none = [False] * len(row_shapes)
        # For the index ops: one flat buffer per state tensor, in its row-view
        # dtype; grown, never shrunk.
        self._scratch: list[torch.Tensor] = [
            torch.empty(0, dtype=t.dtype, device=device) for t in row_shapes
        ]
        # 0, 1, 2, ...: rows in order are compared against a slice of it (a
        # slice copies pointers; ``list(range(...))`` makes an int per row).
        self._arange: list[int] = []

    def move(
        self,
        source: RowSet,
        target: RowSet,
        src: list[int],
        dst: list[int],
        *,
        src_unique: bool = True,
    ) -> None:
        """For every tensor pair, copy row ``src[k]`` of the source into row ``dst[k]``.

        ``dst`` holds no row twice (the batch checks refuse a row twice);
        ``src_unique=False`` says ``src`` may (a shared slot restored into
        several rows), which only rules out reading the source rows as a range.
        """
        dim, count = self._dim, len(src)
        first, order = self._as_range(dst, src)
        if first is not None:
            (index,) = self._indices(order)
            for s, t in zip(source.tensors, target.tensors, strict=True):
                torch.index_select(s, dim, index, out=_rows(t, dim, first, count))
            return
        by_row = self._by_row()
        if any(by_row):
            _each_row(source, target, src, dst, by_row)
        if not all(by_row):
            self._by_index(source, target, src, dst, by_row, src_unique)

    def _as_range(self, rows: list[int], other: list[int]) -> tuple[int | None, list[int]]:
        """``(first, other in row order)`` if ``rows`` are a range in any order; else ``None, []``.

        Rows are unique (the batch checks refuse a row twice), so rows spanning
        exactly ``len(rows)`` values are a range. ``other`` is reordered here,
        beside the test, so the view and the indices cannot disagree.
        """
        count = len(rows)
        first, last = rows[0], rows[-1]
        # The ends decide most cases without a scan: rows of a range lie less
        # than ``count`` apart (a step's snapshot slots, one row in every
        # ``slots_per_sequence``, do not), and rows in order run first to last.
        if abs(last - first) >= count:
            return None, []
        if last - first == count - 1 and rows == self._ascending(first, last):
            return first, other
        first = min(rows)
        if max(rows) - first + 1 != count:
            return None, []
        order = [0] * count
        for row, value in zip(rows, other, strict=True):
            order[row - first] = value
        return first, order

    def _ascending(self, first: int, last: int) -> list[int]:
        """``[first, ..., last]``: a slice of the kept ``0, 1, 2, ...`` when that stays small."""
        if last >= len(self._arange):
            if last >= 4 * (last - first + 1):  # far from 0: do not keep a list that long
                return list(range(first, last + 1))
            self._arange = list(range(last + 1))
        return self._arange[first : last + 1]

    def _by_row(self) -> list[bool]:
        """Which tensors go row by row in this call (the thread count can change between calls)."""
        if self._auto and torch.get_num_threads() != 1:
            return self._none
        return self._wide

    def _by_index(
        self,
        source: RowSet,
        target: RowSet,
        src: list[int],
        dst: list[int],
        skip: list[bool],
        src_unique: bool = True,
    ) -> None:
        """Index ops for the tensors not in ``skip``: one each (source rows a range) or two."""
        dim, count = self._dim, len(src)
        pairs = [
            (i, s, t)
            for i, (s, t, done) in enumerate(zip(source.tensors, target.tensors, skip, strict=True))
            if not done
        ]
        first, order = self._as_range(src, dst) if src_unique else (None, [])
        if first is not None:
            (index,) = self._indices(order)
            for _, s, t in pairs:
                t.index_copy_(dim, index, _rows(s, dim, first, count))
            return
        src_index, dst_index = self._indices(src, dst)
        for i, s, t in pairs:
            gathered = self._scratch_for(i, s, count)
            torch.index_select(s, dim, src_index, out=gathered)
            t.index_copy_(dim, dst_index, gathered)

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
        # ``struct.pack`` converts the ints at about half the cost of ``array("q", ...)``,
        # which converts them one at a time: a step's whole bookkeeping is ~100 ns a row.
        total = sum(map(len, columns))
        host = bytearray(struct.pack(f"{total}q", *chain.from_iterable(columns)))
        tensor = torch.frombuffer(host, dtype=torch.int64)
        if self._to_device:
            tensor = tensor.pin_memory().to(self._device, non_blocking=True)
        if len(columns) == 1:
            return [tensor]
        count = len(columns[0])
        return [tensor[k * count : (k + 1) * count] for k in range(len(columns))]


def _rows(tensor: torch.Tensor, dim: int, first: int, count: int) -> torch.Tensor:
    """Rows ``first .. first + count`` of ``tensor``: itself when that is all of them.

    A ``narrow`` costs about 2 us on the CPU, as much as the bookkeeping of a
    thousand rows; a step that saves every row needs no view.
    """
    if first == 0 and count == tensor.shape[dim]:
        return tensor
    return tensor.narrow(dim, first, count)


def _each_row(
    source: RowSet, target: RowSet, src: list[int], dst: list[int], by_row: list[bool]
) -> None:
    """One ``_foreach_copy_`` per tensor in ``by_row``, over the rows' own views: a single pass.

    Taken in source-row order (the order of the batch does not matter: no
    row is written twice), so reads stream through memory and, for saves
    and restores alike, so do the writes.
    """
    if any(b < a for a, b in pairwise(src)):
        order = sorted(range(len(src)), key=src.__getitem__)
        src, dst = [src[k] for k in order], [dst[k] for k in order]
    for i, wide in enumerate(by_row):
        if wide:
            from_rows, to_rows = source.rows(i), target.rows(i)
            torch._foreach_copy_([to_rows[r] for r in dst], [from_rows[r] for r in src])


def _row_bytes(rows: torch.Tensor, batch_dim: int) -> int:
    """Bytes of one row's own view of ``rows``."""
    count = rows.shape[batch_dim]
    return 0 if count == 0 else rows.numel() // count * rows.element_size()


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
