"""Replay a decode trace through the real ring and rollback code at several ring depths.

The trace's events (``decode_trace``): tokens, rollbacks, finishes and,
in a speculative trace, verify steps. At each depth the same trace runs
through ``SsmDecodeRing``,
``snapshot_boundary_if_ssm`` and ``rollback_to_boundary``; a rollback is
*served* when a snapshot exists for it, and otherwise the scheduler
recomputes the kept prefix from the prompt (its tokens are counted).

A verify event's boundaries are recorded through ``commit_verified``, in a
burst; the first token of a sequence, and the first after a rollback, is
sampled on its own and fed first in the next verify step.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import attrs

from .. import SsmDecodeRing
from .._errors import InvalidArgumentError
from ..rollback import (
    RollbackPlan,
    commit_verified,
    rollback_to_boundary,
    snapshot_boundary_if_ssm,
)
from .decode_trace import TraceEvent

__all__ = ["DepthResult", "replay"]


@attrs.define
class DepthResult:
    """What one ring depth did with the trace."""

    depth: int
    rollbacks: int = 0
    served: int = 0
    declined: int = 0
    tokens_regenerated: int = 0
    tokens_recomputed: int = 0

    @property
    def served_fraction(self) -> float:
        """Served rollbacks over all rollbacks that had a boundary to go to (1.0 if none)."""
        return self.served / self.rollbacks if self.rollbacks else 1.0


@attrs.define
class _Sequence:
    ring: SsmDecodeRing
    length: int = 0
    boundaries: list[int] = attrs.field(factory=list)
    # Speculative traces: the flags (boundary, thinking) of the last committed token,
    # which the next verify step feeds first (None: the next token is sampled alone),
    # and the token events the next verify event commits.
    unfed: tuple[bool, bool] | None = None
    pending: list[TraceEvent] = attrs.field(factory=list)


def replay(
    events: Sequence[TraceEvent], depth: int, progress: Callable[[int], None] | None = None
) -> DepthResult:
    """Run ``events`` through rings of ``depth`` slots; ``progress(events_done)`` now and then.

    A trace with ``verify`` events is speculative: its tokens reach the ring
    through ``commit_verified``, one verify step at a time.
    """
    result = DepthResult(depth)
    speculative = any(event.kind == "verify" for event in events)
    sequences: dict[int, _Sequence] = {}
    for done, event in enumerate(events, start=1):
        state = sequences.get(event.seq)
        if state is None:
            state = sequences[event.seq] = _Sequence(SsmDecodeRing(depth))
        if event.kind == "token":
            if speculative:
                _hold(state, event)
            else:
                _commit_token(state, event)
        elif event.kind == "verify":
            _verify(state, event, done - 1)
        elif event.kind == "rollback":
            if state.pending:
                raise InvalidArgumentError(
                    f"'events[{done - 1}]' rolls seq {event.seq} back in the middle of a "
                    f"verify step: {len(state.pending)} tokens await their verify event"
                )
            _roll_back(state, event, result)
            state.unfed = None
        else:
            sequences[event.seq] = _Sequence(SsmDecodeRing(depth))
        if progress is not None and done % 4096 == 0:
            progress(done)
    if progress is not None:
        progress(len(events))
    return result


def _commit_token(state: _Sequence, event: TraceEvent) -> None:
    """Plain decoding: commit one token and snapshot it if it is a boundary."""
    state.length += 1
    if event.boundary:
        state.boundaries.append(state.length)
    snapshot_boundary_if_ssm(
        state.ring,
        seq=event.seq,
        token_position=state.length,
        is_boundary=event.boundary,
        in_thinking=event.thinking,
    )


def _hold(state: _Sequence, event: TraceEvent) -> None:
    """Speculative decoding: a token sampled alone is committed now; others await a verify."""
    if state.unfed is not None:
        state.pending.append(event)
        return
    state.length += 1  # its state exists only once the next verify step has fed it
    if event.boundary:
        state.boundaries.append(state.length)
    state.unfed = (event.boundary, event.thinking)


def _verify(state: _Sequence, event: TraceEvent, index: int) -> None:
    """Commit a verify step: the last committed token, the accepted drafts and the bonus."""
    pending, accepted = state.pending, event.accepted
    if state.unfed is None or len(pending) != accepted + 1 or event.drafts < accepted:
        raise InvalidArgumentError(
            f"'events[{index}]' must follow the {accepted} accepted drafts and the bonus token "
            f"of seq {event.seq}'s verify step, after a token fed first, with accepted <= "
            f"drafts; got {len(pending)} tokens, drafts {event.drafts}"
        )
    # The rejected drafts are fed as boundaries outside thinking, the worst case for a
    # ring that recorded before acceptance: commit_verified must leave them out (rule 1).
    rejected = event.drafts - accepted
    fed = [state.unfed, *((e.boundary, e.thinking) for e in pending[:accepted])]
    commit_verified(
        state.ring,
        seq=event.seq,
        first_position=state.length,
        accepted=accepted,
        is_boundary=[b for b, _ in fed] + [True] * rejected,
        in_thinking=[t for _, t in fed] + [False] * rejected,
    )
    for committed in pending:
        state.length += 1
        if committed.boundary:
            state.boundaries.append(state.length)
    state.unfed = (pending[-1].boundary, pending[-1].thinking)
    pending.clear()


def _roll_back(state: _Sequence, event: TraceEvent, result: DepthResult) -> None:
    if not state.boundaries:
        return  # nowhere to go back to, at any depth
    target = state.boundaries[-min(event.back, len(state.boundaries))]
    result.rollbacks += 1
    plan = rollback_to_boundary(
        state.ring, state.boundaries, seq=event.seq, current_len=state.length, at_most=target
    )
    if isinstance(plan, RollbackPlan):
        result.served += 1
        keep = plan.keep_len
    else:  # recompute the prefix from the prompt, then carry on from the target
        result.declined += 1
        keep = target
        result.tokens_recomputed += keep
        state.ring.truncate_after(keep)
    result.tokens_regenerated += state.length - keep
    state.length = keep
    while state.boundaries and state.boundaries[-1] > keep:
        state.boundaries.pop()
