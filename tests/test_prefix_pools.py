"""Prefix snapshots through real pools: ``apply_effects`` with shared slots, fail-closed cases,
and a scheduler simulation whose every hit must restore exactly a fresh prefill's state."""

from __future__ import annotations

import random
from collections.abc import Sequence

import attrs
import pytest

from ssm_rollback import (
    Effect,
    InvalidArgumentError,
    PrefillPlan,
    PrefixSnapshotIndex,
    SaveBatch,
    SaveOutcome,
    SharedSnapshotPool,
    SsmDecodeRing,
    SsmPrefixRestore,
    SsmPrefixSave,
    SsmSnapshotRestore,
    SsmSnapshotSave,
    StaleSnapshotError,
    apply_effects,
)
from ssm_rollback._errors import InvalidArgumentTypeError
from ssm_rollback.backends.fake import FakeSnapshotPool
from ssm_rollback.pool import scheduler_step


class RingOnlyPool:
    """A third-party pool that implements ``SnapshotPool`` and nothing else."""

    def __init__(self, inner: FakeSnapshotPool) -> None:
        self.inner = inner
        self.num_sequences = inner.num_sequences
        self.slots_per_sequence = inner.slots_per_sequence

    def save(self, saves: Sequence[SsmSnapshotSave] | SaveBatch, /) -> SaveOutcome:
        return self.inner.save(saves)

    def restore(self, restores: Sequence[SsmSnapshotRestore], /) -> None:
        self.inner.restore(restores)

    def stored_position(self, seq: int, slot: int) -> int | None:
        return self.inner.stored_position(seq, slot)

    def stored_ticket(self, seq: int, slot: int) -> int | None:
        return self.inner.stored_ticket(seq, slot)


class SharedOnlyProtocolPool(RingOnlyPool):
    """A third-party ``SharedSnapshotPool``: the protocols only, no ``PoolBase``."""

    @property
    def shared_slots(self) -> int:
        return self.inner.shared_slots

    def save_shared(self, saves: Sequence[SsmPrefixSave], /) -> SaveOutcome:
        return self.inner.save_shared(saves)

    def restore_shared(self, restores: Sequence[SsmPrefixRestore], /) -> None:
        self.inner.restore_shared(restores)

    def stored_shared_ticket(self, slot: int) -> int | None:
        return self.inner.stored_shared_ticket(slot)


def fake(rows: int = 3, shared: int = 2) -> FakeSnapshotPool:
    pool = FakeSnapshotPool(rows, 2, shared_slots=shared)
    pool.live[:] = [f"row{seq}" for seq in range(rows)]
    return pool


POOLS = {
    "pool base": lambda inner: inner,
    "protocols only": SharedOnlyProtocolPool,
}


def test_protocol_only_pool_is_a_shared_snapshot_pool() -> None:
    assert isinstance(SharedOnlyProtocolPool(fake()), SharedSnapshotPool)
    assert not isinstance(RingOnlyPool(fake()), SharedSnapshotPool)
    assert isinstance(fake(shared=0), SharedSnapshotPool)  # declared, with no slots


# -- the named fail-closed cases ------------------------------------------------------


@pytest.mark.parametrize("make", POOLS.values(), ids=POOLS.keys())
def test_shared_slot_reused_after_eviction_is_never_restored_for_old_prefix(make: type) -> None:
    inner = fake(rows=2, shared=1)
    pool = make(inner)
    index = PrefixSnapshotIndex(1)
    a, b = [1, 2, 3, 4], [7, 8, 9, 4]
    inner.live[0] = "state after A"
    save_a = index.publish(0, a, 3)
    assert save_a is not None
    apply_effects(pool, [save_a], [], prefix_index=index)
    plan = index.plan_prefill(1, a)  # a request on A: its restore, made now, applied later
    assert plan.hit is not None
    old_restore = plan.hit.restore
    index.release(plan)
    inner.live[0] = "state after B"
    save_b = index.publish(0, b, 3)  # evicts A: the same shared slot, a new ticket
    assert save_b is not None
    assert (save_b.slot, index.stats.evicted) == (save_a.slot, 1)
    apply_effects(pool, [save_b], [], prefix_index=index)
    inner.live[1] = "row 1, untouched"
    with pytest.raises(StaleSnapshotError, match=f"holds ticket {save_b.ticket}"):
        apply_effects(pool, [old_restore], [], prefix_index=index)
    with pytest.raises(StaleSnapshotError, match=f"not ticket {save_a.ticket}"):
        pool.restore_shared([old_restore])
    assert inner.live[1] == "row 1, untouched"
    assert inner.stored_shared_value(save_a.slot) == "state after B"


@pytest.mark.parametrize("make", POOLS.values(), ids=POOLS.keys())
def test_failed_shared_save_is_gone_from_index(make: type) -> None:
    inner = fake(rows=2, shared=2)
    pool = make(inner)
    index = PrefixSnapshotIndex(2)
    inner.fail_shared_when(lambda save: save.seq == 0)
    plan = index.plan_prefill(0, [5, 6, 7, 8], publish_at=[2])
    (lost,) = plan.saves
    kept = index.publish(1, [5, 9, 9], 2)
    assert kept is not None
    outcome = apply_effects(pool, [lost, kept], [], prefix_index=index)
    assert outcome == SaveOutcome(failed_shared=(lost,))
    assert index.match([5, 6, 7, 8]) is None  # nothing points at the slot never written
    assert [e.ticket for e in index.entries()] == [kept.ticket]
    index.check_valid()
    index.release(plan)  # the plan's pin on the discarded entry is void, not an error
    # Without the index, the failure is still reported and its slot still restores nothing.
    lost_again = index.publish(0, [5, 6, 7, 8], 2)
    assert lost_again is not None
    assert apply_effects(pool, [lost_again], []).failed_shared == (lost_again,)
    with pytest.raises(StaleSnapshotError, match="holds nothing"):
        apply_effects(pool, [SsmPrefixRestore(1, lost_again.slot, 2, lost_again.ticket)], [])


@pytest.mark.parametrize("make", POOLS.values(), ids=POOLS.keys())
def test_shared_save_applied_twice_is_refused(make: type) -> None:
    inner = fake(rows=3, shared=2)
    pool = make(inner)
    save = SsmPrefixSave(0, 1, 4, 77)
    apply_effects(pool, [save], [])
    inner.live[0] = "row0, later"
    with pytest.raises(StaleSnapshotError, match=r"'effects\[0\]'.*applied twice"):
        apply_effects(pool, [save], [])  # the step's effects applied again
    # Twice in one call, a restore between them (two runs): refused before any copy.
    restore = SsmPrefixRestore(2, 0, 4, 78)
    twice: list[Effect] = [SsmPrefixSave(1, 0, 4, 78), restore, SsmPrefixSave(1, 0, 4, 78)]
    with pytest.raises(StaleSnapshotError, match=r"'effects\[2\]'.*applied twice"):
        apply_effects(pool, twice, [])
    assert inner.stored_shared_value(1) == "row0"
    assert inner.stored_shared_ticket(0) is None
    assert inner.live == ["row0, later", "row1", "row2"]


@pytest.mark.parametrize("make", POOLS.values(), ids=POOLS.keys())
def test_an_older_shared_save_applied_after_its_slot_was_reused_is_refused(make: type) -> None:
    """A shared save applied again after a newer placement reused its slot overwrote the newer
    prefix's state under the old ticket: refused, the newer entry still restores."""
    inner = fake(rows=2, shared=1)
    pool = make(inner)
    old, new = SsmPrefixSave(0, 0, 4, 77), SsmPrefixSave(1, 0, 6, 78)
    apply_effects(pool, [old], [])
    apply_effects(pool, [new], [])
    with pytest.raises(StaleSnapshotError, match=r"'effects\[0\]'.*took a newer save \(ticket 78"):
        apply_effects(pool, [old], [])
    assert (inner.stored_shared_ticket(0), inner.stored_shared_value(0)) == (78, "row1")
    apply_effects(pool, [SsmPrefixRestore(0, 0, 6, 78)], [])
    assert inner.live[0] == "row1"


@pytest.mark.parametrize("make", POOLS.values(), ids=POOLS.keys())
def test_a_shared_save_applied_again_after_its_slots_next_save_failed_is_refused(
    make: type,
) -> None:
    """The failed save left the shared slot holding nothing, and the older save applied again
    went in under its old ticket: a hit planned for it restored whatever the row held then."""
    inner = fake(rows=2, shared=1)
    pool = make(inner)
    old, new = SsmPrefixSave(0, 0, 4, 77), SsmPrefixSave(1, 0, 6, 78)
    apply_effects(pool, [old], [])
    inner.fail_shared_when(lambda save: True)
    assert apply_effects(pool, [new], []).failed_shared == (new,)
    inner.fail_shared_when(None)
    assert inner.stored_shared_ticket(0) is None
    inner.live[0] = "row0, later"
    # A pool of the protocols only: apply_effects sees a slot holding nothing, and the pool's
    # own save (here the fake's) refuses it.
    with pytest.raises(StaleSnapshotError, match="already took that ticket"):
        apply_effects(pool, [old], [])
    assert inner.stored_shared_ticket(0) is None


# -- apply_effects ------------------------------------------------------------------


def test_prefix_effects_are_batched_per_kind_in_runs() -> None:
    pool = fake(rows=4, shared=3)
    effects: list[Effect] = [
        SsmPrefixSave(0, 0, 5, 1),
        SsmPrefixSave(1, 1, 5, 2),
        SsmPrefixRestore(2, 0, 5, 1),  # restores what the saves before it write
        SsmPrefixRestore(3, 0, 5, 1),  # one shared slot, several rows
        SsmSnapshotSave(0, 0, 3, 3),
        SsmPrefixSave(2, 2, 5, 4),
    ]
    assert apply_effects(pool, effects, {0: _ring()}).ok
    assert (pool.shared_save_calls, pool.shared_restore_calls, pool.save_calls) == (2, 1, 1)
    assert pool.live == ["row0", "row1", "row0", "row0"]
    assert pool.stored_shared_value(2) == "row0"  # row 2 saved after its restore


def _ring() -> SsmDecodeRing:
    ring = SsmDecodeRing(2)
    ring.record(3)
    return ring


@pytest.mark.parametrize("make", POOLS.values(), ids=POOLS.keys())
def test_a_bad_prefix_effect_is_refused_before_the_first_copy(make: type) -> None:
    inner = fake(rows=3, shared=2)
    pool = make(inner)
    cases: list[tuple[list[Effect], type[Exception], str]] = [
        ([SsmPrefixSave(0, 0, 1, 1), SsmPrefixRestore(1, 0, 1, 2)], StaleSnapshotError, "[1]"),
        ([SsmPrefixSave(0, 0, 1, 1), SsmPrefixSave(5, 1, 1, 1)], InvalidArgumentError, "seq"),
        ([SsmPrefixSave(0, 2, 1, 1)], InvalidArgumentError, "shared_slots 2"),
        ([SsmPrefixSave(0, 0, 1, 1), SsmPrefixSave(0, 1, 1, 2)], InvalidArgumentError, "row"),
        ([SsmPrefixSave(0, 0, 1, 1), SsmPrefixSave(1, 0, 1, 2)], InvalidArgumentError, "slot"),
        ([SsmPrefixRestore(0, 0, 1, 1), SsmPrefixRestore(0, 1, 1, 1)], InvalidArgumentError, "row"),
    ]
    for effects, error, match in cases:
        with pytest.raises(error, match=match.replace("[", r"\[").replace("]", r"\]")):
            apply_effects(pool, effects, [])
        assert [inner.stored_shared_ticket(slot) for slot in range(2)] == [None, None]
        assert inner.live == ["row0", "row1", "row2"]


def test_a_pool_without_shared_slots_is_refused_naming_the_effect() -> None:
    inner = FakeSnapshotPool(2, 1)
    inner.live[:] = ["a", "b"]
    pool = RingOnlyPool(inner)
    effects: list[Effect] = [SsmSnapshotSave(0, 0, 1, 1), SsmPrefixRestore(1, 0, 1, 1)]
    with pytest.raises(
        InvalidArgumentTypeError,
        match=r"'pool' must be a SharedSnapshotPool .* for 'effects\[1\]' \(an SsmPrefixRestore\), "
        r"got RingOnlyPool",
    ):
        apply_effects(pool, effects, [_ring()])
    assert inner.stored_ticket(0, 0) is None  # nothing copied
    with pytest.raises(InvalidArgumentTypeError, match=r"'effects\[0\]' \(an SsmPrefixSave\)"):
        apply_effects(pool, [SsmPrefixSave(0, 0, 1, 1)], [])


def test_prefix_index_must_be_an_index() -> None:
    with pytest.raises(InvalidArgumentTypeError, match="'prefix_index' must be a Prefix"):
        apply_effects(fake(), [], [], prefix_index=[])  # type: ignore[arg-type]


@pytest.mark.parametrize("make", POOLS.values(), ids=POOLS.keys())
def test_a_restore_that_needed_a_failed_shared_save_is_refused_after_the_batches_before_it(
    make: type,
) -> None:
    inner = fake(rows=3, shared=2)
    pool = make(inner)
    inner.fail_shared_when(lambda save: save.slot == 1)
    effects: list[Effect] = [
        SsmPrefixSave(0, 0, 3, 1),
        SsmPrefixSave(1, 1, 3, 2),
        SsmPrefixRestore(2, 1, 3, 2),
    ]
    with pytest.raises(StaleSnapshotError, match=r"'effects\[2\]'.*holds nothing"):
        apply_effects(pool, effects, [])
    assert inner.stored_shared_value(0) == "row0"  # the batch before it was applied
    assert inner.live[2] == "row2"


# -- a scheduler on the fake pool -------------------------------------------------


MASK = (1 << 61) - 1


def advance(state: int, tokens: Sequence[int]) -> int:
    """The simulated SSM state: a hash chain over the tokens, a function of the exact prefix."""
    for token in tokens:
        state = (state * 1_000_003 + token + 1) & MASK
    return state


@attrs.define
class Active:
    """A request on a row: its prompt, plan, the chunk it is at, and its output."""

    tokens: list[int]
    plan: PrefillPlan
    output: list[int]
    conversation: list[int]
    chunk: int = 0


@attrs.define
class Result:
    requests: int = 0
    hits: int = 0
    mismatches: int = 0
    failed: int = 0
    deferred: int = 0


def simulate(requests: int, *, seed: int, rows: int = 8, slots: int = 24, late: int = 0) -> Result:
    """Serve ``requests`` chat requests on ``rows`` rows of a fake pool, through ``apply_effects``.

    Each step: new requests are planned (one whose hit is an entry placed but
    not yet saved waits, as an engine waits for blocks still being computed),
    their restores applied in one call; every active row feeds one prefill
    chunk (or its output) and the step's saves and publishes go in one call.
    Some shared saves fail; ``apply_effects`` discards them from the index.
    ``late`` saves the state that many tokens too far (the check must bite).
    """
    rng = random.Random(seed)
    pool = FakeSnapshotPool(rows, 0, shared_slots=slots)
    index = PrefixSnapshotIndex(slots, eviction=rng.choice(["lru", "benefit"]))
    pool.fail_shared_when(lambda save: save.ticket % 53 == 0)
    systems = [[rng.randrange(1000) for _ in range(rng.randint(16, 40))] for _ in range(5)]
    history: list[tuple[list[int], list[int]]] = []  # (conversation so far, message ends)
    pending: set[tuple[int, int]] = set()  # (slot, ticket) placed, save not yet applied
    active: dict[int, Active] = {}
    waiting: list[tuple[list[int], list[int]]] = []
    result = Result()
    made = 0

    def new_request() -> tuple[list[int], list[int]]:
        roll = rng.random()
        if history and roll < 0.45:  # the next turn of a conversation
            prompt, ends = rng.choice(history)
        elif history and roll < 0.55:  # regenerate: the same prompt again
            prompt, ends = rng.choice(history)
            return list(prompt), list(ends)
        else:
            system = rng.choice(systems)
            prompt, ends = list(system), [len(system)]
        if len(prompt) > 200:
            system = rng.choice(systems)
            prompt, ends = list(system), [len(system)]
        prompt = prompt + [rng.randrange(1000) for _ in range(rng.randint(3, 12))]
        return prompt, [*ends, len(prompt)]

    while result.requests < requests:
        restores: list[Effect] = []
        for seq in range(rows):
            if seq in active:
                continue
            if not waiting and made < requests:
                waiting.append(new_request())
                made += 1
            if not waiting:
                break
            tokens, ends = waiting[0]
            found = index.match(tokens)
            if found is not None and (found.slot, found.ticket) in pending:
                result.deferred += 1
                break  # wait one step for the save that fills it
            waiting.pop(0)
            publish_at = sorted({e for e in ends if e < len(tokens)} | {len(tokens) - 1})
            plan = index.plan_prefill(seq, tokens, publish_at=publish_at)
            pending.update((s.slot, s.ticket) for s in plan.saves)
            output = [rng.randrange(1000) for _ in range(rng.randint(2, 8))]
            active[seq] = Active(tokens, plan, output, tokens + output)
            pool.live[seq] = advance(0, [])
            if plan.hit is not None:
                restores.append(plan.hit.restore)
                result.hits += 1
        apply_effects(pool, restores, [], prefix_index=index)
        for r in restores:
            assert isinstance(r, SsmPrefixRestore)
            if pool.live[r.seq] != advance(0, active[r.seq].tokens[: r.length]):
                result.mismatches += 1
        saves: list[Effect] = []
        for seq, request in list(active.items()):
            state = pool.live[seq]
            assert isinstance(state, int)
            chunks = request.plan.chunks
            if request.chunk < len(chunks):
                start = request.plan.start if request.chunk == 0 else chunks[request.chunk - 1].end
                chunk = chunks[request.chunk]
                pool.live[seq] = advance(state, request.tokens[start : chunk.end + late])
                if chunk.save is not None:
                    saves.append(chunk.save)
                request.chunk += 1
                continue
            # Prefill done: it must stand exactly where a fresh prefill stands. Decode the
            # output and share its end for the conversation's next turn.
            if state != advance(0, request.tokens):
                result.mismatches += 1
            pool.live[seq] = advance(state, request.output)
            published = index.publish(seq, request.conversation, len(request.conversation))
            if published is not None:
                saves.append(published)
            index.release(request.plan)
            history.append((request.conversation, [len(request.conversation)]))
            if len(history) > 300:
                history.pop(rng.randrange(len(history)))
            del active[seq]
            result.requests += 1
        outcome = apply_effects(pool, saves, [], prefix_index=index)
        result.failed += len(outcome.failed_shared)
        for save in saves:
            assert isinstance(save, SsmPrefixSave)
            pending.discard((save.slot, save.ticket))
        if late:  # the rows saved too far: put them back where their chunk ends
            for seq, request in active.items():
                if request.chunk:
                    done = request.plan.chunks[request.chunk - 1].end
                    pool.live[seq] = advance(0, request.tokens[:done])
    index.check_valid()
    return result


def test_twenty_thousand_requests_restore_exactly_what_a_fresh_prefill_computes() -> None:
    total = Result()
    for seed in range(4):
        result = simulate(5_000, seed=seed)
        assert result.mismatches == 0, seed
        total.requests += result.requests
        total.hits += result.hits
        total.failed += result.failed
    assert total.requests >= 20_000
    assert total.hits > total.requests // 3  # the check ran on many restores
    assert total.failed > 50  # and failed shared saves were discarded along the way


def test_the_exactness_check_bites() -> None:
    result = simulate(400, seed=9, late=1)
    assert result.hits > 0
    # Every hit on a chunk's save is wrong; hits on an output's end (saved in place) are not.
    assert result.mismatches > result.hits // 2


def test_a_shared_save_whose_entry_was_evicted_before_it_ran_is_left_out() -> None:
    """Two publishes in one step, the second evicting the first's entry before its save ran:
    both saves name one shared slot. Given the index, apply_effects leaves the superseded save
    out (nothing points at it) and copies the live one; without it, the call is refused."""
    index = PrefixSnapshotIndex(1)
    pool = FakeSnapshotPool(2, 1, shared_slots=1)
    pool.live = ["row 0 after 5", "row 1 after 7"]
    first = index.publish(0, list(range(5)), 5)
    second = index.publish(1, list(range(10, 17)), 7)
    assert first is not None
    assert second is not None
    assert first.slot == second.slot
    with pytest.raises(InvalidArgumentError, match="each shared slot at most once"):
        apply_effects(pool, [first, second], [])
    outcome = apply_effects(pool, [first, second], [], prefix_index=index)
    assert outcome.ok
    assert pool.stored_shared_ticket(second.slot) == second.ticket
    assert index.match([*range(10, 17), 99]) is not None
    assert index.match([*range(5), 99]) is None


@pytest.mark.parametrize("make", POOLS.values(), ids=POOLS.keys())
def test_a_row_saved_twice_in_one_call_is_refused_even_when_one_save_is_superseded(
    make: type,
) -> None:
    """Row 0 published at 3 and at 5 tokens in one step, the first entry evicted since: the
    superseded save was left out before the batch rules ran, which then never saw row 0
    twice. The other save tagged its slot with 5 tokens of a state holding 3, and a later
    hit restored that state for the 5-token prefix."""
    index = PrefixSnapshotIndex(2)
    inner = FakeSnapshotPool(2, 1, shared_slots=2)
    pool = make(inner)
    inner.live = ["row 0 after 3", "row 1 after 2"]
    at_3 = index.publish(0, [1, 2, 3], 3)
    at_5 = index.publish(0, [7, 8, 9, 10, 11], 5)
    evicting = index.publish(1, [4, 4], 2)  # takes at_3's slot (lru)
    assert at_3 is not None
    assert at_5 is not None
    assert evicting is not None
    assert at_3.slot == evicting.slot
    before = index.entries()
    for given in (None, index):
        with pytest.raises(InvalidArgumentError, match="each row at most once"):
            apply_effects(pool, [at_3, at_5, evicting], [], prefix_index=given)
        assert [inner.stored_shared_ticket(s) for s in (0, 1)] == [None, None]
        assert index.entries() == before


def test_a_shared_save_of_another_length_than_its_entry_is_refused() -> None:
    """Matched by slot and ticket alone, a save of length 1 for a 2-token entry was copied:
    every later hit on the entry then failed as stale while the entry stayed."""
    index = PrefixSnapshotIndex(2)
    pool = FakeSnapshotPool(1, 1, shared_slots=2)
    pool.live = ["row 0 after 2"]
    save = index.publish(0, [1, 2, 3], 2)
    assert save is not None
    forged = attrs.evolve(save, length=1)
    with pytest.raises(InvalidArgumentError, match=r"'prefix_index' placed.* another length"):
        apply_effects(pool, [forged], [], prefix_index=index)
    assert pool.stored_shared_ticket(save.slot) is None
    assert apply_effects(pool, [save], [], prefix_index=index).ok


@pytest.mark.parametrize("effect", [SsmPrefixSave, SsmPrefixRestore])
def test_a_prefix_effect_of_no_tokens_is_refused(effect: type) -> None:
    with pytest.raises(InvalidArgumentError, match="'length' must be an int >= 1"):
        effect(0, 0, 0, 1)


def test_a_shared_save_another_index_placed_is_refused_not_left_out() -> None:
    """Given the wrong index, every save looked superseded: left out, copied nowhere, and
    the call said ok while the right index kept an entry whose slot was never written."""
    index, other = PrefixSnapshotIndex(2), PrefixSnapshotIndex(2)
    pool = FakeSnapshotPool(2, 1, shared_slots=2)
    pool.live = ["row 0 after 2", "row 1 after 2"]
    plan = index.plan_prefill(0, [1, 2, 3, 4], publish_at=[2])
    with pytest.raises(InvalidArgumentError, match=r"'effects\[0\]' .* 'prefix_index' placed"):
        apply_effects(pool, [SsmPrefixSave(1, 1, 2, 5), *plan.saves], [], prefix_index=other)
    assert pool.stored_shared_ticket(plan.saves[0].slot) is None  # nothing copied
    assert apply_effects(pool, plan.saves, [], prefix_index=index).ok


def test_a_save_applied_long_after_its_entry_left_is_refused() -> None:
    """The index remembers the last 64 x capacity (at least 16) entries that left; a save of
    one that left before those is refused, not taken for another index's without a word."""
    index = PrefixSnapshotIndex(1)
    pool = FakeSnapshotPool(1, 1, shared_slots=1)
    stale = index.publish(0, [1, 2, 3], 2)
    assert stale is not None
    for n in range(64 * 16):
        index.publish(0, [9, n, 9], 2)  # each evicts the one before
    apply_effects(pool, [stale], [], prefix_index=index)  # left lately: left out
    index.publish(0, [8, 8, 8], 2)
    with pytest.raises(InvalidArgumentError, match="left long ago"):
        apply_effects(pool, [stale], [], prefix_index=index)


def test_several_rows_restore_one_shared_slot_in_one_call() -> None:
    """Sharing a prefix is several rows reading one shared slot: restores are not writes."""
    index = PrefixSnapshotIndex(1)
    pool = FakeSnapshotPool(3, 1, shared_slots=1)
    pool.live = ["after the system prompt", None, None]
    prompt = list(range(8))
    save = index.publish(0, prompt, 8)
    assert save is not None
    apply_effects(pool, [save], [], prefix_index=index)
    restores = [SsmPrefixRestore(seq, save.slot, 8, save.ticket) for seq in (1, 2)]
    apply_effects(pool, restores, [], prefix_index=index)
    assert pool.live == ["after the system prompt"] * 3


def test_a_bad_shared_restore_batch_is_named_for_what_is_wrong_not_for_sharing() -> None:
    """Two rows reading one shared slot are fine; the error names the row out of range."""
    pool = FakeSnapshotPool(3, 1, shared_slots=1)
    restores = [SsmPrefixRestore(seq, 0, 8, 1) for seq in (1, 2, 7)]
    with pytest.raises(InvalidArgumentError, match=r"'restores\[2\]\.seq' must be < the pool"):
        pool.restore_shared(restores)


def test_scheduler_step_decides_what_only_the_scheduler_holds_before_any_pool() -> None:
    """What a tensor-parallel scheduler runs before broadcasting: the superseded shared save
    left out, a save of another index or a saved row without a ring refused, the rest kept
    in order."""
    index = PrefixSnapshotIndex(1)
    first = index.publish(0, [1, 2, 3], 3)
    second = index.publish(1, [7, 8, 9], 3)  # evicts the first
    assert first is not None
    assert second is not None
    restore = SsmSnapshotRestore(2, 0, 4, 5)
    step = scheduler_step([restore, first, second], [SsmDecodeRing(2)] * 3, index)
    assert step == [restore, second]
    with pytest.raises(InvalidArgumentError, match=r"'effects\[0\]' .* 'prefix_index' placed"):
        scheduler_step([SsmPrefixSave(1, 0, 3, 999)], None, index)
    with pytest.raises(InvalidArgumentError, match="each row at most once"):
        scheduler_step([first, attrs.evolve(second, seq=0)], None, index)
    with pytest.raises(InvalidArgumentError, match="got none for seq 2"):
        scheduler_step([SsmSnapshotSave(2, 0, 4, 5)], {0: SsmDecodeRing(2)}, None)
