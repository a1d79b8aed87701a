"""Edge cases of the grammar integration: vocabulary mismatches, odd bitmasks, odd callbacks.

Each test names a way foreign input once got past the checks - a bitmask
that allowed ids the matcher refuses, a matcher built for another
tokenizer, a strided bitmask, a KV planner that returned no action, a
matcher whose ``rollback_limit`` is not a count - and asserts that it is now
refused by name before anything moves, or handled.
"""

from __future__ import annotations

import functools

import pytest

pytest.importorskip("transformers")

import llguidance
import torch
from transformers import AutoModelForCausalLM
from transformers.utils import logging as hf_logging

from ssm_rollback import (
    InvalidArgumentError,
    InvariantError,
    SsmDecodeRing,
    apply_effects,
    snapshot_boundary_if_ssm,
)
from ssm_rollback.backends.fake import FakeSnapshotPool
from ssm_rollback.integrations._grammar.step import RowGrammar
from ssm_rollback.integrations.grammar import (
    ByteTokenizer,
    GrammarMatcher,
    LLGuidanceMatcher,
    XGrammarMatcher,
    allocate_token_bitmask,
    apply_token_bitmask,
    json_schema_matchers,
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
STRING = {"type": "string"}
OBJECT = {
    "type": "object",
    "properties": {"a": {"type": "integer"}},
    "required": ["a"],
    "additionalProperties": False,
}


def in_string(matcher: GrammarMatcher, tokenizer: ByteTokenizer = TOK) -> GrammarMatcher:
    for token in tokenizer.encode('"ab'):
        assert matcher.accept_token(token)
    return matcher


def allowed_ids(matcher: GrammarMatcher, width: int) -> list[int]:
    """Ids the matcher's bitmask allows, over a logits row ``width`` wide (bitmask starts all-1)."""
    mask = allocate_token_bitmask(1, matcher.vocab_size)
    matcher.fill_next_token_bitmask(mask, 0)
    logits = torch.zeros(width)
    apply_token_bitmask(logits, mask[0])
    return torch.isfinite(logits).nonzero().flatten().tolist()


# -- bitmasks ------------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ["xgrammar", "llguidance"])
def test_a_bitmask_never_allows_ids_beyond_the_matchers_vocabulary(engine: str) -> None:
    xgr, llg = json_schema_matchers(STRING)
    matcher = in_string(xgr if engine == "xgrammar" else llg)
    ids = allowed_ids(matcher, 288)  # a head padded to 9 * 32 ids
    assert ids
    assert max(ids) < TOK.vocab_size  # xgrammar set the padding bits 257..287
    for token in ids:  # what the mask allows, the matcher takes
        assert matcher.accept_token(token)
        matcher.rollback(1)


@pytest.mark.parametrize("engine", ["xgrammar", "llguidance"])
def test_a_strided_bitmask_gets_only_the_row_asked_for(engine: str) -> None:
    xgr, llg = json_schema_matchers(OBJECT)
    matcher = xgr if engine == "xgrammar" else llg
    wide = torch.full((2, 18), -1, dtype=torch.int32)
    view = wide[:, :9]  # rows contiguous, the tensor not
    matcher.fill_next_token_bitmask(view, 1)
    assert wide[0].tolist() == [-1] * 18  # xgrammar wrote row 1 into wide[0, 9:]
    assert wide[1, 9:].tolist() == [-1] * 9
    expected = allocate_token_bitmask(1, TOK.vocab_size)
    matcher.fill_next_token_bitmask(expected, 0)
    assert view[1].tolist() == expected[0].tolist()


def test_row_grammar_masks_ids_beyond_a_foreign_matchers_vocabulary() -> None:
    class Padded:
        """A matcher whose engine sets the padding bits of the last bitmask word."""

        vocab_size = 40
        rollback_limit = 0

        def is_terminated(self) -> bool:
            return False

        def accept_token(self, token: int, /) -> bool:
            return token < 40

        def rollback(self, num_tokens: int, /) -> None:
            raise AssertionError

        def fill_next_token_bitmask(self, bitmask: torch.Tensor, index: int = 0, /) -> None:
            bitmask[index] = torch.tensor([0, -1], dtype=torch.int32)  # ids 32..63

    scores = torch.arange(64, dtype=torch.float32)
    masked = RowGrammar(Padded(), 40).mask(scores)
    assert torch.isfinite(masked).nonzero().flatten().tolist() == list(range(32, 40))


# -- adapters ------------------------------------------------------------------------------


def test_llguidance_adapter_refuses_a_tokenizer_that_is_not_the_matchers() -> None:
    grammar = llguidance.LLMatcher.grammar_from_json_schema('{"type":"string"}')
    wider = ByteTokenizer(("<|eos|>", *(f"<|s{i}|>" for i in range(40))))  # 297 ids
    same_width = ByteTokenizer(("<|eos|>", "<|a|>", "<|b|>", "<|c|>"))  # 260 ids, 9 words too
    for other in (wider, same_width):
        matcher = llguidance.LLMatcher(TOK.llguidance_tokenizer(), grammar, log_level=0)
        with pytest.raises(InvalidArgumentError, match="'tokenizer' must be the one"):
            LLGuidanceMatcher(matcher, other.llguidance_tokenizer())
        assert not matcher.is_error()
    # and the other way round: a matcher over more ids than the tokenizer says
    matcher = llguidance.LLMatcher(wider.llguidance_tokenizer(), grammar, log_level=0)
    with pytest.raises(InvalidArgumentError, match="'tokenizer' must be the one"):
        LLGuidanceMatcher(matcher, TOK.llguidance_tokenizer())


def test_byte_tokenizer_specials_are_never_text_in_either_engine() -> None:
    tokenizer = ByteTokenizer(("<|eos|>", "<|pad|>"))
    pad = tokenizer.eos_token_id + 1
    for matcher in json_schema_matchers(STRING, tokenizer=tokenizer):
        in_string(matcher, tokenizer)  # inside a string, where any text is allowed
        ids = allowed_ids(matcher, tokenizer.vocab_size)
        assert ord("a") in ids
        assert [i for i in ids if i >= EOS] == []  # xgrammar took "<|pad|>" as text
        assert not matcher.accept_token(pad)


# -- the transaction -----------------------------------------------------------------------

BOUNDARIES = [2, 5, 7]


def scene() -> tuple[SsmDecodeRing, FakeSnapshotPool, XGrammarMatcher, list[int]]:
    """``{"a":1234`` accepted by an xgrammar matcher, boundary snapshots at 2, 5, 7."""
    matcher = TOK.xgrammar_json_matcher(OBJECT)
    tokens = TOK.encode('{"a":1234')
    ring, pool = SsmDecodeRing(3), FakeSnapshotPool(1, 3)
    for position, token in enumerate(tokens, start=1):
        assert matcher.accept_token(token)
        pool.live[0] = f"state@{position}"
        save = snapshot_boundary_if_ssm(
            ring, seq=0, token_position=position, is_boundary=position in BOUNDARIES,
            in_thinking=False,
        )  # fmt: skip
        if save is not None:
            apply_effects(pool, [save], [ring])
    return ring, pool, matcher, tokens


def observe(ring: SsmDecodeRing, pool: FakeSnapshotPool, matcher: XGrammarMatcher) -> object:
    mask = allocate_token_bitmask(1, matcher.vocab_size)
    matcher.fill_next_token_bitmask(mask, 0)
    return ring.entries, ring.next_slot, list(pool.live), matcher.num_tokens, mask.tolist()


@pytest.mark.parametrize("action", [None, 3, "cut"])
def test_a_crop_that_returns_no_action_raises_before_anything_moves(action: object) -> None:
    ring, pool, matcher, tokens = scene()
    before = observe(ring, pool, matcher)
    with pytest.raises(TypeError, match="'crop' must return"):
        rollback_with_grammar(
            ring, BOUNDARIES, matcher, seq=0, tokens=tokens, pool=pool, at_most=6,
            crop=lambda keep: action,  # type: ignore[arg-type, return-value]
        )  # fmt: skip
    assert observe(ring, pool, matcher) == before


@pytest.mark.parametrize("limit", [None, "9", -1, 2.5, True])
def test_a_rollback_limit_that_is_not_a_count_is_named(limit: object) -> None:
    ring, pool, inner, tokens = scene()

    class Odd:
        vocab_size = inner.vocab_size
        rollback_limit = limit

        def is_terminated(self) -> bool:
            return inner.is_terminated()

        def accept_token(self, token: int, /) -> bool:
            return inner.accept_token(token)

        def rollback(self, num_tokens: int, /) -> None:
            inner.rollback(num_tokens)

        def fill_next_token_bitmask(self, bitmask: torch.Tensor, index: int = 0, /) -> None:
            inner.fill_next_token_bitmask(bitmask, index)

    before = observe(ring, pool, inner)
    with pytest.raises(InvalidArgumentError, match=r"'matcher\.rollback_limit' must be an int"):
        rollback_with_grammar(
            ring, BOUNDARIES, Odd(), seq=0, tokens=tokens, pool=pool, at_most=6,  # type: ignore[arg-type]
        )  # fmt: skip
    assert observe(ring, pool, inner) == before


def test_a_matcher_wrapped_late_still_rolls_back_what_it_took() -> None:
    """Tokens fed to the engine before it was wrapped only lower the limit: no error."""
    ring, pool, _, tokens = scene()
    engine = TOK.xgrammar_json_matcher(OBJECT).matcher
    for token in tokens[:5]:
        assert engine.accept_token(token)
    late = XGrammarMatcher(engine, TOK.vocab_size)
    for token in tokens[5:]:
        assert late.accept_token(token)
    plan = rollback_with_grammar(ring, BOUNDARIES, late, seq=0, tokens=tokens, pool=pool)
    assert isinstance(plan, RollbackPlan)
    assert (plan.keep_len, late.num_tokens, pool.live[0]) == (7, 2, "state@7")


# -- generation ----------------------------------------------------------------------------


@functools.cache
def model(vocab_size: int) -> torch.nn.Module:
    """A tiny LFM2 whose head prefers the ids past the byte vocabulary (if it has any)."""
    torch.manual_seed(0)
    config = tiny_config("lfm2", vocab_size=vocab_size, eos_token_id=EOS)
    built: torch.nn.Module = AutoModelForCausalLM.from_config(config)  # type: ignore[no-untyped-call]
    with torch.no_grad():
        head = built.get_submodule("lm_head").get_parameter("weight")
        extra = vocab_size - TOK.vocab_size
        if extra > 0:
            head[TOK.vocab_size :] = head[:extra] * 50
    return built.eval()


@pytest.mark.parametrize("engine", ["xgrammar", "llguidance"])
@pytest.mark.parametrize("sampled", [False, True])
def test_generate_never_picks_an_id_beyond_the_grammar(engine: str, sampled: bool) -> None:
    xgr, llg = json_schema_matchers(STRING)
    matcher = xgr if engine == "xgrammar" else llg
    result = backtracking_generate(
        model(288),
        torch.tensor([TOK.encode("s:")]),
        max_new_tokens=8,
        is_boundary=set(),
        reject=lambda new: None,
        grammar=matcher,
        generator=torch.Generator().manual_seed(0) if sampled else None,
    )
    out = result.sequences[0, 2:].tolist()
    assert max(out) <= EOS
    assert matcher.num_tokens == len(out)


def test_generate_refuses_a_grammar_wider_than_the_model() -> None:
    matcher = TOK.xgrammar_json_matcher(STRING)
    with pytest.raises(InvalidArgumentError, match="'grammar' must cover at most the model's 200"):
        backtracking_generate(
            model(200), torch.tensor([TOK.encode("s:")]), max_new_tokens=4,
            is_boundary=set(), reject=lambda new: None, grammar=matcher,
        )  # fmt: skip
    assert matcher.num_tokens == 0


def test_a_mask_that_allows_nothing_is_an_invariant_error_not_a_sampling_crash() -> None:
    inner = TOK.llguidance_json_matcher(STRING)

    class Stuck:
        """Not terminated, yet allows nothing: a broken matcher."""

        vocab_size = inner.vocab_size
        rollback_limit = 0

        def is_terminated(self) -> bool:
            return False

        def accept_token(self, token: int, /) -> bool:
            return False

        def rollback(self, num_tokens: int, /) -> None:
            raise AssertionError

        def fill_next_token_bitmask(self, bitmask: torch.Tensor, index: int = 0, /) -> None:
            bitmask[index].zero_()

    for generator in (None, torch.Generator().manual_seed(0)):
        with pytest.raises(InvariantError, match="allows no token"):
            backtracking_generate(
                model(TOK.vocab_size), torch.tensor([TOK.encode("s:")]), max_new_tokens=4,
                is_boundary=set(), reject=lambda new: None, grammar=Stuck(), generator=generator,
            )  # fmt: skip


# -- foreign input to the helpers ----------------------------------------------------------


def test_boolean_schemas_are_taken_or_named_by_both_engines() -> None:
    for matcher in json_schema_matchers("true"):  # llguidance raised a bare ValueError
        assert all(matcher.accept_token(t) for t in TOK.encode('{"x":[1]}'))
    with pytest.raises(InvalidArgumentError, match="'schema' must be a JSON schema llguidance"):
        TOK.llguidance_json_matcher("false")
    with pytest.raises(InvalidArgumentError, match="'schema' must be a JSON schema xgrammar"):
        TOK.xgrammar_json_matcher("false")


def test_apply_token_bitmask_names_logits_it_cannot_mask_and_takes_an_empty_batch() -> None:
    leaf = torch.zeros(2, TOK.vocab_size, requires_grad=True)
    mask = allocate_token_bitmask(2, TOK.vocab_size)
    mask[:, 0] = 0
    with pytest.raises(InvalidArgumentError, match="'logits' must be maskable in place"):
        apply_token_bitmask(leaf, mask)
    assert not leaf.detach().isinf().any()
    empty = torch.zeros(0, TOK.vocab_size)
    apply_token_bitmask(empty, allocate_token_bitmask(0, TOK.vocab_size))  # was a reshape error
    assert empty.shape == (0, TOK.vocab_size)


@pytest.mark.parametrize("ids", [None, 3, "abc"])
def test_byte_tokenizer_decode_names_ids_that_are_not_a_sequence(ids: object) -> None:
    with pytest.raises(InvalidArgumentError, match="'ids' must be a sequence of token ids"):
        TOK.decode(ids)  # type: ignore[arg-type]
