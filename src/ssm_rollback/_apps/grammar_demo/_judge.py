"""The validator as a decoder's ``reject`` callback: judge each value the moment it ends.

``backtracking_generate`` offers every candidate token to ``reject(tokens)``.
When the candidate completes a value (a string's closing quote, the comma or
brace after a number), the judge parses the value and asks the ``Policy``. A
refused value sends the row back to the boundary in front of it - the
opening quote of a string, the colon before a number - so that the value is
decoded again from there, with its first token (``ban``) banned. A value
refused ``retries`` times is kept, and the call counts as refused: the judge
never loops forever and never hides a failure.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import attrs

from ._scan import Leaf, leaves
from ._tool_call import Policy

__all__ = ["BOUNDARY_BYTES", "Judge", "Rejection"]

#: Bytes whose tokens are boundaries: the grammar events around every key and value.
BOUNDARY_BYTES: Final = frozenset(b'{}:,"')


@attrs.frozen
class Rejection:
    """One refused value: where it was, why, and the boundary the row went back to."""

    path: tuple[str, ...]
    value: object
    reason: str
    #: New tokens kept: the row rolls back to the boundary at this length.
    keep: int
    #: The value's first token, banned when the row decodes the value again.
    ban: int

    def to_dict(self) -> dict[str, object]:
        return {
            "path": ".".join(self.path),
            "value": self.value,
            "reason": self.reason,
            "keep": self.keep,
            "ban": self.ban,
        }


@attrs.define
class Judge:
    """The ``reject`` callback for one call: ``policy`` applied to values as they end.

    ``pieces[t]`` is the bytes of token ``t``. ``rejections`` lists what was
    refused, in order; ``gave_up`` counts values kept after ``retries`` refusals.
    """

    policy: Policy
    pieces: Sequence[bytes]
    retries: int
    rejections: list[Rejection] = attrs.field(factory=list)
    gave_up: int = 0
    _tries: dict[tuple[str, ...], int] = attrs.field(factory=dict, init=False)

    def __call__(self, tokens: list[int]) -> int | None:
        """``None`` keeps the candidate (``tokens[-1]``); an int rolls back to that length."""
        rejection = self.judge(tokens)
        if rejection is None:
            return None
        tries = self._tries.get(rejection.path, 0)
        if tries >= self.retries:
            self.gave_up += 1
            return None
        self._tries[rejection.path] = tries + 1
        self.rejections.append(rejection)
        return rejection.keep

    def judge(self, tokens: Sequence[int]) -> Rejection | None:
        """The value ``tokens[-1]`` completes, if any, and the policy refuses it; else None."""
        before = _complete(leaves(self._bytes(tokens[:-1])))
        now = _complete(leaves(self._bytes(tokens)))
        if len(now) == len(before):
            return None
        leaf = now[-1]
        value = leaf.value()
        reason = self.policy.problem(leaf.path, value, {x.path: x.value() for x in now[:-1]})
        if reason is None:
            return None
        keep = self._token_at(tokens, leaf.start)
        return Rejection(leaf.path, value, reason, keep, tokens[keep])

    def _bytes(self, tokens: Sequence[int]) -> bytes:
        return b"".join(self.pieces[t] for t in tokens)

    def _token_at(self, tokens: Sequence[int], offset: int) -> int:
        """The index of the token whose bytes start at ``offset``."""
        seen = 0
        for index, token in enumerate(tokens):
            if seen >= offset:
                return index
            seen += len(self.pieces[token])
        raise AssertionError(f"no token starts at byte {offset}")


def _complete(found: list[Leaf]) -> list[Leaf]:
    return [leaf for leaf in found if leaf.end is not None]
