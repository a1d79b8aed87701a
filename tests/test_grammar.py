"""Grammar matchers and the rollback transaction, on xgrammar and llguidance both.

Every failure point of ``rollback_with_grammar`` is injected - a matcher that
refuses, one that raises before or in the middle of its rollback, a pool
that raises, a stale slot, a KV cut that is refused, bad arguments - and
each must leave ring, pool, KV and matcher exactly as they were.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

import pytest
import torch

from ssm_rollback import (
    InvalidArgumentError,
    InvariantError,
    SsmDecodeRing,
    SsmRingEntry,
    SsmSnapshotRestore,
    SsmSnapshotSave,
    StaleSnapshotError,
    apply_effects,
    snapshot_boundary_if_ssm,
)
from ssm_rollback.backends.fake import FakeSnapshotPool
from ssm_rollback.backends.torch import TorchSnapshotPool
from ssm_rollback.integrations.grammar import (
    ByteTokenizer,
    GrammarMatcher,
    LLGuidanceMatcher,
    MatcherDeclined,
    XGrammarMatcher,
    allocate_token_bitmask,
    apply_token_bitmask,
    json_schema_matchers,
    rollback_with_grammar,
)
from ssm_rollback.pool import SnapshotPool
from ssm_rollback.rollback import DeclineReason, RollbackDeclined, RollbackPlan

Engine = Literal["xgrammar", "llguidance"]
ENGINES: tuple[Engine, ...] = ("xgrammar", "llguidance")
TOK = ByteTokenizer()
EOS = TOK.eos_token_id
OBJECT = {
    "type": "object",
    "properties": {"a": {"type": "integer"}},
    "required": ["a"],
    "additionalProperties": False,
}


def make(
    engine: Engine, schema: object = OBJECT, max_rollback_tokens: int | None = None
) -> XGrammarMatcher | LLGuidanceMatcher:
    if engine == "xgrammar":
        return TOK.xgrammar_json_matcher(schema, max_rollback_tokens=max_rollback_tokens)  # type: ignore[arg-type]
    return TOK.llguidance_json_matcher(schema, max_rollback_tokens=max_rollback_tokens)  # type: ignore[arg-type]


def allowed(matcher: GrammarMatcher) -> list[int]:
    mask = allocate_token_bitmask(1, matcher.vocab_size)
    matcher.fill_next_token_bitmask(mask, 0)
    logits = torch.zeros(matcher.vocab_size)
    apply_token_bitmask(logits, mask[0])
    return torch.isfinite(logits).nonzero().flatten().tolist()


def feed(matcher: GrammarMatcher, text: str) -> list[int]:
    tokens = TOK.encode(text)
    for token in tokens:
        assert matcher.accept_token(token), (text, token)
    return tokens


def fresh_allowed(engine: Engine, tokens: Sequence[int], schema: object = OBJECT) -> list[int]:
    fresh = make(engine, schema)
    for token in tokens:
        assert fresh.accept_token(token)
    return allowed(fresh)


# -- the adapters ------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ENGINES)
def test_adapters_follow_the_grammar_and_roll_back(engine: Engine) -> None:
    matcher = make(engine)
    assert isinstance(matcher, GrammarMatcher)
    assert allowed(matcher) == [ord("{")]
    tokens = feed(matcher, '{"a":12')
    assert sorted(allowed(matcher)) == [*range(ord("0"), ord("9") + 1), ord("}")]
    assert matcher.num_tokens == matcher.rollback_limit == len(tokens)
    assert not matcher.accept_token(ord("x"))  # refused: nothing changed
    assert matcher.num_tokens == len(tokens)
    assert not matcher.accept_token(TOK.vocab_size + 5)  # out of range: refused, no error state
    matcher.rollback(3)
    assert allowed(matcher) == fresh_allowed(engine, tokens[:-3])
    feed(matcher, ":12}")
    assert allowed(matcher) == [EOS]
    assert not matcher.is_terminated()
    assert matcher.accept_token(EOS)
    assert matcher.is_terminated()
    assert allowed(matcher) == []
    assert not matcher.accept_token(EOS)
    matcher.rollback(1)  # the EOS alone
    assert not matcher.is_terminated()
    assert allowed(matcher) == [EOS]
    matcher.rollback(1)
    assert sorted(allowed(matcher)) == [*range(ord("0"), ord("9") + 1), ord("}")]


def llg(schema: object = OBJECT) -> LLGuidanceMatcher:
    return TOK.llguidance_json_matcher(schema)  # type: ignore[arg-type]


def test_llguidance_eos_after_stop_is_counted_but_not_recorded() -> None:
    matcher = llg()
    feed(matcher, '{"a":1}')
    assert matcher.matcher.is_stopped()
    assert matcher.accept_token(EOS)
    assert matcher.num_tokens == 8
    matcher.rollback(2)  # the EOS, which llguidance never recorded, and the "}"
    assert allowed(matcher) == fresh_allowed("llguidance", TOK.encode('{"a":1'))
    assert not matcher.matcher.is_error()


def test_llguidance_after_stop_takes_eos_only() -> None:
    matcher = llg()
    feed(matcher, '{"a":1}')
    assert matcher.matcher.is_stopped()
    assert not matcher.accept_token(ord("x"))  # llguidance itself would consume it
    assert (matcher.num_tokens, matcher.is_terminated()) == (7, False)
    assert allowed(matcher) == [EOS]
    assert matcher.accept_token(EOS)
    assert (matcher.num_tokens, matcher.is_terminated()) == (8, True)


def test_xgrammar_refuses_the_first_id_past_the_vocabulary_itself(
    capfd: pytest.CaptureFixture[str],
) -> None:
    matcher = make("xgrammar", {"type": "string"})
    feed(matcher, '"ab')
    capfd.readouterr()
    assert not matcher.accept_token(TOK.vocab_size)  # xgrammar would warn on stderr
    assert not matcher.accept_token(TOK.vocab_size + 1)
    assert capfd.readouterr().err == ""
    assert matcher.num_tokens == 3


def test_xgrammar_masks_never_allow_ids_past_the_vocabulary() -> None:
    # Inside a string most tokens are allowed, and xgrammar then also sets the
    # bits past the last token id (257 here: one used bit in the last word).
    matcher = make("xgrammar", {"type": "string"})
    feed(matcher, '"ab')
    mask = allocate_token_bitmask(1, matcher.vocab_size)
    matcher.fill_next_token_bitmask(mask, 0)
    assert int(mask[0, -1].item()) & ~1 == 0
    logits = torch.zeros(32 * mask.shape[1])  # a head as wide as the mask's words
    apply_token_bitmask(logits, mask[0])
    assert int(torch.isfinite(logits).nonzero().max()) < matcher.vocab_size
    assert allowed(matcher) == fresh_allowed("xgrammar", TOK.encode('"ab'), {"type": "string"})


def test_llguidance_eos_before_stop_is_recorded() -> None:
    matcher = llg({"type": "integer"})
    feed(matcher, "7")
    assert not matcher.matcher.is_stopped()
    assert matcher.accept_token(EOS)
    assert matcher.is_terminated()
    matcher.rollback(1)
    assert not matcher.is_terminated()
    assert allowed(matcher) == fresh_allowed("llguidance", TOK.encode("7"), {"type": "integer"})
    assert ord("8") in allowed(matcher)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_rollback_past_the_limit_raises_and_changes_nothing(engine: Engine) -> None:
    matcher = make(engine, max_rollback_tokens=2)
    tokens = feed(matcher, '{"a":1')
    assert matcher.rollback_limit == 2
    before = allowed(matcher)
    with pytest.raises(InvalidArgumentError, match=r"'num_tokens' must be <= .* 2, got 3"):
        matcher.rollback(3)
    with pytest.raises(InvalidArgumentError, match="'num_tokens'"):
        matcher.rollback(-1)
    assert allowed(matcher) == before
    assert matcher.num_tokens == len(tokens)
    matcher.rollback(2)
    assert allowed(matcher) == fresh_allowed(engine, tokens[:-2])


@pytest.mark.parametrize("engine", ENGINES)
def test_adapters_refuse_bad_input_by_name(engine: Engine) -> None:
    matcher = make(engine)
    with pytest.raises(InvalidArgumentError, match="'token'"):
        matcher.accept_token(-1)
    with pytest.raises(InvalidArgumentError, match="'bitmask' must be a CPU tensor shaped"):
        matcher.fill_next_token_bitmask(allocate_token_bitmask(1, 512), 0)
    with pytest.raises(TypeError, match="'bitmask' must be an int32"):
        matcher.fill_next_token_bitmask(torch.zeros(1, 9), 0)
    with pytest.raises(InvalidArgumentError, match="'index' must be < the bitmask's 2 rows"):
        matcher.fill_next_token_bitmask(allocate_token_bitmask(2, TOK.vocab_size), 2)
    mask = allocate_token_bitmask(2, TOK.vocab_size)
    matcher.fill_next_token_bitmask(mask, 1)
    assert mask[0].tolist() == [-1] * 9  # only the row asked for is written
    assert matcher.num_tokens == 0


def test_adapter_construction_checks_its_arguments() -> None:
    xgr_matcher, llg_matcher = json_schema_matchers(OBJECT)
    with pytest.raises(TypeError, match=r"'matcher' must be an xgrammar\.GrammarMatcher"):
        XGrammarMatcher(llg_matcher.matcher, 257)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="'vocab_size' must be the matcher's"):
        XGrammarMatcher(xgr_matcher.matcher, 300)
    with pytest.raises(TypeError, match=r"'matcher' must be an llguidance\.LLMatcher"):
        LLGuidanceMatcher(xgr_matcher.matcher, TOK.llguidance_tokenizer())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"'tokenizer' must be an llguidance\.LLTokenizer"):
        LLGuidanceMatcher(llg_matcher.matcher, TOK)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="'max_rollback_tokens'"):
        XGrammarMatcher(xgr_matcher.matcher, 257, max_rollback_tokens=-2)


def test_byte_tokenizer_and_schemas() -> None:
    assert TOK.vocab_size == 257
    assert TOK.encode("é{") == [0xC3, 0xA9, ord("{")]
    assert TOK.decode([*TOK.encode("é{"), EOS]) == "é{<|eos|>"
    assert len(TOK.vocab()) == 257
    assert ByteTokenizer(("<|end|>", "<|pad|>")).vocab_size == 258
    with pytest.raises(InvalidArgumentError, match="'specials'"):
        ByteTokenizer(())
    with pytest.raises(InvalidArgumentError, match=r"'ids\[1\]'"):
        TOK.decode([1, 999])
    with pytest.raises(InvalidArgumentError, match="'schema' must be valid JSON"):
        json_schema_matchers("{not json")
    with pytest.raises(TypeError, match="'schema'"):
        json_schema_matchers(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="'tokenizer'"):
        json_schema_matchers(OBJECT, tokenizer="bytes")  # type: ignore[arg-type]


def test_the_engines_accept_the_same_compact_json() -> None:
    schema = {
        "type": "object",
        "properties": {"xs": {"type": "array", "items": {"type": "integer"}}},
    }
    for text, ok in (('{"xs":[1,2]}', True), ('{"xs": [1]}', False), ('{"xs":[1],"y":2}', True)):
        for matcher in json_schema_matchers(schema):
            taken = all(matcher.accept_token(t) for t in TOK.encode(text))
            assert taken == ok, (type(matcher).__name__, text)


def test_apply_token_bitmask() -> None:
    mask = allocate_token_bitmask(2, 40)
    mask[0, 0] = 0b101  # tokens 0 and 2
    mask[0, 1] = 0
    logits = torch.zeros(2, 70)  # a head wider than the mask: ids >= 64 masked
    apply_token_bitmask(logits, mask)
    assert torch.isfinite(logits[0]).nonzero().flatten().tolist() == [0, 2]
    assert torch.isfinite(logits[1]).nonzero().flatten().tolist() == list(range(64))
    with pytest.raises(TypeError, match="'logits'"):
        apply_token_bitmask(torch.zeros(3, dtype=torch.long), mask)
    with pytest.raises(InvalidArgumentError, match="one row per logits row"):
        apply_token_bitmask(torch.zeros(3, 40), mask)


# -- the transaction ---------------------------------------------------------------------

TEXT = '{"a":1234'
#: Output lengths that are boundaries, each with a snapshot (ring of 3).
BOUNDARIES = [2, 5, 7]


class Scene:
    """A sequence of TEXT, accepted by a matcher, with boundary snapshots in a pool."""

    def __init__(self, engine: Engine, matcher: GrammarMatcher | None = None) -> None:
        self.matcher = make(engine) if matcher is None else matcher
        self.tokens = feed(self.matcher, TEXT) if matcher is None else TOK.encode(TEXT)
        self.ring = SsmDecodeRing(3)
        self.pool = FakeSnapshotPool(1, 3)
        for position in range(1, len(self.tokens) + 1):
            self.pool.live[0] = f"state@{position}"
            save = snapshot_boundary_if_ssm(
                self.ring,
                seq=0,
                token_position=position,
                is_boundary=position in BOUNDARIES,
                in_thinking=False,
            )
            if save is not None:
                apply_effects(self.pool, [save], [self.ring])
        self.kv = len(self.tokens)
        self.cuts: list[int] = []

    def crop(self, keep: int) -> Callable[[], None]:
        def cut() -> None:
            self.kv = keep
            self.cuts.append(keep)

        return cut

    def observe(self) -> object:
        tags = [(self.pool.stored_position(0, s), self.pool.stored_ticket(0, s)) for s in range(3)]
        return (
            self.ring.entries,
            self.ring.next_slot,
            list(self.pool.live),
            tags,
            self.kv,
            self.matcher.rollback_limit,
            allowed(self.matcher),
        )

    def roll(self, pool: SnapshotPool | None = None, **kwargs: object) -> object:
        return rollback_with_grammar(
            self.ring,
            BOUNDARIES,
            self.matcher,
            seq=0,
            tokens=self.tokens,
            pool=self.pool if pool is None else pool,
            crop=self.crop,
            **kwargs,  # type: ignore[arg-type]
        )


@pytest.mark.parametrize("engine", ENGINES)
def test_a_served_rollback_moves_model_and_matcher_together(engine: Engine) -> None:
    scene = Scene(engine)
    plan = scene.roll(at_most=6)
    assert isinstance(plan, RollbackPlan)
    assert (plan.keep_len, plan.tokens_dropped) == (5, 4)
    assert scene.pool.live[0] == "state@5"
    assert scene.ring.snapshot_positions() == (2, 5)
    assert scene.kv == 5
    assert scene.cuts == [5]
    assert allowed(scene.matcher) == fresh_allowed(engine, scene.tokens[:5])
    scene.ring.check_valid()


@pytest.mark.parametrize("engine", ENGINES)
def test_a_matcher_that_can_go_back_exactly_that_far_is_served(engine: Engine) -> None:
    scene = Scene(engine, make(engine, max_rollback_tokens=4))
    feed(scene.matcher, TEXT)
    plan = scene.roll(at_most=6)  # drops 4 tokens: the limit, not past it
    assert isinstance(plan, RollbackPlan)
    assert (plan.keep_len, plan.tokens_dropped) == (5, 4)
    assert scene.cuts == [5]
    assert allowed(scene.matcher) == fresh_allowed(engine, scene.tokens[:5])


@pytest.mark.parametrize("engine", ENGINES)
def test_a_matcher_that_cannot_go_back_that_far_declines_and_nothing_moves(
    engine: Engine,
) -> None:
    scene = Scene(engine, make(engine, max_rollback_tokens=3))
    feed(scene.matcher, TEXT)
    before = scene.observe()
    assert scene.roll(at_most=6) == MatcherDeclined(0, tokens_dropped=4, rollback_limit=3)
    assert scene.observe() == before
    assert scene.cuts == []
    plan = scene.roll()  # the newest boundary is only 2 back: served
    assert isinstance(plan, RollbackPlan)
    assert plan.keep_len == 7


@pytest.mark.parametrize("engine", ENGINES)
def test_a_model_side_decline_changes_nothing(engine: Engine) -> None:
    scene = Scene(engine)
    before = scene.observe()
    assert scene.roll(at_most=1) == RollbackDeclined(0, DeclineReason.NO_BOUNDARY)
    assert scene.observe() == before


class Flaky:
    """A matcher whose rollback raises: before moving, or after giving back ``moved`` tokens."""

    def __init__(self, inner: GrammarMatcher, moved: int = 0) -> None:
        self.inner = inner
        self.moved = moved
        self.vocab_size = inner.vocab_size

    @property
    def rollback_limit(self) -> int:
        return self.inner.rollback_limit

    def is_terminated(self) -> bool:
        return self.inner.is_terminated()

    def accept_token(self, token: int, /) -> bool:
        return self.inner.accept_token(token)

    def rollback(self, num_tokens: int, /) -> None:
        if self.moved:
            self.inner.rollback(self.moved)
        raise RuntimeError("matcher fault")

    def fill_next_token_bitmask(self, bitmask: torch.Tensor, index: int = 0, /) -> None:
        self.inner.fill_next_token_bitmask(bitmask, index)


@pytest.mark.parametrize("moved", [0, 1, 3])
@pytest.mark.parametrize("engine", ENGINES)
def test_a_matcher_that_raises_mid_rollback_leaves_everything(engine: Engine, moved: int) -> None:
    inner = make(engine)
    feed(inner, TEXT)
    scene = Scene(engine, Flaky(inner, moved))
    before = scene.observe()
    with pytest.raises(RuntimeError, match="matcher fault"):
        scene.roll(at_most=6)
    assert scene.observe() == before
    assert allowed(inner) == fresh_allowed(engine, scene.tokens)


class BrokenRestore:
    """A pool that refuses every restore (copying nothing), as a pool that lost its memory."""

    def __init__(self, pool: FakeSnapshotPool) -> None:
        self.pool = pool
        self.num_sequences = pool.num_sequences
        self.slots_per_sequence = pool.slots_per_sequence
        self.save = pool.save
        self.stored_position = pool.stored_position
        self.stored_ticket = pool.stored_ticket

    def restore(self, restores: Sequence[SsmSnapshotRestore], /) -> None:
        raise InvalidArgumentError("pool fault")


@pytest.mark.parametrize("engine", ENGINES)
def test_a_pool_fault_puts_the_matcher_back(engine: Engine) -> None:
    scene = Scene(engine)
    before = scene.observe()
    with pytest.raises(InvalidArgumentError, match="pool fault"):
        scene.roll(pool=BrokenRestore(scene.pool), at_most=6)
    assert scene.observe() == before
    assert allowed(scene.matcher) == fresh_allowed(engine, scene.tokens)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_replaced_torch_state_tensor_puts_the_matcher_back(engine: Engine) -> None:
    scene = Scene(engine)
    live = torch.zeros(1, 4)
    pool = TorchSnapshotPool([live], 3)
    for entry in scene.ring.entries:  # the torch pool holds the same snapshots
        live.fill_(entry.token_position)
        assert pool.save([_save_of(entry)]).ok
    live.fill_(len(scene.tokens))
    live.set_(
        torch.full((1, 4), 99.0).untyped_storage()
    )  # re-pointed: the pool must refuse to copy
    before = scene.observe()
    with pytest.raises(InvalidArgumentError):
        scene.roll(pool=pool, at_most=6)
    assert scene.observe() == before
    assert live.flatten().tolist() == [99.0] * 4


def _save_of(entry: SsmRingEntry) -> SsmSnapshotSave:
    return SsmSnapshotSave(0, entry.snapshot_slot, entry.token_position, entry.ticket)


@pytest.mark.parametrize("engine", ENGINES)
def test_a_stale_slot_raises_before_anything_moves(engine: Engine) -> None:
    scene = Scene(engine)
    before = scene.observe()
    with pytest.raises(StaleSnapshotError, match="nothing was moved"):
        scene.roll(pool=FakeSnapshotPool(1, 3), at_most=6)  # holds no snapshot at all
    assert scene.observe() == before


@pytest.mark.parametrize("engine", ENGINES)
def test_a_refused_kv_cut_raises_before_anything_moves(engine: Engine) -> None:
    scene = Scene(engine)
    before = scene.observe()

    def refuse(keep: int) -> Callable[[], None]:
        raise InvalidArgumentError(f"'length' {keep} is out of the window")

    with pytest.raises(InvalidArgumentError, match="out of the window"):
        rollback_with_grammar(
            scene.ring, BOUNDARIES, scene.matcher, seq=0, tokens=scene.tokens,
            pool=scene.pool, at_most=6, crop=refuse,
        )  # fmt: skip
    assert scene.observe() == before


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"matcher": object()}, "'matcher' must implement GrammarMatcher"),
        ({"tokens": "abc"}, "'tokens' must be a sequence"),
        ({"pool": object()}, "'pool' must be a SnapshotPool"),
        ({"crop": 3}, "'crop' must be callable"),
        ({"at_most": -1}, "'at_most'"),
        ({"seq": -1}, "'seq'"),
        ({"hybrid": 1}, "'hybrid'"),
        ({"boundaries": [2, 5, 70]}, "'boundaries' must all be <= current_len"),
        ({"tokens": [1, 2, 3]}, "'tokens' must hold every token the matcher accepted"),
        ({"ring": "ring"}, "'ring'"),
    ],
)
def test_bad_arguments_are_named_and_change_nothing(kwargs: dict[str, object], error: str) -> None:
    scene = Scene("xgrammar")
    before = scene.observe()
    args: dict[str, object] = {
        "ring": scene.ring,
        "boundaries": BOUNDARIES,
        "matcher": scene.matcher,
        "seq": 0,
        "tokens": scene.tokens,
        "pool": scene.pool,
        "crop": scene.crop,
        **kwargs,
    }
    ring, boundaries, matcher = args.pop("ring"), args.pop("boundaries"), args.pop("matcher")
    with pytest.raises(InvalidArgumentError, match=error):
        rollback_with_grammar(ring, boundaries, matcher, **args)  # type: ignore[arg-type]
    assert scene.observe() == before


@pytest.mark.parametrize("engine", ENGINES)
def test_pure_attention_rolls_back_without_a_pool(engine: Engine) -> None:
    scene = Scene(engine)
    plan = rollback_with_grammar(
        SsmDecodeRing(0), BOUNDARIES, scene.matcher, seq=0, tokens=scene.tokens,
        pool=None, hybrid=False, at_most=3, crop=scene.crop,
    )  # fmt: skip
    assert plan == RollbackPlan(0, 2, 7, ())
    assert scene.kv == 2
    assert allowed(scene.matcher) == fresh_allowed(engine, scene.tokens[:2])


def test_a_matcher_that_cannot_take_its_tokens_back_is_an_invariant_error() -> None:
    scene = Scene("xgrammar")

    class Forgetful(Flaky):
        def accept_token(self, token: int, /) -> bool:
            return False

    forgetful = Forgetful(scene.matcher, moved=2)
    with pytest.raises(InvariantError, match="refused token") as caught:
        rollback_with_grammar(
            scene.ring, BOUNDARIES, forgetful, seq=0, tokens=scene.tokens, pool=scene.pool,
        )  # fmt: skip
    assert isinstance(caught.value.__cause__, RuntimeError)
