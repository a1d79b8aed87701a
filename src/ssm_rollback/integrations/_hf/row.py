"""One row of ``backtracking_generate``: its decode state (``_Row``) and how it rolls back.

``_roll_back`` sends a row back to its last boundary with a snapshot at most
``limit`` new tokens long: the ring, the matcher and the attention KV move
together or not at all (``_transact``), and the row's output, logits,
scores and boundaries are cut to match. ``_check_against_fresh`` compares
the step after a rollback with a fresh decode of the same tokens, bit for
bit.
"""

from __future__ import annotations

import time

import attrs
import torch

from ... import SsmDecodeRing
from ...rollback import RollbackDeclined, RollbackPlan
from .._grammar.rollback import _transact
from .._grammar.step import RowGrammar
from .decoding import _Counts
from .stream import _Stream

__all__ = ["_Row", "_check_against_fresh", "_roll_back"]


@attrs.define
class _Row:
    """One row's decode: its stream, ring, output and boundaries, and logits after each length."""

    stream: _Stream
    ring: SsmDecodeRing
    prompt: list[int]
    #: The prompt as given (left padding kept): what ``generate``'s processors see before it.
    given: list[int] = attrs.field(factory=list)
    output: list[int] = attrs.field(factory=list)
    boundaries: list[int] = attrs.field(factory=list)
    logits_after: list[torch.Tensor] = attrs.field(factory=list)
    grammar: RowGrammar | None = None
    #: Rollbacks this row may still take (``max_rollbacks`` less those served).
    budget: int = 0
    #: By position: the tokens ``reject`` refused there, each with the tokens before it.
    refused: dict[int, list[tuple[tuple[int, ...], int]]] = attrs.field(factory=dict)
    #: Output tokens put into the streamer: those no rollback can take back any more.
    streamed: int = 0
    #: With ``output_scores``: the scores each output token was picked from.
    scores: list[torch.Tensor] = attrs.field(factory=list)


def _roll_back(row: _Row, limit: int, counts: _Counts) -> bool:
    """Roll the row (and its matcher) back to its last boundary with a snapshot at most
    ``limit`` long."""
    output, stream = row.output, row.stream
    limit = min(limit, len(output))
    if not output:
        counts.rollbacks_declined += 1
        return False
    if row.budget <= 0:  # spent: decline, so a reject that refuses everything still ends
        counts.rollbacks_declined += 1
        counts.rollbacks_over_budget += 1
        return False
    started = time.perf_counter()
    plan = _transact(
        row.ring,
        row.boundaries,
        None if row.grammar is None else row.grammar.matcher,
        seq=0,
        tokens=output,
        pool=stream.pool,
        at_most=limit,
        hybrid=True,
        crop=lambda keep: stream.plan_truncate(len(row.prompt) + keep),
    )
    if not isinstance(plan, RollbackPlan):
        counts.rollbacks_declined += 1
        counts.grammar_declined += not isinstance(plan, RollbackDeclined)
        return False
    counts.rollback_seconds += time.perf_counter() - started
    del output[plan.keep_len :], row.logits_after[plan.keep_len + 1 :], row.scores[plan.keep_len :]
    del row.boundaries[row.boundaries.index(plan.keep_len) + 1 :]
    counts.rollbacks_served += 1
    counts.tokens_regenerated += plan.tokens_dropped
    row.budget -= 1
    return True


def _check_against_fresh(row: _Row, logits: torch.Tensor, counts: _Counts) -> None:
    """Compare the step after a rollback with a fresh decode of the same tokens, bit for bit."""
    stream = row.stream
    vocab = logits.shape[-1]
    started = time.perf_counter()
    # What an engine without snapshots would do instead: prefill the kept prefix again.
    _fresh_stream(stream, vocab).feed(row.prompt + row.output[:-1], last_only=True)
    counts.recompute_seconds += time.perf_counter() - started
    fresh = _fresh_stream(stream, vocab)
    fresh_logits = fresh.feed(row.prompt, last_only=True)[-1]
    for token in row.output:
        fresh_logits = fresh.feed([token])[-1]
    counts.mismatches += not torch.equal(logits, fresh_logits)


def _fresh_stream(stream: _Stream, vocab: int) -> _Stream:
    return _Stream(stream.model, vocab, 0)
