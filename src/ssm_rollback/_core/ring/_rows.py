"""The ring's batched record: many rows' boundaries recorded at once, all or none.

``snapshot_boundaries`` and ``commit_verified_batch`` hand their rows here:
one C-speed-friendly loop checks rule 3 for every row (a ring named for
several rows is checked at each against the rows before), then one tight
loop records them all (rules 4, 5 and 10). Part of the ring: this module
and ``_ring`` are the only code that touches a ring's slot tables.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..._errors import OutOfOrderError
from ._ring import SsmDecodeRing, refuse_order
from ._tickets import mint_tickets

__all__ = ["RowNames", "record_rows"]

#: ``describe(j) -> (argument, owner)`` for row ``j`` of a batched record: how an error
#: names the position (``"'positions[3]'"``) and whose ring it records into (``"row 5"``).
RowNames = Callable[[int], tuple[str, str]]


def record_rows(
    rings: list[SsmDecodeRing], positions: list[int], describe: RowNames
) -> tuple[list[int] | None, list[int], Sequence[int]]:
    """Record ``positions[j]`` into ``rings[j]`` for every ``j``: all of them, or none.

    The batched ``record`` (rules 1-5 and 10), for a step's rows. Positions
    must already be ints ``>= 0`` (rule 2: the caller's column check). A ring
    may be named for several rows; each row is checked against its ring as
    the earlier rows leave it, as per-row calls would be. A position not past
    its ring's newest raises ``OutOfOrderError`` naming ``describe(j)``, with
    no ring changed. Rows whose ring is disabled record nothing (rule 1).

    Returns ``(kept, slots, tickets)``: the rows that recorded (``None`` when
    all of them did) and, in row order, the slot each took and its ticket.
    """
    if _rows_ready(rings, positions):
        slots, tickets = _record_rows(rings, positions)
        return None, slots, tickets
    kept = _check_rows(rings, positions, describe)
    rings = [rings[j] for j in kept]
    positions = [positions[j] for j in kept]
    if not _rows_ready(rings, positions):  # pragma: no cover - _check_rows passed them
        raise AssertionError("rows that passed the order check were refused")
    slots, tickets = _record_rows(rings, positions)
    return kept, slots, tickets


def _rows_ready(rings: list[SsmDecodeRing], positions: list[int]) -> bool:
    """Whether every ring is enabled and every position is past its ring's newest (rule 3).

    One plain loop: a slot read in a loop costs a fraction of a
    ``map(attrgetter)`` pass. It moves each ring's newest position on to its
    row's as it goes, so a ring named for two rows is checked at the second
    against the first (and ``_record_rows`` need not set it). ``False`` puts
    every newest position back, as it was, for the slow path that names the row.
    """
    for ring, position in zip(rings, positions, strict=True):
        if position <= ring._newest or not ring._capacity:
            break
        ring._newest = position
    else:
        return True
    for ring in rings:
        ring._newest = ring._newest_live()
    return False


def _check_rows(rings: list[SsmDecodeRing], positions: list[int], describe: RowNames) -> list[int]:
    """The slow path of ``record_rows``: the rows on enabled rings, or the first out of order."""
    newest: dict[SsmDecodeRing, tuple[int, int]] = {}  # ring -> (position, j) of its last row
    kept: list[int] = []
    for j, (ring, position) in enumerate(zip(rings, positions, strict=True)):
        if not ring._capacity:
            continue  # rule 1: a disabled ring records nothing, whatever the position
        before = newest.get(ring)
        if before is None and position <= ring._newest:
            argument, owner = describe(j)
            refuse_order(argument, owner, ring._newest, position)
        if before is not None and position <= before[0]:
            argument, owner = describe(j)
            earlier_argument, earlier_owner = describe(before[1])
            raise OutOfOrderError(
                f"{argument} must be greater than {before[0]}, which {earlier_owner} records "
                f"into the same ring earlier in this step ({earlier_argument}), got {position}; "
                f"give every row its own ring"
            )
        newest[ring] = (position, j)
        kept.append(j)
    return kept


def _record_rows(
    rings: list[SsmDecodeRing], positions: list[int]
) -> tuple[list[int], Sequence[int]]:
    """``record_ticketed`` for many rings, inlined: the slots taken and the tickets minted.

    Only right after ``_rows_ready`` said ``True`` for these rows: every ring
    is enabled, every position valid and in order, and every newest position
    already moved on, so nothing here can raise half way through. The loop
    only moves each ring on (rules 4, 5 and 10); a ring named again later
    takes the next slot, as per row.
    """
    tickets = mint_tickets(len(rings))
    slots: list[int] = []
    taken = slots.append
    for ring, position, ticket in zip(rings, positions, tickets, strict=True):
        slot = ring._cursor
        taken(slot)
        ring._cursor = slot + 1 if slot + 1 < ring._capacity else 0
        try:
            ring._positions[slot] = position
            ring._tickets[slot] = ticket
        except IndexError:  # the cursor's first visit to this slot
            ring._positions.append(position)
            ring._tickets.append(ticket)
    return slots, tickets
