"""The scheduler's answer to ``AgreementError``: retire every disputed snapshot it holds."""

from __future__ import annotations

from typing import TypeVar, cast

from .._core.prefix import PrefixSnapshotIndex
from .._core.ring import SsmDecodeRing, SsmRingEntry
from .._errors import InvalidArgumentTypeError, check_non_negative_int, describe
from ..pool import Rings, _check_index
from ..pool._runs import ring_lookup
from .disputes import AgreementError, SharedSlotDispute, SlotDispute

__all__ = ["retire_disputed"]


def retire_disputed(
    rings: Rings, error: AgreementError, *, prefix_index: PrefixSnapshotIndex | None = None
) -> tuple[SsmRingEntry, ...]:
    """The scheduler's answer to ``AgreementError``: discard every disputed snapshot it holds.

    For each ring dispute, the ring entry in that slot is discarded if some
    rank holds its ticket (the save that reached only some ranks), so no
    rollback restores it on any rank. With ``prefix_index`` (the scheduler's
    ``PrefixSnapshotIndex``), each shared dispute's entry is discarded from
    it likewise - the entry in that shared slot whose ticket some rank
    holds - so no later request hits it. Returns the ring entries
    discarded; ``prefix_index.entries()`` shows what is left of the index.
    """
    if not isinstance(error, AgreementError):
        raise InvalidArgumentTypeError(
            f"'error' must be the AgreementError check_agreement raised, got {type(error).__name__}"
        )
    _check_index(prefix_index)
    # Everything checked before the first discard: a bad dispute or ring changes nothing.
    ring_for = ring_lookup(rings)
    doomed: list[tuple[SsmDecodeRing, SsmRingEntry]] = []
    seen: set[tuple[int, int]] = set()
    for i, d in enumerate(_checked_disputes(error.disputes, SlotDispute, "disputes")):
        seq = check_non_negative_int(f"error.disputes[{i}].seq", d.seq)
        ring = ring_for(seq)
        if ring is None:
            continue
        entry = next((e for e in ring.entries if e.snapshot_slot == d.slot), None)
        if entry is not None and entry.ticket in d.tickets and (id(ring), d.slot) not in seen:
            seen.add((id(ring), d.slot))  # once, however often the error names its slot
            doomed.append((ring, entry))
    shared = _checked_disputes(error.shared_disputes, SharedSlotDispute, "shared_disputes")
    for ring, entry in doomed:
        ring.discard(entry.token_position)
    if prefix_index is not None and shared:
        by_slot = {e.slot: e for e in prefix_index.entries()}
        for sd in shared:
            shared_entry = by_slot.pop(sd.slot, None)  # once, however often it is named
            if shared_entry is not None and shared_entry.ticket in sd.tickets:
                prefix_index.discard(shared_entry)
    return tuple(entry for _, entry in doomed)


_D = TypeVar("_D", SlotDispute, SharedSlotDispute)


def _checked_disputes(disputes: object, kind: type[_D], name: str) -> tuple[_D, ...]:
    """``error.<name>`` as a tuple of ``kind``, each with an int slot and a tuple of tickets."""
    if type(disputes) is not tuple:
        raise InvalidArgumentTypeError(
            f"'error.{name}' must be a tuple of {kind.__name__}, got {type(disputes).__name__}"
        )
    for i, d in enumerate(cast(tuple[object, ...], disputes)):
        if type(d) is not kind or type(d.tickets) is not tuple:
            raise InvalidArgumentTypeError(
                f"'error.{name}[{i}]' must be a {kind.__name__}, got {describe(d)}"
            )
        check_non_negative_int(f"error.{name}[{i}].slot", d.slot)
    return cast(tuple[_D, ...], disputes)
