"""Rollback in two steps: ``plan_rollback`` decides and changes nothing, ``commit_rollback``
truncates the ring to the plan; the grammar transaction plans once and commits that plan."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ssm_rollback import (
    InvalidArgumentError,
    OutOfOrderError,
    RollbackDeclined,
    RollbackPlan,
    SsmDecodeRing,
    SsmSnapshotRestore,
    SsmSnapshotSave,
    StaleSnapshotError,
    commit_rollback,
    commit_verified_batch,
    plan_rollback,
    rollback_to_boundary,
)
from ssm_rollback._core import rollback as core_rollback
from ssm_rollback.backends.fake import FakeSnapshotPool


def _ring(capacity: int, positions: list[int]) -> SsmDecodeRing:
    ring = SsmDecodeRing(capacity)
    for position in positions:
        ring.record(position)
    return ring


@given(
    capacity=st.integers(0, 4),
    recorded=st.lists(st.integers(0, 40), max_size=8, unique=True).map(sorted),
    extra=st.lists(st.integers(0, 40), max_size=6),
    at_most=st.none() | st.integers(0, 45),
    hybrid=st.booleans(),
)
def test_plan_then_commit_is_rollback_to_boundary(
    capacity: int, recorded: list[int], extra: list[int], at_most: int | None, hybrid: bool
) -> None:
    boundaries = sorted(set(recorded) | set(extra))
    current_len = max(boundaries, default=0) + 3
    planned, direct = _ring(capacity, recorded), _ring(capacity, recorded)
    before = planned.entries
    plan = plan_rollback(
        planned, boundaries, seq=1, current_len=current_len, at_most=at_most, hybrid=hybrid
    )
    assert planned.entries == before  # the plan moved nothing
    expected = rollback_to_boundary(
        direct, boundaries, seq=1, current_len=current_len, at_most=at_most, hybrid=hybrid
    )
    assert type(plan) is type(expected)
    if isinstance(plan, RollbackPlan):
        assert isinstance(expected, RollbackPlan)
        assert (plan.keep_len, plan.tokens_dropped) == (expected.keep_len, expected.tokens_dropped)
        assert [(e.slot, e.token_position) for e in plan.effects] == [
            (e.slot, e.token_position) for e in expected.effects
        ]
        commit_rollback(planned, plan)
    assert planned.snapshot_positions() == direct.snapshot_positions()
    assert planned.next_slot == direct.next_slot


def test_a_plan_the_ring_no_longer_fits_is_refused_and_changes_nothing() -> None:
    ring = _ring(2, [3, 6])
    plan = plan_rollback(ring, [3, 6], seq=0, current_len=8)
    assert isinstance(plan, RollbackPlan)
    assert plan.keep_len == 6
    ring.truncate_after(3)
    ring.record(6)  # the same position again: a new snapshot, a new ticket
    before = ring.entries
    with pytest.raises(StaleSnapshotError, match="'plan' must still fit the ring"):
        commit_rollback(ring, plan)
    assert ring.entries == before


def test_another_rings_plan_is_refused() -> None:
    ring, other = _ring(2, [3, 6]), _ring(2, [3, 6])
    plan = plan_rollback(other, [3, 6], seq=0, current_len=8)
    assert isinstance(plan, RollbackPlan)
    with pytest.raises(StaleSnapshotError):
        commit_rollback(ring, plan)
    assert ring.snapshot_positions() == (3, 6)


def test_a_plan_built_by_hand_to_another_shape_is_refused_and_changes_nothing() -> None:
    """A restore to 5 under keep_len 9 truncated the ring to 5; a save as the effect truncated
    it too; two effects raised ValueError and a non-effect AttributeError."""
    ring = _ring(3, [2, 5, 9])
    real = plan_rollback(ring, [2, 5, 9], seq=0, current_len=12)
    assert isinstance(real, RollbackPlan)
    entry = ring.entry_for(5)
    assert entry is not None
    at_5 = SsmSnapshotRestore(0, entry.snapshot_slot, 5, entry.ticket)
    forged = [
        RollbackPlan(0, 9, 3, (at_5,)),  # keep_len 9, restore at 5
        RollbackPlan(1, 5, 7, (at_5,)),  # another row's plan
        RollbackPlan(0, 5, 7, (SsmSnapshotSave(0, entry.snapshot_slot, 5, entry.ticket),)),  # type: ignore[arg-type]
        RollbackPlan(0, 5, 7, (at_5, at_5)),
        RollbackPlan(0, 5, 7, (3,)),  # type: ignore[arg-type]
        RollbackPlan(0, 5, 7, [at_5]),  # type: ignore[arg-type]
    ]
    for plan in forged:
        with pytest.raises(InvalidArgumentError, match="'plan' must be a RollbackPlan from plan_"):
            commit_rollback(ring, plan)
        assert ring.snapshot_positions() == (2, 5, 9)
    elsewhere = SsmSnapshotRestore(0, (entry.snapshot_slot + 1) % 3, 5, entry.ticket)
    with pytest.raises(StaleSnapshotError, match="'plan' must still fit the ring"):
        commit_rollback(ring, RollbackPlan(0, 5, 7, (elsewhere,)))  # its ticket, another slot
    assert ring.snapshot_positions() == (2, 5, 9)
    commit_rollback(ring, RollbackPlan(0, 5, 7, (at_5,)))  # one of the shape plan_rollback makes
    assert ring.snapshot_positions() == (2, 5)


def test_commit_takes_only_a_ring_not_one_alike() -> None:
    """Something with a ``truncate_after`` is not a ring: refused, its method never called."""
    ring = _ring(2, [3, 6])
    plan = plan_rollback(ring, [3, 6], seq=0, current_len=8)
    assert isinstance(plan, RollbackPlan)
    calls: list[int] = []
    alike = SimpleNamespace(truncate_after=calls.append, entry_for=ring.entry_for)
    with pytest.raises(InvalidArgumentError, match="'ring' must be an SsmDecodeRing"):
        commit_rollback(alike, plan)  # type: ignore[arg-type]
    assert calls == []


@pytest.mark.parametrize(
    "plan", [None, RollbackDeclined(0, core_rollback.DeclineReason.NO_BOUNDARY)]
)
def test_commit_takes_only_a_plan(plan: object) -> None:
    ring = _ring(2, [3])
    with pytest.raises(InvalidArgumentError, match="'plan' must be a RollbackPlan"):
        commit_rollback(ring, plan)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="'ring' must be an SsmDecodeRing"):
        commit_rollback(None, plan)  # type: ignore[arg-type]


def test_a_pure_attention_plan_commits_without_touching_the_ring() -> None:
    ring = _ring(2, [3, 6])
    plan = plan_rollback(ring, [2, 5], seq=0, current_len=8, hybrid=False)
    assert isinstance(plan, RollbackPlan)
    assert (plan.keep_len, plan.effects) == (5, ())
    commit_rollback(ring, plan)
    assert ring.snapshot_positions() == (3, 6)


def test_the_grammar_transaction_searches_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """It plans, moves, then commits that plan: the boundary search runs once."""
    pytest.importorskip("torch")
    from ssm_rollback.integrations.grammar import rollback_with_grammar

    searches: list[object] = []
    search = core_rollback._find

    def counted(*arguments: object) -> int | None:
        searches.append(arguments)
        return search(*arguments)  # type: ignore[arg-type]

    monkeypatch.setattr(core_rollback, "_find", counted)

    class Matcher:
        vocab_size = 16
        rollback_limit = 8

        def rollback(self, n: int) -> None:
            self.rollback_limit -= n

        def accept_token(self, token: int) -> bool:
            return True

        def fill_next_token_bitmask(self, bitmask: object, index: int = 0) -> None:
            pass

        def is_terminated(self) -> bool:
            return False

    ring = _ring(2, [3, 6])
    pool = FakeSnapshotPool(1, 2)
    pool.live[0] = "after 3"
    pool.save([ring_save(ring, 3)])
    plan = rollback_with_grammar(ring, [3], Matcher(), seq=0, tokens=[1] * 8, pool=pool)
    assert isinstance(plan, RollbackPlan)
    assert plan.keep_len == 3
    assert len(searches) == 1
    assert ring.snapshot_positions() == (3,)
    assert pool.live[0] == "after 3"


def ring_save(ring: SsmDecodeRing, position: int) -> SsmSnapshotSave:
    entry = ring.entry_for(position)
    assert entry is not None
    return SsmSnapshotSave(0, entry.snapshot_slot, position, entry.ticket)


def test_a_verify_batch_whose_rows_share_a_ring_is_atomic() -> None:
    """Two rows on one ring, the second behind the first: refused, and no ring changed."""
    shared = SsmDecodeRing(4)
    rings = {0: shared, 1: shared}
    with pytest.raises(OutOfOrderError, match="row 0's, on the same ring earlier in this step"):
        commit_verified_batch(
            rings,
            first_positions=[5, 2],
            accepted=[0, 0],
            is_boundary=[[True], [True]],
            in_thinking=[[False], [False]],
        )
    assert shared.entries == ()
    shared.check_valid()
