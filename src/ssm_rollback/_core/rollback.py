"""When to snapshot, which boundary a rollback can reach, and the plan that gets there.

The scheduler keeps, per sequence, its ``boundaries``: the strictly ascending
token positions (output lengths) at which a boundary token was committed.
After committing each token it calls ``snapshot_boundary_if_ssm``; to roll
back it calls ``rollback_to_boundary`` and carries out the plan: hand its
effects to the pool (``apply_effects``), truncate its tokens and attention KV
to ``plan.keep_len``. A shortfall (no reachable boundary, no live snapshot,
a disabled ring) is a ``RollbackDeclined`` value, never an exception.

A rollback is two steps, so that a caller with more to move (a grammar
matcher, the KV) can decide before anything moves: ``plan_rollback``
decides and changes nothing, ``commit_rollback`` truncates the ring to the
plan once the caller has done its part. ``rollback_to_boundary`` is both.

``boundaries`` can be long (thousands of entries); nothing here scans it.
Lookups bisect it, guided by the ring's few live positions, and only the
elements actually read are checked (a violation seen is an
``InvalidArgumentError``).
"""

from __future__ import annotations

import enum
from bisect import bisect_right
from collections.abc import Iterable, Sequence

import attrs

from .._errors import (
    InvalidArgumentError,
    InvalidArgumentTypeError,
    StaleSnapshotError,
    check_non_negative_int,
    shown,
)
from .effects import SsmSnapshotRestore, SsmSnapshotSave, trusted_save
from .ring import SsmDecodeRing, newest_first, newest_position, record_ticketed

__all__ = [
    "DeclineReason",
    "RollbackDeclined",
    "RollbackPlan",
    "check_ring",
    "commit_rollback",
    "find_last_boundary_with_snapshot",
    "plan_rollback",
    "rollback_to_boundary",
    "snapshot_boundary_if_ssm",
]


class DeclineReason(enum.Enum):
    """Why a rollback was declined; when several apply, ``RING_DISABLED`` wins."""

    #: A hybrid model whose ring has capacity 0: every rollback is declined.
    RING_DISABLED = "ring_disabled"
    #: No boundary at or before the rollback limit.
    NO_BOUNDARY = "no_boundary"
    #: Boundaries are reachable, but none of them still has a live snapshot.
    SNAPSHOT_EVICTED = "snapshot_evicted"


@attrs.frozen
class RollbackPlan:
    """A rollback to carry out: apply ``effects``, then truncate tokens and KV to ``keep_len``."""

    seq: int
    keep_len: int
    tokens_dropped: int
    effects: tuple[SsmSnapshotRestore, ...]


@attrs.frozen
class RollbackDeclined:
    """A rollback that cannot be done; nothing was changed."""

    seq: int
    reason: DeclineReason


def check_ring(ring: object) -> SsmDecodeRing:
    """``ring`` if it is an ``SsmDecodeRing``; anything else raises naming it."""
    if type(ring) is not SsmDecodeRing:
        raise InvalidArgumentTypeError(
            f"'ring' must be an SsmDecodeRing, got {shown(ring)} of type {type(ring).__name__}"
        )
    return ring


def _check_bool(name: str, value: object) -> bool:
    if type(value) is not bool:
        raise InvalidArgumentTypeError(
            f"'{name}' must be a bool, got {shown(value)} of type {type(value).__name__}"
        )
    return value


def snapshot_boundary_if_ssm(
    ring: SsmDecodeRing,
    *,
    seq: int,
    token_position: int,
    is_boundary: bool,
    in_thinking: bool,
) -> SsmSnapshotSave | None:
    """After committing a token: record a snapshot if it is a boundary worth rolling back to.

    ``token_position`` is the new output length. Returns the save to hand to
    the pool for a boundary token outside thinking on an enabled ring;
    otherwise ``None``, and nothing changes.
    """
    # Runs for every sequence at every step. Most rows commit a token that is
    # no boundary: every argument passes its identity tests and nothing else
    # runs (no slower than v0.1, which did not check the ring).
    if (
        is_boundary is False
        and type(seq) is int
        and type(token_position) is int
        and seq >= 0
        and token_position >= 0
        and type(ring) is SsmDecodeRing
        and (in_thinking is False or in_thinking is True)
    ):
        return None
    # Plain ints and bools pass a few identity tests (cheaper than type()
    # calls); anything else takes the full check, which names the argument.
    if (
        type(seq) is not int
        or type(token_position) is not int
        or seq < 0
        or token_position < 0
        or type(ring) is not SsmDecodeRing
        or (in_thinking is not False and in_thinking is not True)
        or (is_boundary is not False and is_boundary is not True)
    ):
        check_ring(ring)
        seq = check_non_negative_int("seq", seq)
        token_position = check_non_negative_int("token_position", token_position)
        _check_bool("is_boundary", is_boundary)
        _check_bool("in_thinking", in_thinking)
    if is_boundary is False or in_thinking is True:
        return None
    recorded = record_ticketed(ring, token_position)
    if recorded is None:
        return None
    return trusted_save(seq, recorded[0], token_position, recorded[1])


def _boundary_at(boundaries: Sequence[int], index: int) -> int:
    value = boundaries[index]
    if type(value) is not int or value < 0:
        value = check_non_negative_int(f"boundaries[{index}]", value)
    return value


def _last_boundary_index(boundaries: Sequence[int], limit: int) -> int:
    """Index of the largest boundary ``<= limit``, or -1; checks the elements it reads."""
    try:
        index = bisect_right(boundaries, limit) - 1
    except TypeError:
        # An element bisect compared is not a number: find it for the message.
        for i, value in enumerate(boundaries):
            check_non_negative_int(f"boundaries[{i}]", value)
        raise  # pragma: no cover - bisect only raises for an element the loop refuses
    if index >= 0:
        found = _boundary_at(boundaries, index)
        if index > 0 and _boundary_at(boundaries, index - 1) >= found:
            raise InvalidArgumentError(
                f"'boundaries' must be strictly ascending, got boundaries[{index - 1}] = "
                f"{boundaries[index - 1]} and boundaries[{index}] = {found}"
            )
    return index


def _check_sequence(boundaries: Sequence[int]) -> None:
    if not isinstance(boundaries, Sequence) or isinstance(boundaries, str | bytes):
        raise InvalidArgumentTypeError(
            f"'boundaries' must be a sequence of ints, got {type(boundaries).__name__}"
        )


def _check_last(boundaries: Sequence[int], current_len: int) -> None:
    _check_sequence(boundaries)
    if boundaries:
        last = _boundary_at(boundaries, len(boundaries) - 1)
        if last > current_len:
            raise InvalidArgumentError(
                f"'boundaries' must all be <= current_len {current_len}, "
                f"got a last boundary of {shown(last)}"
            )


def _limit(at_most: int | None, ceiling: int | None) -> int | None:
    if at_most is not None:
        at_most = check_non_negative_int("at_most", at_most)
    if ceiling is None:
        return at_most
    return ceiling if at_most is None else min(at_most, ceiling)


def _find(newest_first: Iterable[int], boundaries: Sequence[int], limit: int | None) -> int | None:
    # Try the ring's live positions newest first, lazily (the newest is the
    # usual hit, whatever the capacity), and bisect the possibly long
    # boundary history for each.
    for position in newest_first:
        if limit is not None and position > limit:
            continue
        index = _last_boundary_index(boundaries, position)
        if index >= 0 and boundaries[index] == position:
            return position
    return None


def find_last_boundary_with_snapshot(
    ring: SsmDecodeRing, boundaries: Sequence[int], *, at_most: int | None = None
) -> int | None:
    """The largest boundary (``<= at_most`` when given) that still has a live snapshot."""
    ring = check_ring(ring)
    _check_sequence(boundaries)
    return _find(newest_first(ring), boundaries, _limit(at_most, None))


def plan_rollback(
    ring: SsmDecodeRing,
    boundaries: Sequence[int],
    *,
    seq: int,
    current_len: int,
    at_most: int | None = None,
    hybrid: bool = True,
) -> RollbackPlan | RollbackDeclined:
    """Decide a rollback of sequence ``seq`` to its last reachable boundary; change nothing.

    The target is the largest boundary ``<= min(at_most, current_len)``; on a
    hybrid model it must also have a live snapshot, and the plan carries the
    one restore to apply. On a pure-attention model (``hybrid=False``) the
    plan only truncates. Every argument is checked here, so that
    ``commit_rollback(ring, plan)`` cannot fail on an unchanged ring.
    """
    ring = check_ring(ring)
    seq = check_non_negative_int("seq", seq)
    current_len = check_non_negative_int("current_len", current_len)
    hybrid = _check_bool("hybrid", hybrid)
    _check_last(boundaries, current_len)
    limit = _limit(at_most, current_len)
    assert limit is not None  # current_len is the ceiling
    if hybrid:
        newest = newest_position(ring)
        if newest > current_len:
            raise InvalidArgumentError(
                f"'current_len' must be >= every live snapshot position, got {current_len} "
                f"while the ring holds {newest}; truncate_after() the ring whenever "
                f"the sequence is truncated"
            )
        if not ring.is_enabled:
            return RollbackDeclined(seq, DeclineReason.RING_DISABLED)
        target = _find(newest_first(ring), boundaries, limit)
        if target is None:
            return RollbackDeclined(seq, _shortfall(boundaries, limit))
        entry = ring.entry_for(target)
        assert entry is not None  # _find only returns live positions
        restore = SsmSnapshotRestore(seq, entry.snapshot_slot, target, entry.ticket)
        return RollbackPlan(seq, target, current_len - target, (restore,))
    index = _last_boundary_index(boundaries, limit)
    if index < 0:
        return RollbackDeclined(seq, DeclineReason.NO_BOUNDARY)
    target = boundaries[index]
    return RollbackPlan(seq, target, current_len - target, ())


def commit_rollback(ring: SsmDecodeRing, plan: RollbackPlan) -> None:
    """Truncate ``ring`` to a plan of ``plan_rollback``: the rollback's ring step.

    A hybrid plan (one restore) truncates the ring after ``plan.keep_len``; a
    pure-attention plan (no effects) leaves the ring alone. The plan must
    still fit the ring - its snapshot live, in the restore's slot with its
    ticket - otherwise (the ring moved since the plan, or the plan is another
    ring's) ``StaleSnapshotError``, and nothing changes.
    """
    ring = check_ring(ring)
    if type(plan) is not RollbackPlan:
        raise InvalidArgumentTypeError(
            f"'plan' must be a RollbackPlan from plan_rollback(), got {shown(plan)} of type "
            f"{type(plan).__name__}"
        )
    if plan.effects == ():
        return
    restore = _the_restore(plan)
    entry = ring.entry_for(restore.token_position)
    if entry is None or (entry.snapshot_slot, entry.ticket) != (restore.slot, restore.ticket):
        raise StaleSnapshotError(
            f"'plan' must still fit the ring: it restores position {restore.token_position} "
            f"from slot {restore.slot} ticket {restore.ticket}, and the ring holds {entry}"
        )
    ring.truncate_after(restore.token_position)


def _the_restore(plan: RollbackPlan) -> SsmSnapshotRestore:
    """The one restore of a hybrid plan, as ``plan_rollback`` makes it: of the plan's row, to
    its ``keep_len``; a plan built otherwise would truncate the ring elsewhere."""
    effects = plan.effects
    restore = effects[0] if type(effects) is tuple and len(effects) == 1 else None
    if (
        type(restore) is not SsmSnapshotRestore
        or restore.seq != plan.seq
        or restore.token_position != plan.keep_len
    ):
        raise InvalidArgumentError(
            f"'plan' must be a RollbackPlan from plan_rollback(): no effects, or one "
            f"SsmSnapshotRestore of its seq to its keep_len, got {shown(plan)}"
        )
    return restore


def rollback_to_boundary(
    ring: SsmDecodeRing,
    boundaries: Sequence[int],
    *,
    seq: int,
    current_len: int,
    at_most: int | None = None,
    hybrid: bool = True,
) -> RollbackPlan | RollbackDeclined:
    """Plan a rollback of sequence ``seq`` to its last reachable boundary, and commit it.

    ``plan_rollback`` then ``commit_rollback``: on a hybrid model the ring is
    truncated to the target and the plan carries the one restore to apply;
    on a pure-attention model (``hybrid=False``) the plan only truncates and
    the ring is left alone. A decline changes nothing.
    """
    plan = plan_rollback(
        ring, boundaries, seq=seq, current_len=current_len, at_most=at_most, hybrid=hybrid
    )
    if isinstance(plan, RollbackPlan) and plan.effects:
        ring.truncate_after(plan.keep_len)  # the commit: plan_rollback checked the ring
    return plan


def _shortfall(boundaries: Sequence[int], limit: int) -> DeclineReason:
    if _last_boundary_index(boundaries, limit) < 0:
        return DeclineReason.NO_BOUNDARY
    return DeclineReason.SNAPSHOT_EVICTED
