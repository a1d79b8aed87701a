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
snapshots when a ring is asked for. Every argument is checked before the first forward pass
(``arguments``, ``prompts``, ``generate_args``), and a model (or assistant) whose own
multi-token cached forward fails is refused then (``probe``); drafters are in ``drafting``,
what a row decodes with in ``speculative_run``. Drafts past an EOS are never verified, and an
accepted EOS draft ends the row there.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence

import torch

from ... import SsmDecodeRing
from ..._errors import InvalidArgumentError, check_non_negative_int
from ...rollback import commit_verified
from .arguments import (
    TokenPredicate,
    as_predicate,
    check_generator,
    eos_ids,
    pad_id,
    text_vocab_size,
)
from .decoding import GenerationResult, _Counts
from .drafting import DraftFn, Proposal, drafters
from .generate_args import generate_args, settings_in_config
from .prefix_use import checked_prefix_cache, publish_stream, start_stream
from .probe import check_multi_token_forward
from .prompts import InputIds, sequences
from .scoring import Scoring
from .speculative_run import _Boundaries, _Run
from .stream import _Stream
from .streaming import generate_call, open_stream

__all__ = ["speculative_generate"]

#: A replay wider than this many verify steps is fed in a forward pass of its own. A wider
#: forward pass costs little more than a narrow one (CPU: 9 tokens 1.05x of 5; GPU: width is
#: nearly free), while an extra pass costs a whole one: fold a few rejected steps, not all.
_REPLAY_STEPS = 4


def _accept(
    logits: torch.Tensor,
    drafts: list[int],
    dists: list[torch.Tensor] | None,
    generator: torch.Generator | None,
    sampled: bool | None = None,
) -> tuple[int, int]:
    """How many drafts the target accepts, and its own token after them, from the target's
    (processed) scores at each verify position.

    Greedy: drafts equal to the target's argmax. Sampled (``sampled``, by
    default when a ``generator`` is given): the standard rule (accept ``d``
    with probability ``min(1, p(d) / q(d))``, else sample the residual
    ``max(p - q, 0)``), so the output is distributed as the target's ``p``.
    """
    if not (generator is not None if sampled is None else sampled):
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


@settings_in_config
def speculative_generate(
    model: torch.nn.Module,
    input_ids: InputIds,
    *,
    max_new_tokens: int | None = None,
    draft: str | DraftFn | torch.nn.Module = "prompt_lookup",
    num_draft_tokens: int = 4,
    generator: torch.Generator | None = None,
    eos_token_id: int | Sequence[int] | None = None,
    pad_token_id: int | None = None,
    is_boundary: TokenPredicate | None = None,
    capacity: int = 0,
    prefix_cache: object = None,
    **generate_kwargs: object,
) -> GenerationResult:
    """Speculative decoding for hybrid (and any) causal LMs; greedy unless sampled.

    Decodes ``max_new_tokens`` tokens (else what the generation config's
    ``max_new_tokens`` or ``max_length`` allows) or up to an EOS.
    ``draft``: ``"prompt_lookup"`` (n-gram match in prompt + output), a causal
    LM with the same vocabulary (the assistant), or ``draft(tokens, k)``.
    Greedy output equals greedy ``model.generate``'s; with a ``generator``
    tokens are sampled and drafts accepted by the standard rule. With
    ``is_boundary`` and ``capacity`` > 0, boundary tokens get snapshots in a
    ring as ``backtracking_generate``'s do. As ``model.generate(...,
    custom_generate=speculative_generate)`` it takes what ``generate``
    prepares and refuses settings it cannot honour (beam search, outputs it
    does not build). A batch decodes row after row, each row independent of
    the others (its padding dropped, as ``backtracking_generate`` does), and
    comes back padded as ``generate`` pads it. A model whose own multi-token
    cached forward pass fails is refused up front.
    With ``prefix_cache`` (a ``HybridPrefixCache`` of ``model``) decoding
    starts from ``prefix_cache.prepare(input_ids)`` instead of a full prefill, and the state
    after the output is published back to it (the next turn hits there).
    """
    call = generate_call(inspect.currentframe())
    with open_stream(generate_kwargs, call) as stream:
        vocab = text_vocab_size(model)
        generator = check_generator(generator, model)
        passed = generate_args(
            "speculative_generate", generate_kwargs, model=model, vocab=vocab, call=call
        )
        eos = eos_ids(eos_token_id, passed.eos_token_id, vocab)
        pad = pad_id(pad_token_id, passed.pad_token_id, eos)
        prompts = passed.prompts(input_ids, vocab, pad_token_id, eos)
        max_new_tokens = passed.max_new_tokens(max_new_tokens, len(prompts.given[0]))
        k_max = check_non_negative_int("num_draft_tokens", num_draft_tokens)
        # A ring never holds more boundaries than the output has positions (one past the cut).
        slots = min(check_non_negative_int("capacity", capacity), max_new_tokens + 1)
        if (capacity > 0) != (is_boundary is not None):  # one without the other does nothing
            alone, needs = ("capacity", "is_boundary") if capacity else ("is_boundary", "capacity")
            raise InvalidArgumentError(
                f"'{alone}' keeps boundary snapshots only with '{needs}' (a predicate and "
                f"slots > 0): pass both, or neither"
            )
        boundary = (
            as_predicate("is_boundary", is_boundary, vocab) if is_boundary is not None else None
        )
        verifies = k_max > 0 and max_new_tokens > 1  # else every forward pass is one token
        new_drafter = drafters(draft, vocab, verifies)  # checked before any row decodes
        if verifies:
            check_multi_token_forward("model", model, vocab)
        prefixes = checked_prefix_cache(prefix_cache, model)
        use = passed.cache_use(model, prompts, prefixed=prefixes is not None)
        if stream.active and len(prompts.rows) != 1:
            raise InvalidArgumentError(
                f"'streamer' streams one row: speculative_generate decodes the rows of a batch "
                f"one after another (pass one row, or no streamer), got {len(prompts.rows)} rows"
            )
        scoring = passed.scoring(model, prompts, generator, eos=eos, max_new_tokens=max_new_tokens)
        stream.prompt(torch.tensor(prompts.given))
        counts = _Counts()
        runs: list[_Run] = []
        for i, (prompt, given) in enumerate(zip(prompts.rows, prompts.given, strict=True)):
            # Each row on its own: a stream, a ring and a drafter of its own.
            ring = _Boundaries(SsmDecodeRing(slots), boundary) if boundary is not None else None
            target = _Stream(model, vocab, slots)
            target.cache = use.start  # one row: the cache passed, if any (else a new one)
            start_stream(prefixes, target, prompt)
            row_scoring = scoring.for_row(i)
            run = _Run(target, ring, row_scoring, eos, stream, counts, passed.outputs, given)
            run.new.extend(_decode(run, prompt, max_new_tokens, k_max, new_drafter()))
            runs.append(run)
        for prompt, run in zip(prompts.rows, runs, strict=True):  # every row decoded: no raise
            publish_stream(prefixes, run.target, prompt, run.new)
        # One row: its cache after all but its last token, as generate's.
        cache, passes = use.finish(runs[0].target, prompts.rows[0] + runs[0].new)
        counts.forward_passes += passes
        return passed.outputs.result(
            sequences(prompts, [run.new for run in runs], pad),
            counts.freeze(),
            [run.scores[: len(run.new)] for run in runs],
            [run.logits[: len(run.new)] for run in runs],
            pad,
            cache,
        )


def _decode(
    run: _Run,
    prompt: list[int],
    max_new_tokens: int,
    k_max: int,
    propose: Callable[[list[int], int, Scoring], Proposal],
) -> list[int]:
    """The row's new tokens, decoded through the run's target, streamed as they are accepted;
    what happened counted in the run's counters."""
    target, scoring, eos, counts = run.target, run.scoring, run.eos, run.counts
    new: list[int] = []
    if max_new_tokens:
        fed = target.feed(prompt[len(target.fed) :], last_only=True)
        scored = scoring.process(run.given, [], fed)
        new.append(scoring.pick(scored[0]))
        run.keep(scored, fed)
        run.stream.tokens(new)
    # An EOS ends the row where it stands, an accepted draft's too (drafts are cut after their
    # first EOS, so one is only ever the newest token): the last checkpoint then stands before
    # it, where the row's cache can go back to.
    while new and len(new) < max_new_tokens and new[-1] not in eos:
        k = min(k_max, max_new_tokens - len(new))
        drafts, dists = propose(prompt + new, k, scoring) if k else ([], None)
        drafts = _cut(drafts, eos)  # an accepted EOS ends the row: nothing after it is verified
        if len(target.queued) > _REPLAY_STEPS * (k_max + 1):
            # The checkpoint is taken before the queued replay, so a verify step that carries it
            # and rejects again replays it once more: fed on its own once it is as wide as a few
            # verify steps, the replay stays bounded when drafts keep failing.
            target.feed([])
        target.checkpoint()
        logits = target.feed([new[-1], *drafts])
        scores = scoring.process(run.given + new, drafts, logits)
        n, bonus = _accept(scores, drafts, dists, scoring.generator, scoring.sampled)
        # An accepted EOS draft (the last of the drafts, so all of them) is the row's last token:
        # the target's token after it is dropped, and the cache already stands after the output.
        kept = drafts[:n] if n and drafts[n - 1] in eos else [*drafts[:n], bonus]
        run.keep(scores[: len(kept)], logits[: len(kept)])
        counts.drafts_proposed += len(drafts)
        counts.drafts_accepted += n
        first = len(new)  # the output length of the last committed token, fed first
        new += kept
        run.stream.tokens(_cut(new[first:max_new_tokens], eos))
        _commit(
            target,
            run.boundaries,
            counts,
            len(prompt),
            first,
            drafts,
            n,
            new[first - 1 : first + n],
        )
    new = _cut(new[:max_new_tokens], eos)
    counts.tokens += len(new)
    counts.forward_passes += target.forward_passes
    return new


def _cut(tokens: list[int], eos: tuple[int, ...]) -> list[int]:
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
