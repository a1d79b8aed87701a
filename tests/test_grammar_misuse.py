"""The grammar transaction where a misuse probe found it off its contract.

- a matcher whose ``rollback`` said no (``False``) without moving counted as rolled back:
  the model went back to 6 tokens, the matcher stayed at 10, and a decode wrote
  ``{"id":<eos>`` with no error;
- ``tokens`` were only counted: a failed restore fed the dropped ones back to the matcher,
  which broke half-way on a bad id and left it rolled back under an error saying nothing
  changed;
- two adapters over one engine passed the "each row its own matcher" check, and row 1
  started from row 0's finished grammar;
- an absurd bitmask size and a bitmask no device copy reads raised torch's own errors.
"""

from __future__ import annotations

import pytest

pytest.importorskip("xgrammar")

import torch

from ssm_rollback import (
    InvalidArgumentError,
    InvariantError,
    SsmDecodeRing,
    SsmRollbackError,
    apply_effects,
    snapshot_boundary_if_ssm,
)
from ssm_rollback.backends.fake import FakeSnapshotPool
from ssm_rollback.integrations.grammar import (
    ByteTokenizer,
    GrammarMatcher,
    XGrammarMatcher,
    allocate_token_bitmask,
    apply_token_bitmask,
    rollback_with_grammar,
)
from ssm_rollback.integrations.transformers import backtracking_generate
from ssm_rollback.testing import tiny_model

TOK = ByteTokenizer()
SCHEMA = {
    "type": "object",
    "properties": {"id": {"type": "integer"}},
    "required": ["id"],
    "additionalProperties": False,
}


def decoded(
    matcher: GrammarMatcher, pool: FakeSnapshotPool | None = None
) -> tuple[list[int], SsmDecodeRing, FakeSnapshotPool]:
    """``{"id":1234`` accepted by ``matcher``, with snapshots at 2 and 6."""
    tokens = TOK.encode('{"id":1234')
    ring, pool = SsmDecodeRing(2), pool or FakeSnapshotPool(1, 2)
    for position, token in enumerate(tokens, start=1):
        assert matcher.accept_token(token)
        pool.live[0] = f"state after {position}"
        save = snapshot_boundary_if_ssm(
            ring, seq=0, token_position=position, is_boundary=position in (2, 6), in_thinking=False
        )
        if save is not None:
            apply_effects(pool, [save], [ring])
    return tokens, ring, pool


class SaysNo:
    """A matcher whose ``rollback`` answers ``False`` and moves nothing, once told to."""

    def __init__(self, inner: XGrammarMatcher) -> None:
        self.inner, self.refuse = inner, False

    @property
    def vocab_size(self) -> int:
        return self.inner.vocab_size

    @property
    def rollback_limit(self) -> int:
        return self.inner.rollback_limit

    def is_terminated(self) -> bool:
        return self.inner.is_terminated()

    def accept_token(self, token: int, /) -> bool:
        return self.inner.accept_token(token)

    def fill_next_token_bitmask(self, bitmask: torch.Tensor, index: int = 0, /) -> None:
        self.inner.fill_next_token_bitmask(bitmask, index)

    def rollback(self, num_tokens: int, /) -> None:
        if not self.refuse:
            self.inner.rollback(num_tokens)
            return None
        return False  # type: ignore[return-value]  # the engine's own way of saying no


def test_a_rollback_the_matcher_says_no_to_moves_nothing() -> None:
    matcher = SaysNo(TOK.xgrammar_json_matcher(SCHEMA))
    tokens, ring, pool = decoded(matcher)
    matcher.refuse = True
    with pytest.raises(InvariantError, match="'matcher' must give back the 4 tokens"):
        rollback_with_grammar(ring, [2, 6], matcher, seq=0, tokens=tokens, pool=pool)
    assert pool.live[0] == "state after 10"
    assert ring.snapshot_positions() == (2, 6)
    assert matcher.rollback_limit == 10


def test_a_counting_matcher_that_gives_back_too_few_is_moved_back_and_refused() -> None:
    class TooFew(XGrammarMatcher):  # type: ignore[misc]  # final for users, not for a test
        def rollback(self, num_tokens: int, /) -> None:
            super().rollback(num_tokens - 1)

    engine = TOK.xgrammar_json_matcher(SCHEMA).matcher
    matcher = TooFew(engine, TOK.vocab_size)
    tokens, ring, pool = decoded(matcher)
    with pytest.raises(InvariantError, match="got 3 given back; nothing was moved"):
        rollback_with_grammar(ring, [2, 6], matcher, seq=0, tokens=tokens, pool=pool)
    assert matcher.num_tokens == 10
    assert pool.live[0] == "state after 10"


@pytest.mark.parametrize(
    ("bad", "match"),
    [("x", r"'tokens\[0\]' must be an int >= 0"), (-1, r"'tokens\[0\]' must be an int >= 0")],
)
def test_every_token_id_is_checked_before_anything_moves(bad: object, match: str) -> None:
    """A pool whose restore fails gets the dropped tokens fed back to the matcher: a bad id
    among them broke that half-way, the matcher rolled back and the model not."""

    class FailingPool(FakeSnapshotPool):  # type: ignore[misc]  # final for users, not for a test
        def restore(self, effects: object, /) -> None:
            raise RuntimeError("device copy failed")

    matcher = TOK.llguidance_json_matcher(SCHEMA)
    tokens, ring, pool = decoded(matcher, FailingPool(1, 2))
    with pytest.raises(InvalidArgumentError, match=match):
        rollback_with_grammar(ring, [2, 6], matcher, seq=0, tokens=[bad] * 10, pool=pool)  # type: ignore[list-item]
    assert matcher.num_tokens == 10
    with pytest.raises(
        InvalidArgumentError, match=r"'tokens\[9\]' must be a token id in \[0, 257\)"
    ):
        rollback_with_grammar(ring, [2, 6], matcher, seq=0, tokens=[*tokens[:9], 999], pool=pool)
    assert (matcher.num_tokens, pool.live[0]) == (10, "state after 10")
    with pytest.raises(RuntimeError, match="device copy failed"):  # the pool's own, after
        rollback_with_grammar(ring, [2, 6], matcher, seq=0, tokens=tokens, pool=pool)
    assert matcher.num_tokens == 10  # fed back whole


def test_two_adapters_over_one_engine_are_refused_as_one_matcher() -> None:
    model = tiny_model("lfm2", vocab_size=TOK.vocab_size, eos_token_id=TOK.eos_token_id)
    prompt = torch.tensor([TOK.encode("json:")] * 2)
    engine = TOK.xgrammar_json_matcher(SCHEMA).matcher
    twins = [XGrammarMatcher(engine, TOK.vocab_size), XGrammarMatcher(engine, TOK.vocab_size)]
    with pytest.raises(InvalidArgumentError, match=r"'grammar\[1\]' is the matcher of an earlier"):
        backtracking_generate(
            model,
            prompt,
            grammar=twins,
            max_new_tokens=4,
            is_boundary=set(TOK.encode(",")),
            reject=lambda t: None,
        )


@pytest.mark.parametrize(
    ("rows", "vocab"), [(2**63, 257), (1, 2**70)], ids=["rows past int64", "words past int64"]
)
def test_a_bitmask_too_large_to_hold_is_refused_by_name(rows: int, vocab: int) -> None:
    with pytest.raises(SsmRollbackError, match="must be a bitmask this process can hold"):
        allocate_token_bitmask(rows, vocab)


def test_a_bitmask_no_copy_reads_is_refused_by_name() -> None:
    logits = torch.zeros(1, 257)
    with pytest.raises(InvalidArgumentError, match="'bitmask' must be readable on the logits'"):
        apply_token_bitmask(logits, torch.zeros(1, 9, dtype=torch.int32, device="meta"))
    assert logits.eq(0).all()


@pytest.mark.parametrize("engine", ["xgrammar", "llguidance"])
def test_a_bitmask_whose_rows_share_memory_is_refused(engine: str) -> None:
    """An expand()ed bitmask took the write of row 1 in every row; the docs promise only the
    row asked for is written."""
    make = TOK.xgrammar_json_matcher if engine == "xgrammar" else TOK.llguidance_json_matcher
    matcher = make(SCHEMA)
    shared = torch.full((1, 9), -1, dtype=torch.int32).expand(3, 9)
    with pytest.raises(InvalidArgumentError, match="'bitmask' rows must not share memory"):
        matcher.fill_next_token_bitmask(shared, 1)
    assert shared[0].tolist() == [-1] * 9
    apart = allocate_token_bitmask(3, TOK.vocab_size)
    matcher.fill_next_token_bitmask(apart, 1)
    assert apart[0].tolist() == apart[2].tolist() == [-1] * 9
