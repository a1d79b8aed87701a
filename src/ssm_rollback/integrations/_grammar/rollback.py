"""One rollback over the model state and a grammar matcher: both move back, or neither does.

The order is what makes it a transaction:

1. Plan without moving: the boundary the ring can reach (``tokens_dropped``),
   the restore it needs, the KV crop (checked, not run). A model-side
   shortfall is the ``RollbackDeclined`` of ``rollback_to_boundary``.
2. Ask the matcher: ``rollback_limit < tokens_dropped`` is a
   ``MatcherDeclined``, and nothing moved.
3. Check that the pool slot holds the restore's ticket (a stale slot raises
   ``StaleSnapshotError``, nothing moved).
4. Move the matcher. If it raises, the model has not moved; a matcher that
   gave back some tokens before raising gets them back.
5. Restore the snapshot. If the pool raises (it copies nothing when it
   does), the matcher takes the dropped tokens again, and the error goes on.
6. Crop the KV (checked in 1), then truncate the ring (``rollback_to_boundary``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import attrs

from ..._core.effects import SsmSnapshotRestore
from ..._core.ring import SsmDecodeRing
from ..._errors import (
    InvalidArgumentError,
    InvalidArgumentTypeError,
    InvariantError,
    StaleSnapshotError,
    check_non_negative_int,
)
from ...pool import SnapshotPool
from ...rollback import (
    RollbackDeclined,
    RollbackPlan,
    find_last_boundary_with_snapshot,
    rollback_to_boundary,
)
from .matchers import GrammarMatcher

__all__ = ["CropPlanner", "MatcherDeclined", "rollback_with_grammar"]

#: ``crop(keep_len)``: check that the attention KV can be cut to ``keep_len`` output tokens,
#: changing nothing (raise if not), and return the action that cuts it, which must not fail.
CropPlanner = Callable[[int], Callable[[], None]]


@attrs.frozen
class MatcherDeclined:
    """A rollback the grammar matcher cannot follow that far; nothing was changed.

    The model would drop ``tokens_dropped`` tokens; the matcher can give back
    ``rollback_limit``.
    """

    seq: int
    tokens_dropped: int
    rollback_limit: int


def rollback_with_grammar(
    ring: SsmDecodeRing,
    boundaries: Sequence[int],
    matcher: GrammarMatcher,
    *,
    seq: int,
    tokens: Sequence[int],
    pool: SnapshotPool | None,
    at_most: int | None = None,
    hybrid: bool = True,
    crop: CropPlanner | None = None,
) -> RollbackPlan | RollbackDeclined | MatcherDeclined:
    """Roll sequence ``seq`` and its grammar matcher back to its last reachable boundary together.

    ``tokens`` are the sequence's output tokens, every one accepted by
    ``matcher`` (``current_len`` is their count); ``boundaries``, ``at_most``
    and ``hybrid`` as for ``rollback_to_boundary``. On success the snapshot is
    restored into ``pool`` (``None``: the model has no recurrent state to
    restore), the KV cut by ``crop`` if given, the ring truncated, the matcher
    rolled back by ``tokens_dropped``, and the plan returned; the caller
    truncates its own tokens to ``plan.keep_len``. A model-side shortfall is a
    ``RollbackDeclined``, a matcher that cannot go back that far a
    ``MatcherDeclined``: either way nothing changed. An error leaves ring,
    pool, KV and matcher as they were.
    """
    if not isinstance(matcher, GrammarMatcher):
        raise InvalidArgumentTypeError(
            f"'matcher' must implement GrammarMatcher (accept_token, rollback, "
            f"rollback_limit, ...), got {type(matcher).__name__}"
        )
    return _transact(
        ring,
        boundaries,
        matcher,
        seq=seq,
        tokens=tokens,
        pool=pool,
        at_most=at_most,
        hybrid=hybrid,
        crop=crop,
    )


def _transact(
    ring: SsmDecodeRing,
    boundaries: Sequence[int],
    matcher: GrammarMatcher | None,
    *,
    seq: int,
    tokens: Sequence[int],
    pool: SnapshotPool | None,
    at_most: int | None,
    hybrid: bool,
    crop: CropPlanner | None,
) -> RollbackPlan | RollbackDeclined | MatcherDeclined:
    """``rollback_with_grammar``, also without a matcher (the decoders' plain rollbacks)."""
    seq = check_non_negative_int("seq", seq)
    current_len = _check_inputs(tokens, pool, crop)
    target = _hybrid_target(ring, boundaries, current_len, at_most) if hybrid is True else None
    if target is None:
        # A decline (which changes nothing), a bad argument, or the pure-attention plan,
        # which leaves the ring alone.
        plan = rollback_to_boundary(
            ring, boundaries, seq=seq, current_len=current_len, at_most=at_most, hybrid=hybrid
        )
        if isinstance(plan, RollbackDeclined):
            return plan
        assert not hybrid, "rollback_to_boundary found a boundary the search did not"
        target = plan.keep_len
    dropped = current_len - target
    if matcher is not None:
        limit = _matcher_limit(matcher)
        if limit < dropped:
            return MatcherDeclined(seq, dropped, limit)
    restore = _restore_for(ring, seq, target, pool) if hybrid else None
    cut = None if crop is None else _plan_cut(crop, target)
    _move_matcher(matcher, dropped, tokens)
    if restore is not None and pool is not None:
        try:
            pool.restore([restore])
        except BaseException as error:
            _reaccept(matcher, tokens[target:], error)
            raise
    if cut is not None:
        cut()
    if not hybrid:
        return RollbackPlan(seq, target, dropped, ())
    plan = rollback_to_boundary(
        ring, boundaries, seq=seq, current_len=current_len, at_most=at_most, hybrid=True
    )
    if not isinstance(plan, RollbackPlan) or plan.keep_len != target:
        raise InvariantError(f"the ring's rollback went to {plan}, not to the planned {target}")
    return plan


def _check_inputs(
    tokens: Sequence[int], pool: SnapshotPool | None, crop: CropPlanner | None
) -> int:
    if not isinstance(tokens, Sequence) or isinstance(tokens, str | bytes):
        raise InvalidArgumentTypeError(
            f"'tokens' must be a sequence of token ids, got {type(tokens).__name__}"
        )
    if pool is not None and not isinstance(pool, SnapshotPool):
        raise InvalidArgumentTypeError(
            f"'pool' must be a SnapshotPool or None, got {type(pool).__name__}"
        )
    if crop is not None and not callable(crop):
        raise InvalidArgumentTypeError(
            f"'crop' must be callable (keep_len -> action) or None, got {type(crop).__name__}"
        )
    return len(tokens)


def _matcher_limit(matcher: GrammarMatcher) -> int:
    """The matcher's ``rollback_limit``, checked: it decides whether anything moves."""
    return check_non_negative_int("matcher.rollback_limit", matcher.rollback_limit)


def _plan_cut(crop: CropPlanner, target: int) -> Callable[[], None]:
    """``crop(target)``: checks the KV cut, changing nothing, and returns the action."""
    cut = crop(target)
    if not callable(cut):
        raise InvalidArgumentTypeError(
            f"'crop' must return the action that cuts the KV (a callable), got {type(cut).__name__}"
        )
    return cut


def _hybrid_target(
    ring: SsmDecodeRing, boundaries: Sequence[int], current_len: int, at_most: int | None
) -> int | None:
    """The boundary ``rollback_to_boundary`` would pick, found without truncating the ring.

    Checks what it would check, so that the commit at the end cannot raise.
    """
    if at_most is not None:
        at_most = check_non_negative_int("at_most", at_most)
    limit = current_len if at_most is None else min(at_most, current_len)
    target = find_last_boundary_with_snapshot(ring, boundaries, at_most=limit)
    if target is None:
        return None
    last = check_non_negative_int(f"boundaries[{len(boundaries) - 1}]", boundaries[-1])
    if last > current_len:
        raise InvalidArgumentError(
            f"'boundaries' must all be <= current_len {current_len}, got a last boundary of {last}"
        )
    newest = ring.snapshot_positions()[-1]
    if newest > current_len:
        raise InvalidArgumentError(
            f"'tokens' must be at least as long as every live snapshot position, got "
            f"{current_len} tokens while the ring holds {newest}"
        )
    return target


def _restore_for(
    ring: SsmDecodeRing, seq: int, target: int, pool: SnapshotPool | None
) -> SsmSnapshotRestore:
    entry = ring.entry_for(target)
    assert entry is not None  # the search only finds live positions
    restore = SsmSnapshotRestore(seq, entry.snapshot_slot, target, entry.ticket)
    if pool is not None:
        held = pool.stored_ticket(seq, entry.snapshot_slot)
        if held != entry.ticket:
            raise StaleSnapshotError(
                f"pool slot ({seq}, {entry.snapshot_slot}) must hold ticket {entry.ticket} "
                f"(position {target}) to roll back, got {held}; nothing was moved"
            )
    return restore


def _move_matcher(matcher: GrammarMatcher | None, dropped: int, tokens: Sequence[int]) -> None:
    if matcher is None or not dropped:
        return
    before = matcher.rollback_limit
    try:
        matcher.rollback(dropped)
    except BaseException as error:
        # The contract says a raising rollback changed nothing; one that gave back some
        # tokens first (its limit fell) gets them back, so that nothing has moved.
        after = matcher.rollback_limit
        given_back = before - after if type(after) is int else 0
        if 0 < given_back <= dropped:
            _reaccept(matcher, tokens[len(tokens) - given_back :], error)
        raise


def _reaccept(matcher: GrammarMatcher | None, tokens: Sequence[int], error: BaseException) -> None:
    """Feed the matcher the tokens it gave back, after a later step of the rollback failed."""
    if matcher is None:
        return
    for token in tokens:
        if not matcher.accept_token(token):
            raise InvariantError(
                f"the matcher refused token {token} it had accepted before, while undoing a "
                f"failed rollback ({type(error).__name__}: {error}); it no longer matches the "
                f"sequence"
            ) from error
