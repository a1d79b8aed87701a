"""``PrefixSnapshotIndex`` against a brute-force reference: a list of entries and linear scans."""

from __future__ import annotations

import random
from collections.abc import Sequence
from types import SimpleNamespace

import attrs
import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from ssm_rollback import (
    InvalidArgumentError,
    PrefillPlan,
    PrefixEntry,
    PrefixHold,
    PrefixSnapshotIndex,
    SsmPrefixRestore,
    SsmPrefixSave,
)
from ssm_rollback._core.prefix._trie import Trie


@attrs.define
class _Ref:
    tokens: tuple[int, ...]
    slot: int
    pins: int = 0
    uses: int = 1
    used: int = 0
    base: int = 0
    demoted: bool = False
    first_use: int = 16  # sixteenths of a use, while a live entry extends it


@attrs.define
class ReferenceIndex:
    """The plainest model of SPEC 13's index: a list, scanned."""

    capacity: int
    eviction: str
    entries: list[_Ref] = attrs.field(factory=list)
    plans: dict[int, list[_Ref]] = attrs.field(factory=dict)
    clock: int = 0
    level: int = 0
    ghosts: dict[int, int] = attrs.field(factory=dict)
    branch_hits: int = 0
    interiors: int = 0
    stats: dict[str, int] = attrs.field(
        factory=lambda: dict.fromkeys(
            ("hits", "misses", "tokens_reused", "published", "evicted", "declined"), 0
        )
    )

    def match(self, tokens: Sequence[int]) -> _Ref | None:
        fits = [
            e
            for e in self.entries
            if len(e.tokens) <= len(tokens) - 1 and tuple(tokens[: len(e.tokens)]) == e.tokens
        ]
        return max(fits, key=lambda e: len(e.tokens), default=None)

    def _at(self, tokens: Sequence[int], length: int) -> _Ref | None:
        return next((e for e in self.entries if e.tokens == tuple(tokens[:length])), None)

    def _touch(self, e: _Ref) -> None:
        self.clock += 1
        e.used = self.clock
        e.base = self.level
        e.demoted = False

    def _extended(self, e: _Ref) -> bool:
        """Whether a live entry extends ``e``."""
        n = len(e.tokens)
        return any(len(o.tokens) > n and o.tokens[:n] == e.tokens for o in self.entries)

    def margin(self, e: _Ref) -> int:
        """Its length less that of its longest live proper prefix (0 when none)."""
        n = len(e.tokens)
        below = [
            len(o.tokens)
            for o in self.entries
            if len(o.tokens) < n and e.tokens[: len(o.tokens)] == o.tokens
        ]
        return n - max(below, default=0)

    def priority(self, e: _Ref) -> int:
        """GreedyDual: the level at its last use plus margin x uses (SPEC 13's "benefit"), in
        sixteenths, the first use discounted while a live entry extends it."""
        first = e.first_use if self._extended(e) else 16
        return e.base + self.margin(e) * (16 * (e.uses - 1) + first)

    def _now_extended(self, before: list[_Ref]) -> None:
        """Entries a placement made extended: their first use takes the rate of hits at a
        branch per entry ever extended (Laplace's rule), at most a whole use."""
        for e in self.entries:
            if self._extended(e) and not any(e is o for o in before):
                e.first_use = min(16, 16 * (self.branch_hits + 1) // (self.interiors + 2))
                self.interiors += 1

    def _place(self, tokens: Sequence[int], length: int, own: Sequence[_Ref] = ()) -> _Ref | None:
        if len(self.entries) == self.capacity:
            # A plan may evict what it placed itself for an earlier position.
            free = [e for e in self.entries if not e.pins or any(e is o for o in own)]
            if not free:
                self.stats["declined"] += 1
                return None
            demoted = [e for e in free if e.demoted] or free  # demoted ones go first
            if self.eviction == "lru":
                victim = min(demoted, key=lambda e: e.used)
            else:
                victim = min(demoted, key=lambda e: (self.priority(e), e.used))
                if not victim.demoted:
                    self.level = max(self.level, self.priority(victim))
                self.ghosts.pop(hash(victim.tokens), None)
                self.ghosts[hash(victim.tokens)] = victim.uses
                if len(self.ghosts) > 4 * self.capacity:
                    del self.ghosts[next(iter(self.ghosts))]
            self.entries.remove(victim)
            self.stats["evicted"] += 1
        slot = min(set(range(self.capacity)) - {e.slot for e in self.entries})
        e = _Ref(tuple(tokens[:length]), slot)
        e.uses = self.ghosts.pop(hash(e.tokens), 1)
        self._touch(e)
        extended = [o for o in self.entries if self._extended(o)]
        self.entries.append(e)
        self._now_extended(extended)
        self.stats["published"] += 1
        return e

    def plan(
        self, tokens: Sequence[int], publish_at: Sequence[int]
    ) -> tuple[_Ref | None, list[int | None], list[_Ref]]:
        hit = self.match(tokens)
        pinned = []
        if hit is None:
            self.stats["misses"] += 1
        else:
            self.stats["hits"] += 1
            self.stats["tokens_reused"] += len(hit.tokens)
            frontier = not self._extended(hit)
            last_use = (hit.used, hit.base)
            self._touch(hit)
            hit.uses += not frontier  # a use only where the request branches off (rule 7)
            self.branch_hits += not frontier
            hit.pins += 1
            pinned.append(hit)
        start = 0 if hit is None else len(hit.tokens)
        saves: list[int | None] = []
        own: list[_Ref] = []
        for p in sorted(set(publish_at)):
            if p <= start:
                continue
            live = self._at(tokens, p)
            if live is not None:
                self._touch(live)
                continue
            placed = self._place(tokens, p, own)
            if placed is not None:
                placed.pins += 1
                own.append(placed)
        if hit is not None and frontier and self._extended(hit) and self.eviction == "benefit":
            hit.used, hit.base = last_use  # passed through: the traffic moved on
        for e in own:
            if any(e is o for o in self.entries):
                pinned.append(e)
                saves.append(e.slot)
        return hit, saves, pinned

    def publish(self, tokens: Sequence[int], length: int) -> int | None:
        live = self._at(tokens, length)
        if live is not None:
            self._touch(live)
            return None
        placed = self._place(tokens, length)
        return None if placed is None else placed.slot

    def release(self, pinned: list[_Ref]) -> None:
        for e in pinned:
            if e in self.entries:
                e.pins -= 1

    def discard(self, slot: int) -> None:
        e = next(e for e in self.entries if e.slot == slot)
        e.pins = 0
        self.entries.remove(e)

    def demote(self, slot: int) -> None:
        next(e for e in self.entries if e.slot == slot).demoted = True


TOKENS = st.lists(st.integers(0, 3), min_size=1, max_size=12)


class PrefixIndexMachine(RuleBasedStateMachine):
    """Random plans, publishes, releases, discards and matches, compared step by step."""

    @initialize(capacity=st.integers(0, 6), eviction=st.sampled_from(["lru", "benefit"]))
    def start(self, capacity: int, eviction: str) -> None:
        self.index = PrefixSnapshotIndex(capacity, eviction=eviction)  # type: ignore[arg-type]
        self.ref = ReferenceIndex(capacity, eviction)
        self.plans: list[tuple[PrefillPlan | PrefixHold, list[_Ref]]] = []
        self.tickets: set[int] = set()

    @rule(tokens=TOKENS)
    def match(self, tokens: list[int]) -> None:
        found, expected = self.index.match(tokens), self.ref.match(tokens)
        assert (None if found is None else (found.length, found.slot)) == (
            None if expected is None else (len(expected.tokens), expected.slot)
        )

    @rule(tokens=TOKENS, data=st.data())
    def plan(self, tokens: list[int], data: st.DataObject) -> None:
        publish_at = data.draw(st.lists(st.integers(0, len(tokens) - 1), max_size=4))
        plan = self.index.plan_prefill(3, tokens, publish_at=publish_at)
        hit, saves, pinned = self.ref.plan(tokens, publish_at)
        if hit is None:
            assert plan.hit is None
            assert plan.start == 0
        else:
            assert plan.hit is not None
            assert (plan.hit.entry.length, plan.hit.entry.slot) == (len(hit.tokens), hit.slot)
            assert plan.hit.restore == SsmPrefixRestore(
                3, hit.slot, len(hit.tokens), plan.hit.entry.ticket
            )
        assert [s.slot for s in plan.saves] == saves
        assert plan.chunks[-1].end == len(tokens)
        for save in plan.saves:
            assert save.ticket not in self.tickets  # rule 5: a fresh ticket per placement
            self.tickets.add(save.ticket)
        self.plans.append((plan, pinned))

    @precondition(lambda self: bool(self.plans))
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        k = data.draw(st.integers(0, len(self.plans) - 1))
        plan, pinned = self.plans.pop(k)
        self.index.release(plan)
        self.ref.release(pinned)

    @rule(tokens=TOKENS, data=st.data())
    def publish(self, tokens: list[int], data: st.DataObject) -> None:
        length = data.draw(st.integers(1, len(tokens)))
        save = self.index.publish(5, tokens, length)
        slot = self.ref.publish(tokens, length)
        assert (None if save is None else save.slot) == slot
        if save is not None:
            assert save.ticket not in self.tickets
            self.tickets.add(save.ticket)

    @precondition(lambda self: len(self.index) > 0)
    @rule(data=st.data())
    def discard(self, data: st.DataObject) -> None:
        entry = data.draw(st.sampled_from(self.index.entries()))
        self.index.discard(entry)
        self.ref.discard(entry.slot)

    @precondition(lambda self: len(self.index) > 0)
    @rule(data=st.data())
    def demote(self, data: st.DataObject) -> None:
        entry = data.draw(st.sampled_from(self.index.entries()))
        self.index.demote(entry)
        self.ref.demote(entry.slot)

    @precondition(lambda self: len(self.index) > 0)
    @rule(data=st.data())
    def hold(self, data: st.DataObject) -> None:
        """The application's pin (rule 6): released like a plan, never a use."""
        entry = data.draw(st.sampled_from(self.index.entries()))
        held = next(e for e in self.ref.entries if e.slot == entry.slot)
        held.pins += 1
        self.plans.append((self.index.hold(entry), [held]))

    @invariant()
    def agrees(self) -> None:
        if not hasattr(self, "index"):
            return
        self.index.check_valid()
        assert {(e.length, e.slot, self.index.tokens_of(e)) for e in self.index.entries()} == {
            (len(e.tokens), e.slot, e.tokens) for e in self.ref.entries
        }
        assert attrs.asdict(self.index.stats) == self.ref.stats
        if self.ref.eviction == "benefit":  # the order itself, not only the victims it picks
            order = self.index._order
            assert (order._branch_hits, order._interiors) == (
                self.ref.branch_hits,
                self.ref.interiors,
            )
            assert {s: order.key(live)[1] for s, live in self.index._by_slot.items()} == {
                e.slot: self.ref.priority(e) for e in self.ref.entries
            }


TestPrefixIndexMachine = PrefixIndexMachine.TestCase


def test_fifty_thousand_random_operations_agree_with_the_reference() -> None:
    """The same machine's operations, seeded, 50,000 of them over fresh indices."""
    rng = random.Random(13)
    done = 0
    while done < 50_000:
        machine = PrefixIndexMachine()
        machine.start(rng.randint(0, 6), rng.choice(["lru", "benefit"]))
        for _ in range(200):
            tokens = [rng.randint(0, 3) for _ in range(rng.randint(1, 12))]
            op = rng.random()
            if op < 0.35:
                publish_at = [rng.randrange(len(tokens)) for _ in range(rng.randint(0, 4))]
                machine.plan(tokens, _Fixed([publish_at]))
            elif op < 0.55 and machine.plans:
                machine.release(_Fixed([rng.randrange(len(machine.plans))]))
            elif op < 0.8:
                machine.publish(tokens, _Fixed([rng.randint(1, len(tokens))]))
            elif op < 0.85 and len(machine.index):
                machine.discard(_Fixed([rng.choice(machine.index.entries())]))
            elif op < 0.9 and len(machine.index):
                machine.demote(_Fixed([rng.choice(machine.index.entries())]))
            elif op < 0.93 and len(machine.index):
                machine.hold(_Fixed([rng.choice(machine.index.entries())]))
            else:
                machine.match(tokens)
            machine.agrees()
            done += 1


@attrs.define
class _Fixed:
    """``data.draw`` for the seeded driver: hands out the given values in order."""

    values: list[object]

    def draw(self, strategy: object, label: object = None) -> object:
        return self.values.pop(0)


def test_a_slot_reused_by_another_prefix_is_never_restored_for_the_old_one() -> None:
    index = PrefixSnapshotIndex(1)
    old = index.publish(0, [1, 2, 3, 9], 3)
    assert old is not None
    new = index.publish(0, [4, 5, 6, 9], 3)  # evicts [1, 2, 3]: same slot, new ticket
    assert new is not None
    assert new.slot == old.slot
    assert new.ticket != old.ticket
    assert index.match([1, 2, 3, 9]) is None
    plan = index.plan_prefill(1, [4, 5, 6, 9])
    assert plan.hit is not None
    assert plan.hit.restore.ticket == new.ticket


def test_a_pinned_entry_is_never_evicted() -> None:
    index = PrefixSnapshotIndex(1)
    assert index.publish(0, [1, 2, 3, 9], 3) is not None
    plan = index.plan_prefill(0, [1, 2, 3, 4])  # a hit: pinned until released
    assert plan.hit is not None
    assert index.publish(0, [7, 7, 7, 7], 2) is None  # declined, not evicted
    assert index.stats.declined == 1
    assert index.match([1, 2, 3, 4]) == plan.hit.entry
    index.release(plan)
    assert index.publish(0, [7, 7, 7, 7], 2) is not None
    with pytest.raises(InvalidArgumentError, match="not yet released"):
        index.release(plan)


def test_a_held_entry_is_never_evicted_until_its_hold_is_released() -> None:
    """``hold`` pins an entry for the application (an agent's answer end while its tool runs):
    placements evict others or are declined; the hold is released once, like a plan."""
    index = PrefixSnapshotIndex(2, eviction="benefit")
    index.publish(0, [1, 2, 3, 9], 3)
    index.publish(0, [4, 5, 6, 9], 3)
    older, newer = index.entries()
    hold = index.hold(older)  # the least recently used: next to go, but held
    assert isinstance(hold, PrefixHold)
    assert hold.entry == older
    assert index.publish(0, [7, 7, 7, 7], 2) is not None  # evicts the unheld one
    assert older in index.entries()
    assert newer not in index.entries()
    second = index.hold(index.entries()[1])
    assert index.publish(0, [8, 8, 8], 2) is None  # every slot held: declined, not forced
    assert index.stats.declined == 1
    index.check_valid()
    index.release(hold)
    assert index.publish(0, [8, 8, 8], 2) is not None
    assert older not in index.entries()
    for stale in (hold, attrs.evolve(second, entry=older)):  # released, or forged
        with pytest.raises(
            InvalidArgumentError, match="'plan' must be a PrefillPlan or PrefixHold"
        ):
            index.release(stale)
    with pytest.raises(InvalidArgumentError, match="'entry' must be a live entry"):
        index.hold(older)  # evicted: nothing to hold
    index.discard(second.entry)  # a failed save: its pins are void, its hold still releases
    index.release(second)
    index.check_valid()


def test_a_hold_is_not_a_use() -> None:
    """Holding keeps the entry's place in the eviction order: released, it goes as before."""
    index = PrefixSnapshotIndex(2)
    index.publish(0, [1, 2, 9], 2)
    index.publish(0, [3, 4, 9], 2)
    older = index.entries()[0]
    index.release(index.hold(older))
    index.publish(0, [5, 6, 9], 2)
    assert older not in index.entries()


def test_a_discarded_entry_is_gone() -> None:
    index = PrefixSnapshotIndex(2)
    save = index.publish(0, [1, 2, 3], 2)
    assert isinstance(save, SsmPrefixSave)
    (entry,) = index.entries()
    index.discard(entry)
    assert index.match([1, 2, 3]) is None
    with pytest.raises(InvalidArgumentError, match="'entry' must be a live entry"):
        index.discard(entry)
    index.check_valid()


def test_discarding_a_stale_entry_leaves_the_slots_new_owner() -> None:
    index = PrefixSnapshotIndex(1)
    assert index.publish(0, [1, 2, 3], 2) is not None
    (old,) = index.entries()
    index.discard(old)
    assert index.publish(0, [7, 8, 9], 3) is not None
    (new,) = index.entries()
    assert new.slot == old.slot
    with pytest.raises(InvalidArgumentError, match="'entry' must be a live entry"):
        index.discard(old)
    assert index.entries() == (new,)
    assert index.match([7, 8, 9, 1]) == new
    index.check_valid()


def test_the_tree_refuses_to_remove_a_prefix_it_only_branches_at() -> None:
    trie: Trie[str] = Trie()
    trie.put([1, 2, 3], 3, "a")
    trie.put([1, 2, 4], 3, "b")  # a valueless node now stands at [1, 2]
    with pytest.raises(KeyError):
        trie.remove([1, 2], 2)
    with pytest.raises(KeyError):
        trie.remove([1, 2, 5], 3)
    trie.check()
    assert sorted(trie.items()) == [([1, 2, 3], "a"), ([1, 2, 4], "b")]
    trie.remove([1, 2, 3], 3)
    trie.check()
    assert list(trie.items()) == [([1, 2, 4], "b")]


def test_one_token_is_always_left_to_compute() -> None:
    index = PrefixSnapshotIndex(2)
    index.publish(0, [1, 2, 3], 3)
    assert index.match([1, 2, 3]) is None
    assert index.match([1, 2, 3, 4]) == PrefixEntry(3, 0, index.entries()[0].ticket)


def test_a_disabled_index_misses_and_declines() -> None:
    index = PrefixSnapshotIndex(0)
    assert index.publish(0, [1, 2], 1) is None
    plan = index.plan_prefill(0, [1, 2, 3], publish_at=[1, 2])
    assert plan.hit is None
    assert plan.saves == ()
    assert index.stats.declined == 3


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda i: PrefixSnapshotIndex(-1), "'capacity'"),
        (lambda i: PrefixSnapshotIndex(2, eviction="fifo"), "'eviction'"),  # type: ignore[arg-type]
        (lambda i: i.plan_prefill(0, [1, 2], publish_at=[2]), "'publish_at'"),
        (lambda i: i.plan_prefill(-1, [1, 2]), "'seq'"),
        (lambda i: i.plan_prefill(0, "ab"), "'tokens'"),
        (lambda i: i.publish(0, [1, 2], 3), "'length'"),
        (lambda i: i.publish(0, [1, -2], 1), r"'tokens\[1\]'"),
        (lambda i: i.release(None), "'plan'"),
        (lambda i: i.release(SimpleNamespace(pin=[1])), "'plan'"),
        (lambda i: PrefixSnapshotIndex(10**30), "'capacity' must be at most 16,777,216"),
        (lambda i: i.plan_prefill(0, []), "'tokens' must hold at least one token"),
        (lambda i: i.discard(PrefixEntry(2, [0], 1)), "'entry'"),  # type: ignore[arg-type]
        (lambda i: i.demote(PrefixEntry(2, [0], 1)), "'entry'"),  # type: ignore[arg-type]
        (lambda i: i.tokens_of(PrefixEntry(2, [0], 1)), "'entry'"),  # type: ignore[arg-type]
    ],
)
def test_bad_arguments_are_named_and_change_nothing(call: object, match: str) -> None:
    index = PrefixSnapshotIndex(2)
    index.publish(0, [1, 2, 3], 2)
    before = index.entries()
    with pytest.raises(InvalidArgumentError, match=match):
        call(index)  # type: ignore[operator]
    assert index.entries() == before
    index.check_valid()


def test_a_plan_released_must_be_the_one_handed_out() -> None:
    """A plan rebuilt with the same ``pin`` released the real one's pins; now refused."""
    index = PrefixSnapshotIndex(2)
    index.publish(0, [1, 2, 3], 2)
    plan = index.plan_prefill(0, [1, 2, 3, 4], publish_at=[3])
    forged = attrs.evolve(plan, seq=99, hit=None, chunks=())
    with pytest.raises(
        InvalidArgumentError, match="'plan' must be a PrefillPlan or PrefixHold of this index"
    ):
        index.release(forged)
    assert all(e.length in (2, 3) for e in index.entries())
    index.check_valid()
    index.release(plan)  # the real one still releases, once
    with pytest.raises(InvalidArgumentError, match="not yet released"):
        index.release(plan)
    index.check_valid()


def test_benefit_keeps_the_prompt_end_that_samples_branch_at_over_one_output_past_it() -> None:
    """Evicting an entry costs its margin over its longest live prefix, not its length.

    The prompt end (12 tokens) that best-of-n samples branch at, then one
    sample's output end past it (15): evicting the output end costs its 3
    tokens past the prompt end, evicting the prompt end costs the next
    sample its whole prompt (12 tokens, worth half of that for its first use
    while the output end extends it and no branch was seen yet). The prompt
    end stays.
    """
    index = PrefixSnapshotIndex(2, eviction="benefit")
    sample = list(range(10, 30))
    prompt_end = index.publish(0, sample, 12)
    assert index.publish(0, sample, 15) is not None
    assert index.publish(0, [7, 7, 7, 7], 3) is not None  # full: one of the two goes
    assert prompt_end is not None
    next_sample = [*sample[:12], 99, 98]
    assert index.match(next_sample) == PrefixEntry(12, prompt_end.slot, prompt_end.ticket)


def test_benefit_weighs_an_entry_by_its_whole_length_once_its_prefix_is_gone() -> None:
    """A margin follows the live entries: with its prefix dropped, an entry is worth its length."""
    index = PrefixSnapshotIndex(3, eviction="benefit")
    long = list(range(10, 16))
    shorter = index.publish(0, long, 4)
    index.publish(0, long, 6)  # 2 tokens past ``shorter``
    index.publish(0, [7, 7, 7], 3)
    assert shorter is not None
    index.discard(PrefixEntry(4, shorter.slot, shorter.ticket))  # now worth 6, not 2
    index.publish(0, [8, 8, 8, 8], 4)
    index.publish(0, [9, 9], 1)  # full: the 3-token entry goes, not the 6-token one
    assert sorted(e.length for e in index.entries()) == [1, 4, 6]
    index.check_valid()


def test_benefit_remembers_the_branches_of_a_prefix_placed_again_after_its_eviction() -> None:
    """A system prompt that sessions branched off outlives, placed again, a prefix placed once."""
    for branches, kept in ((2, True), (0, False)):
        index = PrefixSnapshotIndex(2, eviction="benefit")
        system = [1, 2, 3, 4]
        index.publish(0, [*system, 40, 41], 4)
        index.publish(0, [*system, 40, 41], 5)  # a session goes on past the system prompt
        for user in range(50, 50 + 10 * branches, 10):  # other sessions branch off it
            plan = index.plan_prefill(0, [*system, user, user + 1], publish_at=[])
            assert plan.hit is not None
            assert plan.hit.entry.length == 4
            index.release(plan)
        for junk in (9, 8, 7):
            index.publish(0, [junk] * 12, 11)
        assert index.match([*system, 1]) is None  # evicted
        index.publish(0, [*system, 70], 4)  # placed again: worth what its branches made it
        for junk in (6, 5):
            index.publish(0, [junk] * 3, 2)
        assert (index.match([*system, 1]) is not None) is kept, branches
        index.check_valid()


def test_benefit_lets_the_next_turn_pass_through_the_answer_it_extends() -> None:
    """A hit on a frontier whose plan places a longer entry on its path keeps its age.

    The conversation's traffic moved on to the new entry: the old answer end is
    evicted before an entry of equal value used after it, where counting the
    hit as a use (or as recent) would keep the stale answer end instead.
    """
    index = PrefixSnapshotIndex(3, eviction="benefit")
    turn = [1, 2, 3, 4, 5]
    answer = index.publish(0, turn, 4)
    other = index.publish(0, [20, 21, 22, 23, 24], 4)  # as valuable, used later
    assert answer is not None
    assert other is not None
    plan = index.plan_prefill(0, [*turn, 6, 7, 8, 9, 10, 11], publish_at=[10])
    assert plan.hit is not None
    assert plan.hit.entry.length == 4
    index.release(plan)
    index.publish(0, [30, 31, 32, 33, 34], 4)  # full: the passed-through answer end goes
    assert sorted(e.length for e in index.entries()) == [4, 4, 10]
    assert index.match([*turn, 99]) is None
    assert index.match([20, 21, 22, 23, 24, 99]) is not None
    index.check_valid()


def _agent_step(index: PrefixSnapshotIndex) -> None:
    """A prompt end minus one (8 tokens), the answer end 5 tokens past it, then an unrelated
    5-token entry; the index is full, and one more publish evicts."""
    step = list(range(100, 114))
    index.publish(0, step, 8)
    index.publish(0, step, 13)
    index.publish(0, [60, 61, 62, 63, 64, 65], 5)
    index.publish(0, [70, 71, 72], 2)


def test_benefit_discounts_the_first_use_of_an_entry_a_longer_one_extends() -> None:
    """The next step of an agent hits the answer end, not the prompt end minus one below it.

    With no hit at a branch seen yet, an entry that a longer live entry
    extends is worth half a use (Laplace's rule) until one hits it: the
    prompt end (8 x 1/2) goes before the answer end past it (5 x 1), which
    the traffic moving on will hit. Without the discount the answer end went.
    """
    index = PrefixSnapshotIndex(3, eviction="benefit")
    _agent_step(index)
    assert sorted(e.length for e in index.entries()) == [2, 5, 13]
    assert index.match([*range(100, 113), 99]) is not None  # the next step still hits
    index.check_valid()


def test_benefit_values_a_first_use_by_the_rate_of_hits_at_a_branch() -> None:
    """Where requests often branch off entries longer ones extend, the discount goes.

    Three sessions branch off a system prompt a longer entry extends: 3 hits
    at a branch for 1 entry that came to be extended, a rate above one. The
    prompt end minus one placed after that keeps its whole first use (8),
    and the answer end past it (5) goes instead.
    """
    index = PrefixSnapshotIndex(5, eviction="benefit")
    system = [1, 2, 3]
    index.publish(0, [*system, *range(200, 230)], 3)
    index.publish(0, [*system, *range(200, 230)], 30)
    for user in (40, 50, 60):
        plan = index.plan_prefill(0, [*system, user, user + 1], publish_at=[])
        assert plan.hit is not None
        index.release(plan)
    _agent_step(index)
    assert sorted(e.length for e in index.entries()) == [2, 3, 5, 8, 30]
    index.check_valid()


def test_a_prefix_that_gives_all_its_kids_to_a_new_entry_is_not_extended_again() -> None:
    """A prefix that gives all its kids to an entry placed under them still has kids.

    Publishing 2, 5 and then 3 tokens of one list extends only 3 (which 5
    extends now): 2 stayed extended. Counting 2 a second time halved its
    first use (rule 7), and the equally valuable, older root [9] stayed
    where it should have gone.
    """
    index = PrefixSnapshotIndex(4, eviction="benefit")
    long = [1, 2, 3, 4, 5, 6]
    index.publish(0, [9, 9], 1)  # a root worth 1 x 16, used first
    for length in (2, 5, 3):
        index.publish(0, long, length)
    index.discard(next(e for e in index.entries() if e.length == 3))
    index.publish(0, [7, 7, 7, 7], 3)  # the last free slot
    index.publish(0, [6, 6], 1)  # full: the least valuable goes, the older on a tie
    assert sorted(index.tokens_of(e) for e in index.entries()) == [
        (1, 2),  # 2 tokens x a first use of 8/16 (Laplace: no hit at a branch, 1 extended)
        (1, 2, 3, 4, 5),
        (6,),
        (7, 7, 7),
    ]
    index.check_valid()


def test_benefit_counts_a_hit_at_a_branch_as_a_use() -> None:
    """A regenerated answer hits the prompt end that an earlier answer extends: a use."""
    index = PrefixSnapshotIndex(3, eviction="benefit")
    prompt = [1, 2, 3, 4, 5]
    index.publish(0, [*prompt, 6, 7], 4)  # the prompt end minus one
    index.publish(0, [*prompt, 6, 7], 6)  # the first answer's end extends it
    index.publish(0, [20, 21, 22, 23, 24], 4)  # as valuable, used later
    plan = index.plan_prefill(0, [*prompt, 8, 9], publish_at=[])  # a regeneration branches
    index.release(plan)
    index.publish(0, [30, 31, 32, 33, 34, 35, 36], 6)  # full: the lone 2-token margin goes
    index.publish(0, [40, 41, 42, 43, 44], 4)  # full again: the entry hit at a branch stays
    assert index.match([*prompt, 99]) is not None
    assert index.match([20, 21, 22, 23, 24, 99]) is None
    index.check_valid()


@pytest.mark.parametrize(("eviction", "kept"), [("lru", [4, 5]), ("benefit", [4, 5])])
def test_a_plan_of_more_positions_than_slots_keeps_its_longest_not_its_first(
    eviction: str, kept: list[int]
) -> None:
    """Its own earlier publishes make way (their saves left out), instead of declines.

    ``"benefit"`` keeps the same pair: with no hit at a branch seen yet, an
    entry a longer one extends is worth a fraction of a use (rule 7), so 3
    below 5 would be worth less than 4 below 5 is.
    """
    index = PrefixSnapshotIndex(2, eviction=eviction)  # type: ignore[arg-type]
    plan = index.plan_prefill(0, [5, 6, 7, 8, 9, 10], publish_at=[1, 2, 3, 4, 5])
    assert [save.length for save in plan.saves] == kept
    assert [chunk.end for chunk in plan.chunks] == [*kept, 6]
    assert index.stats.declined == 0
    assert index.publish(1, [1, 2, 3], 2) is None  # still pinned by the plan for the rest
    index.release(plan)
    index.check_valid()


def test_a_publish_of_length_0_is_refused_naming_it() -> None:
    index = PrefixSnapshotIndex(2)
    with pytest.raises(InvalidArgumentError, match=r"'length' must be in \[1, len\(tokens\) 3\]"):
        index.publish(0, [1, 2, 3], 0)
    assert index.entries() == ()


def test_a_plan_asked_to_publish_at_its_hit_saves_nothing_there() -> None:
    index = PrefixSnapshotIndex(4)
    first = index.publish(0, list(range(8)), 8)
    assert first is not None
    plan = index.plan_prefill(1, [*range(8), 50, 51, 52, 53], publish_at=[8, 10])
    assert plan.hit is not None
    assert plan.hit.entry.length == 8
    assert [s.length for s in plan.saves] == [10]
    index.release(plan)
    index.check_valid()


@pytest.mark.parametrize("eviction", ["lru", "benefit"])
def test_a_demoted_entry_is_evicted_before_any_other(eviction: str) -> None:
    index = PrefixSnapshotIndex(2, eviction=eviction)  # type: ignore[arg-type]
    assert index.publish(0, [1, 1, 1, 1, 1, 1], 6) is not None  # older, and worth more
    assert index.publish(0, [2, 2, 9], 2) is not None
    newer = index.match([2, 2, 9])
    assert newer is not None
    index.demote(newer)
    assert index.publish(0, [3, 3, 9], 2) is not None
    assert index.match([2, 2, 9]) is None  # the demoted one went
    assert index.match([1, 1, 1, 1, 1, 1, 9]) is not None
    index.check_valid()


def test_a_demoted_entry_stays_matchable_and_a_hit_makes_it_ordinary() -> None:
    index = PrefixSnapshotIndex(2)
    assert index.publish(0, [1, 2, 9], 2) is not None
    assert index.publish(0, [3, 4, 9], 2) is not None
    demoted = index.match([1, 2, 9])
    assert demoted is not None
    index.demote(demoted)
    plan = index.plan_prefill(0, [1, 2, 9])  # still a hit: used again, no longer demoted
    assert plan.hit is not None
    assert plan.hit.entry == demoted
    index.release(plan)
    assert index.publish(0, [5, 6, 9], 2) is not None  # LRU again: [3, 4] goes
    assert index.match([3, 4, 9]) is None
    assert index.match([1, 2, 9]) == demoted


def test_demoted_lists_what_is_still_demoted_until_a_hit_or_a_publish() -> None:
    index = PrefixSnapshotIndex(4)
    for tokens in ([1, 2, 9], [3, 4, 9], [5, 6, 9]):
        assert index.publish(0, tokens, 2) is not None
    one, two, three = (index.match(t) for t in ([1, 2, 9], [3, 4, 9], [5, 6, 9]))
    assert one is not None and two is not None and three is not None  # noqa: PT018
    assert index.demoted() == ()
    for entry in (three, one, two):
        index.demote(entry)
    assert index.demoted() == (one, two, three)  # by slot
    plan = index.plan_prefill(0, [1, 2, 9])  # a hit: ordinary again
    index.release(plan)
    assert index.publish(0, [3, 4, 9], 2) is None  # a publish of it: the same
    assert index.demoted() == (three,)


def test_a_pinned_demoted_entry_is_not_evicted() -> None:
    index = PrefixSnapshotIndex(1)
    assert index.publish(0, [1, 2, 9], 2) is not None
    plan = index.plan_prefill(0, [1, 2, 9])
    assert plan.hit is not None
    index.demote(plan.hit.entry)
    assert index.publish(0, [5, 6, 9], 2) is None  # declined: the only entry is pinned
    assert index.match([1, 2, 9]) == plan.hit.entry
    index.release(plan)
    assert index.publish(0, [5, 6, 9], 2) is not None


def test_demoting_an_entry_not_live_is_refused_with_nothing_changed() -> None:
    index = PrefixSnapshotIndex(2)
    assert index.publish(0, [1, 2, 9], 2) is not None
    (entry,) = index.entries()
    index.discard(entry)
    before = index.stats
    with pytest.raises(InvalidArgumentError, match="'entry' must be a live entry"):
        index.demote(entry)
    with pytest.raises(InvalidArgumentError, match="'entry' must be a live entry"):
        index.demote((2, 0, entry.ticket))  # type: ignore[arg-type]
    assert index.stats == before
    index.check_valid()
