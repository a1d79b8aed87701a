"""What each snapshot slot holds: the record the stale-restore rule checks against.

``SlotTags`` keeps, for every ``(seq, slot)``, the position and the ticket
(SPEC 7) of the save that last wrote it, and owns the flat index
``seq * slots_per_sequence + slot`` with its bounds. It is a
``BatchChecks``: the per-batch rules (``_batch_rules``) check against this
record directly. ``PoolTagsView`` is the same rules over the record a
third-party pool reports.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import final

import attrs

from .._errors import InvalidArgumentError, check_non_negative_int
from ._batch_rules import BatchChecks, IndexTable
from ._protocols import SnapshotPool

__all__ = ["PoolTagsView", "SlotIndex", "SlotTags"]


def _num_sequences_arg(value: int) -> int:
    return check_non_negative_int("num_sequences", value)


def _slots_arg(value: int) -> int:
    return check_non_negative_int("slots_per_sequence", value)


@final
@attrs.define(eq=False, repr=False, on_setattr=attrs.setters.NO_OP)
class SlotTags(BatchChecks):
    """Which position and ticket each ``(seq, slot)`` holds: the stale-restore guard of every pool.

    A backend checks a batch (``check_saves``, ``check_restores``,
    ``check_accepts``: rules 1-5, raising and changing nothing on bad or
    stale input) before it copies anything, then ``commit`` s the saves it
    made. It owns the flat index ``seq * slots_per_sequence + slot``.
    """

    _num_sequences: int = attrs.field(converter=_num_sequences_arg)
    _slots_per_sequence: int = attrs.field(converter=_slots_arg)
    _positions: list[int | None] = attrs.field(init=False)
    _tickets: list[int | None] = attrs.field(init=False)
    _slot_index: IndexTable = attrs.field(init=False)
    # The largest ticket ever committed: no slot holds a larger one (rule 6's shortcut).
    _newest_ticket: int = attrs.field(init=False, default=-1)
    # Per row, the ticket of the last accept copied (rule 7); None: none ticketed yet.
    _accepted_tickets: list[int | None] = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        count = self._num_sequences * self._slots_per_sequence
        try:
            self._positions = [None] * count
            self._tickets = [None] * count
            self._accepted_tickets = [None] * self._num_sequences
            # Every flat index, row by row, for the batch checks to look ids up in:
            # faster than computing and range-checking them, for about 40 bytes
            # of host memory a slot (the snapshot a slot holds is far larger).
            per_row = self._slots_per_sequence
            self._slot_index = [
                list(range(seq * per_row, (seq + 1) * per_row))
                for seq in range(self._num_sequences)
            ]
        except (MemoryError, OverflowError):
            raise InvalidArgumentError(
                f"'slots_per_sequence' * 'num_sequences' must be a slot count this process "
                f"can hold, got {self._slots_per_sequence} * {self._num_sequences} = {count}"
            ) from None

    def __repr__(self) -> str:
        held = sum(tag is not None for tag in self._tickets)
        return (
            f"SlotTags(num_sequences={self._num_sequences}, "
            f"slots_per_sequence={self._slots_per_sequence}, held={held})"
        )

    def index(self, seq: int, slot: int) -> int:
        """Flat index ``seq * slots_per_sequence + slot``; ids out of range raise (rule 1)."""
        seq = check_non_negative_int("seq", seq)
        slot = check_non_negative_int("slot", slot)
        self._check_ids("seq", seq, "slot", slot)
        return seq * self._slots_per_sequence + slot

    def stored_position(self, seq: int, slot: int) -> int | None:
        """The position ``(seq, slot)`` holds, or ``None``; out-of-range ids raise."""
        return self._positions[self.index(seq, slot)]

    def stored_ticket(self, seq: int, slot: int) -> int | None:
        """The ticket of the save ``(seq, slot)`` holds, or ``None``; out-of-range ids raise."""
        return self._tickets[self.index(seq, slot)]

    def commit(
        self,
        flat: Sequence[int],
        positions: Sequence[int],
        tickets: Sequence[int],
        failed: Sequence[int] = (),
    ) -> None:
        """Tag slot ``flat[k]`` with ``positions[k]`` and ``tickets[k]``, except the ``failed`` k.

        A failed save's slot holds nothing afterwards: it may be half written.
        """
        held_positions, held_tickets = self._positions, self._tickets
        # One plain loop: in CPython 3.11 it beats map/deque over list.__setitem__.
        for i, position, ticket in zip(flat, positions, tickets, strict=True):
            held_positions[i] = position
            held_tickets[i] = ticket
        for k in failed:
            i = flat[k]
            held_positions[i] = held_tickets[i] = None
        if tickets:
            self._newest_ticket = max(self._newest_ticket, max(tickets))

    def commit_accepts(self, rows: Sequence[int], tickets: Sequence[int | None]) -> None:
        """Record the tickets of accepts just copied: rule 7 refuses them, and older ones, again."""
        accepted = self._accepted_tickets
        for seq, ticket in zip(rows, tickets, strict=True):
            if ticket is not None:
                accepted[seq] = ticket

    def forget(self, flat: Sequence[int]) -> None:
        """Mark the slots at ``flat`` as holding nothing (a copy that raised half way)."""
        positions, tickets = self._positions, self._tickets
        for i in flat:
            positions[i] = tickets[i] = None

    def _held(
        self, seqs: list[int], slots: list[int], flat: list[int]
    ) -> tuple[list[int | None], list[int | None]]:
        positions, tickets = self._positions, self._tickets
        return [positions[i] for i in flat], [tickets[i] for i in flat]

    def _held_tickets(self, seqs: list[int], slots: list[int], flat: list[int]) -> list[int | None]:
        return list(map(self._tickets.__getitem__, flat))

    def _accepted(self, seqs: list[int]) -> list[int | None]:
        return [self._accepted_tickets[seq] for seq in seqs]

    def _may_hold(self, tickets: list[int]) -> bool:
        # A batch whose tickets are all newer than any committed (every step the
        # library mints) cannot be one applied before: one C-speed min, no lookups.
        return min(tickets) <= self._newest_ticket


@final
class PoolTagsView(BatchChecks):
    """Rules 1-5 over a third-party ``SnapshotPool``: its shape, and what its ``stored_*`` report.

    ``apply_effects`` checks such a pool's batches with it, so a pool that
    implements only the protocol is held to the same rules as ours.
    """

    def __init__(self, pool: SnapshotPool) -> None:
        self._pool = pool
        self._num_sequences = pool.num_sequences
        self._slots_per_sequence = pool.slots_per_sequence
        self._slot_index = SlotIndex(self._num_sequences, self._slots_per_sequence)

    def _held(
        self, seqs: list[int], slots: list[int], flat: list[int]
    ) -> tuple[list[int | None], list[int | None]]:
        pairs = list(zip(seqs, slots, strict=True))
        return (
            [self._pool.stored_position(seq, slot) for seq, slot in pairs],
            [self._pool.stored_ticket(seq, slot) for seq, slot in pairs],
        )


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
