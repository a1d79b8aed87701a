"""Backtracking generation for Hugging Face hybrid models: roll a row back to a boundary, exactly.

``backtracking_generate`` decodes each row one token at a time. After a
boundary token (``is_boundary``) it snapshots the row's recurrent state into
its ring. Every candidate token goes to ``reject(tokens)``: ``None`` keeps it;
an int ``m`` sends the row back to its last boundary at most ``m`` new tokens
long that still has a snapshot (restore the snapshot, crop the attention KV),
and the next token is resampled there with ``ban`` masked out. Rows are
decoded as separate batch-1 caches, because one ``DynamicCache`` has one
length and its rows cannot be cropped to different lengths. With
``grammar=`` each row's logits are masked by its matcher, and a rollback
moves the matcher back with the model or not at all (``_grammar_step``,
``_grammar_rollback``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Sequence
from typing import Final

import attrs
import torch

from ... import SsmDecodeRing
from ..._errors import InvalidArgumentError, check_non_negative_int
from ...rollback import snapshot_boundary_if_ssm
from .._grammar.step import GrammarArg, RowGrammar, row_grammars
from .arguments import (
    TokenPredicate,
    as_predicate,
    ban_mask,
    check_callable,
    check_flag,
    check_generator,
    eos_ids,
    pad_id,
    text_vocab_size,
)
from .decoding import GenerationReport, GenerationResult, Outputs, _Counts
from .generate_args import generate_args, settings_in_config
from .prefix_cache import HybridPrefixCache
from .prefix_use import checked_prefix_cache, publish_stream, start_stream
from .prompts import InputIds, Prompts, sequences
from .result_cache import CacheUse
from .row import _check_against_fresh, _roll_back, _Row
from .scoring import Scoring
from .stream import _Stream
from .streaming import TokenStreamer, generate_call, open_stream

__all__ = ["GenerationReport", "GenerationResult", "backtracking_generate"]

#: ``reject(tokens)``: ``None`` keeps the newest token; an int rolls the row back to at most it.
RejectFn = Callable[[list[int]], int | None]

#: Served rollbacks a row may take by default before further ones are declined.
MAX_ROLLBACKS: Final = 64


@attrs.frozen
class _Rules:
    """A call's checked arguments that every row decodes by."""

    max_new_tokens: int
    boundary: Callable[[int], bool]
    reject: RejectFn
    banned: torch.Tensor | None
    eos: tuple[int, ...]
    scoring: Scoring
    check: bool
    stream: TokenStreamer
    outputs: Outputs = attrs.field(factory=Outputs)
    #: The cache a single row decodes in, and whether it is left as ``generate`` leaves its.
    cache: CacheUse = attrs.field(factory=CacheUse)


@settings_in_config
def backtracking_generate(
    model: torch.nn.Module,
    input_ids: InputIds,
    *,
    max_new_tokens: int | None = None,
    is_boundary: TokenPredicate,
    reject: RejectFn,
    capacity: int = 4,
    ban: Iterable[int] | torch.Tensor | None = None,
    generator: torch.Generator | None = None,
    eos_token_id: int | Sequence[int] | None = None,
    pad_token_id: int | None = None,
    check_rollbacks: bool = False,
    progress: Callable[[int, int], None] | None = None,
    grammar: GrammarArg = None,
    max_rollbacks: int = MAX_ROLLBACKS,
    prefix_cache: object = None,
    **generate_kwargs: object,
) -> GenerationResult:
    """Decode with rollback to a boundary whenever ``reject`` says no; every row on its own.

    ``is_boundary``: a function of a token id, or the set of boundary ids.
    ``reject(new_tokens)`` sees the row's new tokens, the candidate last:
    ``None`` keeps the candidate; an int ``m`` rolls the row back to its last
    boundary ``<= m`` new tokens that has a snapshot in its ``capacity``-slot
    ring (declined, the row stays). Either way the candidate is dropped and
    the next token is picked again with ``ban`` masked (token ids, or a bool
    mask over the vocabulary; ignored if it would leave no token) and is not
    offered to ``reject``. Without ``ban``, the rejected token is banned at
    the position it was rejected at, whenever the row reaches that position
    again after the same tokens, so a retry from the boundary (greedy or
    sampled) moves on instead of regenerating it. A row serves at
    most ``max_rollbacks`` rollbacks; after that every rollback is declined
    (``report.rollbacks_over_budget``), so a ``reject`` that refuses
    everything still ends.
    Greedy unless a ``generator`` is given (then sampled). A row ends after
    ``max_new_tokens`` or an EOS (``eos_token_id``, default the model's);
    shorter rows are padded. ``attention_mask`` may pad rows on the left, as
    ``model.generate`` does: each row decodes as its unpadded tokens. As
    ``model.generate(..., custom_generate=backtracking_generate)`` it takes
    what ``generate`` prepares and refuses settings it cannot honour.
    ``check_rollbacks`` re-decodes each kept prefix from the prompt after a
    served rollback and counts logits that are not bitwise equal in
    ``report.mismatches``.

    ``grammar``: a ``GrammarMatcher`` (batch 1) or one per row, fresh. Every
    pick is masked by the row's matcher; each kept token is accepted into it
    before ``is_boundary(token)`` is called, so a boundary predicate that
    closes over the matcher sees the grammar state after the token;
    ``reject`` sees the candidate before the matcher does. A rollback moves
    the matcher back by the same tokens as the model, or is declined
    (``report.grammar_declined``) when the matcher cannot go back that far,
    and neither moves. A row also ends when its matcher terminates.

    ``prefix_cache``: a ``HybridPrefixCache`` of ``model``; each row then
    starts from ``prefix_cache.prepare(row)`` instead of a full prefill, and the state
    after its output is published back to it (the next turn hits there).
    """
    call = generate_call(inspect.currentframe())
    with open_stream(generate_kwargs, call) as stream:
        vocab = text_vocab_size(model)
        generator = check_generator(generator, model)
        passed = generate_args(
            "backtracking_generate", generate_kwargs, model=model, vocab=vocab, call=call
        )
        eos = eos_ids(eos_token_id, passed.eos_token_id, vocab)
        pad = pad_id(pad_token_id, passed.pad_token_id, eos)
        prompts = passed.prompts(input_ids, vocab, pad_token_id, eos)
        max_new_tokens = passed.max_new_tokens(max_new_tokens, len(prompts.given[0]))
        # A ring never holds more boundaries than a row has positions: no slot past those is used.
        slots = min(check_non_negative_int("capacity", capacity), max_new_tokens)
        budget = check_non_negative_int("max_rollbacks", max_rollbacks)
        check_callable("reject", reject)
        check_callable("progress", progress, optional=True)
        if stream.active and len(prompts.rows) != 1:
            raise InvalidArgumentError(
                f"'streamer' streams one row: backtracking_generate decodes the rows of a batch "
                f"one after another (pass one row, or no streamer), got {len(prompts.rows)} rows"
            )
        given = torch.tensor(prompts.given, device=prompts.device)
        rules = _Rules(
            max_new_tokens,
            as_predicate("is_boundary", is_boundary, vocab),
            reject,
            ban_mask(ban, vocab),
            eos,
            passed.scoring(model, prompts, generator, eos=eos, max_new_tokens=max_new_tokens),
            check_flag("check_rollbacks", check_rollbacks),
            stream,
            passed.outputs,
        )
        grammars = row_grammars(grammar, len(prompts.rows), vocab)
        prefixes = checked_prefix_cache(prefix_cache, model)
        rules = attrs.evolve(
            rules, cache=passed.cache_use(model, prompts, prefixed=prefixes is not None)
        )
        stream.prompt(given)
        outputs, counts, rows = _decode_rows(
            model, vocab, prompts, grammars, rules, slots, budget, progress, prefixes
        )
        # One row: its cache after all but its last token, as generate's.
        cache, passes = rules.cache.finish(rows[0].stream, rows[0].prompt + outputs[0])
        counts.forward_passes += passes
        return passed.outputs.result(
            sequences(prompts, outputs, pad),
            counts.freeze(),
            [row.scores for row in rows],
            [row.logits_after[: len(row.output)] for row in rows],
            pad,
            cache,
        )


def _decode_rows(
    model: torch.nn.Module,
    vocab: int,
    prompts: Prompts,
    grammars: Sequence[RowGrammar | None],
    rules: _Rules,
    slots: int,
    budget: int,
    progress: Callable[[int, int], None] | None,
    prefixes: HybridPrefixCache | None,
) -> tuple[list[list[int]], _Counts, list[_Row]]:
    """Every row's new tokens, decoded one row after another, the counters and the rows."""
    counts = _Counts()
    total = len(prompts.rows) * rules.max_new_tokens
    done_before = 0
    outputs = []
    rows = []
    rows_given = zip(prompts.rows, prompts.given, grammars, strict=True)
    for i, (prompt, given, row_grammar) in enumerate(rows_given):
        row_rules = attrs.evolve(rules, scoring=rules.scoring.for_row(i))
        row = _Row(_Stream(model, vocab, slots), SsmDecodeRing(slots), prompt, given, budget=budget)
        row.grammar = row_grammar
        row.stream.cache = rules.cache.start  # one row: the cache passed, if any
        start_stream(prefixes, row.stream, prompt)
        row.logits_after.append(row.stream.feed(prompt[len(row.stream.fed) :], last_only=True)[-1])

        def report_progress(done: int, base: int = done_before) -> None:
            if progress is not None:
                progress(base + done, total)

        _decode_row(row, row_rules, counts, report_progress)
        rules.stream.tokens(row.output[row.streamed :])
        done_before += rules.max_new_tokens
        counts.tokens += len(row.output)
        counts.boundaries += len(row.boundaries)
        counts.forward_passes += row.stream.forward_passes
        outputs.append(row.output)
        rows.append(row)
    for row in rows:  # once every row decoded: a call that raises publishes nothing
        publish_stream(prefixes, row.stream, row.prompt, row.output)
    return outputs, counts, rows


def _decode_row(row: _Row, rules: _Rules, counts: _Counts, progress: Callable[[int], None]) -> None:
    stream, output, grammar = row.stream, row.output, row.grammar
    while not _ends(row, rules):
        scores = _without(_scores(row, rules), _refused_here(row))
        token = rules.scoring.pick(scores)
        rolled_back = False
        limit = rules.reject([*output, token])
        if limit is not None:
            limit = check_non_negative_int("reject()", limit)
            if rules.banned is None:
                row.refused.setdefault(len(output), []).append((tuple(output), token))
            rolled_back = _roll_back(row, limit, counts)
            banned = _refused_here(row) if rules.banned is None else rules.banned
            scores = _without(_scores(row, rules), banned)
            token = rules.scoring.pick(scores)
        output.append(token)
        if rules.outputs.scores:
            row.scores.append(scores)
        if grammar is not None:
            grammar.accept(token)
        is_b = rules.boundary(token)
        if is_b:
            row.boundaries.append(len(output))
        save = snapshot_boundary_if_ssm(
            row.ring, seq=0, token_position=len(output), is_boundary=is_b, in_thinking=False
        )
        if rules.cache.stand and _ends(row, rules):
            stream.checkpoint()  # the state before the last token, to leave the cache at
        logits = stream.feed([token])[-1]
        row.logits_after.append(logits)
        if save is not None and stream.save(save, row.ring):
            counts.snapshots += 1
        if rolled_back and rules.check:
            _check_against_fresh(row, logits, counts)
        _stream_final(row, rules.stream)
        progress(len(output))


def _ends(row: _Row, rules: _Rules) -> bool:
    """Whether the row is done: its newest token is its last (the length, an EOS, a grammar
    that is done), or a grammar is done before any."""
    output = row.output
    done = row.grammar is not None and row.grammar.is_done()
    return len(output) >= rules.max_new_tokens or (bool(output) and output[-1] in rules.eos) or done


def _stream_final(row: _Row, stream: TokenStreamer) -> None:
    """Put the row's tokens that no rollback can take back: a rollback keeps the tokens before
    a snapshot the ring holds or will hold, so those before its oldest are final (all of them
    once the row's rollback budget is spent)."""
    held = row.ring.snapshot_positions() if row.budget > 0 else ()
    final = min(held[0], len(row.output)) if held else len(row.output)
    if final > row.streamed:
        stream.tokens(row.output[row.streamed : final])
        row.streamed = final


def _scores(row: _Row, rules: _Rules) -> torch.Tensor:
    """The scores to pick the row's next token from: the logits masked by the row's grammar,
    if any, then processed as ``generate`` processes them.

    The grammar comes first, as a constrained-decoding logits processor does: a top-k or
    top-p cut of the unmasked logits could keep only tokens the grammar forbids.
    """
    logits = row.logits_after[-1][None]
    if row.grammar is not None:
        logits = row.grammar.mask(logits)
    return rules.scoring.process([*row.given, *row.output], [], logits)[0]


def _refused_here(row: _Row) -> list[int]:
    """The tokens ``reject`` refused at the row's next position after the same tokens."""
    here = row.refused.get(len(row.output), ())
    if not here:
        return []
    before = tuple(row.output)
    return [token for prefix, token in here if prefix == before]


def _without(scores: torch.Tensor, banned: torch.Tensor | list[int]) -> torch.Tensor:
    """``scores`` with ``banned`` (ids or a bool mask) masked out, unless that leaves none."""
    if isinstance(banned, list):
        if not banned:
            return scores
        mask = torch.zeros(scores.shape[-1], dtype=torch.bool)
        mask[banned] = True
        banned = mask
    kept = scores.masked_fill(banned.to(scores.device), float("-inf"))
    return kept if bool(torch.isfinite(kept).any()) else scores
