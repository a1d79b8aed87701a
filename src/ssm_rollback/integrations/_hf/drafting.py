"""Drafters for speculative decoding: prompt lookup, an assistant model, or a draft function.

``drafters(draft, vocab, verifies)`` checks the ``draft`` argument once and
makes, for each row, a function ``propose(tokens, k, scoring) -> (drafts,
distributions)`` of its own (an assistant keeps a cache per row). Checked
where it enters: an assistant must share the target's vocabulary
(and, when drafts will be verified, run multi-token forward passes from its
cache); what a draft function returns is checked on every call (a list,
tuple or 1-D integer tensor of at most ``k`` ids in the vocabulary). An
assistant picks its drafts as the target picks its tokens (the same logits
processors, greedy or sampled), as ``transformers``' assistant does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import final

import torch

from ..._errors import InvalidArgumentError, InvalidArgumentTypeError
from .arguments import shown, text_vocab_size, token_ids
from .probe import check_multi_token_forward
from .scoring import Scoring
from .stream import _Stream

__all__ = ["DraftFn", "Proposal", "Proposer", "drafters", "prompt_lookup"]

#: A drafter: ``draft(tokens, k)`` proposes up to ``k`` token ids to follow ``tokens``.
DraftFn = Callable[[list[int], int], Sequence[int]]

#: Drafts and, for a sampling assistant, the distribution each was drawn from.
Proposal = tuple[list[int], list[torch.Tensor] | None]
#: One row's drafter: ``propose(tokens, k, scoring)``.
Proposer = Callable[[list[int], int, Scoring], Proposal]


def prompt_lookup(tokens: Sequence[int], k: int, max_ngram: int = 2) -> list[int]:
    """Up to ``k`` tokens that followed the earliest earlier match of the last n-gram.

    The rule of ``transformers``' prompt lookup: longest n-gram first
    (``max_ngram`` down to 1), earliest match first, over prompt and output.
    """
    length = len(tokens)
    for n in range(min(max_ngram, length - 1), 0, -1):
        pattern = list(tokens[length - n :])
        for start in range(length - n):
            if list(tokens[start : start + n]) == pattern:
                follow = list(tokens[start + n : start + n + k])
                if follow:
                    return follow
    return []


@final
class _Assistant:
    """Drafts from a smaller causal LM with a cache of its own, rewound as the target's is."""

    def __init__(self, model: torch.nn.Module, vocab: int) -> None:
        self._stream = _Stream(model, vocab, 0)
        self.forward_passes = 0

    def propose(self, tokens: list[int], k: int, scoring: Scoring) -> Proposal:
        stream = self._stream
        held = stream.fed + stream.queued
        common = next(
            (i for i, (a, b) in enumerate(zip(held, tokens, strict=False)) if a != b), None
        )
        if common is None:
            common = min(len(held), len(tokens))
        if common < len(held):
            stream.rewind(common)  # its last drafts were rejected, or differ from the output
        logits = stream.feed(tokens[len(stream.fed) + len(stream.queued) :], last_only=True)[-1]
        stream.checkpoint()
        drafts: list[int] = []
        dists: list[torch.Tensor] = []
        while len(drafts) < k:
            scores = scoring.process([*tokens, *drafts], [], logits[None])[0]
            if scoring.sampled:
                dists.append(torch.softmax(scores.float(), -1))
            drafts.append(scoring.pick(scores))
            if len(drafts) < k:
                logits = stream.feed([drafts[-1]])[-1]
        self.forward_passes = stream.forward_passes
        return drafts, (dists if scoring.sampled else None)


def drafters(draft: object, vocab: int, verifies: bool) -> Callable[[], Proposer]:
    """The drafter ``draft`` names, checked once, as a maker of one fresh drafter per row: an
    assistant must share the target's vocabulary and, when drafts will be verified, run
    multi-token forward passes from its cache."""
    if isinstance(draft, torch.nn.Module):
        own = text_vocab_size(draft, "draft")
        if own != vocab:
            raise InvalidArgumentError(
                f"'draft' must be a causal LM with the target's vocabulary of {vocab} ids, "
                f"got one of {own}"
            )
        if verifies:
            check_multi_token_forward("draft", draft, vocab)
        assistant = draft
        return lambda: _Assistant(assistant, vocab).propose
    proposer = _stateless(draft, vocab)
    return lambda: proposer


def _stateless(draft: object, vocab: int) -> Proposer:
    """Prompt lookup, or a draft function whose every answer is checked."""
    if isinstance(draft, str) and draft == "prompt_lookup":
        return lambda tokens, k, _: (prompt_lookup(tokens, k), None)
    if isinstance(draft, str) or not callable(draft):
        raise InvalidArgumentTypeError(
            f"'draft' must be 'prompt_lookup', a causal LM or a function (tokens, k) -> ids, "
            f"got {shown(draft)}"
        )
    user = draft

    def call(tokens: list[int], k: int, _: Scoring) -> Proposal:
        proposed = token_ids(
            "draft(tokens, k)", user(list(tokens), k), vocab, ordered=True, verb="return"
        )
        if len(proposed) > k:
            raise InvalidArgumentError(
                f"'draft(tokens, k)' must return at most k={k} token ids, got {len(proposed)}"
            )
        return proposed, None

    return call
