"""The plainest possible port of the seed ring: the model the real ring is checked against.

A list of ``(token_position, slot)`` pairs, scanned on every call, exactly as
the original. It has none of the new strictness (it trusts its input), so a
stateful test only calls it with input the real ring accepts. ``discard`` and
``clear`` are the contract's new members, written as plainly. Tickets are
minted by one process-wide counter, so the reference cannot predict them:
``record`` is told the ticket the real ring minted, and keeps it with the
entry.
"""

from __future__ import annotations

__all__ = ["ReferenceRing"]


class ReferenceRing:
    """Seed-exact list port of the SSM decode ring; O(capacity) per record, by design."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.entries: list[tuple[int, int, int]] = []  # (position, slot, ticket)
        self.next_slot = 0

    def record(self, token_position: int, ticket: int = 0) -> int | None:
        if self.capacity == 0:
            return None
        slot = self.next_slot
        self.next_slot = (self.next_slot + 1) % self.capacity
        self.entries = [e for e in self.entries if e[1] != slot]
        self.entries.append((token_position, slot, ticket))
        return slot

    def slot_for_position(self, keep_len: int) -> int | None:
        for position, slot, _ in self.entries:
            if position == keep_len:
                return slot
        return None

    def ticket_for_position(self, keep_len: int) -> int | None:
        for position, _, ticket in self.entries:
            if position == keep_len:
                return ticket
        return None

    def snapshot_positions(self) -> tuple[int, ...]:
        return tuple(position for position, _, _ in self.entries)

    def truncate_after(self, keep_len: int) -> None:
        self.entries = [e for e in self.entries if e[0] <= keep_len]
        if self.entries:
            self.next_slot = (self.entries[-1][1] + 1) % self.capacity
        elif self.capacity > 0:
            self.next_slot = 0

    def discard(self, token_position: int) -> int:
        for index, (position, slot, _) in enumerate(self.entries):
            if position == token_position:
                if index == len(self.entries) - 1:
                    self.next_slot = slot
                del self.entries[index]
                return slot
        raise KeyError(token_position)

    def clear(self) -> None:
        self.entries = []
        self.next_slot = 0
