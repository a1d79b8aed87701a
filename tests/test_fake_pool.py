"""The fake pool: the conformance suite, and what it adds (counters, faults, any value)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from ssm_rollback import SaveOutcome, SsmPrefixSave, SsmSnapshotRestore, SsmSnapshotSave
from ssm_rollback.backends.fake import FakeSnapshotPool
from ssm_rollback.testing import SnapshotPoolConformance, SnapshotPoolMachine


class TestFakePoolConformance(SnapshotPoolConformance[FakeSnapshotPool]):
    def make_pool(self, num_sequences: int, slots_per_sequence: int) -> FakeSnapshotPool:
        return FakeSnapshotPool(num_sequences, slots_per_sequence)

    def set_live(self, pool: FakeSnapshotPool, seq: int, value: int) -> None:
        pool.live[seq] = ("state", value)

    def get_live(self, pool: FakeSnapshotPool, seq: int) -> int:
        state = pool.live[seq]
        assert isinstance(state, tuple)
        marker = state[1]
        assert isinstance(marker, int)
        return marker

    def fail_saves(
        self, pool: FakeSnapshotPool, predicate: Callable[[SsmSnapshotSave], bool]
    ) -> bool:
        pool.fail_when(predicate)
        return True

    def set_intermediate(self, pool: FakeSnapshotPool, seq: int, values: list[int]) -> bool:
        pool.intermediate[seq] = [("state", value) for value in values]
        return True

    def make_shared_pool(
        self, num_sequences: int, slots_per_sequence: int, shared_slots: int
    ) -> FakeSnapshotPool:
        return FakeSnapshotPool(num_sequences, slots_per_sequence, shared_slots=shared_slots)

    def fail_shared_saves(
        self, pool: FakeSnapshotPool, predicate: Callable[[SsmPrefixSave], bool]
    ) -> bool:
        pool.fail_shared_when(predicate)
        return True


def test_counters_count_batched_calls_and_rows_copied() -> None:
    pool = FakeSnapshotPool(4, 2)
    pool.live[:] = ["a", "b", "c", "d"]
    pool.save([SsmSnapshotSave(seq, 0, 3, 3) for seq in range(4)])
    pool.restore([SsmSnapshotRestore(1, 0, 3, 3), SsmSnapshotRestore(2, 0, 3, 3)])
    assert (pool.save_calls, pool.restore_calls, pool.copies) == (1, 1, 6)


def test_failed_saves_are_not_counted_as_copies_and_faults_turn_off() -> None:
    pool = FakeSnapshotPool(2, 1)
    pool.fail_when(lambda save: True)
    assert not pool.save([SsmSnapshotSave(0, 0, 1, 1)]).ok
    assert pool.copies == 0
    pool.fail_when(None)
    assert pool.save([SsmSnapshotSave(0, 0, 1, 1)]) == SaveOutcome(())
    assert pool.copies == 1


def test_a_predicate_that_raises_leaves_the_pool_as_it_was() -> None:
    pool = FakeSnapshotPool(2, 1)

    def broken(save: SsmSnapshotSave) -> bool:
        raise RuntimeError("boom")

    pool.fail_when(broken)
    with pytest.raises(RuntimeError, match="boom"):
        pool.save([SsmSnapshotSave(0, 0, 1, 1)])
    assert pool.save_calls == 0
    assert pool.stored_position(0, 0) is None


def test_stored_value_is_what_was_live_at_the_save() -> None:
    pool = FakeSnapshotPool(1, 1)
    pool.live[0] = (1, 2, 3)
    pool.save([SsmSnapshotSave(0, 0, 3, 3)])
    pool.live[0] = (1, 2, 3, 4)
    assert pool.stored_value(0, 0) == (1, 2, 3)
    pool.fail_when(lambda save: True)
    pool.save([SsmSnapshotSave(0, 0, 4, 4)])
    assert pool.stored_value(0, 0) is None


@pytest.mark.parametrize(("n", "slots"), [(-1, 1), (1, -1), (True, 1), (1, 1.5)])
def test_bad_shapes_raise_naming_the_argument(n: object, slots: object) -> None:
    from ssm_rollback import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match=r"num_sequences|slots_per_sequence"):
        FakeSnapshotPool(n, slots)  # type: ignore[arg-type]


@pytest.mark.parametrize("slots", [0, 1])
def test_rows_past_any_engine_are_refused_at_once(slots: int) -> None:
    """``FakeSnapshotPool(10**8, 0)`` built 10**8 rows of tags for 30 s, then blamed a slot
    count of 0 for the memory it ran out of."""
    from ssm_rollback import InvalidArgumentError

    with pytest.raises(InvalidArgumentError, match=r"'num_sequences' must be at most 16,777,216"):
        FakeSnapshotPool(2**24 + 1, slots)


def test_repr_shows_shape_and_counters() -> None:
    assert repr(FakeSnapshotPool(2, 3)) == (
        "FakeSnapshotPool(num_sequences=2, slots_per_sequence=3, save_calls=0, "
        "restore_calls=0, accept_calls=0, copies=0)"
    )


TestFakePoolMachine = SnapshotPoolMachine.for_adapter(TestFakePoolConformance()).TestCase
