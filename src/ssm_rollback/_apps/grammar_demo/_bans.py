"""A grammar matcher with the validator's bans on top: refused first tokens stay masked.

When the validator refuses a value, the row rolls back to the boundary in
front of it and decodes the value again. Banning only the token that was
offered last would not steer anything (for a string that is the closing
quote), so the judge bans the refused value's *first* token at the position
where the value starts, and this wrapper - a ``GrammarMatcher`` like any
other, passed as ``grammar=`` - clears those tokens from the engine's mask
whenever the row stands at that position. Bans pile up, so each retry of a
value picks among first tokens not yet refused. A rollback to before a
banned position forgets its bans: the text before it may differ next time.
A ban that would leave no token is not applied.
"""

from __future__ import annotations

from typing import Final, final

import torch

from ...integrations.grammar import GrammarMatcher

__all__ = ["BanningMatcher"]

# Int32 words with every bit set but one: bit 31 is the sign bit.
_ALL_BUT: Final = tuple(~(1 << bit) if bit < 31 else 2**31 - 1 for bit in range(32))


@final
class BanningMatcher:
    """``inner``, a ``GrammarMatcher``, whose mask also leaves out tokens banned at a position."""

    def __init__(self, inner: GrammarMatcher) -> None:
        self.inner = inner
        self._length = 0
        self._bans: dict[int, set[int]] = {}

    @property
    def vocab_size(self) -> int:
        return self.inner.vocab_size

    @property
    def rollback_limit(self) -> int:
        return self.inner.rollback_limit

    @property
    def num_tokens(self) -> int:
        """Tokens accepted and not rolled back: the position the bans are keyed by."""
        return self._length

    def ban(self, position: int, token: int) -> None:
        """Leave ``token`` out of the mask whenever ``position`` tokens have been accepted."""
        self._bans.setdefault(position, set()).add(token)

    def is_terminated(self) -> bool:
        return self.inner.is_terminated()

    def accept_token(self, token: int, /) -> bool:
        if not self.inner.accept_token(token):
            return False
        self._length += 1
        return True

    def rollback(self, num_tokens: int, /) -> None:
        self.inner.rollback(num_tokens)  # raises, changing nothing, past rollback_limit
        self._length -= num_tokens
        for position in [p for p in self._bans if p > self._length]:
            del self._bans[position]

    def fill_next_token_bitmask(self, bitmask: torch.Tensor, index: int = 0, /) -> None:
        self.inner.fill_next_token_bitmask(bitmask, index)
        banned = self._bans.get(self._length)
        if not banned:
            return
        row = bitmask[index]
        kept = row.clone()
        for token in banned:
            kept[token // 32] &= _ALL_BUT[token % 32]
        if bool(kept.any()):
            row.copy_(kept)
