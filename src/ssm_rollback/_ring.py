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

Cost: ``record``, ``slot_for_position`` and ``discard`` are O(1) and
``truncate_after`` is O(1) per dropped entry, whatever the capacity: the
live entries are kept in two dicts (position -> slot in recording order,
slot -> position) instead of the list the seed scanned on every record.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import final

import attrs

from ._errors import (
    InvariantError,
    OutOfOrderError,
    UnknownSnapshotError,
    check_non_negative_int,
)

__all__ = ["SsmDecodeRing", "SsmRingEntry"]

# Rule 10: one counter for the process, so no two records anywhere share a
# ticket. ``next`` on an ``itertools.count`` is atomic under the GIL.
_mint_ticket = itertools.count(1).__next__


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
@attrs.define(eq=False, repr=False, on_setattr=attrs.setters.NO_OP)
class SsmDecodeRing:
    """Bookkeeping of one decode sequence's SSM snapshots (rules in this module's docstring).

    ``capacity`` is the number of snapshot slots the pool reserved for the
    sequence; ``0`` disables the ring. No tensors, no I/O: the scheduler
    saves into the slot ``record`` returns and restores from the slot
    ``slot_for_position`` finds.
    """

    _capacity: int = attrs.field(converter=_capacity)
    # position -> slot, in recording order (= ascending position, rule 3).
    # Plain ints, not NewTypes: a NewType call costs ~100 ns on the per-boundary
    # path, and the two dicts are only touched in this module.
    _slot_of: dict[int, int] = attrs.field(init=False, factory=dict)
    # slot -> position: who owns each slot, for eviction (rule 5).
    _owner_of: dict[int, int] = attrs.field(init=False, factory=dict)
    # slot -> ticket of the slot's newest record (rule 10); read only through
    # a live entry's slot, so entries of dropped slots may linger here.
    _ticket_of: dict[int, int] = attrs.field(init=False, factory=dict)
    _cursor: int = attrs.field(init=False, default=0)
    # The newest live position (-1 when none): the order check of rule 3.
    _newest: int = attrs.field(init=False, default=-1)

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
        tickets = self._ticket_of
        return tuple(SsmRingEntry(p, s, tickets[s]) for p, s in self._slot_of.items())

    def __len__(self) -> int:
        return len(self._slot_of)

    def __repr__(self) -> str:
        live = ", ".join(f"{p}@{s}#{self._ticket_of[s]}" for p, s in self._slot_of.items())
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
        recorded = self._record(token_position)
        return None if recorded is None else recorded[0]

    def _record(self, token_position: int) -> tuple[int, int] | None:
        """``record``, returning ``(slot, ticket)``: the per-boundary path of the planners."""
        if type(token_position) is not int or token_position < 0:  # rule 2, fast path first
            token_position = check_non_negative_int("token_position", token_position)
        capacity = self._capacity
        if not capacity:
            return None
        if token_position <= self._newest:
            raise OutOfOrderError(
                f"'token_position' must be greater than the newest live snapshot "
                f"position {self._newest}, got {token_position}; call truncate_after() "
                f"after a rollback before recording again"
            )
        slot = self._cursor
        self._cursor = slot + 1 if slot + 1 < capacity else 0
        owner_of, slot_of = self._owner_of, self._slot_of
        evicted = owner_of.pop(slot, None)
        if evicted is not None:
            del slot_of[evicted]
        slot_of[token_position] = slot
        owner_of[slot] = token_position
        self._newest = token_position
        ticket = self._ticket_of[slot] = _mint_ticket()
        return slot, ticket

    @staticmethod
    def _record_rows(
        rings: list[SsmDecodeRing], positions: list[int], rows: list[int]
    ) -> tuple[list[int], list[int], list[int], list[int]]:
        """``_record`` for many rings, inlined: the columns of the saves a step makes.

        The caller has checked every position (rule 2) and its order (rule 3)
        for every ring, so nothing here can raise half way through.
        """
        seqs: list[int] = []
        slots: list[int] = []
        saved: list[int] = []
        tickets: list[int] = []
        mint = _mint_ticket
        for ring, position, row in zip(rings, positions, rows, strict=True):
            capacity = ring._capacity
            if not capacity:
                continue
            slot = ring._cursor
            ring._cursor = slot + 1 if slot + 1 < capacity else 0
            evicted = ring._owner_of.pop(slot, None)
            if evicted is not None:
                del ring._slot_of[evicted]
            ring._slot_of[position] = slot
            ring._owner_of[slot] = position
            ring._newest = position
            ticket = ring._ticket_of[slot] = mint()
            seqs.append(row)
            slots.append(slot)
            saved.append(position)
            tickets.append(ticket)
        return seqs, slots, saved, tickets

    def entry_for(self, position: int) -> SsmRingEntry | None:
        """The live entry at exactly ``position`` (its slot and ticket), or ``None``. Rule 2."""
        if type(position) is not int or position < 0:
            position = check_non_negative_int("position", position)
        slot = self._slot_of.get(position)
        return None if slot is None else SsmRingEntry(position, slot, self._ticket_of[slot])

    def slot_for_position(self, keep_len: int) -> int | None:
        """The slot holding the snapshot at exactly ``keep_len`` tokens, or ``None``. Rule 2."""
        if type(keep_len) is not int or keep_len < 0:
            keep_len = check_non_negative_int("keep_len", keep_len)
        return self._slot_of.get(keep_len)

    def snapshot_positions(self) -> tuple[int, ...]:
        """The positions that have a live snapshot, in recording (= ascending) order."""
        return tuple(self._slot_of)

    def _newest_first(self) -> Iterator[int]:
        """The live positions, newest first, lazily: a rollback usually stops at the first."""
        return reversed(self._slot_of)

    def _newest_position(self) -> int:
        """The newest live position, or -1 when none is live."""
        return self._newest

    def truncate_after(self, keep_len: int) -> None:
        """Forget every snapshot after ``keep_len`` tokens (a rollback to ``keep_len``). Rule 6."""
        keep = check_non_negative_int("keep_len", keep_len)
        slot_of = self._slot_of
        while slot_of:
            position, slot = slot_of.popitem()  # newest first
            if position <= keep:
                slot_of[position] = slot  # it was the newest; it stays the newest
                self._newest = position
                self._cursor = slot + 1 if slot + 1 < self._capacity else 0
                return
            del self._owner_of[slot]
        self._newest = -1
        self._cursor = 0

    def discard(self, token_position: int) -> int:
        """Drop the entry at exactly ``token_position`` (a failed save); return its slot. Rule 7."""
        position = check_non_negative_int("token_position", token_position)
        slot_of = self._slot_of
        slot = slot_of.get(position)
        if slot is None:
            raise UnknownSnapshotError(
                f"'token_position' must be a live snapshot position "
                f"({_summarise(tuple(slot_of))}), got {position}"
            )
        del slot_of[position]
        del self._owner_of[slot]
        if position == self._newest:
            self._cursor = slot
            self._newest = next(reversed(slot_of), -1)
        return slot

    def clear(self) -> None:
        """Drop every entry and reset the cursor: the sequence's pool row is reused. Rule 8."""
        self._slot_of.clear()
        self._owner_of.clear()
        self._cursor = 0
        self._newest = -1

    def check_valid(self) -> None:
        """Raise ``InvariantError`` naming the first broken invariant (rule 9); for tests."""
        capacity = self._capacity
        slot_of, owner_of = self._slot_of, self._owner_of
        if len(slot_of) > capacity:
            raise InvariantError(f"{len(slot_of)} live entries exceed capacity {capacity}")
        if len(owner_of) != len(slot_of) or any(owner_of.get(s) != p for p, s in slot_of.items()):
            raise InvariantError(
                f"two live entries share a slot, or the slot owners disagree with the "
                f"entries: entries {slot_of}, owners {owner_of}"
            )
        for position, slot in slot_of.items():
            if not 0 <= slot < capacity:
                raise InvariantError(
                    f"entry at position {position} has slot {slot} outside [0, {capacity})"
                )
        positions = list(slot_of)
        if any(a >= b for a, b in itertools.pairwise(positions)):
            raise InvariantError(f"live positions are not strictly ascending: {positions}")
        tickets = [self._ticket_of.get(slot, -1) for slot in slot_of.values()]
        if any(a >= b for a, b in itertools.pairwise(tickets)) or -1 in tickets:
            raise InvariantError(
                f"live tickets are missing or not ascending with their positions: {tickets}"
            )
        if self._newest != next(reversed(slot_of), -1):
            raise InvariantError(
                f"cached newest position {self._newest} is not the newest live entry's"
            )
        if not (0 <= self._cursor < capacity or self._cursor == capacity == 0):
            raise InvariantError(f"cursor {self._cursor} outside [0, {capacity})")


def _summarise(positions: tuple[int, ...], limit: int = 8) -> str:
    if not positions:
        return "none are live"
    if len(positions) <= limit:
        return "live: " + ", ".join(map(str, positions))
    return f"live: {positions[0]} ... {positions[-1]} ({len(positions)} in all)"
