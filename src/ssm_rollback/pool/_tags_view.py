"""A third-party pool's slot tags, read through the ``SnapshotPool`` protocol for the rules.

``apply_effects`` checks a pool that is not one of the library's (no
``_slot_tags()``) through ``PoolTagsView``: the same rules as ``SlotTags``
applies to its own record, over what the pool's ``stored_*`` report.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast, final

from .._errors import check_non_negative_int
from ._protocols import SharedSnapshotPool, SnapshotPool
from ._shared_rules import SharedChecks, SharedHeld

__all__ = ["PoolTagsView", "SlotIndex"]


@final
class PoolTagsView(SharedChecks):
    """Rules 1-6 over a third-party ``SnapshotPool``: its shape, and what its ``stored_*`` report.

    ``apply_effects`` checks such a pool's batches with it, so a pool that
    implements only the protocol is held to the same rules as ours.
    """

    def __init__(self, pool: SnapshotPool) -> None:
        self._pool = pool
        self._num_sequences = pool.num_sequences
        self._slots_per_sequence = pool.slots_per_sequence
        self._slot_index = SlotIndex(self._num_sequences, self._slots_per_sequence)

    def _held(
        self, seqs: list[int], slots: Sequence[int], flat: list[int]
    ) -> tuple[list[int | None], list[int | None]]:
        pairs = list(zip(seqs, slots, strict=True))
        return (
            [self._pool.stored_position(seq, slot) for seq, slot in pairs],
            [self._pool.stored_ticket(seq, slot) for seq, slot in pairs],
        )

    @property
    def shared_slots(self) -> int:
        # Asked only once a step holds prefix effects, by then known a SharedSnapshotPool.
        pool = cast(SharedSnapshotPool, self._pool)
        return check_non_negative_int("pool.shared_slots", pool.shared_slots)

    def _held_shared_now(self, slots: list[int]) -> SharedHeld:
        stored = cast(SharedSnapshotPool, self._pool).stored_shared_ticket
        return None, [stored(slot) for slot in slots]  # lengths: the protocol reports none


class SlotIndex:
    """``index[seq][slot]``: the flat index ``seq * slots_per_sequence + slot``, made on demand.

    What ``BatchChecks`` looks ids up in where keeping a table would cost
    more than it saves (a third-party pool's view lives for one call); an id
    out of range raises ``IndexError``, as the table's would.
    """

    def __init__(self, num_sequences: int, slots_per_sequence: int) -> None:
        self._rows = num_sequences
        self._slots = slots_per_sequence

    def __getitem__(self, seq: int, /) -> Sequence[int]:
        if not 0 <= seq < self._rows:
            raise IndexError(seq)
        return range(seq * self._slots, (seq + 1) * self._slots)
