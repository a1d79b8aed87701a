"""Grammar-constrained decoding on a tiny random hybrid model, with xgrammar and llguidance.

The property: after any sequence of decodes and rollbacks, the matcher's
next-token mask is that of a fresh matcher fed the kept tokens, and the
model's next logits are bitwise those of a fresh token-by-token decode of
them; a declined rollback changes nothing at all.
"""

from __future__ import annotations

import functools
import json

import pytest

pytest.importorskip("transformers")

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import AutoModelForCausalLM
from transformers.utils import logging as hf_logging

from ssm_rollback import InvalidArgumentError, SsmDecodeRing, snapshot_boundary_if_ssm
from ssm_rollback.integrations._hf.stream import _Stream
from ssm_rollback.integrations.grammar import (
    ByteTokenizer,
    GrammarMatcher,
    LLGuidanceMatcher,
    MatcherDeclined,
    XGrammarMatcher,
    allocate_token_bitmask,
    apply_token_bitmask,
    rollback_with_grammar,
)
from ssm_rollback.integrations.transformers import backtracking_generate
from ssm_rollback.rollback import RollbackPlan
from ssm_rollback.testing import tiny_config

hf_logging.set_verbosity_error()  # type: ignore[no-untyped-call]
# Model code warns about slow reference kernels and the like: not our concern here.
pytestmark = pytest.mark.usefixtures("quiet_warnings")

TOK = ByteTokenizer()
EOS = TOK.eos_token_id
ENGINES = ("xgrammar", "llguidance")
ARRAY = {"type": "array", "items": {"type": "integer"}, "maxItems": 3}
RECORD = {
    "type": "object",
    "properties": {"id": {"type": "integer"}, "ok": {"type": "boolean"}},
    "required": ["id", "ok"],
    "additionalProperties": False,
}
PROMPT = TOK.encode("json:")


@functools.cache
def model() -> torch.nn.Module:
    """A tiny LFM2 (attention + short-conv state) over the byte vocabulary, EOS 256."""
    torch.manual_seed(0)
    config = tiny_config("lfm2", vocab_size=TOK.vocab_size, eos_token_id=EOS)
    built: torch.nn.Module = AutoModelForCausalLM.from_config(config)  # type: ignore[no-untyped-call]
    return built.eval()


def make(
    engine: str, schema: object = ARRAY, limit: int | None = None
) -> XGrammarMatcher | LLGuidanceMatcher:
    if engine == "xgrammar":
        return TOK.xgrammar_json_matcher(schema, max_rollback_tokens=limit)  # type: ignore[arg-type]
    return TOK.llguidance_json_matcher(schema, max_rollback_tokens=limit)  # type: ignore[arg-type]


def mask_of(matcher: GrammarMatcher) -> torch.Tensor:
    mask = allocate_token_bitmask(1, matcher.vocab_size)
    matcher.fill_next_token_bitmask(mask, 0)
    return mask


def allowed(matcher: GrammarMatcher) -> list[int]:
    logits = torch.zeros(matcher.vocab_size)
    apply_token_bitmask(logits, mask_of(matcher)[0])
    return torch.isfinite(logits).nonzero().flatten().tolist()


@functools.cache
def fresh_logits(tokens: tuple[int, ...]) -> torch.Tensor:
    """The logits after ``PROMPT + tokens``, decoded token by token from a fresh cache."""
    if not tokens:
        return _Stream(model(), TOK.vocab_size, 0).feed(PROMPT)[-1]
    stream = _Stream(model(), TOK.vocab_size, 0)
    stream.feed(PROMPT)
    logits = torch.empty(0)
    for token in tokens:
        logits = stream.feed([token])[-1]
    return logits


def fresh_mask(engine: str, tokens: list[int]) -> torch.Tensor:
    fresh = make(engine)
    for token in tokens:
        assert fresh.accept_token(token)
    return mask_of(fresh)


def observe(stream: _Stream, ring: SsmDecodeRing, matcher: GrammarMatcher) -> object:
    """Everything a declined rollback must leave alone."""
    assert stream.pool is not None
    assert stream.cache is not None
    pool = stream.pool
    tags = [(pool.stored_position(0, s), pool.stored_ticket(0, s)) for s in range(3)]
    state = [t.clone() for t in pool.torch_pool._live]
    return (
        ring.entries,
        ring.next_slot,
        tags,
        list(stream.fed),
        stream.cache.get_seq_length(),
        state,
        matcher.rollback_limit,
        mask_of(matcher).tolist(),
    )


def same(a: object, b: object) -> bool:
    assert isinstance(a, tuple)
    assert isinstance(b, tuple)
    return all(
        all(torch.equal(x, y) for x, y in zip(u, v, strict=True))
        if isinstance(u, list) and u and isinstance(u[0], torch.Tensor)
        else u == v
        for u, v in zip(a, b, strict=True)
    )


DECODE = st.tuples(st.just("decode"), st.integers(0, 40), st.booleans())
ROLLBACK = st.tuples(st.just("rollback"), st.integers(0, 8), st.booleans())
#: Mostly decodes (a rollback needs tokens and boundaries behind it), some rollbacks.
OPS = st.lists(st.one_of(DECODE, DECODE, ROLLBACK), min_size=1, max_size=14)


@pytest.mark.parametrize("engine", ENGINES)
@settings(max_examples=12)
@given(ops=OPS, limit=st.sampled_from([2, None, 1]))
def test_model_and_matcher_stay_in_step(
    engine: str, ops: list[tuple[str, int, bool]], limit: int | None
) -> None:
    matcher = make(engine, limit=limit)
    ring = SsmDecodeRing(2)
    stream = _Stream(model(), TOK.vocab_size, ring.capacity)
    logits = stream.feed(PROMPT)[-1]
    tokens: list[int] = []
    boundaries: list[int] = []
    for op, value, flag in [*ops, ("decode", 0, False)]:  # end with a decode: check the state
        if op == "decode":
            if matcher.is_terminated():
                continue
            choices = allowed(matcher)
            token = choices[value % len(choices)]
            assert matcher.accept_token(token)
            tokens.append(token)
            if flag:
                boundaries.append(len(tokens))
            save = snapshot_boundary_if_ssm(
                ring, seq=0, token_position=len(tokens), is_boundary=flag, in_thinking=False
            )
            logits = stream.feed([token])[-1]
            if save is not None:
                assert stream.save(save, ring)
            assert torch.equal(logits, fresh_logits(tuple(tokens)))
            continue
        before = observe(stream, ring, matcher)
        plan = rollback_with_grammar(
            ring,
            boundaries,
            matcher,
            seq=0,
            tokens=tokens,
            pool=stream.pool,
            at_most=value if flag else None,
            crop=lambda keep: stream.plan_truncate(len(PROMPT) + keep),
        )
        if isinstance(plan, RollbackPlan):
            del tokens[plan.keep_len :]
            del boundaries[boundaries.index(plan.keep_len) + 1 :]
            assert stream.fed == PROMPT + tokens
        else:
            assert same(observe(stream, ring, matcher), before), plan
        if isinstance(plan, MatcherDeclined):
            assert limit is not None
            assert plan.tokens_dropped > limit
        ring.check_valid()
        assert matcher.num_tokens == len(tokens)
        assert torch.equal(mask_of(matcher), fresh_mask(engine, tokens))


# -- backtracking_generate with grammar= ------------------------------------------------


def once_at(*lengths: int) -> object:
    """A ``reject`` that sends the row back (at most 6 tokens) once at each given length."""
    fired: set[int] = set()

    def reject(new: list[int]) -> int | None:
        if len(new) in lengths and len(new) not in fired:
            fired.add(len(new))
            return 6
        return None

    return reject


BOUNDARY_BYTES = frozenset(TOK.encode(',:{["'))


@pytest.mark.parametrize("engine", ENGINES)
def test_generate_follows_the_grammar_through_rollbacks(engine: str) -> None:
    matcher = make(engine, RECORD)
    result = backtracking_generate(
        model(),
        torch.tensor([PROMPT]),
        max_new_tokens=40,
        is_boundary=BOUNDARY_BYTES,
        reject=once_at(4, 9, 14),  # type: ignore[arg-type]
        grammar=matcher,
        check_rollbacks=True,
    )
    out = result.sequences[0, len(PROMPT) :].tolist()
    assert out[-1] == EOS
    record = json.loads(TOK.decode(out[:-1]))
    assert set(record) == {"id", "ok"}
    assert result.report.rollbacks_served >= 2
    assert result.report.mismatches == 0
    assert matcher.num_tokens == len(out)
    assert matcher.is_terminated()


@pytest.mark.parametrize("engine", ENGINES)
def test_generate_counts_rollbacks_the_matcher_declines(engine: str) -> None:
    matcher = make(engine, RECORD, limit=1)
    result = backtracking_generate(
        model(),
        torch.tensor([PROMPT]),
        max_new_tokens=12,
        is_boundary=BOUNDARY_BYTES,
        reject=once_at(9),  # type: ignore[arg-type]
        grammar=matcher,
    )
    assert result.report.grammar_declined == result.report.rollbacks_declined == 1
    assert result.report.rollbacks_served == 0
    out = result.sequences[0, len(PROMPT) :].tolist()
    assert torch.equal(mask_of(matcher), fresh_mask_for(engine, RECORD, out))


def fresh_mask_for(engine: str, schema: object, tokens: list[int]) -> torch.Tensor:
    fresh = make(engine, schema)
    for token in tokens:
        assert fresh.accept_token(token)
    return mask_of(fresh)


def test_generate_takes_one_matcher_per_row_and_bans_on_top_of_the_grammar() -> None:
    prompts = torch.tensor([PROMPT, TOK.encode("data:")])
    matchers = [make("xgrammar", RECORD), make("llguidance", RECORD)]
    digits = set(TOK.encode("0123456789"))
    result = backtracking_generate(
        model(),
        prompts,
        max_new_tokens=30,
        is_boundary=BOUNDARY_BYTES,
        reject=lambda new: 0 if new[-1] in digits else None,  # no rollback reaches: declined
        ban=sorted(digits - {ord("7")}),
        grammar=matchers,
    )
    for row, matcher in zip(result.sequences.tolist(), matchers, strict=True):
        out = row[len(PROMPT) :]
        assert out[:7] == TOK.encode('{"id":7')  # the grammar forced the rest
        assert {t for t in out if t in digits} == {ord("7")}  # the ban held on top of it
        assert matcher.num_tokens == len(out)
    assert result.report.rollbacks_declined > 0


def test_grammar_argument_errors_name_it() -> None:
    prompts = torch.tensor([PROMPT, PROMPT])
    one = make("xgrammar")
    common = {"max_new_tokens": 2, "is_boundary": set(), "reject": lambda new: None}
    with pytest.raises(
        InvalidArgumentError, match=r"'grammar' must have one matcher per row \(2\)"
    ):
        backtracking_generate(model(), prompts, grammar=one, **common)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match=r"'grammar\[1\]' is the matcher of an earlier"):
        backtracking_generate(model(), prompts, grammar=[one, one], **common)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"'grammar\[0\]' must implement GrammarMatcher"):
        backtracking_generate(model(), prompts, grammar=["a", one], **common)  # type: ignore[arg-type, list-item]
    assert one.num_tokens == 0


@pytest.mark.parametrize("engine", ENGINES)
def test_a_grammar_that_is_done_ends_the_row_whatever_the_eos_ids(engine: str) -> None:
    """The grammar's own stop token (the tokenizer's EOS) ends the row even where the call's
    EOS ids do not hold it: a done matcher accepts nothing more."""
    matcher = make(engine, RECORD)
    result = backtracking_generate(
        model(),
        torch.tensor([PROMPT]),
        max_new_tokens=40,
        eos_token_id=[0],  # not the grammar's stop token
        is_boundary=BOUNDARY_BYTES,
        reject=lambda tokens: None,
        grammar=matcher,
    )
    out = result.sequences[0, len(PROMPT) :].tolist()
    assert matcher.is_terminated()
    assert out[-1] == EOS
    assert len(out) < 40
    assert set(json.loads(TOK.decode(out[:-1]))) == {"id", "ok"}
