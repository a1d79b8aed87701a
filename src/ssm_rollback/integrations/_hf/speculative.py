"""Speculative decoding for Hugging Face hybrid models, rejected drafts undone exactly.

Each step feeds the last committed token and ``k`` drafts through the target
in one forward pass, after a checkpoint of the recurrent state (a pool slot
of its own). If the target rejects a draft, the checkpoint is restored, the
attention KV cropped, and the accepted tokens are queued to be fed again in
front of the next step's tokens - one forward pass per step either way. (A
replay that rejections in a row made wider than four verify steps gets a
forward pass of its own, so that forward passes stay bounded.)
An attention-only cache is cropped to the accepted tokens and replays
nothing. That is the replay form of ``commit_verified``'s plan, which also places boundary
snapshots when a ring is asked for.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import final

import attrs
import torch

from ... import SsmDecodeRing
from ..._errors import InvalidArgumentError, InvalidArgumentTypeError, check_non_negative_int
from ...rollback import commit_verified
from .decoding import GenerationResult, _Counts, pad_id, pad_rows, pick, prompt_rows
from .stream import TokenPredicate, _Stream, as_predicate, eos_ids, text_vocab_size

__all__ = ["DraftFn", "speculative_generate"]

#: A drafter: ``draft(tokens, k)`` proposes up to ``k`` token ids to follow ``tokens``.
DraftFn = Callable[[list[int], int], Sequence[int]]

#: A replay wider than this many verify steps is fed in a forward pass of its own. A wider
#: forward pass costs little more than a narrow one (CPU: 9 tokens 1.05x of 5; GPU: width is
#: nearly free), while an extra pass costs a whole one: fold a few rejected steps, not all.
_REPLAY_STEPS = 4

#: Drafts and, for a sampling assistant, the distribution each was drawn from.
_Proposal = tuple[list[int], list[torch.Tensor] | None]


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

    def propose(self, tokens: list[int], k: int, generator: torch.Generator | None) -> _Proposal:
        stream = self._stream
        held = stream.fed + stream.queued
        common = next(
            (i for i, (a, b) in enumerate(zip(held, tokens, strict=False)) if a != b), None
        )
        if common is None:
            common = min(len(held), len(tokens))
        if common < len(held):
            stream.rewind(common)  # its last drafts were rejected, or differ from the output
        logits = stream.feed(tokens[len(stream.fed) + len(stream.queued) :])[-1]
        stream.checkpoint()
        drafts: list[int] = []
        dists: list[torch.Tensor] = []
        while len(drafts) < k:
            if generator is not None:
                dists.append(torch.softmax(logits.float(), -1))
            drafts.append(pick(logits, generator))
            if len(drafts) < k:
                logits = stream.feed([drafts[-1]])[-1]
        self.forward_passes = stream.forward_passes
        return drafts, (dists if generator is not None else None)


def _drafter(
    draft: str | DraftFn | torch.nn.Module, vocab: int
) -> Callable[[list[int], int, torch.Generator | None], _Proposal]:
    if isinstance(draft, torch.nn.Module):
        return _Assistant(draft, vocab).propose
    if draft == "prompt_lookup":
        return lambda tokens, k, _: (prompt_lookup(tokens, k), None)
    if isinstance(draft, str) or not callable(draft):
        raise InvalidArgumentTypeError(
            f"'draft' must be 'prompt_lookup', a causal LM or a function (tokens, k) -> ids, "
            f"got {draft!r}"
        )
    user = draft

    def call(tokens: list[int], k: int, _: torch.Generator | None) -> _Proposal:
        proposed = [int(t) for t in user(list(tokens), k)][:k]
        bad = [t for t in proposed if not 0 <= t < vocab]
        if bad:
            raise InvalidArgumentError(f"'draft' must propose ids below {vocab}, got {bad}")
        return proposed, None

    return call


def _accept(
    logits: torch.Tensor,
    drafts: list[int],
    dists: list[torch.Tensor] | None,
    generator: torch.Generator | None,
) -> tuple[int, int]:
    """How many drafts the target accepts, and its own token after them.

    Greedy: drafts equal to the target's argmax. Sampled: the standard rule
    (accept ``d`` with probability ``min(1, p(d) / q(d))``, else sample the
    residual ``max(p - q, 0)``), so the output is distributed as the target's.
    """
    if generator is None:
        chosen = logits.argmax(-1).tolist()
        n = 0
        while n < len(drafts) and drafts[n] == chosen[n]:
            n += 1
        return n, int(chosen[n])
    probs = torch.softmax(logits.float(), -1)
    for i, token in enumerate(drafts):
        p = probs[i]
        q = (
            dists[i]
            if dists is not None
            else torch.nn.functional.one_hot(torch.tensor(token), p.shape[-1]).to(p)
        )
        ratio = float(p[token] / q[token]) if float(q[token]) > 0 else 0.0
        if float(torch.rand((), generator=generator)) < min(1.0, ratio):
            continue
        residual = (p - q).clamp(min=0)
        residual = residual if float(residual.sum()) > 0 else p
        return i, int(torch.multinomial(residual / residual.sum(), 1, generator=generator))
    return len(drafts), int(torch.multinomial(probs[len(drafts)], 1, generator=generator))


@attrs.define
class _Boundaries:
    """Boundary snapshots during speculative decoding: a ring and the predicate."""

    ring: SsmDecodeRing
    is_boundary: Callable[[int], bool]


def speculative_generate(
    model: torch.nn.Module,
    input_ids: torch.Tensor,
    *,
    max_new_tokens: int,
    draft: str | DraftFn | torch.nn.Module = "prompt_lookup",
    num_draft_tokens: int = 4,
    generator: torch.Generator | None = None,
    eos_token_id: int | Sequence[int] | None = None,
    pad_token_id: int | None = None,
    is_boundary: TokenPredicate | None = None,
    capacity: int = 0,
    **generate_kwargs: object,
) -> GenerationResult:
    """Speculative decoding for hybrid (and any) causal LMs, batch 1; greedy unless sampled.

    ``draft``: ``"prompt_lookup"`` (n-gram match in prompt + output), a causal
    LM with the same vocabulary (the assistant), or ``draft(tokens, k)``.
    Greedy output equals greedy ``model.generate``'s; with a ``generator``
    tokens are sampled and drafts accepted by the standard rule. With
    ``is_boundary`` and ``capacity`` > 0, boundary tokens get snapshots in a
    ring as ``backtracking_generate``'s do. As ``model.generate(...,
    custom_generate=speculative_generate)`` the arguments ``generate``
    prepares are taken; logits processors other than none are refused.
    """
    max_new_tokens = check_non_negative_int("max_new_tokens", max_new_tokens)
    k_max = check_non_negative_int("num_draft_tokens", num_draft_tokens)
    capacity = check_non_negative_int("capacity", capacity)
    processors = generate_kwargs.get("logits_processor")
    if isinstance(processors, Sequence) and len(processors):
        raise InvalidArgumentError(
            f"speculative_generate applies no logits processors, got {len(processors)} "
            f"(from generation settings such as temperature or repetition_penalty)"
        )
    if eos_token_id is None:
        eos_token_id = getattr(generate_kwargs.get("generation_config"), "eos_token_id", None)
    (prompt,) = _one_row(input_ids)
    vocab = text_vocab_size(model)
    eos = eos_ids(model, eos_token_id)
    propose = _drafter(draft, vocab)
    boundaries = (
        _Boundaries(SsmDecodeRing(capacity), as_predicate("is_boundary", is_boundary))
        if is_boundary is not None
        else None
    )
    target = _Stream(model, vocab, capacity)
    counts = _Counts()
    new = [pick(target.feed(prompt)[-1], generator)] if max_new_tokens else []
    while new and len(new) < max_new_tokens and new[-1] not in eos:
        k = min(k_max, max_new_tokens - len(new))
        drafts, dists = propose(prompt + new, k, generator) if k else ([], None)
        if len(target.queued) > _REPLAY_STEPS * (k_max + 1):
            # The checkpoint is taken before the queued replay, so a verify step that carries it
            # and rejects again replays it once more: fed on its own once it is as wide as a few
            # verify steps, the replay stays bounded when drafts keep failing.
            target.feed([])
        target.checkpoint()
        logits = target.feed([new[-1], *drafts])
        n, bonus = _accept(logits, drafts, dists, generator)
        counts.drafts_proposed += len(drafts)
        counts.drafts_accepted += n
        first = len(new)  # the output length of the last committed token, fed first
        new += [*drafts[:n], bonus]
        _commit(
            target, boundaries, counts, len(prompt), first, drafts, n, new[first - 1 : first + n]
        )
    new = _cut(new[:max_new_tokens], eos)
    counts.tokens = len(new)
    counts.forward_passes = target.forward_passes
    sequences = pad_rows([prompt + new], pad_id(model, eos, pad_token_id), input_ids)
    return GenerationResult(sequences, counts.freeze())


def _one_row(input_ids: torch.Tensor) -> list[list[int]]:
    rows = prompt_rows(input_ids)
    if len(rows) != 1:
        raise InvalidArgumentError(
            f"'input_ids' must hold one row (speculative_generate decodes batch 1), got {len(rows)}"
        )
    return rows


def _cut(tokens: list[int], eos: frozenset[int]) -> list[int]:
    for i, token in enumerate(tokens):
        if token in eos:
            return tokens[: i + 1]
    return tokens


def _commit(
    target: _Stream,
    boundaries: _Boundaries | None,
    counts: _Counts,
    prompt_len: int,
    first: int,
    drafts: list[int],
    n: int,
    fed_kept: list[int],
) -> None:
    """Leave the target's state after the accepted tokens; snapshot accepted boundaries."""
    keep = prompt_len + first + n  # the cache must end up holding this many tokens
    if boundaries is None:
        if n < len(drafts):
            target.rewind(keep)  # the re-feed rides along with the next step's tokens
            counts.rollbacks_served += 1
            counts.tokens_regenerated += len(target.queued)
        return
    flags = [boundaries.is_boundary(t) for t in fed_kept]
    flags += [False] * (len(drafts) + 1 - len(flags))  # rejected drafts never record
    plan = commit_verified(
        boundaries.ring,
        seq=0,
        first_position=first,
        accepted=n,
        is_boundary=flags,
        in_thinking=[False] * len(flags),
    )
    counts.boundaries += sum(flags)
    if plan.replay_needed:
        target.rewind(keep)
        counts.rollbacks_served += n < len(drafts)
        counts.tokens_regenerated += len(target.queued)
    for segment in plan.replay:
        if segment.save is None:
            continue
        if plan.replay_needed and target.queued:  # feed up to the boundary, to save its state
            upto = prompt_len + segment.through - len(target.fed)
            target.queued, rest = target.queued[:upto], target.queued[upto:]
            target.feed([])
            target.queued = rest
        counts.snapshots += target.save(segment.save, boundaries.ring)
