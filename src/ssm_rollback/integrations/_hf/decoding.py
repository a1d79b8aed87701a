"""What the Hugging Face decoders share: their counters and their result.

``backtracking_generate`` and ``speculative_generate`` both count what they
did in ``_Counts`` and return a ``GenerationResult`` whose ``report`` is
those counters frozen (``prompts`` reads their prompts and builds the
sequences).
"""

from __future__ import annotations

import attrs
import torch
from transformers.cache_utils import Cache
from transformers.generation.utils import GenerateDecoderOnlyOutput

__all__ = ["GenerationReport", "GenerationResult", "Outputs"]


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


class GenerationResult(GenerateDecoderOnlyOutput):
    """A decoder's output, as ``transformers``' own ``GenerateDecoderOnlyOutput``.

    ``sequences``: prompt + new tokens, as ``generate`` gives them. With
    ``output_scores`` / ``output_logits``: ``scores`` / ``logits``, one
    ``(batch, vocab)`` float32 tensor per new token, as ``transformers``'
    assisted decoding returns them - the processed scores each token was
    picked from, and the model's raw logits there (a row that ended before
    the others puts all its weight on the pad id past its end). ``cache``:
    with ``return_dict_in_generate``, the cache a one-row call decoded in,
    after all its tokens but the last (as ``generate``'s). ``report``: what
    the decoder did.
    """

    def __init__(
        self,
        sequences: torch.Tensor | None = None,
        report: GenerationReport | None = None,
        *,
        scores: tuple[torch.Tensor, ...] | None = None,
        logits: tuple[torch.Tensor, ...] | None = None,
        cache: Cache | None = None,
    ) -> None:
        super().__init__(sequences=sequences, scores=scores, logits=logits, cache=cache)  # type: ignore[arg-type]
        self._report = GenerationReport() if report is None else report

    @property
    def report(self) -> GenerationReport:
        """What the decoder did, summed over the rows."""
        return self._report

    def __reduce__(self) -> str | tuple[object, ...]:
        """Rebuilt empty, then filled: ``transformers``' own ``__reduce__`` rebuilds a
        ``ModelOutput`` as ``cls(*field_values)``, which this signature does not take. The
        fields come back as items, ``report`` and any other attribute as state, so
        ``copy.copy``, ``copy.deepcopy`` and ``pickle`` round-trip it."""
        reduced = super().__reduce__()  # type: ignore[no-untyped-call]
        if isinstance(reduced, str):
            return reduced
        _, _, *rest = reduced  # the field values as arguments: dropped, the items hold them
        return (type(self), (), *rest)


@attrs.frozen
class Outputs:
    """Which per-token outputs a call asked for (``output_scores``, ``output_logits``)."""

    scores: bool = False
    logits: bool = False

    def result(
        self,
        sequences: torch.Tensor,
        report: GenerationReport,
        scores: list[list[torch.Tensor]],
        logits: list[list[torch.Tensor]],
        pad: int | None,
        cache: Cache | None = None,
    ) -> GenerationResult:
        """The decoders' answer: ``sequences`` and ``report``, with each row's per-token
        ``scores`` and ``logits`` where the call asked for them, and the ``cache`` to return."""
        return GenerationResult(
            sequences,
            report,
            scores=self.per_token(scores, pad) if self.scores else None,
            logits=self.per_token(logits, pad) if self.logits else None,
            cache=cache,
        )

    def per_token(
        self, rows: list[list[torch.Tensor]], pad: int | None
    ) -> tuple[torch.Tensor, ...]:
        """One ``(batch, vocab)`` float32 tensor per new token from each row's per-token
        tensors; a row shorter than the longest puts all its weight on ``pad`` past its end."""
        if not rows or not any(rows):
            return ()
        width = max(len(row) for row in rows)
        template = next(row[0] for row in rows if row)
        past_end = torch.full_like(template, float("-inf"), dtype=torch.float32)
        if pad is not None and pad < len(past_end):
            past_end[pad] = 0.0
        steps = []
        for j in range(width):
            step = [row[j].float() if j < len(row) else past_end for row in rows]
            steps.append(torch.stack(step))
        return tuple(steps)
