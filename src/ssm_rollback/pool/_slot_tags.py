"""What each snapshot slot holds: the record the stale-restore rule checks against.

``SlotTags`` keeps, for every ``(seq, slot)``, the position and the ticket
(SPEC 7) of the save that last wrote it, and owns the flat index
``seq * slots_per_sequence + slot`` with its bounds; and for every shared
slot of prefix snapshots (SPEC 13) the length and ticket it holds. It is a
``SharedChecks``: the per-batch rules (``_batch_rules``, ``_shared_rules``)
check against this record directly. ``PoolTagsView`` is the same rules over
the record a third-party pool reports.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, final

import attrs

from .._core.columns import as_list, int_column, one_length
from .._core.ring import tickets
from .._errors import InvalidArgumentError, check_non_negative_int, grouped, shown
from ._batch_rules import replayed
from ._batch_values import IndexTable, Names
from ._shared_rules import SharedChecks, SharedHeld, check_rows_once

__all__ = ["SlotTags"]

_ROWS: Final = Names("rows")


#: The most rows a pool keeps: no engine batches more sequences; past it, a typo (whose
#: per-row tags alone would take seconds and gigabytes of host memory to build).
MAX_ROWS: Final = 1 << 24


def _num_sequences_arg(value: int) -> int:
    rows = check_non_negative_int("num_sequences", value)
    if rows > MAX_ROWS:
        raise InvalidArgumentError(
            f"'num_sequences' must be at most {MAX_ROWS:,} (the rows of one engine), got "
            f"{grouped(rows)}"
        )
    return rows


def _slots_arg(value: int) -> int:
    return check_non_negative_int("slots_per_sequence", value)


def _shared_arg(value: int) -> int:
    return check_non_negative_int("shared_slots", value)


def _indices(name: str, values: Sequence[int], bound: int) -> list[int]:
    """``values`` as ints in ``[0, bound)``; else raise naming the column or its element."""
    column = int_column(name, values)
    if column and max(column) >= bound:
        k = next(k for k, value in enumerate(column) if value >= bound)
        raise InvalidArgumentError(f"'{name}[{k}]' must be < {bound}, got {shown(column[k])}")
    return column


def _tag_columns(
    names: tuple[str, str],
    bound: int,
    where: Sequence[int],
    values: Sequence[int],
    tickets: Sequence[int],
    failed: Sequence[int],
) -> tuple[list[int], list[int], list[int], list[int]]:
    """A public write's columns checked: slots in ``[0, bound)`` (named ``names[0]``), their
    values (``names[1]``) and tickets, one length, and ``failed`` indices into them."""
    where_list = _indices(names[0], where, bound)
    value_list, ticket_list = int_column(names[1], values), int_column("tickets", tickets)
    one_length({names[0]: len(where_list), names[1]: len(value_list), "tickets": len(ticket_list)})
    return where_list, value_list, ticket_list, _indices("failed", failed, len(where_list))


@final
@attrs.define(eq=False, repr=False, on_setattr=attrs.setters.NO_OP, getstate_setstate=False)
class SlotTags(SharedChecks, tickets.HoldsTickets):
    """Which position and ticket each ``(seq, slot)`` holds: the stale-restore guard of every pool.

    A backend checks a batch (``check_saves``, ``check_restores``,
    ``check_accepts``: rules 1-6, raising and changing nothing on bad or
    stale input) before it copies anything, then ``commit`` s the saves it
    made. It owns the flat index ``seq * slots_per_sequence + slot``.
    ``shared_slots`` shared slots (SPEC 13) are kept the same way:
    ``check_shared_saves`` / ``check_shared_restores``, then ``commit_shared``.
    """

    _num_sequences: int = attrs.field(converter=_num_sequences_arg)
    _slots_per_sequence: int = attrs.field(converter=_slots_arg)
    _shared_slots: int = attrs.field(default=0, kw_only=True, converter=_shared_arg)
    _positions: list[int | None] = attrs.field(init=False)
    _tickets: list[int | None] = attrs.field(init=False)
    _slot_index: IndexTable = attrs.field(init=False)
    # The largest ticket ever committed: no slot holds a larger one (rule 6's shortcut).
    _newest_ticket: int = attrs.field(init=False, default=-1)
    _shared_lengths: list[int | None] = attrs.field(init=False)
    _shared_tickets: list[int | None] = attrs.field(init=False)
    # Per slot, the ticket of the newest save written into it, kept when a later save into
    # it failed or a copy was forgotten: rule 6 compares with it, so an older save applied
    # again cannot tag a slot a failed save left holding nothing (that save itself may be
    # retried: its ticket is newer).
    _seen: list[int | None] = attrs.field(init=False)
    _shared_seen: list[int | None] = attrs.field(init=False)
    # Per row, the ticket of the last accept copied (rule 7); None: none ticketed yet.
    _accepted_tickets: list[int | None] = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        try:
            self._shared_lengths = [None] * self._shared_slots
            self._shared_tickets = [None] * self._shared_slots
            self._shared_seen = [None] * self._shared_slots
        except (MemoryError, OverflowError):
            raise InvalidArgumentError(
                f"'shared_slots' must be a slot count this process can hold, "
                f"got {grouped(self._shared_slots)}"
            ) from None
        count = self._num_sequences * self._slots_per_sequence
        try:
            self._positions = [None] * count
            self._tickets = [None] * count
            self._seen = [None] * count
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
                f"can hold, got {grouped(self._slots_per_sequence)} * "
                f"{grouped(self._num_sequences)} = {grouped(count)}"
            ) from None

    def _newest_held(self) -> int:
        """The largest ticket any slot or row holds (-1: none)."""
        kept = (self._seen, self._shared_seen, self._accepted_tickets)
        return max((t for column in kept for t in column if t is not None), default=-1)

    def __repr__(self) -> str:
        held = sum(tag is not None for tag in self._tickets)
        shared = ""
        if self._shared_slots:
            shared_held = sum(tag is not None for tag in self._shared_tickets)
            shared = f", shared_slots={self._shared_slots}, shared_held={shared_held}"
        return (
            f"SlotTags(num_sequences={self._num_sequences}, "
            f"slots_per_sequence={self._slots_per_sequence}, held={held}{shared})"
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

        ``flat`` are the flat indices a check returned (``CheckedSaves.flat``). A
        failed save's slot holds nothing afterwards: it may be half written. Bad
        columns raise naming them, with nothing tagged.
        """
        columns = (flat, positions, tickets, failed)
        self._commit(*_tag_columns(("flat", "positions"), len(self._positions), *columns))

    def commit_accepts(self, rows: Sequence[int], tickets: Sequence[int | None]) -> None:
        """Record the tickets of accepts just copied: rule 7 refuses them, and older ones, again.

        Each row at most once, each ticket newer than the row's last (what
        ``check_accepts`` let through): a commit that would lower a row's
        mark raises naming it, with nothing recorded.
        """
        row_list = _indices("rows", rows, len(self._accepted_tickets))
        ticket_list = as_list("tickets", tickets, "ints >= 0 or None")[0]
        checked = [
            None if ticket is None else check_non_negative_int(f"tickets[{k}]", ticket)
            for k, ticket in enumerate(ticket_list)
        ]
        one_length({"rows": len(row_list), "tickets": len(checked)})
        check_rows_once(row_list, _ROWS)
        for k, (seq, ticket) in enumerate(zip(row_list, checked, strict=True)):
            last = self._accepted_tickets[seq]
            if ticket is not None and replayed(ticket, last):
                raise InvalidArgumentError(
                    f"'tickets[{k}]' must be newer than row {seq}'s last accept (ticket "
                    f"{last}), got {shown(ticket)}: rule 7 would then let that accept through "
                    f"again"
                )
        self._commit_accepts(row_list, checked)

    def forget(self, flat: Sequence[int]) -> None:
        """Mark the slots at ``flat`` as holding nothing (a copy that raised half way)."""
        self._forget(_indices("flat", flat, len(self._positions)))

    def _commit(
        self,
        flat: Sequence[int],
        positions: Sequence[int],
        tickets: Sequence[int],
        failed: Sequence[int] = (),
    ) -> None:
        """``commit`` of columns a check of these tags produced (the pool base's own)."""
        held_positions, held_tickets, seen = self._positions, self._tickets, self._seen
        # One plain loop: in CPython 3.11 it beats map/deque over list.__setitem__.
        taken = [seen[flat[k]] for k in failed]  # what the failed saves' slots had taken
        for i, position, ticket in zip(flat, positions, tickets, strict=True):
            held_positions[i] = position
            held_tickets[i] = seen[i] = ticket
        for k, before in zip(failed, taken, strict=True):
            i = flat[k]
            held_positions[i] = held_tickets[i] = None
            seen[i] = before
        if tickets:
            self._newest_ticket = max(self._newest_ticket, max(tickets))

    def _commit_accepts(self, rows: Sequence[int], tickets: Sequence[int | None]) -> None:
        accepted = self._accepted_tickets
        for seq, ticket in zip(rows, tickets, strict=True):
            if ticket is not None:
                accepted[seq] = ticket

    def _forget(self, flat: Sequence[int]) -> None:
        positions, tickets = self._positions, self._tickets
        for i in flat:
            positions[i] = tickets[i] = None

    # -- shared slots (SPEC 13) -------------------------------------------------------

    def shared_index(self, slot: int) -> int:
        """``slot`` itself, once checked to be a shared slot of the pool (rule 1)."""
        slot = check_non_negative_int("slot", slot)
        if slot >= self._shared_slots:
            raise InvalidArgumentError(
                f"'slot' must be < the pool's shared_slots {self._shared_slots}, got {shown(slot)}"
            )
        return slot

    def stored_shared_length(self, slot: int) -> int | None:
        """The length shared ``slot`` holds, or ``None``; a slot out of range raises."""
        return self._shared_lengths[self.shared_index(slot)]

    def stored_shared_ticket(self, slot: int) -> int | None:
        """The ticket of the save shared ``slot`` holds, or ``None``; out of range raises."""
        return self._shared_tickets[self.shared_index(slot)]

    def commit_shared(
        self,
        slots: Sequence[int],
        lengths: Sequence[int],
        tickets: Sequence[int],
        failed: Sequence[int] = (),
    ) -> None:
        """Tag shared ``slots[k]`` with ``lengths[k]`` and ``tickets[k]``, but the ``failed`` k.

        Bad columns raise naming them, with nothing tagged.
        """
        columns = (slots, lengths, tickets, failed)
        self._commit_shared(*_tag_columns(("slots", "lengths"), self._shared_slots, *columns))

    def forget_shared(self, slots: Sequence[int]) -> None:
        """Mark the shared ``slots`` as holding nothing (a failed save, a copy that raised)."""
        self._forget_shared(_indices("slots", slots, self._shared_slots))

    def _commit_shared(
        self,
        slots: Sequence[int],
        lengths: Sequence[int],
        tickets: Sequence[int],
        failed: Sequence[int] = (),
    ) -> None:
        held_lengths, held_tickets = self._shared_lengths, self._shared_tickets
        seen = self._shared_seen
        taken = [seen[slots[k]] for k in failed]  # what the failed saves' slots had taken
        for slot, length, ticket in zip(slots, lengths, tickets, strict=True):
            held_lengths[slot] = length
            held_tickets[slot] = seen[slot] = ticket
        for k, before in zip(failed, taken, strict=True):
            seen[slots[k]] = before
        self._forget_shared([slots[k] for k in failed])

    def _forget_shared(self, slots: Sequence[int]) -> None:
        for slot in slots:
            self._shared_lengths[slot] = self._shared_tickets[slot] = None

    def _held_shared_now(self, slots: list[int]) -> SharedHeld:
        lengths, tickets = self._shared_lengths, self._shared_tickets
        return [lengths[slot] for slot in slots], [tickets[slot] for slot in slots]

    def _seen_shared_now(self, slots: list[int]) -> list[int | None]:
        return [self._shared_seen[slot] for slot in slots]

    def _held(
        self, seqs: list[int], slots: Sequence[int], flat: list[int]
    ) -> tuple[list[int | None], list[int | None]]:
        positions, tickets = self._positions, self._tickets
        return [positions[i] for i in flat], [tickets[i] for i in flat]

    def _held_tickets(
        self, seqs: list[int], slots: Sequence[int], flat: list[int]
    ) -> list[int | None]:
        return list(map(self._seen.__getitem__, flat))  # rule 6: what each slot took

    def _accepted(self, seqs: list[int]) -> list[int | None]:
        return [self._accepted_tickets[seq] for seq in seqs]

    def _may_hold(self, tickets: Sequence[int]) -> bool:
        # A batch whose tickets are all newer than any committed (every step the
        # library mints) cannot be one applied before: one C-speed min, no lookups.
        return min(tickets) <= self._newest_ticket
