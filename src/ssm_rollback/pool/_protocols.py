"""What a pool is, and the optional capabilities a pool declares beside it (SPEC 4, 15).

``SnapshotPool`` is what every pool implements. An optional capability is a
protocol of its own that extends it - ``VerifyBufferPool`` for the
intermediate buffers of a speculative verify step - and ``apply_effects``
asks ``isinstance(pool, <capability>)`` only when a step needs it, through
one function per capability that raises a library error naming what needed
it. A new capability (SPEC 13's shared slots) is one more protocol here and
one more such function.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, TypeAlias, runtime_checkable

import attrs

from .._core.effect_dict import SaveBatch, SsmSnapshotRestore, SsmSnapshotSave, SsmStateAccept
from .._core.ring import SsmDecodeRing
from .._errors import InvalidArgumentTypeError

__all__ = ["Rings", "SaveOutcome", "SnapshotPool", "VerifyBufferPool", "verify_buffers"]


@attrs.frozen
class SaveOutcome:
    """What a batched ``save`` did: ``failed`` lists the saves that did not happen."""

    failed: tuple[SsmSnapshotSave, ...] = ()

    @property
    def ok(self) -> bool:
        """True when every save happened."""
        return not self.failed


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
