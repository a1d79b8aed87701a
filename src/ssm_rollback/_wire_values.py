"""The effects a payload decodes to, built without their validators: the wire checked every column.

Rule 5 of ``_wire`` checked each column at C speed before any of these run,
so they set the fields directly. Accepts are interned: a verify step's
``(seq, index)`` pairs repeat from step to step (``index`` is at most the
draft count), and an accept is a frozen value, so one instance per pair
serves every step. Restores and saves carry a fresh ticket each time and are
built anew.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from ._effect_values import SsmSnapshotRestore, SsmSnapshotSave, SsmStateAccept, trusted_save
from ._save_batch import LIVE, SaveBatch

__all__ = ["accepts", "restore", "save", "save_batch"]

_new = object.__new__
_set = object.__setattr__

#: The most interned accepts kept; past it the table starts again (a bound, not a tuning knob).
ACCEPT_LIMIT: Final = 1 << 16
_ACCEPTS: Final[dict[tuple[int, int], SsmStateAccept]] = {}


def accepts(seqs: Sequence[int], indices: Sequence[int]) -> list[SsmStateAccept]:
    """One ``SsmStateAccept`` per row, the interned one when this pair was seen before."""
    keys = list(zip(seqs, indices, strict=True))
    try:
        return list(map(_ACCEPTS.__getitem__, keys))  # the steady state: every pair seen
    except KeyError:
        pass
    if len(_ACCEPTS) + len(keys) > ACCEPT_LIMIT:
        _ACCEPTS.clear()
    out = []
    for key in keys:
        found = _ACCEPTS.get(key)
        if found is None:
            found = _ACCEPTS[key] = _accept(*key)
        out.append(found)
    return out


def _accept(seq: int, index: int) -> SsmStateAccept:
    accept = _new(SsmStateAccept)
    _set(accept, "seq", seq)
    _set(accept, "index", index)
    return accept


def restore(seq: int, slot: int, position: int, ticket: int) -> SsmSnapshotRestore:
    """An ``SsmSnapshotRestore`` from checked ints."""
    made = _new(SsmSnapshotRestore)
    _set(made, "seq", seq)
    _set(made, "slot", slot)
    _set(made, "token_position", position)
    _set(made, "ticket", ticket)
    return made


def save(seq: int, slot: int, position: int, ticket: int, source: int) -> SsmSnapshotSave:
    """An ``SsmSnapshotSave`` from checked ints; a source of ``LIVE`` is the live state."""
    return trusted_save(seq, slot, position, ticket, None if source == LIVE else source)


def save_batch(
    seqs: tuple[int, ...],
    slots: tuple[int, ...],
    positions: tuple[int, ...],
    tickets: tuple[int, ...],
    sources: tuple[int, ...] | None = None,
) -> SaveBatch:
    """A ``SaveBatch`` over checked columns, kept as they are (an all-``LIVE`` column too)."""
    batch = _new(SaveBatch)
    _set(batch, "seqs", seqs)
    _set(batch, "slots", slots)
    _set(batch, "positions", positions)
    _set(batch, "tickets", tickets)
    _set(batch, "sources", sources)
    return batch
