"""What one row of ``speculative_generate`` decodes with: its target stream, boundary ring,
scoring, EOS ids, streamer and counters, and what it has kept so far."""

from __future__ import annotations

from collections.abc import Callable

import attrs
import torch

from ... import SsmDecodeRing
from .decoding import Outputs, _Counts
from .scoring import Scoring
from .stream import _Stream
from .streaming import TokenStreamer

__all__ = ["_Boundaries", "_Run"]


@attrs.define
class _Boundaries:
    """Boundary snapshots during speculative decoding: a ring and the predicate."""

    ring: SsmDecodeRing
    is_boundary: Callable[[int], bool]


@attrs.frozen(eq=False)
class _Run:
    """What a decode works with: the target's stream, boundaries, scoring, EOS ids, the
    streamer and the counters."""

    target: _Stream
    boundaries: _Boundaries | None
    scoring: Scoring
    eos: tuple[int, ...]
    stream: TokenStreamer
    counts: _Counts
    #: Per new token, with ``output_scores`` / ``output_logits``: its scores and raw logits.
    outputs: Outputs = attrs.field(factory=Outputs)
    #: The row as given (left padding kept): what ``generate``'s processors see before it.
    given: list[int] = attrs.field(factory=list)
    new: list[int] = attrs.field(factory=list)
    scores: list[torch.Tensor] = attrs.field(factory=list)
    logits: list[torch.Tensor] = attrs.field(factory=list)

    def keep(self, scores: torch.Tensor, logits: torch.Tensor) -> None:
        """Keep the rows of the tokens just committed, if asked for (``[n, vocab]`` each)."""
        if self.outputs.scores:
            self.scores.extend(scores.float().clone())
        if self.outputs.logits:
            self.logits.extend(logits.float().clone())
