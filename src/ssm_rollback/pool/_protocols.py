"""What a pool is, and the optional capabilities a pool declares beside it (SPEC 4, 15).

``SnapshotPool`` is what every pool implements. An optional capability is a
protocol of its own that extends it - ``VerifyBufferPool`` for the
intermediate buffers of a speculative verify step, ``SharedSnapshotPool`` for
the shared slots of prefix snapshots (SPEC 13) - and ``apply_effects`` asks
``isinstance(pool, <capability>)`` only when a step needs it, through one
function per capability (``verify_buffers``, ``shared_buffers``) that raises
a library error naming what needed it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, TypeAlias, runtime_checkable

import attrs

from .._core.effect_dict import (
    SaveBatch,
    SsmPrefixRestore,
    SsmPrefixSave,
    SsmSnapshotRestore,
    SsmSnapshotSave,
    SsmStateAccept,
)
from .._core.ring import SsmDecodeRing
from .._errors import InvalidArgumentTypeError

__all__ = [
    "Rings",
    "SaveOutcome",
    "SharedSnapshotPool",
    "SnapshotPool",
    "VerifyBufferPool",
    "shared_buffers",
    "verify_buffers",
]


@attrs.frozen
class SaveOutcome:
    """What a batched save did: the ring saves (``failed``) and shared saves that did not happen.

    A failed save leaves its slot holding nothing: no restore of it copies.
    """

    failed: tuple[SsmSnapshotSave, ...] = ()
    failed_shared: tuple[SsmPrefixSave, ...] = ()

    @property
    def ok(self) -> bool:
        """True when every save happened."""
        return not self.failed and not self.failed_shared


@runtime_checkable
class SnapshotPool(Protocol):
    """Snapshot memory for ``num_sequences`` rows of ``slots_per_sequence`` slots each.

    ``save`` and ``restore`` are batched: one call per step, one copy per
    state tensor inside it, never one per sequence or layer. A failed save
    leaves its slot holding nothing; a restore of a slot that does not hold
    the restore's exact ticket raises ``StaleSnapshotError`` and copies
    nothing.
    ``ssm_rollback.testing.SnapshotPoolConformance`` checks all of this.
    """

    @property
    def num_sequences(self) -> int:
        """Rows (decode-batch entries) the pool holds snapshots for."""
        ...

    @property
    def slots_per_sequence(self) -> int:
        """Snapshot slots per row: the capacity of each row's ring."""
        ...

    def save(self, saves: Sequence[SsmSnapshotSave] | SaveBatch, /) -> SaveOutcome:
        """Copy each save's live row into its slot; report the saves that failed."""
        ...

    def restore(self, restores: Sequence[SsmSnapshotRestore], /) -> None:
        """Copy each restore's slot back into its live row, or raise and copy nothing."""
        ...

    def stored_position(self, seq: int, slot: int) -> int | None:
        """The ``token_position`` snapshot ``(seq, slot)`` holds; ``None`` if nothing."""
        ...

    def stored_ticket(self, seq: int, slot: int) -> int | None:
        """The ticket of the save snapshot ``(seq, slot)`` holds; ``None`` if nothing."""
        ...


@runtime_checkable
class VerifyBufferPool(SnapshotPool, Protocol):
    """A pool that also holds the intermediate states of a speculative verify step (SPEC 9).

    ``intermediate_count(seq)`` is how many states row ``seq``'s buffer
    holds now (index ``j``: the state after ``first_position + j`` tokens);
    ``accept`` makes one of them a row's live state, and a save whose
    ``source`` is ``j`` copies index ``j`` into its slot. An index the row
    does not hold is refused with ``StaleSnapshotError``, copying nothing.
    """

    def accept(self, accepts: Sequence[SsmStateAccept], /) -> None:
        """Make each accept's intermediate state its row's live state, or raise and copy nothing."""
        ...

    def intermediate_count(self, seq: int) -> int:
        """How many intermediate states row ``seq`` holds now (0 when none)."""
        ...


@runtime_checkable
class SharedSnapshotPool(SnapshotPool, Protocol):
    """A pool that also holds ``shared_slots`` snapshots shared across rows (SPEC 13).

    The shared slots are a region apart from every row's ring slots, each as
    large as a ring slot; ``PrefixSnapshotIndex`` decides what they hold.
    ``save_shared`` copies each save's live row into its shared slot (a
    failed one leaves the slot holding nothing); ``restore_shared`` copies a
    shared slot into each restore's live row - several rows may read one
    slot - only when the slot holds exactly the restore's ticket, otherwise
    ``StaleSnapshotError`` and nothing is copied. Both are batched: one copy
    per state tensor per call.
    """

    @property
    def shared_slots(self) -> int:
        """Shared slots the pool holds (0: none; every prefix effect is refused)."""
        ...

    def save_shared(self, saves: Sequence[SsmPrefixSave], /) -> SaveOutcome:
        """Copy each save's live row into its shared slot; report failures in ``failed_shared``."""
        ...

    def restore_shared(self, restores: Sequence[SsmPrefixRestore], /) -> None:
        """Copy each restore's shared slot into its live row, or raise and copy nothing."""
        ...

    def stored_shared_ticket(self, slot: int) -> int | None:
        """The ticket of the save shared ``slot`` holds; ``None`` if nothing."""
        ...


Rings: TypeAlias = Sequence[SsmDecodeRing] | Mapping[int, SsmDecodeRing]
"""The scheduler's rings, indexed by ``seq``: a list by row, or a mapping from row."""


def verify_buffers(pool: SnapshotPool, what: str) -> VerifyBufferPool:
    """``pool`` as a ``VerifyBufferPool``, or a library error naming ``what`` needed one.

    Asked only when a step holds accepts or intermediate-sourced saves: a
    runtime protocol check costs microseconds, more than a small step's copies.
    """
    if isinstance(pool, VerifyBufferPool):
        return pool
    raise InvalidArgumentTypeError(
        f"'pool' must be a VerifyBufferPool (with accept() and intermediate_count()) for "
        f"{what}, got {type(pool).__name__}"
    )


def shared_buffers(pool: SnapshotPool, what: str) -> SharedSnapshotPool:
    """``pool`` as a ``SharedSnapshotPool``, or a library error naming ``what`` needed one.

    Asked only when a step holds prefix effects, as ``verify_buffers`` is.
    """
    if isinstance(pool, SharedSnapshotPool):
        return pool
    raise InvalidArgumentTypeError(
        f"'pool' must be a SharedSnapshotPool (with save_shared(), restore_shared(), "
        f"stored_shared_ticket() and shared_slots) for {what}, got {type(pool).__name__}"
    )
