"""A matcher that disagrees with the model is a named error, before anything moves.

- an ``XGrammarMatcher`` told another vocabulary size than the one its
  grammar was compiled for (258 or 288 for a 257-token vocabulary was
  taken: its masks could allow ids the matcher then refuses);
- ``rollback_with_grammar`` given fewer ``tokens`` than the matcher accepted
  (the model went back to 6 tokens, the matcher to 7);
- ``backtracking_generate`` given a matcher that already accepted tokens.
"""

from __future__ import annotations

import pytest
import torch
import xgrammar

from ssm_rollback import (
    InvalidArgumentError,
    SsmDecodeRing,
    apply_effects,
    snapshot_boundary_if_ssm,
)
from ssm_rollback.backends.fake import FakeSnapshotPool
from ssm_rollback.integrations._grammar import xgrammar_vocab
from ssm_rollback.integrations.grammar import (
    ByteTokenizer,
    GrammarMatcher,
    LLGuidanceMatcher,
    XGrammarMatcher,
    allocate_token_bitmask,
    rollback_with_grammar,
)

TOK = ByteTokenizer()
OBJECT = {
    "type": "object",
    "properties": {"a": {"type": "integer"}},
    "required": ["a"],
    "additionalProperties": False,
}


def engine_matcher(vocab_size: int | None = None) -> xgrammar.GrammarMatcher:
    """A fresh xgrammar matcher of JSON for the byte vocabulary, its mask ``vocab_size`` wide."""
    info = xgrammar.TokenizerInfo(
        TOK.vocab(), xgrammar.VocabType.RAW, vocab_size=vocab_size, stop_token_ids=[256]
    )
    compiled = xgrammar.GrammarCompiler(info, max_threads=1).compile_builtin_json_grammar()
    return xgrammar.GrammarMatcher(compiled)


# -- the matcher's vocabulary ---------------------------------------------------------------


@pytest.mark.parametrize("vocab_size", [256, 258, 288, 300, 0])
def test_xgrammar_matcher_refuses_a_vocab_size_other_than_its_grammars(vocab_size: int) -> None:
    engine = engine_matcher()
    with pytest.raises(InvalidArgumentError, match=r"'vocab_size' must be the matcher's vocab"):
        XGrammarMatcher(engine, vocab_size)
    assert XGrammarMatcher(engine, 257).num_tokens == 0  # its own size, and it did not move


def test_xgrammar_matcher_names_the_size_its_grammar_was_compiled_for() -> None:
    with pytest.raises(InvalidArgumentError) as raised:
        XGrammarMatcher(engine_matcher(), 258)
    assert str(raised.value) == (
        "'vocab_size' must be the matcher's vocabulary size 257 (the vocab_size of the "
        "xgrammar.TokenizerInfo its grammar was compiled with), got 258"
    )


def test_a_padded_head_is_declared_to_xgrammar_and_then_taken() -> None:
    """xgrammar's own padding: ids 257..287 are in its vocabulary and never allowed."""
    with pytest.raises(InvalidArgumentError, match="vocabulary size 288"):
        XGrammarMatcher(engine_matcher(288), 257)
    matcher = XGrammarMatcher(engine_matcher(288), 288)
    for token in TOK.encode('{"a":"'):  # inside a string: every byte is allowed
        assert matcher.accept_token(token)
    mask = allocate_token_bitmask(1, 288)
    matcher.fill_next_token_bitmask(mask, 0)
    allowed = [t for t in range(288) if int(mask[0, t // 32]) >> (t % 32) & 1]
    assert ord("a") in allowed
    assert max(allowed) < 256


def test_reading_the_vocabulary_leaves_matcher_and_stderr_alone(
    capfd: pytest.CaptureFixture[str],
) -> None:
    engine = engine_matcher()
    for token in [*TOK.encode("{}"), 256]:
        assert engine.accept_token(token)
    capfd.readouterr()
    assert xgrammar_vocab.engine_vocab_size(engine) == 257
    assert engine.is_terminated()
    wrapped = XGrammarMatcher(engine, 257)
    assert wrapped.is_terminated()
    assert capfd.readouterr().err == ""  # xgrammar's warning was kept off stderr


def test_without_xgrammars_answer_the_bitmask_width_is_still_checked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(xgrammar_vocab, "engine_vocab_size", lambda matcher: None)
    with pytest.raises(InvalidArgumentError, match="which xgrammar refuses"):
        XGrammarMatcher(engine_matcher(), 300)


# -- tokens the matcher accepted ------------------------------------------------------------

BOUNDARIES = [2, 6]


def scene(
    max_rollback_tokens: int | None,
) -> tuple[SsmDecodeRing, FakeSnapshotPool, XGrammarMatcher, list[int]]:
    """``{"a":1234`` accepted by a matcher, boundary snapshots at 2 and 6."""
    matcher = TOK.xgrammar_json_matcher(OBJECT, max_rollback_tokens=max_rollback_tokens)
    tokens = TOK.encode('{"a":1234')
    ring, pool = SsmDecodeRing(2), FakeSnapshotPool(1, 2)
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


def observe(ring: SsmDecodeRing, pool: FakeSnapshotPool, matcher: GrammarMatcher) -> object:
    mask = allocate_token_bitmask(1, matcher.vocab_size)
    matcher.fill_next_token_bitmask(mask, 0)
    return ring.entries, ring.next_slot, list(pool.live), matcher.rollback_limit, mask.tolist()


@pytest.mark.parametrize("max_rollback_tokens", [None, 4])
def test_tokens_shorter_than_what_the_matcher_accepted_are_refused(
    max_rollback_tokens: int | None,
) -> None:
    """The matcher took 9 tokens, the caller passes 8: the model would go to 6, it to 7."""
    ring, pool, matcher, tokens = scene(max_rollback_tokens)
    before = observe(ring, pool, matcher)
    with pytest.raises(InvalidArgumentError) as raised:
        rollback_with_grammar(ring, BOUNDARIES, matcher, seq=0, tokens=tokens[:-1], pool=pool)
    assert str(raised.value) == (
        "'tokens' must hold every token the matcher accepted: it accepted at least 9, "
        "got 8 tokens; nothing was moved"
    )
    assert observe(ring, pool, matcher) == before
    assert matcher.num_tokens == 9


def test_a_matcher_without_a_count_is_held_to_its_rollback_limit() -> None:
    ring, pool, inner, tokens = scene(None)

    class Plain:
        """The protocol only: no ``num_tokens``."""

        vocab_size = inner.vocab_size

        @property
        def rollback_limit(self) -> int:
            return inner.rollback_limit

        def is_terminated(self) -> bool:
            return inner.is_terminated()

        def accept_token(self, token: int, /) -> bool:
            return inner.accept_token(token)

        def rollback(self, num_tokens: int, /) -> None:
            inner.rollback(num_tokens)

        def fill_next_token_bitmask(self, bitmask: torch.Tensor, index: int = 0, /) -> None:
            inner.fill_next_token_bitmask(bitmask, index)

    before = observe(ring, pool, inner)
    with pytest.raises(InvalidArgumentError, match="it accepted at least 9, got 7 tokens"):
        rollback_with_grammar(ring, BOUNDARIES, Plain(), seq=0, tokens=tokens[:7], pool=pool)
    assert observe(ring, pool, inner) == before


@pytest.mark.parametrize("count", [-1, "9", None])
def test_a_num_tokens_that_is_not_a_count_is_named(count: object) -> None:
    ring, pool, inner, tokens = scene(None)

    class Odd:
        vocab_size = inner.vocab_size
        rollback_limit = 0
        num_tokens = count

        def is_terminated(self) -> bool:
            return False

        def accept_token(self, token: int, /) -> bool:
            raise AssertionError

        def rollback(self, num_tokens: int, /) -> None:
            raise AssertionError

        def fill_next_token_bitmask(self, bitmask: torch.Tensor, index: int = 0, /) -> None:
            raise AssertionError

    with pytest.raises(InvalidArgumentError, match=r"'matcher\.num_tokens' must be an int"):
        rollback_with_grammar(ring, BOUNDARIES, Odd(), seq=0, tokens=tokens, pool=pool)


def test_a_matcher_wrapped_late_may_hold_fewer_tokens_than_the_sequence() -> None:
    """The engine took tokens before it was wrapped: the count is a floor, not an error."""
    ring, pool, _, tokens = scene(None)
    engine = TOK.xgrammar_json_matcher(OBJECT).matcher
    for token in tokens[:5]:
        assert engine.accept_token(token)
    late = XGrammarMatcher(engine, TOK.vocab_size)
    for token in tokens[5:]:
        assert late.accept_token(token)
    plan = rollback_with_grammar(ring, BOUNDARIES, late, seq=0, tokens=tokens, pool=pool)
    assert (plan.keep_len, late.num_tokens, pool.live[0]) == (6, 1, "state@6")  # type: ignore[union-attr]


# -- backtracking_generate ------------------------------------------------------------------


@pytest.mark.parametrize("engine", ["xgrammar", "llguidance"])
def test_generate_refuses_a_matcher_that_already_accepted_tokens(engine: str) -> None:
    transformers = pytest.importorskip("transformers")
    from ssm_rollback.integrations.transformers import backtracking_generate
    from ssm_rollback.testing import tiny_config

    matcher: XGrammarMatcher | LLGuidanceMatcher = (
        TOK.xgrammar_json_matcher(OBJECT)
        if engine == "xgrammar"
        else TOK.llguidance_json_matcher(OBJECT)
    )
    assert matcher.accept_token(ord("{"))
    model = transformers.AutoModelForCausalLM.from_config(
        tiny_config("lfm2", vocab_size=TOK.vocab_size, eos_token_id=TOK.eos_token_id)
    )
    with pytest.raises(InvalidArgumentError) as raised:
        backtracking_generate(
            model, torch.tensor([TOK.encode("j:")]), max_new_tokens=4, is_boundary=set(),
            reject=lambda new: None, grammar=matcher,
        )  # fmt: skip
    assert str(raised.value) == (
        "'grammar' must be a fresh matcher (the row has no tokens yet), got one that accepted "
        "1 tokens"
    )
    assert matcher.num_tokens == 1


def test_generate_refuses_a_matcher_that_already_serves_another_row() -> None:
    transformers = pytest.importorskip("transformers")
    from ssm_rollback.integrations.transformers import backtracking_generate
    from ssm_rollback.testing import tiny_config

    matcher = TOK.xgrammar_json_matcher(OBJECT)
    model = transformers.AutoModelForCausalLM.from_config(
        tiny_config("lfm2", vocab_size=TOK.vocab_size, eos_token_id=TOK.eos_token_id)
    )
    with pytest.raises(InvalidArgumentError) as raised:
        backtracking_generate(
            model, torch.tensor([TOK.encode("j:"), TOK.encode("k:")]), max_new_tokens=4,
            is_boundary=set(), reject=lambda new: None, grammar=[matcher, matcher],
        )  # fmt: skip
    assert str(raised.value) == (
        "'grammar[1]' is the matcher of an earlier row (or an adapter over its engine): "
        "each row needs its own"
    )
    assert matcher.num_tokens == 0
