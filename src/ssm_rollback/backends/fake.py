"""A pure-Python snapshot pool for tests: any value stands in for a row's SSM state."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import final

from .._effects import SsmSnapshotRestore, SsmSnapshotSave
from ..pool import SaveOutcome, SlotTags

__all__ = ["FakeSnapshotPool"]


@final
class FakeSnapshotPool:
    """A ``SnapshotPool`` whose "state" is whatever a test puts in ``live[seq]``.

    ``save`` stores ``live[seq]`` in the slot, ``restore`` puts the stored
    value back into ``live[seq]``; ``fail_when(predicate)`` makes every save
    for which ``predicate(save)`` is true fail (``None`` turns faults off).
    ``save_calls`` and ``restore_calls`` count batched calls, ``copies`` the
    rows copied. Give each row's live state a value that names its position
    (the tokens so far, say) and every wrong restore shows.
    """

    def __init__(self, num_sequences: int, slots_per_sequence: int) -> None:
        self._tags = SlotTags(num_sequences, slots_per_sequence)
        self.live: list[object] = [None] * num_sequences
        self._stored: list[object] = [None] * (num_sequences * slots_per_sequence)
        self._fail: Callable[[SsmSnapshotSave], bool] | None = None
        self.save_calls = 0
        self.restore_calls = 0
        self.copies = 0

    @property
    def num_sequences(self) -> int:
        """Rows the pool holds snapshots for."""
        return self._tags.num_sequences

    @property
    def slots_per_sequence(self) -> int:
        """Snapshot slots per row."""
        return self._tags.slots_per_sequence

    def __repr__(self) -> str:
        return (
            f"FakeSnapshotPool(num_sequences={self.num_sequences}, "
            f"slots_per_sequence={self.slots_per_sequence}, save_calls={self.save_calls}, "
            f"restore_calls={self.restore_calls}, copies={self.copies})"
        )

    def fail_when(self, predicate: Callable[[SsmSnapshotSave], bool] | None) -> None:
        """Make every later save for which ``predicate(save)`` is true fail; ``None``: none."""
        self._fail = predicate

    def save(self, saves: Sequence[SsmSnapshotSave], /) -> SaveOutcome:
        """Store each save's ``live[seq]`` in its slot, except the saves made to fail."""
        self._tags.check_saves(saves)
        fail = self._fail
        # Ask the predicate about every save before copying any, so a
        # predicate that raises leaves the pool as it was.
        failed = () if fail is None else tuple(save for save in saves if fail(save))
        self.save_calls += 1
        stored, live, slots = self._stored, self.live, self.slots_per_sequence
        for save in saves:
            stored[save.seq * slots + save.slot] = live[save.seq]
        for save in failed:
            stored[save.seq * slots + save.slot] = None
        self.copies += len(saves) - len(failed)
        self._tags.mark_saved(saves)
        self._tags.mark_failed(failed)
        return SaveOutcome(failed)

    def restore(self, restores: Sequence[SsmSnapshotRestore], /) -> None:
        """Put each restore's stored value back into ``live[seq]``; stale restores copy nothing."""
        self._tags.check_restores(restores)
        self.restore_calls += 1
        for restore in restores:
            self.live[restore.seq] = self._stored[self._tags.index(restore.seq, restore.slot)]
        self.copies += len(restores)

    def stored_position(self, seq: int, slot: int) -> int | None:
        """The position snapshot ``(seq, slot)`` holds, or ``None``."""
        return self._tags.stored_position(seq, slot)

    def stored_value(self, seq: int, slot: int) -> object:
        """The value snapshot ``(seq, slot)`` holds (``None`` when it holds nothing)."""
        if self._tags.stored_position(seq, slot) is None:
            return None
        return self._stored[self._tags.index(seq, slot)]
