"""Whether every tensor-parallel rank's pool holds the same snapshots, and what to do if not.

``check_agreement`` gathers a digest of every rank's slot tags - ring slots,
the shared slots of prefix snapshots when the pool has them (SPEC 13), and
each row's last accept - and, only when they differ, the tags themselves,
to name the rank, the slots and the rows (``disputes``); ``retire_disputed``
is the scheduler's answer to its ``AgreementError``.
``ssm_rollback.distributed`` re-exports them.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from typing import Final, cast

import torch
import torch.distributed as dist

from .._errors import InvalidArgumentError, InvalidArgumentTypeError, SsmRollbackError
from ..pool import SharedSnapshotPool, SnapshotPool, _check_pool
from ..pool._base import TaggedPool
from .disputes import (
    ROW_WORDS,
    SHARED_ROW,
    AgreementError,
    find_disputes,
    odd_one,
)
from .failures import lost
from .groups import group_active, group_device, group_label

__all__ = ["check_agreement"]

# A known dispute's words, unchanged since it was reported. Not -2: CPython hashes -1 as -2,
# so (-2, -2) and an empty slot's (-1, -1) would give one digest.
_EXCUSED: Final = -3


def _shared_slots(pool: SnapshotPool) -> int:
    """How many shared slots the pool holds (0 for a pool without them)."""
    return pool.shared_slots if isinstance(pool, SharedSnapshotPool) else 0


def _tags(
    pool: SnapshotPool,
    shared: int,
    staged: list[int],
    known: Mapping[tuple[int, int], tuple[int, int]] | None,
) -> tuple[list[int], list[int]]:
    """Every key's pair of words, -1 for nothing; and the same with known disputes excused.

    The ring slots by row as ``(position, ticket)``, then the ``shared``
    shared slots as ``(-1, ticket)`` (a pool records no position of a shared
    slot, and its ticket alone names the prefix placed there: no two
    placements share one), then each row as ``(intermediate count, ticket of
    its last accept)``: a row whose accept or verify buffer reached some
    ranks only has a different live state on each.
    """
    rows, slots = pool.num_sequences, pool.slots_per_sequence
    actual: list[int] = []
    compared: list[int] = []

    def add(key: tuple[int, int], first: int | None, second: int | None) -> None:
        tag = (-1 if first is None else first, -1 if second is None else second)
        actual.extend(tag)
        excused = known is not None and known.get(key) == tag
        compared.extend((_EXCUSED, _EXCUSED) if excused else tag)

    for seq in range(rows):
        for slot in range(slots):
            add((seq, slot), pool.stored_position(seq, slot), pool.stored_ticket(seq, slot))
    if shared:
        shared_pool = cast(SharedSnapshotPool, pool)  # _shared_slots asked the protocol
        for slot in range(shared):
            add((SHARED_ROW, slot), None, shared_pool.stored_shared_ticket(slot))
    accepted = _accepted(pool)
    for seq in range(rows):
        add((seq, ROW_WORDS), staged[seq] if staged else None, accepted[seq])
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


def _staged(pool: SnapshotPool) -> list[int]:
    """How many intermediate states each row's buffer holds, for a ``VerifyBufferPool`` (an
    accept applies on a rank whose buffer holds its index, and is refused on one whose does
    not); none for other pools."""
    count = getattr(pool, "intermediate_count", None)
    if not callable(count):
        return []
    return [count(seq) for seq in range(pool.num_sequences)]


def _accepted(pool: SnapshotPool) -> list[int | None]:
    """The ticket of the last accept each row applied (rule 7), for a pool of this library
    (``None`` for every row of a third-party pool: the protocol does not report it)."""
    if not issubclass(type(pool), TaggedPool):
        return [None] * pool.num_sequences
    return cast(TaggedPool, pool)._slot_tags()._accepted(list(range(pool.num_sequences)))


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
    ``all_gather`` of a six-word digest (whether this rank accepted its
    arguments; the pool's shape - rows, ring slots, shared slots, and the
    most intermediate states a row's buffer holds - and a hash of every ring
    slot's position and ticket, for a ``SharedSnapshotPool`` every shared
    slot's ticket, and per row the ticket of the last accept it applied (on
    the library's pools) and, for a ``VerifyBufferPool``, its intermediate
    count); a rank whose ``pool`` or ``known`` is refused takes part saying
    so, and every rank raises ``InvalidArgumentError`` (none waits for it);
    only when they differ, a second one of the tags themselves, to name the
    rank and the slots. A shared save that failed on one rank is caught like
    a ring save: the error's ``shared_disputes`` names the shared slot. An
    accept or a verify step's buffer that reached some ranks only is named
    in ``row_disputes``: that row's live state differs between ranks, and no
    slot can bring it back - the scheduler ends or re-prefills its request.

    ``known`` (the same dict passed on every call, on every rank) makes the
    check report each dispute once: on raising, the disputed slots are
    recorded there with this rank's tags (a shared slot under ``(SHARED_ROW,
    slot)``, a row under ``(seq, ROW_WORDS)``), and later checks pass over a
    slot while it still holds what it held then - the scheduler has retired
    it (``retire_disputed``) and no restore will name it. The next save that
    writes the slot on every rank (for a row: the next verify step or
    accept) brings it back under the check.

    A peer that died, or did not call within the group's timeout, is
    ``DistributedError`` (naming the group; the backend does not say which rank).
    """
    # The same checks on one rank as on many. A rank whose arguments are refused still takes
    # part in the gather, saying so, so that every rank raises and none waits for it.
    refused: SsmRollbackError | None = None
    try:
        pool = _check_pool(pool)
        if known is not None and not isinstance(known, MutableMapping):
            raise InvalidArgumentTypeError(
                f"'known' must be a dict kept from call to call, or None, got "
                f"{type(known).__name__}"
            )
    except SsmRollbackError as error:
        refused = error
    if not group_active(group):
        if refused is not None:
            raise refused
        return
    resolved = dist.group.WORLD if group is None else group
    if not isinstance(resolved, dist.ProcessGroup) or dist.get_rank(resolved) < 0:
        raise InvalidArgumentError(
            f"'group' must hold this rank ({dist.get_rank()}) to check agreement over it"
        )
    if refused is None:
        shared = _shared_slots(pool)
        staged = _staged(pool)
        actual, compared = _tags(pool, shared, staged, known)
        shape = [pool.num_sequences, pool.slots_per_sequence, shared, max(staged, default=0)]
        words = [0, *shape, _digest(compared)]
    else:  # the same six words, saying so
        words = [1, 0, 0, 0, 0, 0]
    everyone = _gather(words, group)
    if refused is not None:
        raise refused
    if any(d[0] for d in everyone):
        bad = next(r for r, d in enumerate(everyone) if d[0])
        raise InvalidArgumentError(
            f"every rank must pass check_agreement arguments it accepts, got rank {bad}'s "
            f"refused there (its error says which): every rank raises, none compares"
        )
    digests = [d[1:] for d in everyone]
    if all(d == digests[0] for d in digests):
        return
    shapes = [tuple(d[:4]) for d in digests]
    if any(s != shapes[0] for s in shapes):
        raise AgreementError(
            f"every rank's pool must have the same (num_sequences, slots_per_sequence, "
            f"shared_slots, intermediate states per row), got {shapes} by rank",
            odd_one(shapes),
            (),
        )
    tables = _gather([*actual, *compared], group)
    half = len(actual)
    rows, slots = pool.num_sequences, pool.slots_per_sequence
    disputes, shared_disputes, row_disputes, disputed, settled = find_disputes(
        [t[half:] for t in tables], [t[:half] for t in tables], rows, slots, shared
    )
    if known is not None:
        for key in settled:  # every rank holds the same again: back under the check
            known.pop(key, None)
        for key, at in disputed.items():  # this rank's own words there
            known[key] = (actual[2 * at], actual[2 * at + 1])
    if not (disputes or shared_disputes or row_disputes):
        return  # only excusals differed: the ranks agree
    named = [f"(seq {d.seq}, slot {d.slot}): tickets {d.tickets}" for d in disputes]
    named += [f"(shared slot {d.slot}): tickets {d.tickets}" for d in shared_disputes]
    named += [
        f"(row {d.seq}): accept tickets {d.accept_tickets}, intermediate states "
        f"{d.intermediate_counts}"
        for d in row_disputes
    ]
    more = f" and {len(named) - 4} more" if len(named) > 4 else ""
    rank = odd_one([d[4] for d in digests])
    raise AgreementError(
        f"every rank's slots must hold the same snapshots, and its rows the same live state, "
        f"got rank {rank} differing on {len(named)} - {', '.join(named[:4])}{more}",
        rank,
        disputes,
        shared_disputes,
        row_disputes,
    )
