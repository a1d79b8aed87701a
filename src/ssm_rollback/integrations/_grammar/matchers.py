"""Grammar matchers behind one small protocol: xgrammar and llguidance adapters.

A rollback transaction has to ask a matcher *before* anything moves whether
it can give back ``n`` tokens, so the protocol carries ``rollback_limit``
beside ``accept_token``, ``rollback`` and ``fill_next_token_bitmask``. The two
adapters make the engines behave alike where they differ:

- xgrammar keeps an unbounded history (its ``max_rollback_tokens`` is
  deprecated and always -1) but raises on a rollback past it, and raises on a
  mask request once terminated;
- llguidance's ``rollback`` past its history returns False *and* leaves the
  matcher in a permanent error state, as does consuming a token it refuses
  or one out of range; and an EOS consumed after the matcher stopped is not
  recorded (a later ``rollback(1)`` would undo the token before it).

Both adapters count the tokens they accepted, refuse a token without
touching the engine when it would not be taken, and refuse a rollback past
``rollback_limit`` with an ``InvalidArgumentError`` before calling the
engine. The bitmask is the layout both engines share: int32, one row per
sequence, ``ceil(vocab_size / 32)`` words, bit ``t % 32`` of word ``t // 32``
set when token ``t`` is allowed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, final, runtime_checkable

import torch

from ..._errors import InvalidArgumentError, InvalidArgumentTypeError, check_non_negative_int, shown
from .bitmask import check_row, clear_padding, describe
from .xgrammar_vocab import check_vocab_size

if TYPE_CHECKING:
    import llguidance
    import xgrammar

__all__ = ["CountingMatcher", "GrammarMatcher", "LLGuidanceMatcher", "XGrammarMatcher"]


@runtime_checkable
class GrammarMatcher(Protocol):
    """A grammar matcher a rollback can move back with the model: the adapters below, or yours.

    Contract: ``accept_token`` that returns False changed nothing;
    ``rollback(n)`` with ``n <= rollback_limit`` succeeds, and one that raises
    changed nothing; ``fill_next_token_bitmask`` changes nothing.
    """

    @property
    def vocab_size(self) -> int:
        """The token ids the bitmask covers: a row is ``ceil(vocab_size / 32)`` int32 words."""
        ...

    @property
    def rollback_limit(self) -> int:
        """How many of the newest accepted tokens ``rollback`` can give back now."""
        ...

    def is_terminated(self) -> bool:
        """True once the matcher takes no further token (its stop token was accepted)."""
        ...

    def accept_token(self, token: int, /) -> bool:
        """Advance past ``token``; False (and no change) if the grammar does not allow it."""
        ...

    def rollback(self, num_tokens: int, /) -> None:
        """Give back the newest ``num_tokens`` accepted tokens."""
        ...

    def fill_next_token_bitmask(self, bitmask: torch.Tensor, index: int = 0, /) -> None:
        """Write the tokens allowed next into row ``index`` of ``bitmask``."""
        ...


@runtime_checkable
class CountingMatcher(GrammarMatcher, Protocol):
    """A ``GrammarMatcher`` that also counts the tokens it accepted (the adapters do)."""

    @property
    def num_tokens(self) -> int:
        """Tokens accepted through this object and not rolled back."""
        ...


def _check_limit(name: str, value: int | None) -> int | None:
    return None if value is None else check_non_negative_int(name, value)


def _check_rollback(num_tokens: int, limit: int) -> int:
    num_tokens = check_non_negative_int("num_tokens", num_tokens)
    if num_tokens > limit:
        raise InvalidArgumentError(
            f"'num_tokens' must be <= the matcher's rollback_limit {limit}, got {shown(num_tokens)}"
        )
    return num_tokens


class _CountedAdapter:
    """What both adapters keep alike: the bitmask width and the tokens taken through them.

    ``_max`` bounds a rollback's reach (``None``: every token taken here).
    """

    _vocab_size: int
    _accepted: int
    _max: int | None

    @property
    def vocab_size(self) -> int:
        """The token ids the bitmask covers (the tokenizer's vocabulary)."""
        return self._vocab_size

    @property
    def num_tokens(self) -> int:
        """Tokens accepted through the adapter and not rolled back."""
        return self._accepted

    @property
    def rollback_limit(self) -> int:
        """How many of the newest accepted tokens ``rollback`` can give back now."""
        return self._accepted if self._max is None else min(self._accepted, self._max)


@final
class XGrammarMatcher(_CountedAdapter):
    """A ``GrammarMatcher`` over an ``xgrammar.GrammarMatcher``.

    ``vocab_size`` is the ``vocab_size`` of the ``xgrammar.TokenizerInfo``
    the matcher's grammar was compiled with (the bitmask width follows it):
    any other is refused, a padded model head is declared to xgrammar there.
    ``max_rollback_tokens`` bounds how far back a rollback may reach, as an
    engine with a bounded history would (default: every token accepted
    through this adapter). Wrap a fresh matcher: tokens it accepted before
    it was wrapped cannot be rolled back through the adapter.
    """

    def __init__(
        self,
        matcher: xgrammar.GrammarMatcher,
        vocab_size: int,
        *,
        max_rollback_tokens: int | None = None,
    ) -> None:
        import xgrammar

        if not isinstance(matcher, xgrammar.GrammarMatcher):
            raise InvalidArgumentTypeError(
                f"'matcher' must be an xgrammar.GrammarMatcher, got {describe(matcher)}"
            )
        vocab_size = check_non_negative_int("vocab_size", vocab_size)
        self._max = _check_limit("max_rollback_tokens", max_rollback_tokens)
        engine_max = matcher.max_rollback_tokens  # -1 (unbounded) since xgrammar 0.1.20
        if engine_max >= 0:
            self._max = engine_max if self._max is None else min(self._max, engine_max)
        check_vocab_size(matcher, vocab_size)
        self._matcher = matcher
        self._vocab_size = vocab_size
        self._accepted = 0

    @property
    def matcher(self) -> xgrammar.GrammarMatcher:
        """The wrapped xgrammar matcher (read it; move it only through the adapter)."""
        return self._matcher

    def is_terminated(self) -> bool:
        """True once the stop token was accepted."""
        return self._matcher.is_terminated()

    def accept_token(self, token: int, /) -> bool:
        """Advance past ``token``; False, and no change, if the grammar does not allow it."""
        token = check_non_negative_int("token", token)
        # Out-of-range ids and tokens after termination are refused here: xgrammar
        # would refuse them too, but with a warning on stderr for each.
        if token >= self._vocab_size or self._matcher.is_terminated():
            return False
        if not self._matcher.accept_token(token):
            return False
        self._accepted += 1
        return True

    def rollback(self, num_tokens: int, /) -> None:
        """Give back the newest ``num_tokens`` tokens; past ``rollback_limit`` raises."""
        num_tokens = _check_rollback(num_tokens, self.rollback_limit)
        if num_tokens:
            self._matcher.rollback(num_tokens)
            self._accepted -= num_tokens

    def fill_next_token_bitmask(self, bitmask: torch.Tensor, index: int = 0, /) -> None:
        """Write the allowed next tokens into row ``index``; none once terminated."""
        row = check_row(bitmask, index, self._vocab_size)
        if self._matcher.is_terminated():
            row.zero_()  # xgrammar raises for a terminated matcher: nothing is allowed
            return
        # The row alone, as a batch of one: xgrammar finds row ``index`` as if the
        # bitmask were contiguous, and would write another row of a strided one.
        self._matcher.fill_next_token_bitmask(row.unsqueeze(0), 0)
        clear_padding(row, self._vocab_size)

    def __repr__(self) -> str:
        return (
            f"XGrammarMatcher(vocab_size={self._vocab_size}, num_tokens={self._accepted}, "
            f"rollback_limit={self.rollback_limit}, terminated={self.is_terminated()})"
        )


@final
class LLGuidanceMatcher(_CountedAdapter):
    """A ``GrammarMatcher`` over an ``llguidance.LLMatcher`` built with ``tokenizer``.

    The adapter keeps the engine out of its error state: a token is checked
    (in range, ``validate_tokens``) before it is consumed, and a rollback past
    ``rollback_limit`` raises before the engine is asked. An EOS taken after
    the grammar stopped is counted as a token here, though llguidance does not
    record it, so that one token of the sequence is one token of the matcher.
    ``max_rollback_tokens`` as for ``XGrammarMatcher``.
    """

    def __init__(
        self,
        matcher: llguidance.LLMatcher,
        tokenizer: llguidance.LLTokenizer,
        *,
        max_rollback_tokens: int | None = None,
    ) -> None:
        import llguidance

        if not isinstance(matcher, llguidance.LLMatcher):
            raise InvalidArgumentTypeError(
                f"'matcher' must be an llguidance.LLMatcher, got {describe(matcher)}"
            )
        if not isinstance(tokenizer, llguidance.LLTokenizer):
            raise InvalidArgumentTypeError(
                f"'tokenizer' must be an llguidance.LLTokenizer, got {describe(tokenizer)}"
            )
        if matcher.is_error():
            raise InvalidArgumentError(
                f"'matcher' must not be in llguidance's error state, got: {matcher.get_error()}"
            )
        # The matcher does not say which tokenizer it was built with, but its logit bias
        # has one entry per token id. Another vocabulary would make every mask the wrong
        # size, and a token id past the matcher's own puts it in its error state for good.
        covered = len(matcher.compute_logit_bias())
        if covered != tokenizer.vocab_size:
            raise InvalidArgumentError(
                f"'tokenizer' must be the one the matcher was built with: the matcher covers "
                f"{covered} token ids, got a tokenizer of {tokenizer.vocab_size}"
            )
        self._max = _check_limit("max_rollback_tokens", max_rollback_tokens)
        self._matcher = matcher
        self._vocab_size = tokenizer.vocab_size
        self._eos = frozenset(tokenizer.eos_tokens)
        self._accepted = 0
        #: The EOS that ended the sequence after the grammar stopped: counted, not recorded.
        self._unrecorded_eos = False

    @property
    def matcher(self) -> llguidance.LLMatcher:
        """The wrapped llguidance matcher (read it; move it only through the adapter)."""
        return self._matcher

    def is_terminated(self) -> bool:
        """True once an EOS was accepted (or the engine failed): nothing more is taken."""
        return (
            self._unrecorded_eos
            or self._matcher.is_error()
            or (self._matcher.is_stopped() and self._matcher.stop_reason() == "EndOfSentence")
        )

    def accept_token(self, token: int, /) -> bool:
        """Advance past ``token``; False, and no change, if the grammar does not allow it."""
        token = check_non_negative_int("token", token)
        if token >= self._vocab_size or self.is_terminated():
            return False
        if self._matcher.is_stopped():
            # Stopped (the grammar is complete): only EOS is taken, and not recorded.
            if token not in self._eos or not self._matcher.consume_token(token):
                return False
            self._unrecorded_eos = True
            self._accepted += 1
            return True
        if self._matcher.validate_tokens([token]) != 1 or not self._matcher.consume_token(token):
            return False
        self._accepted += 1
        return True

    def rollback(self, num_tokens: int, /) -> None:
        """Give back the newest ``num_tokens`` tokens; past ``rollback_limit`` raises."""
        num_tokens = _check_rollback(num_tokens, self.rollback_limit)
        if not num_tokens:
            return
        recorded = num_tokens - self._unrecorded_eos
        if recorded and not self._matcher.rollback(recorded):
            raise InvalidArgumentError(
                f"llguidance refused to roll back {recorded} tokens: {self._matcher.get_error()}"
            )
        self._unrecorded_eos = False
        self._accepted -= num_tokens

    def fill_next_token_bitmask(self, bitmask: torch.Tensor, index: int = 0, /) -> None:
        """Write the allowed next tokens into row ``index``; none once terminated."""
        row = check_row(bitmask, index, self._vocab_size)
        if self.is_terminated():
            row.zero_()
            return
        self._matcher.unsafe_compute_mask_ptr(row.data_ptr(), row.numel() * row.element_size())

    def __repr__(self) -> str:
        return (
            f"LLGuidanceMatcher(vocab_size={self._vocab_size}, num_tokens={self._accepted}, "
            f"rollback_limit={self.rollback_limit}, terminated={self.is_terminated()})"
        )
