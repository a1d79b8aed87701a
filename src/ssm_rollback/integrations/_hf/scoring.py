"""How a position's logits become a token: ``generate``'s processors, then argmax or a sample.

The processors are the ones ``model.generate`` builds from its generation
config (repetition penalty, temperature, top-k, top-p with sampling, ...)
and any passed as ``logits_processor``. They are applied as ``transformers``'
own assisted decoding applies them: to every verify position, in order, in
float32, each with the tokens before that position (prompt, output, and the
drafts ahead of it) as its ``input_ids``. A decode is greedy (argmax of the
processed scores) unless it samples (``do_sample``, or a ``generator``).

The rows of a batch decode one after another, so a processor sees one row
at a time, as a batch of one (``for_row``). ``prefix_allowed_tokens_fn`` is
still called with the row's index in the batch, as ``generate`` calls it;
the processors ``generate`` builds with a value per row of the batch (the
padding a repetition penalty ignores, the prompt an encoder repetition
penalty or ``encoder_no_repeat_ngram_size`` reads) hold the row's own; a
processor of the caller's own that reads the batch index sees 0.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import attrs
import torch
from transformers.generation.logits_process import (
    EncoderNoRepeatNGramLogitsProcessor,
    EncoderRepetitionPenaltyLogitsProcessor,
    LogitsProcessorList,
    PrefixConstrainedLogitsProcessor,
    RepetitionPenaltyLogitsProcessor,
)

__all__ = ["Scoring", "pick"]


@attrs.frozen(eq=False)
class Scoring:
    """A call's processors (``None``: none) and whether, and with which generator, it samples."""

    processors: LogitsProcessorList | None
    sampled: bool
    generator: torch.Generator | None

    def process(
        self, before: Sequence[int], following: Sequence[int], logits: torch.Tensor
    ) -> torch.Tensor:
        """Scores of ``logits`` (``[n, vocab]``), row ``i`` the position after ``before`` and
        ``following[:i]``; the logits themselves when there are no processors."""
        if self.processors is None:
            return logits
        scores = logits.float().clone()
        ids = torch.tensor([[*before, *following[: len(scores) - 1]]], device=scores.device)
        for i in range(len(scores)):
            upto = ids[:, : len(before) + i]
            scores[i] = self.processors(upto, scores[i : i + 1])[0]  # type: ignore[arg-type]
        return scores

    def for_row(self, row: int) -> Scoring:
        """The scoring of batch row ``row`` as a batch of one: ``prefix_allowed_tokens_fn`` told
        the row's index, processors holding a value per row of the batch given the row's."""
        if self.processors is None:
            return self
        kept = [_of_row(p, row) for p in self.processors]
        return attrs.evolve(self, processors=LogitsProcessorList(kept))

    def pick(self, scores: torch.Tensor) -> int:
        return pick(scores, self.generator, self.sampled)


def pick(
    scores: torch.Tensor, generator: torch.Generator | None, sampled: bool | None = None
) -> int:
    """The next token: the argmax, or a sample (``sampled``; by default when a ``generator`` is
    given; without one, from torch's global generator, as ``generate`` samples)."""
    if not (generator is not None if sampled is None else sampled):
        return int(scores.argmax())
    probs = torch.softmax(scores.float(), -1)
    return int(torch.multinomial(probs, 1, generator=generator))


def _of_row(processor: object, row: int) -> object:
    """``processor`` as batch row ``row`` needs it, scored as a batch of one: a copy holding the
    row's value where ``generate`` built it with one per row of the batch, else itself."""
    if type(processor) is PrefixConstrainedLogitsProcessor:
        return _constraint_of_row(processor, row) if row else processor
    fields: dict[str, object] = {}
    # transformers 5.25's fields: generate builds these for the whole batch.
    if type(processor) is RepetitionPenaltyLogitsProcessor:
        ignored = processor.prompt_ignore_length  # each row's left padding, from the mask
        if isinstance(ignored, torch.Tensor) and len(ignored) > 1:
            fields["prompt_ignore_length"] = ignored[row : row + 1]
    elif type(processor) is EncoderRepetitionPenaltyLogitsProcessor:
        prompt = processor.encoder_input_ids  # the padded prompts, [batch, length]
        if prompt.dim() == 2 and len(prompt) > 1:
            fields["encoder_input_ids"] = prompt[row : row + 1]
    elif type(processor) is EncoderNoRepeatNGramLogitsProcessor and processor.batch_size > 1:
        fields = {"batch_size": 1, "generated_ngrams": processor.generated_ngrams[row : row + 1]}
    if not fields:
        return processor
    own = copy.copy(processor)
    vars(own).update(fields)
    return own


def _constraint_of_row(processor: object, row: int) -> object:
    """``processor``, or for ``prefix_allowed_tokens_fn``'s a copy that passes it ``row`` where
    ``generate`` passes the batch index (each row is scored as a batch of one)."""
    if type(processor) is not PrefixConstrainedLogitsProcessor:
        return processor
    allowed = processor._prefix_allowed_tokens_fn  # transformers 5.25's field: the function

    def allowed_in_row(_batch_id: int, ids: torch.Tensor) -> list[int]:
        return allowed(row, ids)

    return PrefixConstrainedLogitsProcessor(allowed_in_row, num_beams=1)
