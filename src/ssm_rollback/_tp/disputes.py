"""What ``check_agreement`` reports: the disputes between ranks, and the error carrying them.

Every rank contributes one pair of words per key - a ring slot ``(seq,
slot)``, a shared slot ``(SHARED_ROW, slot)``, a row ``(seq, ROW_WORDS)`` -
and a key whose pair differs between ranks is a dispute of its kind.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import attrs

from .._errors import InvariantError

__all__ = [
    "ROW_WORDS",
    "SHARED_ROW",
    "AgreementError",
    "RowDispute",
    "SharedSlotDispute",
    "SlotDispute",
    "find_disputes",
    "key_of",
    "odd_one",
]

#: The row a shared slot is filed under in ``check_agreement``'s ``known``:
#: ``known[(SHARED_ROW, slot)]``. No pool has a row -1.
SHARED_ROW: Final = -1
#: The slot a row's own words (its intermediate count, its last accept's ticket) are filed
#: under in ``known``: ``known[(seq, ROW_WORDS)]``. No ring has a slot -1.
ROW_WORDS: Final = -1


@attrs.frozen
class SlotDispute:
    """A slot the ranks disagree about: the ticket each rank holds there (``None``: nothing)."""

    seq: int
    slot: int
    tickets: tuple[int | None, ...]


@attrs.frozen
class SharedSlotDispute:
    """A shared slot (SPEC 13) the ranks disagree about: the ticket each rank holds there."""

    slot: int
    tickets: tuple[int | None, ...]


@attrs.frozen
class RowDispute:
    """A row whose live state the ranks moved apart: the ticket of the last accept each
    rank applied there (``None``: none, or a pool that does not report it), and how many
    intermediate states each rank's buffer holds for it (``None``: no buffer)."""

    seq: int
    accept_tickets: tuple[int | None, ...]
    intermediate_counts: tuple[int | None, ...]


class AgreementError(InvariantError):
    """The ranks' pools disagree about what their slots hold; raised on every rank alike.

    ``rank`` is the first rank (in group order) whose view differs from the
    majority's (rank 0's when tied); ``disputes`` lists the ring slots,
    ``shared_disputes`` the shared slots of prefix snapshots, and
    ``row_disputes`` the rows where an accept or a verify step's buffer
    reached some ranks only: their live state differs between ranks.
    """

    def __init__(
        self,
        message: str,
        rank: int,
        disputes: tuple[SlotDispute, ...],
        shared_disputes: tuple[SharedSlotDispute, ...] = (),
        row_disputes: tuple[RowDispute, ...] = (),
    ) -> None:
        super().__init__(message)
        self.rank = rank
        self.disputes = disputes
        self.shared_disputes = shared_disputes
        self.row_disputes = row_disputes


def odd_one(values: Sequence[object]) -> int:
    """The first rank whose value is not the majority's (ties: the lowest rank's value wins)."""
    counts: dict[object, int] = {}
    for value in values:
        counts[value] = counts.get(value, 0) + 1
    best = max(counts.values())
    majority = next(v for v in values if counts[v] == best)
    return next(r for r, v in enumerate(values) if v != majority)


def _held(word: int) -> int | None:
    return None if word < 0 else word


def key_of(at: int, rows: int, slots: int, shared: int) -> tuple[int, int]:
    """The ``known`` key of the ``at``-th pair of words: a ring slot, a shared slot, a row."""
    ring_slots = rows * slots
    if at < ring_slots:
        return (at // slots, at % slots)
    if at < ring_slots + shared:
        return (SHARED_ROW, at - ring_slots)
    return (at - ring_slots - shared, ROW_WORDS)


def find_disputes(
    views: list[list[int]], actual: list[list[int]], rows: int, slots: int, shared: int
) -> tuple[
    tuple[SlotDispute, ...],
    tuple[SharedSlotDispute, ...],
    tuple[RowDispute, ...],
    dict[tuple[int, int], int],
    tuple[tuple[int, int], ...],
]:
    """The ring slots, the shared slots and the rows whose words differ by rank; each of
    those keys with its place among the pairs of words (for ``known``); and the keys that
    only a known dispute's excusal made differ (settled: every rank holds the same).

    ``views`` are the words each rank compares (known disputes excused),
    ``actual`` what each rank holds: a pair per ring slot by row, per shared
    slot, then per row (its intermediate count, its last accept's ticket).
    """
    found, found_shared, found_rows, settled = [], [], [], []
    disputed: dict[tuple[int, int], int] = {}
    for k in range(0, len(views[0]), 2):
        pair = (views[0][k], views[0][k + 1])
        if all((v[k], v[k + 1]) == pair for v in views):
            continue
        key = key_of(k // 2, rows, slots, shared)
        held = (actual[0][k], actual[0][k + 1])
        if all((a[k], a[k + 1]) == held for a in actual):
            settled.append(key)  # excused on some ranks only: the disputed slot came back
            continue
        disputed[key] = k // 2
        tickets = tuple(_held(a[k + 1]) for a in actual)
        if key[0] == SHARED_ROW:
            found_shared.append(SharedSlotDispute(key[1], tickets))
        elif key[1] == ROW_WORDS:
            counts = tuple(_held(a[k]) for a in actual)
            found_rows.append(RowDispute(key[0], tickets, counts))
        else:
            found.append(SlotDispute(key[0], key[1], tickets))
    return tuple(found), tuple(found_shared), tuple(found_rows), disputed, tuple(settled)
