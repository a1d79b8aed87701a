"""Whether every tensor-parallel rank's pool holds the same snapshots, and what to do if not.

``check_agreement`` gathers a digest of every rank's slot tags (and, only
when they differ, the tags themselves, to name the rank and the slots);
``retire_disputed`` is the scheduler's answer to its ``AgreementError``.
``ssm_rollback.distributed`` re-exports them.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping, Sequence
from typing import Final

import attrs
import torch
import torch.distributed as dist

from .._core.ring import SsmDecodeRing, SsmRingEntry
from .._errors import InvariantError
from ..pool import Rings, SnapshotPool
from .failures import lost
from .groups import group_active, group_device, group_label

__all__ = ["AgreementError", "SlotDispute", "check_agreement", "retire_disputed"]


@attrs.frozen
class SlotDispute:
    """A slot the ranks disagree about: the ticket each rank holds there (``None``: nothing)."""

    seq: int
    slot: int
    tickets: tuple[int | None, ...]


class AgreementError(InvariantError):
    """The ranks' pools disagree about what their slots hold; raised on every rank alike.

    ``rank`` is the first rank (in group order) whose view differs from the
    majority's (rank 0's when tied); ``disputes`` lists the slots.
    """

    def __init__(self, message: str, rank: int, disputes: tuple[SlotDispute, ...]) -> None:
        super().__init__(message)
        self.rank = rank
        self.disputes = disputes


_EXCUSED: Final = -2  # a known dispute's slot, unchanged since it was reported


def _tags(
    pool: SnapshotPool, known: Mapping[tuple[int, int], tuple[int, int]] | None
) -> tuple[list[int], list[int]]:
    """Every slot's (position, ticket), -1 for nothing; and the same with known ones excused."""
    rows, slots = pool.num_sequences, pool.slots_per_sequence
    actual: list[int] = []
    compared: list[int] = []
    for seq in range(rows):
        for slot in range(slots):
            ticket = pool.stored_ticket(seq, slot)
            position = pool.stored_position(seq, slot)
            tag = (-1 if position is None else position, -1 if ticket is None else ticket)
            actual += tag
            excused = known is not None and known.get((seq, slot)) == tag
            compared += (_EXCUSED, _EXCUSED) if excused else tag
    return actual, compared


def _gather(values: list[int], group: dist.ProcessGroup | None) -> list[list[int]]:
    device = group_device(group)
    mine = torch.tensor(values, dtype=torch.int64, device=device)
    everyone = [torch.empty_like(mine) for _ in range(dist.get_world_size(group))]
    try:
        dist.all_gather(everyone, mine, group=group)
    except RuntimeError as cause:  # a peer died or never called: DistributedError, not gloo's
        resolved = dist.group.WORLD if group is None else group
        assert isinstance(resolved, dist.ProcessGroup)  # initialised: group_active said so
        raise lost(group_label(resolved), None, "did not check agreement", cause) from cause
    return [t.tolist() for t in everyone]


def _digest(values: list[int]) -> int:
    # Ints hash the same in every process (PYTHONHASHSEED salts only str and
    # bytes), and tuple hashing mixes order in: equal tags, equal digests.
    return hash(tuple(values))


def check_agreement(
    pool: SnapshotPool,
    group: dist.ProcessGroup | None = None,
    *,
    known: MutableMapping[tuple[int, int], tuple[int, int]] | None = None,
) -> None:
    """Raise ``AgreementError`` on every rank unless every rank's slots hold the same tags.

    Call it on every rank after a step's effects were applied. One
    ``all_gather`` of a three-word digest (the pool's shape and a hash of
    every slot's position and ticket); only when they differ, a second one of
    the tags themselves, to name the rank and the slots.

    ``known`` (the same dict passed on every call, on every rank) makes the
    check report each dispute once: on raising, the disputed slots are
    recorded there with this rank's tags, and later checks pass over a slot
    while it still holds what it held then - the scheduler has retired it
    (``retire_disputed``) and no restore will name it. The next save that
    writes the slot on every rank brings it back under the check.

    A peer that died, or did not call within the group's timeout, is
    ``DistributedError`` (naming the group; the backend does not say which rank).
    """
    if not group_active(group):
        return
    actual, compared = _tags(pool, known)
    shape = [pool.num_sequences, pool.slots_per_sequence]
    digests = _gather([*shape, _digest(compared)], group)
    if all(d == digests[0] for d in digests):
        return
    shapes = [(d[0], d[1]) for d in digests]
    if any(s != shapes[0] for s in shapes):
        raise AgreementError(
            f"every rank's pool must have the same (num_sequences, slots_per_sequence), got "
            f"{shapes} by rank",
            _odd_one(shapes),
            (),
        )
    tables = _gather([*actual, *compared], group)
    half = len(actual)
    views = [t[half:] for t in tables]
    rank = _odd_one([d[2] for d in digests])
    disputes = _disputes(views, [t[:half] for t in tables], pool.slots_per_sequence)
    if known is not None:
        for d in disputes:
            flat = 2 * (d.seq * pool.slots_per_sequence + d.slot)
            known[(d.seq, d.slot)] = (actual[flat], actual[flat + 1])
    shown = ", ".join(f"(seq {d.seq}, slot {d.slot}): tickets {d.tickets}" for d in disputes[:4])
    more = f" and {len(disputes) - 4} more" if len(disputes) > 4 else ""
    raise AgreementError(
        f"every rank's slots must hold the same snapshots, got rank {rank} differing on "
        f"{len(disputes)} slots - {shown}{more}",
        rank,
        disputes,
    )


def _odd_one(values: Sequence[object]) -> int:
    """The first rank whose value is not the majority's (ties: the lowest rank's value wins)."""
    counts: dict[object, int] = {}
    for value in values:
        counts[value] = counts.get(value, 0) + 1
    best = max(counts.values())
    majority = next(v for v in values if counts[v] == best)
    return next(r for r, v in enumerate(values) if v != majority)


def _disputes(
    views: list[list[int]], actual: list[list[int]], slots: int
) -> tuple[SlotDispute, ...]:
    found = []
    for k in range(0, len(views[0]), 2):
        pair = (views[0][k], views[0][k + 1])
        if all((v[k], v[k + 1]) == pair for v in views):
            continue
        tickets = tuple(None if a[k + 1] < 0 else a[k + 1] for a in actual)
        found.append(SlotDispute(k // 2 // slots, k // 2 % slots, tickets))
    return tuple(found)


def retire_disputed(rings: Rings, error: AgreementError) -> tuple[SsmRingEntry, ...]:
    """The scheduler's answer to ``AgreementError``: discard every disputed snapshot from its ring.

    For each dispute, the ring entry in that slot is discarded if some rank
    holds its ticket (the save that reached only some ranks), so no rollback
    restores it on any rank. Returns the entries discarded.
    """
    retired = []
    for d in error.disputes:
        ring = rings.get(d.seq) if isinstance(rings, Mapping) else _row(rings, d.seq)
        if ring is None:
            continue
        entry = next((e for e in ring.entries if e.snapshot_slot == d.slot), None)
        if entry is not None and entry.ticket in d.tickets:
            ring.discard(entry.token_position)
            retired.append(entry)
    return tuple(retired)


def _row(rings: Sequence[SsmDecodeRing], seq: int) -> SsmDecodeRing | None:
    return rings[seq] if seq < len(rings) else None
