"""A pure-Python snapshot pool for tests: any value stands in for a row's SSM state."""

from __future__ import annotations

from collections.abc import Sequence
from typing import final

from .._core.effect_dict import (
    SaveBatch,
    SsmPrefixSave,
    SsmSnapshotRestore,
    SsmSnapshotSave,
    SsmStateAccept,
)
from ..pool import SaveOutcome
from ..pool._base import PoolBase
from ..pool._batch_values import CheckedAccepts, CheckedRestores, CheckedSaves
from ..pool._shared_rules import CheckedSharedRestores, CheckedSharedSaves

__all__ = ["FakeSnapshotPool"]


@final
class FakeSnapshotPool(PoolBase):
    """A ``SnapshotPool`` whose "state" is whatever a test puts in ``live[seq]``.

    ``save`` stores ``live[seq]`` in the slot, ``restore`` puts the stored
    value back into ``live[seq]``; ``fail_when(predicate)`` makes every save
    for which ``predicate(save)`` is true fail (``None`` turns faults off).
    ``save_calls``, ``restore_calls`` and ``accept_calls`` count batched
    calls, ``copies`` the rows copied. Give each row's live state a value
    that names its position (the tokens so far, say) and every wrong restore
    shows.

    ``intermediate[seq]`` is row ``seq``'s intermediate buffer of a verify
    step (SPEC 9): a list whose index ``j`` a test sets to the state after
    ``first_position + j`` tokens. Saves with a ``source`` copy from it,
    ``accept`` makes an entry live, and an index the list does not hold is
    refused with ``StaleSnapshotError``.

    ``shared_slots`` shared slots (SPEC 13) make it a ``SharedSnapshotPool``:
    ``save_shared`` / ``restore_shared`` copy ``live[seq]`` to and from them
    (counted in ``shared_save_calls``, ``shared_restore_calls`` and
    ``copies``), ``fail_shared_when`` makes shared saves fail.
    """

    def __init__(
        self, num_sequences: int, slots_per_sequence: int, *, shared_slots: int = 0
    ) -> None:
        super().__init__(num_sequences, slots_per_sequence, shared_slots)
        self.live: list[object] = [None] * self.num_sequences
        self._stored: list[object] = [None] * (self.num_sequences * self.slots_per_sequence)
        self._shared: list[object] = [None] * self.shared_slots
        self.intermediate: list[list[object]] = [[] for _ in range(self.num_sequences)]
        self.save_calls = 0
        self.restore_calls = 0
        self.accept_calls = 0
        self.shared_save_calls = 0
        self.shared_restore_calls = 0
        self.copies = 0

    def __repr__(self) -> str:
        shared = ""
        if self.shared_slots:
            shared = (
                f"shared_slots={self.shared_slots}, shared_save_calls={self.shared_save_calls}, "
                f"shared_restore_calls={self.shared_restore_calls}, "
            )
        return (
            f"FakeSnapshotPool(num_sequences={self.num_sequences}, "
            f"slots_per_sequence={self.slots_per_sequence}, save_calls={self.save_calls}, "
            f"restore_calls={self.restore_calls}, accept_calls={self.accept_calls}, "
            f"{shared}copies={self.copies})"
        )

    def save(self, saves: Sequence[SsmSnapshotSave] | SaveBatch, /) -> SaveOutcome:
        """Store each save's ``live[seq]`` in its slot, except the saves made to fail."""
        return SaveOutcome(self._save_batch(saves))

    def restore(self, restores: Sequence[SsmSnapshotRestore], /) -> None:
        """Put each restore's stored value back into ``live[seq]``; stale restores copy nothing."""
        self._restore_batch(restores)

    def accept(self, accepts: Sequence[SsmStateAccept], /) -> None:
        """Make each accept's intermediate entry its row's live value; bad indices copy nothing."""
        self._accept_batch(accepts)

    # The calls are counted where every batch ends up, checked here or by
    # apply_effects: a batch that was refused was not a call.

    def _save_checked(
        self, checked: CheckedSaves, saves: Sequence[SsmSnapshotSave] | SaveBatch | None = None, /
    ) -> tuple[SsmSnapshotSave, ...]:
        failed = super()._save_checked(checked, saves)
        self.save_calls += 1
        return failed

    def _restore_checked(self, checked: CheckedRestores, /) -> None:
        super()._restore_checked(checked)
        self.restore_calls += 1

    def _accept_checked(self, checked: CheckedAccepts, /) -> None:
        super()._accept_checked(checked)
        self.accept_calls += 1

    def _save_shared_checked(
        self, checked: CheckedSharedSaves, saves: Sequence[SsmPrefixSave], /
    ) -> tuple[SsmPrefixSave, ...]:
        failed = super()._save_shared_checked(checked, saves)
        self.shared_save_calls += 1
        return failed

    def _restore_shared_checked(self, checked: CheckedSharedRestores, /) -> None:
        super()._restore_shared_checked(checked)
        self.shared_restore_calls += 1

    def stored_shared_value(self, slot: int) -> object:
        """The value shared ``slot`` holds (``None`` when it holds nothing)."""
        if self._tags.stored_shared_ticket(slot) is None:
            return None
        return self._shared[slot]

    def stored_value(self, seq: int, slot: int) -> object:
        """The value snapshot ``(seq, slot)`` holds (``None`` when it holds nothing)."""
        if self._tags.stored_ticket(seq, slot) is None:
            return None
        return self._stored[self._tags.index(seq, slot)]

    def _copy_saves(self, rows: list[int], flat: list[int]) -> None:
        stored, live = self._stored, self.live
        for seq, i in zip(rows, flat, strict=True):
            stored[i] = live[seq]
        self.copies += len(rows)

    def _copy_restores(self, rows: list[int], flat: list[int]) -> None:
        stored, live = self._stored, self.live
        for seq, i in zip(rows, flat, strict=True):
            live[seq] = stored[i]
        self.copies += len(rows)

    def _copy_shared_saves(self, rows: list[int], slots: list[int]) -> None:
        shared, live = self._shared, self.live
        for seq, slot in zip(rows, slots, strict=True):
            shared[slot] = live[seq]
        self.copies += len(rows)

    def _copy_shared_restores(self, rows: list[int], slots: list[int]) -> None:
        shared, live = self._shared, self.live
        for seq, slot in zip(rows, slots, strict=True):
            live[seq] = shared[slot]
        self.copies += len(rows)

    def _intermediate_count(self, seq: int) -> int:
        return len(self.intermediate[seq])

    def _copy_intermediate_saves(
        self, rows: list[int], flat: list[int], indices: list[int]
    ) -> None:
        stored, staged = self._stored, self.intermediate
        for seq, i, j in zip(rows, flat, indices, strict=True):
            stored[i] = staged[seq][j]
        self.copies += len(rows)

    def _copy_accepts(self, rows: list[int], indices: list[int]) -> None:
        live, staged = self.live, self.intermediate
        for seq, j in zip(rows, indices, strict=True):
            live[seq] = staged[seq][j]
        self.copies += len(rows)
