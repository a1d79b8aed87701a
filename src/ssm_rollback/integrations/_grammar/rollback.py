"""One rollback over the model state and a grammar matcher: both move back, or neither does.

The order is what makes it a transaction:

0. A matcher that accepted more tokens than the sequence holds (its
   ``rollback_limit`` or ``num_tokens`` past ``len(tokens)``) is refused:
   it would stay ahead of the model after any rollback.
1. Plan without moving (``plan_rollback``): the boundary the ring can reach
   (``tokens_dropped``), the restore it needs, the KV crop (checked, not
   run). A model-side shortfall is its ``RollbackDeclined``.
2. Ask the matcher: ``rollback_limit < tokens_dropped`` is a
   ``MatcherDeclined``, and nothing moved.
3. Check that the pool slot holds the restore's ticket (a stale slot raises
   ``StaleSnapshotError``, nothing moved).
4. Move the matcher. If it raises, the model has not moved; a matcher that
   gave back some tokens before raising gets them back.
5. Restore the snapshot. If the pool raises (it copies nothing when it
   does), the matcher takes the dropped tokens again, and the error goes on.
6. Crop the KV (checked in 1), then commit the plan to the ring
   (``commit_rollback``, which cannot fail: nothing moved the ring since 1).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import attrs

from ... import SsmDecodeRing, SsmSnapshotRestore
from ..._core.columns import int_column
from ..._errors import (
    InvalidArgumentError,
    InvalidArgumentTypeError,
    InvariantError,
    StaleSnapshotError,
    check_non_negative_int,
    shown,
)
from ...pool import SnapshotPool
from ...rollback import RollbackDeclined, RollbackPlan, commit_rollback, plan_rollback
from .matchers import CountingMatcher, GrammarMatcher

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
    ``matcher`` (``current_len`` is their count): a matcher whose
    ``rollback_limit`` - or ``num_tokens``, where it counts its tokens as the
    adapters do - exceeds ``len(tokens)`` accepted tokens the sequence does
    not hold, and is refused (``InvalidArgumentError`` naming ``tokens``)
    before anything moves; ``boundaries``, ``at_most``
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
    current_len = _check_inputs(tokens, pool, crop)
    _check_token_ids(tokens, matcher)
    limit = None if matcher is None else _matcher_limit(matcher, current_len)
    plan = plan_rollback(
        ring, boundaries, seq=seq, current_len=current_len, at_most=at_most, hybrid=hybrid
    )
    if isinstance(plan, RollbackDeclined):
        return plan
    if limit is not None and limit < plan.tokens_dropped:
        return MatcherDeclined(plan.seq, plan.tokens_dropped, limit)
    restores = list(plan.effects) if pool is not None else []
    for restore in restores:
        _check_held(pool, restore)
    cut = None if crop is None else _plan_cut(crop, plan.keep_len)
    _move_matcher(matcher, plan.tokens_dropped, tokens)
    if restores:
        assert pool is not None
        try:
            pool.restore(restores)
        except BaseException as error:
            _reaccept(matcher, tokens[plan.keep_len :], error)
            raise
    if cut is not None:
        cut()
    commit_rollback(ring, plan)
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


def _check_token_ids(tokens: Sequence[int], matcher: GrammarMatcher | None) -> None:
    """Every id of ``tokens`` an int >= 0 (and in the matcher's vocabulary): a failed restore
    feeds the matcher back the dropped ones, which must not fail half-way."""
    ids = int_column("tokens", tokens)
    if matcher is not None and ids:
        vocab = check_non_negative_int("matcher.vocab_size", matcher.vocab_size)
        if max(ids) >= vocab:
            k = next(k for k, token in enumerate(ids) if token >= vocab)
            raise InvalidArgumentError(
                f"'tokens[{k}]' must be a token id in [0, {vocab}) (the matcher's vocabulary), "
                f"got {shown(ids[k])}; nothing was moved"
            )


def _matcher_limit(matcher: GrammarMatcher, held: int) -> int:
    """The matcher's ``rollback_limit``, checked: it decides whether anything moves.

    A matcher that accepted more tokens than the ``held`` ones would stay that
    far ahead of the model after the rollback. It accepted at least its
    ``rollback_limit`` and, where it counts them, its ``num_tokens``; fewer
    is no error (tokens an adapter's engine took before it was wrapped).
    """
    limit = check_non_negative_int("matcher.rollback_limit", matcher.rollback_limit)
    taken = limit
    if isinstance(matcher, CountingMatcher):
        taken = max(taken, check_non_negative_int("matcher.num_tokens", matcher.num_tokens))
    if taken > held:
        raise InvalidArgumentError(
            f"'tokens' must hold every token the matcher accepted: it accepted at least "
            f"{taken}, got {held} tokens; nothing was moved"
        )
    return limit


def _plan_cut(crop: CropPlanner, target: int) -> Callable[[], None]:
    """``crop(target)``: checks the KV cut, changing nothing, and returns the action."""
    cut = crop(target)
    if not callable(cut):
        raise InvalidArgumentTypeError(
            f"'crop' must return the action that cuts the KV (a callable), got {type(cut).__name__}"
        )
    return cut


def _check_held(pool: SnapshotPool | None, restore: SsmSnapshotRestore) -> None:
    """The pool slot holds the restore's ticket: the one check a restore makes, before
    anything moves (the pool would refuse it too, but only after the matcher moved)."""
    assert pool is not None
    held = pool.stored_ticket(restore.seq, restore.slot)
    if held != restore.ticket:
        raise StaleSnapshotError(
            f"pool slot ({restore.seq}, {restore.slot}) must hold ticket {restore.ticket} "
            f"(position {restore.token_position}) to roll back, got {held}; nothing was moved"
        )


def _move_matcher(matcher: GrammarMatcher | None, dropped: int, tokens: Sequence[int]) -> None:
    if matcher is None or not dropped:
        return
    before = matcher.rollback_limit
    counted = _counted(matcher)
    try:
        answer: object = matcher.rollback(dropped)  # type: ignore[func-returns-value]
        # A rollback that says no (False, as llguidance's engine answers) or that counts
        # fewer tokens given back than asked did not move the matcher with the model.
        moved = _given_back(matcher, counted)
        if answer is False or (moved is not None and moved != dropped):
            raise InvariantError(
                f"'matcher' must give back the {dropped} tokens rollback({dropped}) asks for "
                f"(its rollback_limit {before} allowed them) or raise, got "
                f"{'False' if answer is False else f'{moved} given back'}; nothing was moved"
            )
    except BaseException as error:
        # The contract says a raising rollback changed nothing; one that gave back some
        # tokens first (its count, else its limit, fell) gets them back: nothing has moved.
        given_back = _given_back(matcher, counted)
        if given_back is None:
            after = matcher.rollback_limit
            given_back = before - after if type(after) is int else 0
        if 0 < given_back <= dropped:
            _reaccept(matcher, tokens[len(tokens) - given_back :], error)
        raise


def _counted(matcher: GrammarMatcher) -> int | None:
    """The tokens a ``CountingMatcher`` holds (``None`` for a matcher that does not count)."""
    if not isinstance(matcher, CountingMatcher):
        return None
    count = matcher.num_tokens
    return count if type(count) is int else None


def _given_back(matcher: GrammarMatcher, counted: int | None) -> int | None:
    """How many tokens a counting matcher gave back since it held ``counted`` (``None``
    where it does not count)."""
    now = _counted(matcher)
    return None if counted is None or now is None else counted - now


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
