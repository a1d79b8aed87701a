"""Tensor-parallel workers: a step's effects over ``torch.distributed``, and an agreement check.

The scheduler decides on one rank; every tensor-parallel rank holds its own
shard of the SSM state in its own pool. Per step:

1. ``broadcast_effects(effects, src=scheduler)`` on every rank: the
   scheduler's effects travel as int64 words in one message of a buffer
   each group keeps (``_wire_channel``: tagged sends on gloo, a
   ``broadcast`` on NCCL), no pickling, and every rank - the scheduler
   included - gets the same decoded tuple back. Bad input raises
   ``SsmRollbackError`` on every rank: each rank makes the same calls in the
   same order and decodes the same words, so an error cannot leave a peer
   waiting.
2. The scheduler applies them with ``apply_effects(pool, effects, rings)``;
   a worker, which has no rings, with ``apply_on_worker(pool, effects)``.
3. ``check_agreement(pool)`` on every rank: one small ``all_gather`` of a
   digest of each rank's slot tags. A rank whose save failed (its slot holds
   nothing where its peers hold the ticket) raises ``AgreementError`` on
   every rank, naming that rank and the slots; the scheduler then retires
   those snapshots with ``retire_disputed``.

``shard_live_states``, ``shard_of`` and ``shard_pool`` size and build each
rank's pool from ``ssm_rollback.reserve``'s per-rank shapes, split the way
vLLM splits them.

Without an initialised process group everything runs as a single rank: no
collective, the same checks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, MutableMapping, Sequence
from typing import Final, final

import attrs
import torch
import torch.distributed as dist

from ._core.effect_dict import Effect
from ._core.ring import SsmDecodeRing, SsmRingEntry
from ._errors import InvalidArgumentError, InvariantError, check_non_negative_int
from ._tp import channel as _wire_channel
from ._tp import wire as _wire
from ._tp.shard import shard_live_states, shard_of, shard_pool
from .pool import Rings, SaveOutcome, SnapshotPool, apply_effects

__all__ = [
    "AgreementError",
    "SlotDispute",
    "WireError",
    "apply_on_worker",
    "broadcast_effects",
    "check_agreement",
    "retire_disputed",
    "shard_live_states",
    "shard_of",
    "shard_pool",
]

WireError = _wire.WireError


# -- the process group -------------------------------------------------------------------------


def _active(group: dist.ProcessGroup | None) -> bool:
    return dist.is_available() and dist.is_initialized()


def _device(group: dist.ProcessGroup | None) -> torch.device:
    """Where this group's collectives want their tensors: the CPU if it has a CPU backend."""
    return _wire_channel.buffer_device(str(dist.get_backend_config(group)))


# -- effects --------------------------------------------------------------------------------


def broadcast_effects(
    effects: Iterable[Effect] | None, *, src: int, group: dist.ProcessGroup | None = None
) -> tuple[Effect, ...]:
    """The scheduler's step effects on every rank, as int64 words; call it on every rank.

    ``src`` is the scheduler's global rank (as in ``torch.distributed.broadcast``);
    only it passes ``effects`` (the others pass ``None``, or anything: it is
    ignored). One message per step, of a buffer the group keeps from step to
    step: on gloo a send from ``src`` to each rank (tagged ``b"SSMR"``, apart
    from the engine's own messages), on NCCL a ``broadcast``. The group's
    first step first checks every rank's wire format version (one
    ``all_reduce``), and a step too big for the buffer grows it with a
    second message. Every rank decodes the same words,
    so all return equal tuples or all raise: ``InvalidArgumentError`` when
    the scheduler's input was bad (with its message), ``WireError`` when the
    ranks speak different format versions or the words do not decode.
    """
    src = check_non_negative_int("src", src)
    if not _active(group):
        if src != 0:
            raise InvalidArgumentError(
                f"'src' must be 0 without an initialised process group (one rank), got {src}"
            )
        return _wire.decode(_wire.encode(() if effects is None else effects))
    if src >= dist.get_world_size():  # every rank refuses alike, before any collective
        raise InvalidArgumentError(
            f"'src' must be a rank < the world size {dist.get_world_size()}, got {src}"
        )
    return _wire_channel.step(effects, src=src, group=group)


@final
class _NoRings(Mapping[int, SsmDecodeRing]):
    """A worker's stand-in for the scheduler's rings: a disabled ring for every row.

    ``apply_effects`` then checks and batches exactly as on the scheduler,
    and its discard of a failed save finds no entry: a worker reports failed
    saves, the scheduler's rings (through ``check_agreement``) act on them.
    """

    _ring: Final = SsmDecodeRing(0)

    def __getitem__(self, seq: int) -> SsmDecodeRing:
        return self._ring

    def __contains__(self, seq: object) -> bool:
        return True

    def __iter__(self) -> _EmptyIterator:
        return _EmptyIterator()

    def __len__(self) -> int:
        return 0


@final
class _EmptyIterator:
    def __iter__(self) -> _EmptyIterator:
        return self

    def __next__(self) -> int:
        raise StopIteration


_NO_RINGS: Final = _NoRings()


def apply_on_worker(pool: SnapshotPool, effects: Iterable[Effect]) -> SaveOutcome:
    """A worker's ``apply_effects``: the same checks, batching and order, without rings.

    Returns the saves that failed on this rank; ``check_agreement`` is how
    the scheduler hears of them.
    """
    return apply_effects(pool, effects, _NO_RINGS)


# -- agreement ------------------------------------------------------------------------------


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
    device = _device(group)
    mine = torch.tensor(values, dtype=torch.int64, device=device)
    everyone = [torch.empty_like(mine) for _ in range(dist.get_world_size(group))]
    dist.all_gather(everyone, mine, group=group)
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
    """
    if not _active(group):
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
