"""The grammar's part of ``backtracking_generate``: one matcher per row, its mask, its tokens.

Each step a row's matcher fills its bitmask and the row's logits are masked
with it before a token is picked; the kept token is accepted into the
matcher; a served rollback moves the matcher back with the model
(``_grammar_rollback``). Ids beyond the matcher's vocabulary (a model head
wider than the tokenizer) are never picked; a matcher over more ids than the
model scores is refused up front.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import final

import torch

from ..._errors import (
    InvalidArgumentError,
    InvalidArgumentTypeError,
    InvariantError,
    check_non_negative_int,
)
from .bitmask import allocate_token_bitmask, apply_token_bitmask
from .matchers import CountingMatcher, GrammarMatcher

__all__ = ["GrammarArg", "RowGrammar", "row_grammars"]

#: ``grammar=``: one matcher (batch 1), one per row, or ``None``.
GrammarArg = GrammarMatcher | Sequence[GrammarMatcher] | None


@final
class RowGrammar:
    """One row's matcher and the bitmask it fills each step."""

    def __init__(self, matcher: GrammarMatcher, vocab_size: int) -> None:
        self.matcher = matcher
        self._vocab_size = vocab_size
        self._bitmask = allocate_token_bitmask(1, vocab_size)

    def mask(self, scores: torch.Tensor) -> torch.Tensor:
        """``scores`` with every token the grammar forbids next at ``-inf`` (a copy)."""
        self.matcher.fill_next_token_bitmask(self._bitmask, 0)
        masked = scores.clone()
        apply_token_bitmask(masked, self._bitmask[0])
        # A bitmask's last word has bits past the vocabulary, which an engine may set.
        masked[..., self._vocab_size :] = float("-inf")
        if not bool(torch.isfinite(masked).any()):
            # Picking from all -inf would take id 0 (greedy) or fail to sample.
            raise InvariantError(
                "the grammar matcher allows no token the model scores, yet has not terminated"
            )
        return masked

    def accept(self, token: int) -> None:
        """Accept a kept token; a matcher that refuses what its mask allowed is broken."""
        if not self.matcher.accept_token(token):
            raise InvariantError(
                f"the grammar matcher refused token {token}, which its own bitmask allowed"
            )

    def is_done(self) -> bool:
        """True once the matcher has terminated: the row ends there."""
        return self.matcher.is_terminated()


def row_grammars(grammar: GrammarArg, rows: int, vocab_size: int) -> list[RowGrammar | None]:
    """``grammar=`` as one ``RowGrammar`` (or ``None``) per row, checked.

    ``vocab_size``: the ids the model scores; a matcher may cover fewer (a
    padded head), not more. A matcher that already accepted tokens is refused.
    """
    if grammar is None:
        return [None] * rows
    single = isinstance(grammar, GrammarMatcher)
    if single:
        matchers: list[object] = [grammar]
    elif isinstance(grammar, Sequence) and not isinstance(grammar, str | bytes):
        matchers = list(grammar)
    else:
        raise InvalidArgumentTypeError(
            f"'grammar' must be a GrammarMatcher or a sequence of them (one per row), "
            f"got {type(grammar).__name__}"
        )
    if len(matchers) != rows:
        raise InvalidArgumentError(
            f"'grammar' must have one matcher per row ({rows}), got {len(matchers)}"
        )
    checked: list[RowGrammar | None] = []
    for index, matcher in enumerate(matchers):
        name = "grammar" if single else f"grammar[{index}]"
        if not isinstance(matcher, GrammarMatcher):
            raise InvalidArgumentTypeError(
                f"'{name}' must implement GrammarMatcher, got {type(matcher).__name__}"
            )
        engine = _engine(matcher)
        if any(other is matcher or _engine(other) is engine for other in matchers[:index]):
            raise InvalidArgumentError(
                f"'{name}' is the matcher of an earlier row (or an adapter over its engine): "
                f"each row needs its own"
            )
        taken = check_non_negative_int(f"{name}.rollback_limit", matcher.rollback_limit)
        if isinstance(matcher, CountingMatcher):
            taken = max(taken, check_non_negative_int(f"{name}.num_tokens", matcher.num_tokens))
        if taken:
            # Every rollback would leave it that far ahead of the row's tokens.
            raise InvalidArgumentError(
                f"'{name}' must be a fresh matcher (the row has no tokens yet), got one that "
                f"accepted {taken} tokens"
            )
        covered = check_non_negative_int(f"{name}.vocab_size", matcher.vocab_size)
        if covered > vocab_size:
            raise InvalidArgumentError(
                f"'{name}' must cover at most the model's {vocab_size} token ids, got a "
                f"matcher of {covered}"
            )
        checked.append(RowGrammar(matcher, covered))
    return checked


def _engine(matcher: object) -> object:
    """What ``matcher`` matches with: an adapter's engine (its ``matcher``), else itself."""
    engine = getattr(type(matcher), "matcher", None)
    return matcher.matcher if isinstance(engine, property) else matcher  # type: ignore[attr-defined]
