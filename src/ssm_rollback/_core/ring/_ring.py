"""The SSM decode ring: which snapshot slot each boundary goes into.

One ring per decode sequence. It holds no tensors: it decides which of the
sequence's ``capacity`` snapshot slots a boundary's SSM state is saved into,
and which slot a rollback to a position can restore from. The rules, which
every method below cites:

1. **Capacity.** ``capacity`` is an ``int >= 0`` fixed at construction.
   ``0`` is a disabled ring: ``record`` returns ``None``, every lookup finds
   nothing, truncation and ``clear`` change nothing.
2. **Arguments.** Every capacity and position is an ``int`` (not ``bool``)
   ``>= 0``; anything else raises ``InvalidArgumentError``. Whatever raises
   leaves the ring exactly as it was.
3. **Order.** ``record(p)`` needs ``p`` greater than every live position,
   else ``OutOfOrderError``: after a rollback, ``truncate_after`` comes
   first. Live entries in recording order therefore have strictly ascending
   positions.
4. **Slot assignment.** ``record`` takes the slot at the cursor and moves
   the cursor one slot on, wrapping at ``capacity``.
5. **Eviction by ownership.** The live entry that owns the slot ``record``
   takes is evicted, whatever its age: the caller is about to overwrite that
   slot's memory, and after a ``truncate_after`` the owner is not always the
   oldest entry. Two entries sharing a slot would let a rollback restore
   state a later save overwrote.
6. **Truncation.** ``truncate_after(k)`` drops the entries with position
   ``> k`` and keeps the one at ``k``. The cursor resumes right after the
   newest survivor's slot (0 when none survives): the dropped entries were
   recorded after it in cursor order, so their slots are reused before any
   survivor is evicted.
7. **Failed saves.** ``discard(p)`` removes the entry at exactly ``p`` and
   returns its slot; when it was the newest, the cursor moves back onto that
   slot so the next record reuses it. An unknown ``p`` raises
   ``UnknownSnapshotError``.
8. **Clear.** ``clear()`` drops every entry and puts the cursor at 0 (the
   sequence finished or was preempted and its pool row is reused).
9. **Invariant.** At most ``capacity`` live entries; every slot in
   ``[0, capacity)``; no two live entries share a slot; positions strictly
   ascending; tickets strictly ascending with them; cursor in
   ``[0, capacity)``, or 0 when disabled. ``check_valid()`` verifies it.
10. **Tickets.** Every ``record`` mints a ticket: an ``int`` no other
   ``record`` in the process has had (one process-wide counter). The entry,
   the save and the restore carry it, and a pool restores a slot only when
   the slot holds exactly that ticket. A position cannot tell a branch
   re-recorded after a rollback, or a reused row, from the snapshot it
   replaced; a ticket can.

Cost: ``record`` is O(1) and a handful of list stores; ``truncate_after``
walks back over the dropped entries only; the newest-first walk a rollback
does stops at its hit; ``slot_for_position`` tries the newest slot first
and otherwise scans the slots at C speed. The live entries are two lists
indexed by slot (position, -1 for none; ticket), in the cursor's cyclic
order: read from the cursor round, the live positions ascend (rules 3, 4,
6 and 7 each keep that so), which is what the walks rely on.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import NoReturn, final

import attrs

from ..._errors import (
    InvariantError,
    OutOfOrderError,
    UnknownSnapshotError,
    check_non_negative_int,
    shown,
)
from . import _tickets as tickets

__all__ = [
    "SsmDecodeRing",
    "SsmRingEntry",
    "newest_first",
    "newest_position",
    "record_ticketed",
    "refuse_order",
]


def _non_negative_int(_instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    check_non_negative_int(attribute.name, value)


@attrs.frozen
class SsmRingEntry:
    """One live snapshot: the SSM state after ``token_position`` generated tokens, in a slot.

    A rollback that keeps ``keep_len`` tokens needs the entry whose
    ``token_position == keep_len``.
    """

    token_position: int = attrs.field(validator=_non_negative_int)
    snapshot_slot: int = attrs.field(validator=_non_negative_int)
    #: The ticket ``record`` minted for this snapshot (rule 10).
    ticket: int = attrs.field(validator=_non_negative_int)


def _capacity(value: int) -> int:
    return check_non_negative_int("capacity", value)


@final
# No on_setattr hooks: attrs would otherwise run the capacity converter's
# machinery on every cursor update, tripling the cost of ``record``.
@attrs.define(eq=False, repr=False, on_setattr=attrs.setters.NO_OP, getstate_setstate=False)
class SsmDecodeRing(tickets.HoldsTickets):
    """Bookkeeping of one decode sequence's SSM snapshots (rules in this module's docstring).

    ``capacity`` is the number of snapshot slots the pool reserved for the
    sequence; ``0`` disables the ring. No tensors, no I/O: the scheduler
    saves into the slot ``record`` returns and restores from the slot
    ``slot_for_position`` finds.
    """

    _capacity: int = attrs.field(converter=_capacity)
    # slot -> the position it holds, _EMPTY for none. Grown one slot at a time
    # as the cursor first reaches it (a huge capacity costs nothing up front);
    # the cursor never passes its end. Plain ints, not NewTypes: a NewType call
    # costs ~100 ns on the per-boundary path, and only this module reads it.
    _positions: list[int] = attrs.field(init=False, factory=list)
    # slot -> ticket of the slot's newest record (rule 10); meaningful only
    # where the slot holds a position.
    _tickets: list[int] = attrs.field(init=False, factory=list)
    _cursor: int = attrs.field(init=False, default=0)
    # The newest live position (-1 when none): the order check of rule 3.
    _newest: int = attrs.field(init=False, default=-1)

    def _newest_held(self) -> int:
        return max(self._tickets, default=-1)

    @property
    def capacity(self) -> int:
        """Number of snapshot slots this sequence has (rule 1)."""
        return self._capacity

    @property
    def is_enabled(self) -> bool:
        """``capacity > 0``; a disabled ring records nothing (rule 1)."""
        return self._capacity > 0

    @property
    def next_slot(self) -> int:
        """The slot the next ``record`` will take (the cursor, rule 4)."""
        return self._cursor

    @property
    def entries(self) -> tuple[SsmRingEntry, ...]:
        """The live entries, oldest first."""
        positions, tickets = self._positions, self._tickets
        return tuple(SsmRingEntry(positions[s], s, tickets[s]) for s in self._oldest_first())

    def __len__(self) -> int:
        return len(self._positions) - self._positions.count(_EMPTY)

    def __repr__(self) -> str:
        live = ", ".join(f"{e.token_position}@{e.snapshot_slot}#{e.ticket}" for e in self.entries)
        return (
            f"SsmDecodeRing(capacity={self._capacity}, next_slot={self._cursor}, entries=[{live}])"
        )

    def record(self, token_position: int) -> int | None:
        """Reserve the slot for a snapshot after ``token_position`` tokens; return it.

        Returns ``None`` on a disabled ring (rule 1). Otherwise the caller
        must save the SSM state into the returned slot, or ``discard`` the
        entry if the save fails; ``entry_for(token_position)`` has the ticket
        the save carries. Rules 2-5 and 10.
        """
        recorded = record_ticketed(self, token_position)
        return None if recorded is None else recorded[0]

    def _newest_live(self) -> int:
        """The newest live position from the slot table (-1 when none): what ``_newest`` caches.

        Read from the cursor round, the live positions ascend, so the slot
        before the cursor holds the newest when it is live; else the largest.
        """
        positions = self._positions
        if not positions:
            return _EMPTY
        guess = positions[self._cursor - 1]
        return guess if guess != _EMPTY else max(positions)

    def _slot_holding(self, position: int) -> int | None:
        """The slot whose live entry is at ``position``, or ``None``."""
        if position > self._newest:
            return None
        positions = self._positions
        newest = self._cursor - 1  # where the newest usually is: a rollback's usual target
        if positions and positions[newest] == position:
            return newest % len(positions)
        try:
            return positions.index(position)
        except ValueError:
            return None

    def entry_for(self, position: int) -> SsmRingEntry | None:
        """The live entry at exactly ``position`` (its slot and ticket), or ``None``. Rule 2."""
        if type(position) is not int or position < 0:
            position = check_non_negative_int("position", position)
        slot = self._slot_holding(position)
        return None if slot is None else SsmRingEntry(position, slot, self._tickets[slot])

    def slot_for_position(self, keep_len: int) -> int | None:
        """The slot holding the snapshot at exactly ``keep_len`` tokens, or ``None``. Rule 2."""
        if type(keep_len) is not int or keep_len < 0:
            keep_len = check_non_negative_int("keep_len", keep_len)
        return self._slot_holding(keep_len)

    def snapshot_positions(self) -> tuple[int, ...]:
        """The positions that have a live snapshot, in recording (= ascending) order."""
        positions = self._positions
        return tuple(positions[slot] for slot in self._oldest_first())

    def _oldest_first(self) -> Iterator[int]:
        """The live slots in cyclic order from the cursor: ascending positions."""
        positions, cursor = self._positions, self._cursor
        for slot in itertools.chain(range(cursor, len(positions)), range(cursor)):
            if positions[slot] != _EMPTY:
                yield slot

    def _newest_first_slots(self) -> Iterator[int]:
        """The live slots, newest first, lazily: a rollback usually stops at the first."""
        positions, cursor = self._positions, self._cursor
        for slot in itertools.chain(
            range(cursor - 1, -1, -1), range(len(positions) - 1, cursor - 1, -1)
        ):
            if positions[slot] != _EMPTY:
                yield slot

    def truncate_after(self, keep_len: int) -> None:
        """Forget every snapshot after ``keep_len`` tokens (a rollback to ``keep_len``). Rule 6."""
        keep = check_non_negative_int("keep_len", keep_len)
        positions = self._positions
        count = len(positions)
        slot = self._cursor
        # The dropped entries are the newest ones: walk back from the cursor to
        # the first survivor (a plain loop: this runs on every rollback).
        for _ in range(count):
            slot = slot - 1 if slot else count - 1
            position = positions[slot]
            if position == _EMPTY:
                continue
            if position <= keep:
                self._newest = position
                self._cursor = slot + 1 if slot + 1 < self._capacity else 0
                return
            positions[slot] = _EMPTY
        self.clear()

    def discard(self, token_position: int) -> int:
        """Drop the entry at exactly ``token_position`` (a failed save); return its slot. Rule 7."""
        position = check_non_negative_int("token_position", token_position)
        slot = self._slot_holding(position)
        if slot is None:
            raise UnknownSnapshotError(
                f"'token_position' must be a live snapshot position "
                f"({_summarise(self.snapshot_positions())}), got {shown(position)}"
            )
        self._positions[slot] = _EMPTY
        if position == self._newest:
            self._cursor = slot
            self._newest = self._newest_live()
        return slot

    def clear(self) -> None:
        """Drop every entry and reset the cursor: the sequence's pool row is reused. Rule 8."""
        self._positions.clear()
        self._tickets.clear()
        self._cursor = 0
        self._newest = -1

    def check_valid(self) -> None:
        """Raise ``InvariantError`` naming the first broken invariant (rule 9); for tests."""
        capacity, cursor = self._capacity, self._cursor
        positions, tickets = self._positions, self._tickets
        if len(positions) != len(tickets) or len(positions) > capacity:
            raise InvariantError(
                f"slot tables of {len(positions)} positions and {len(tickets)} tickets for "
                f"capacity {capacity}"
            )
        if not (0 <= cursor < capacity or cursor == capacity == 0) or cursor > len(positions):
            raise InvariantError(f"cursor {cursor} outside [0, {capacity}) or past the slots used")
        live = list(self._oldest_first())
        in_order = [positions[s] for s in live]
        if any(p < 0 for p in in_order) or len(set(in_order)) != len(in_order):
            raise InvariantError(
                f"two live entries share a position, or one is negative: {in_order}"
            )
        if any(a >= b for a, b in itertools.pairwise(in_order)):
            raise InvariantError(
                f"live positions are not strictly ascending from the cursor: {in_order}"
            )
        ticket_order = [tickets[s] for s in live]
        if any(a >= b for a, b in itertools.pairwise(ticket_order)) or any(
            t <= 0 for t in ticket_order
        ):
            raise InvariantError(
                f"live tickets are missing or not ascending with their positions: {ticket_order}"
            )
        newest = in_order[-1] if in_order else -1
        if self._newest != newest or self._newest_live() != newest:
            raise InvariantError(
                f"cached newest position {self._newest} (from the slots: "
                f"{self._newest_live()}) is not the newest live entry's, {newest}"
            )


_EMPTY = -1  # a slot that holds no live entry


# -- The ring's API for the rest of the core -----------------------------------------
# Module functions rather than methods: the planners call them once per boundary or per
# batch, and they are the only code outside the class that touches its slot tables.


def newest_position(ring: SsmDecodeRing) -> int:
    """The newest live position, or -1 when none is live (what rule 3 compares against)."""
    return ring._newest


def newest_first(ring: SsmDecodeRing) -> Iterator[int]:
    """The live positions, newest first, lazily: a rollback usually stops at the first."""
    positions = ring._positions
    return (positions[slot] for slot in ring._newest_first_slots())


def record_ticketed(ring: SsmDecodeRing, token_position: int) -> tuple[int, int] | None:
    """``ring.record(token_position)``, returning ``(slot, ticket)``: the per-boundary path.

    Rules 1-5 and 10; ``None`` on a disabled ring.
    """
    if type(token_position) is not int or token_position < 0:  # rule 2, fast path first
        token_position = check_non_negative_int("token_position", token_position)
    capacity = ring._capacity
    if not capacity:
        return None
    if token_position <= ring._newest:
        refuse_order("'token_position'", "the ring", ring._newest, token_position)
    slot = ring._cursor
    ring._cursor = slot + 1 if slot + 1 < capacity else 0
    ring._newest = token_position
    ticket = tickets.mint_ticket()
    # Rule 5: the slot's owner, whoever it is, is overwritten with it.
    try:
        ring._positions[slot] = token_position
        ring._tickets[slot] = ticket
    except IndexError:  # the cursor's first visit to this slot
        ring._positions.append(token_position)
        ring._tickets.append(ticket)
    return slot, ticket


def refuse_order(argument: str, owner: str, newest: int, position: int) -> NoReturn:
    """Rule 3's error: the one wording of an out-of-order record, per row or batched."""
    raise OutOfOrderError(
        f"{argument} must be greater than {owner}'s newest live snapshot position {newest}, "
        f"got {position}; truncate_after() the ring after a rollback before recording again"
    )


def _summarise(positions: tuple[int, ...], limit: int = 8) -> str:
    if not positions:
        return "none are live"
    if len(positions) <= limit:
        return "live: " + ", ".join(map(str, positions))
    return f"live: {positions[0]} ... {positions[-1]} ({len(positions)} in all)"
