"""Decode tool calls under a JSON schema on a tiny hybrid model, rolling refused values back.

Each call: a fresh grammar matcher of ``TOOL_CALL_SCHEMA`` over a byte-level
vocabulary, a ``Policy`` drawn for the call, and grammar-constrained
``backtracking_generate`` whose ``reject`` is the policy's ``Judge``. Every
rollback is checked twice: the model's next logits against a fresh decode
of the kept tokens (``check_rollbacks``, served rollbacks), and the engine
matcher's next-token mask against a fresh matcher fed the kept tokens (at
the next offer to ``reject``: the decoder gives no hook in between, so the
token picked again at the boundary is in both). Each finished call is
parsed and checked against the schema in plain Python, fed whole to a fresh
matcher, and judged by the policy.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence

import attrs
import torch
from transformers.utils import logging as hf_logging

from ..._errors import InvalidArgumentTypeError
from ...integrations.grammar import ByteTokenizer, GrammarMatcher, allocate_token_bitmask
from ...integrations.transformers import GenerationReport, backtracking_generate
from ...testing import tiny_config, tiny_model
from ._bans import BanningMatcher
from ._judge import BOUNDARY_BYTES, Judge
from ._options import GrammarDemoOptions
from ._report import CallOutcome, GrammarDemoReport, judge_output
from ._tool_call import TOOL_CALL_SCHEMA, Policy

__all__ = ["run_grammar_demo"]

_PROMPT = "Call one tool as JSON.\n"


def _tiny_model(model_type: str, vocab_size: int, seed: int) -> torch.nn.Module:
    """The demo's tiny random model, its embedding and head as wide as the byte vocabulary."""
    sizes = {"vocab_size": vocab_size}
    text = tiny_config(model_type).get_text_config(decoder=True)
    if getattr(text, "unpadded_vocab_size", None) is not None:
        sizes["unpadded_vocab_size"] = vocab_size  # Inkling2's head is this wide
    return tiny_model(model_type, seed=seed, **sizes)


@attrs.define
class _MatcherCheck:
    """Compares a matcher's next-token mask with a fresh matcher's fed the same tokens."""

    fresh: Callable[[], GrammarMatcher]
    checks: int = 0
    mismatches: int = 0

    def compare(self, matcher: BanningMatcher, tokens: Sequence[int]) -> None:
        """Count a mismatch unless the engine's mask and the ban positions fit ``tokens``."""
        self.checks += 1
        reference = self.fresh()
        fits = matcher.num_tokens == len(tokens) and all(reference.accept_token(t) for t in tokens)
        self.mismatches += not (fits and torch.equal(_mask(matcher.inner), _mask(reference)))

    def accepts(self, tokens: Sequence[int]) -> bool:
        """Whether a fresh matcher takes every token and then takes no more."""
        reference = self.fresh()
        return all(reference.accept_token(t) for t in tokens) and reference.is_terminated()


def _mask(matcher: GrammarMatcher) -> torch.Tensor:
    bitmask = allocate_token_bitmask(1, matcher.vocab_size)
    matcher.fill_next_token_bitmask(bitmask, 0)
    return bitmask


@attrs.define
class _Reject:
    """``reject`` for one call: the judge, its bans, and a matcher check after each rollback.

    A refused value's first token is banned where the value starts. The
    decoder offers a candidate to ``reject`` with the matcher holding the
    tokens before it, so the first offer after a rollback shows the kept
    tokens (and the token picked again at the boundary) that the engine's
    matcher must agree with.
    """

    judge: Judge
    matcher: BanningMatcher
    check: _MatcherCheck
    _rolled_back: bool = False

    def __call__(self, tokens: list[int]) -> int | None:
        if self._rolled_back:
            self.check.compare(self.matcher, tokens[:-1])
            self._rolled_back = False
        keep = self.judge(tokens)
        if keep is not None:
            self.matcher.ban(keep, tokens[keep])
            self._rolled_back = True
        return keep


def run_grammar_demo(
    options: GrammarDemoOptions, progress: Callable[[int, int], None] | None = None
) -> GrammarDemoReport:
    """Decode ``options.calls`` tool calls; ``progress(done, total)`` after each call."""
    if not isinstance(options, GrammarDemoOptions):
        raise InvalidArgumentTypeError(
            f"'options' must be GrammarDemoOptions, got {type(options).__name__}"
        )
    hf_logging.set_verbosity_error()  # type: ignore[no-untyped-call]
    threads = torch.get_num_threads()
    # A 64-wide model gains nothing from threads, and on a busy machine they cost
    # tenfold (each op waits for its slowest thread): one, and the caller's back after.
    torch.set_num_threads(1)
    try:
        return _run(options, progress)
    finally:
        torch.set_num_threads(threads)


def _run(
    options: GrammarDemoOptions, progress: Callable[[int, int], None] | None
) -> GrammarDemoReport:
    started = time.perf_counter()
    tokenizer = ByteTokenizer()
    model = _tiny_model(options.model_type, tokenizer.vocab_size, options.seed)
    pieces = tokenizer.vocab()
    boundaries = frozenset(t for t, piece in enumerate(pieces[:256]) if piece[0] in BOUNDARY_BYTES)

    def fresh() -> GrammarMatcher:
        if options.engine == "llguidance":
            return tokenizer.llguidance_json_matcher(TOOL_CALL_SCHEMA)
        return tokenizer.xgrammar_json_matcher(TOOL_CALL_SCHEMA)

    check = _MatcherCheck(fresh)
    rng = random.Random(options.seed)
    generator = torch.Generator().manual_seed(options.seed)
    prompt = torch.tensor([tokenizer.encode(_PROMPT)])
    outcomes: list[CallOutcome] = []
    totals = GenerationReport()  # the decoder's counters, summed over the calls
    for index in range(options.calls):
        policy = Policy.drawn(rng)
        matcher = BanningMatcher(fresh())
        judge = Judge(policy, pieces, options.retries)
        result = backtracking_generate(
            model,
            prompt,
            max_new_tokens=options.max_tokens,
            is_boundary=boundaries,
            reject=_Reject(judge, matcher, check),
            capacity=options.capacity,
            generator=generator,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.eos_token_id,
            check_rollbacks=True,
            grammar=matcher,
        )
        output: list[int] = result.sequences[0, prompt.shape[1] :].tolist()
        totals += result.report
        outcomes.append(_outcome(output, tokenizer, policy, judge, matcher, check))
        if progress is not None:
            progress(index + 1, options.calls)
    return GrammarDemoReport(
        options.model_type,
        options.engine,
        options.capacity,
        options.seed,
        tuple(outcomes),
        tokens=totals.tokens,
        rollbacks_served=totals.rollbacks_served,
        rollbacks_declined=totals.rollbacks_declined,
        tokens_regenerated=totals.tokens_regenerated,
        mismatches=totals.mismatches,
        matcher_checks=check.checks,
        matcher_mismatches=check.mismatches,
        seconds=time.perf_counter() - started,
    )


def _outcome(
    output: list[int],
    tokenizer: ByteTokenizer,
    policy: Policy,
    judge: Judge,
    matcher: BanningMatcher,
    check: _MatcherCheck,
) -> CallOutcome:
    eos = tokenizer.eos_token_id
    finished = eos in output
    if finished:
        del output[output.index(eos) + 1 :]  # the padding after EOS
    check.compare(matcher, output)  # the matcher at the end of the call, too
    body = bytes(t for t in output if t != eos)
    valid, approved = judge_output(
        body, finished=finished, matcher_accepts=check.accepts(output), policy=policy
    )
    return CallOutcome(
        body.decode(errors="replace"),
        policy,
        finished,
        valid,
        approved,
        tuple(judge.rejections),
        judge.gave_up,
    )
