"""How a step fails on every rank together: the ranks' ``src`` words, and a group's lost peers.

Rules:

1. Every rank's ``src`` is one word (``src_word``): the rank itself, or
   ``INVALID`` where it is not an int >= 0 that int64 carries. A rank with a
   bad ``src`` still brings its word to the collective its peers make, so
   where the words meet every rank reads the same words and
   ``src_refusal`` gives every rank the same error, naming each rank's ``src``.
2. A backend call that fails - a peer died, or did not take part within the
   group's timeout - is ``DistributedError`` naming the group and, where
   the call says which, the peer; the backend's own error is its cause.
   Gloo closes a group's connections when a call times out, so the channel
   that raised it refuses every later step on that group (``channel``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from .._errors import InvalidArgumentError, SsmRollbackError, check_non_negative_int, shown

__all__ = ["INVALID", "DistributedError", "lost", "src_refusal", "src_word"]

#: A rank's word for a ``src`` that is no rank at all (not an int >= 0 within int64).
INVALID: Final = -1
_MAX_INT64: Final = (1 << 63) - 1
_WHY: Final = "it died, hung, raised before the call or passed another 'src'"


class DistributedError(SsmRollbackError, RuntimeError):
    """A peer of the process group died, or did not take the step within the group's timeout.

    ``group`` names the process group; ``rank`` is the peer's global rank, or
    ``None`` where the backend does not say which peer failed (a collective).
    A peer that passed another ``src`` after the group's first step, or
    raised before calling, shows up here too: its peers wait for it until
    the group's timeout (``init_process_group(timeout=...)``). The group
    cannot be used again (gloo closes its connections on a timeout): destroy
    it and start a new one.
    """

    def __init__(self, message: str, group: str, rank: int | None) -> None:
        super().__init__(message)
        self.group = group
        self.rank = rank


def src_word(src: object) -> tuple[int, InvalidArgumentError | None]:
    """This rank's word for ``src`` (rule 1), and its own error when the word is ``INVALID``."""
    try:
        value = check_non_negative_int("src", src)
    except InvalidArgumentError as error:
        return INVALID, error
    if value > _MAX_INT64:
        return INVALID, InvalidArgumentError(f"'src' must be a rank (an int64), got {shown(value)}")
    return value, None


def src_refusal(
    words: Sequence[int], ranks: Sequence[int], error: InvalidArgumentError | None
) -> InvalidArgumentError | None:
    """The error every rank raises for these ``src`` words (group order), or ``None``: agreed.

    ``ranks`` are the group's global ranks in group order; ``error`` is this
    rank's own (``src_word``'s), raised when every word is ``INVALID``.
    """
    if any(word != words[0] for word in words):
        shown = ", ".join(
            f"{_shown(word)} on rank {rank}" for word, rank in zip(words, ranks, strict=True)
        )
        return InvalidArgumentError(
            f"'src' must be the same rank of the group on every rank, got {shown}"
        )
    if error is not None:
        return error
    if words[0] not in ranks:
        return InvalidArgumentError(
            f"'src' must be a rank of the group (ranks {list(ranks)}), got {words[0]}"
        )
    return None


def _shown(word: int) -> str:
    return str(word) if word != INVALID else "no rank (not an int >= 0)"


def lost(
    label: str, rank: int | None, what: str, cause: BaseException | None, why: str = _WHY
) -> DistributedError:
    """The error for a step that failed on ``label``: ``rank`` (the peer, if known) ``what``."""
    who = "a peer" if rank is None else f"rank {rank}"
    because = "" if cause is None else f": {type(cause).__name__}: {cause}"
    return DistributedError(
        f"{label}: {who} {what} - {why}; the group cannot be used again{because}", label, rank
    )
