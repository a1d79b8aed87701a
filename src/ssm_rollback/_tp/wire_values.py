"""The effects a payload decodes to, built without their validators: the wire checked every column.

Rule 5 of ``_wire`` checked each column at C speed before any of these run,
so they set the fields directly. Every effect carries a fresh ticket (an
accept too, SPEC 15), so each is built anew, a column at a time.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from functools import partial
from itertools import repeat
from operator import add
from typing import Final, TypeVar

from .._core.effects import (
    SsmPrefixRestore,
    SsmPrefixSave,
    SsmSnapshotRestore,
    SsmSnapshotSave,
    SsmStateAccept,
    slot_setter,
    trusted_save,
)
from .._core.save_batch import LIVE, SaveBatch

__all__ = ["accepts", "prefix_restores", "prefix_saves", "restores", "save", "save_batch"]

_new = object.__new__
_E = TypeVar("_E")
_Setter = Callable[[object, object], None]
_set = object.__setattr__


_RESTORE_FIELDS: Final = tuple(
    slot_setter(SsmSnapshotRestore, name) for name in ("seq", "slot", "token_position", "ticket")
)
_PREFIX_FIELDS: Final = {
    cls: tuple(slot_setter(cls, name) for name in ("seq", "slot", "length", "ticket"))
    for cls in (SsmPrefixSave, SsmPrefixRestore)
}
_UNSHIFTED: Final = partial(add, LIVE)  # a source on the wire, back: 0 -> LIVE, i + 1 -> i
_ACCEPT_FIELDS: Final = tuple(
    slot_setter(SsmStateAccept, name) for name in ("seq", "index", "ticket")
)


def accepts(
    seqs: Sequence[int], indices: Sequence[int], tickets: Sequence[int]
) -> list[SsmStateAccept]:
    """One ``SsmStateAccept`` per row; ``tickets`` as on the wire (0: none, ``t + 1``: ``t``)."""
    if not len(seqs) == len(indices) == len(tickets):
        raise ValueError(f"accept columns of {len(seqs)}, {len(indices)} and {len(tickets)} rows")
    held = [None if t == 0 else t - 1 for t in tickets]
    return _built(SsmStateAccept, _ACCEPT_FIELDS, (seqs, indices, held))


def restores(
    seqs: Sequence[int], slots: Sequence[int], positions: Sequence[int], tickets: Sequence[int]
) -> list[SsmSnapshotRestore]:
    """One ``SsmSnapshotRestore`` per row from checked columns, built a column at a time."""
    return _built(SsmSnapshotRestore, _RESTORE_FIELDS, (seqs, slots, positions, tickets))


def prefix_saves(
    seqs: Sequence[int], slots: Sequence[int], lengths: Sequence[int], tickets: Sequence[int]
) -> list[SsmPrefixSave]:
    """One ``SsmPrefixSave`` per row from checked columns, built a column at a time."""
    return _built(SsmPrefixSave, _PREFIX_FIELDS[SsmPrefixSave], (seqs, slots, lengths, tickets))


def prefix_restores(
    seqs: Sequence[int], slots: Sequence[int], lengths: Sequence[int], tickets: Sequence[int]
) -> list[SsmPrefixRestore]:
    """One ``SsmPrefixRestore`` per row from checked columns, built a column at a time."""
    fields = _PREFIX_FIELDS[SsmPrefixRestore]
    return _built(SsmPrefixRestore, fields, (seqs, slots, lengths, tickets))


def _built(
    cls: type[_E], setters: Sequence[_Setter], columns: Sequence[Sequence[int | None]]
) -> list[_E]:
    """One ``cls`` per row, its fields set from ``columns`` in ``setters``' order.

    Every instance first, then each field's setter mapped over them all: C
    loops, no Python frame per effect (a third of the per-restore call).
    """
    made: list[_E] = list(map(_new, repeat(cls, len(columns[0]))))
    for setter, column in zip(setters, columns, strict=True):
        deque(map(setter, made, column), 0)
    return made


def save(seq: int, slot: int, position: int, ticket: int, source: int) -> SsmSnapshotSave:
    """An ``SsmSnapshotSave`` from checked ints; ``source`` as on the wire (0: the live state)."""
    return trusted_save(seq, slot, position, ticket, source - 1 if source else None)


def save_batch(
    seqs: tuple[int, ...],
    slots: tuple[int, ...],
    positions: tuple[int, ...],
    tickets: tuple[int, ...],
    sources: tuple[int, ...] | None = None,
) -> SaveBatch:
    """A ``SaveBatch`` over checked columns; ``sources`` as on the wire (0: ``LIVE``), kept."""
    batch: SaveBatch = _new(SaveBatch)
    _set(batch, "seqs", seqs)
    _set(batch, "slots", slots)
    _set(batch, "positions", positions)
    _set(batch, "tickets", tickets)
    _set(batch, "sources", None if sources is None else tuple(map(_UNSHIFTED, sources)))
    _set(batch, "distinct", False)  # words from another rank: each pool checks them in full
    return batch
