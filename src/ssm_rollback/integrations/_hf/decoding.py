"""What the Hugging Face decoders share: their counters and their result.

``backtracking_generate`` and ``speculative_generate`` both count what they
did in ``_Counts`` and return a ``GenerationResult`` whose ``report`` is
those counters frozen (``prompts`` reads their prompts and builds the
sequences).
"""

from __future__ import annotations

import attrs
import torch

__all__ = ["GenerationReport", "GenerationResult"]


@attrs.define
class _Counts:
    """The report's counters while a run is under way; ``freeze()`` makes the report."""

    #: New tokens in the output (rollbacks' dropped tokens not counted).
    tokens: int = 0
    #: Forward passes of the target model, prefill included.
    forward_passes: int = 0
    drafts_proposed: int = 0
    drafts_accepted: int = 0
    rollbacks_served: int = 0
    rollbacks_declined: int = 0
    #: Of those, rollbacks the grammar matcher could not follow that far.
    grammar_declined: int = 0
    #: Of those, rollbacks declined because the row had spent its ``max_rollbacks``.
    rollbacks_over_budget: int = 0
    #: Tokens dropped by served rollbacks (and decoded again).
    tokens_regenerated: int = 0
    #: Boundary tokens in the output.
    boundaries: int = 0
    #: Boundary snapshots saved.
    snapshots: int = 0
    #: Time spent restoring snapshots and cropping KV for rollbacks.
    rollback_seconds: float = 0.0
    #: With ``check_rollbacks``: time a re-prefill of each kept prefix took instead.
    recompute_seconds: float = 0.0
    #: With ``check_rollbacks``: rollbacks whose next logits differ from a fresh decode.
    mismatches: int = 0

    def freeze(self) -> GenerationReport:
        return GenerationReport(**attrs.asdict(self))


@attrs.frozen
class GenerationReport(_Counts):
    """What a decoder did, summed over the rows: the counters above, frozen.

    ``drafts_proposed``, ``drafts_accepted``, ``forward_passes``,
    ``rollbacks_served`` and ``rollbacks_declined`` among them (SPEC 10).
    ``report + other`` sums two reports, counter by counter (the totals of
    several runs; ``GenerationReport()`` is all zeros).
    """

    def __add__(self, other: object) -> GenerationReport:
        if not isinstance(other, GenerationReport):
            return NotImplemented
        mine, theirs = attrs.asdict(self), attrs.asdict(other)
        return GenerationReport(**{name: value + theirs[name] for name, value in mine.items()})


@attrs.frozen(eq=False)  # holds a tensor: compare by identity
class GenerationResult:
    """A decoder's output: ``sequences`` (prompt + new tokens, as ``generate``) and ``report``."""

    sequences: torch.Tensor
    report: GenerationReport
