"""Hostile input to the core is refused with a named error, and nothing changes.

Each test names a case that failed open or raised a foreign error before: a verify
step behind the ring, a batch whose rows share a ring, a rings container that is no
container or fails, a 0-d array where a column belongs, a column generator that raises.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import numpy as np
import pytest

from ssm_rollback import (
    InvalidArgumentError,
    OutOfOrderError,
    SaveBatch,
    SsmDecodeRing,
    commit_verified,
    commit_verified_batch,
    snapshot_boundaries,
)


def test_a_verify_step_behind_the_rings_newest_snapshot_is_refused() -> None:
    """first_position 8 while the ring's newest snapshot is 10 (its boundary at 11): refused,
    as a per-token record at 8 would be; before, the ring became (6, 10, 11)."""
    ring = SsmDecodeRing(4)
    ring.record(6)
    ring.record(10)
    before = ring.entries
    with pytest.raises(OutOfOrderError, match="'first_position' must not lie behind"):
        commit_verified(
            ring,
            seq=0,
            first_position=8,
            accepted=3,
            is_boundary=[False, False, False, True],
            in_thinking=[False] * 4,
        )
    assert ring.entries == before


def test_a_verify_step_at_the_rings_newest_snapshot_is_accepted() -> None:
    ring = SsmDecodeRing(4)
    ring.record(10)
    plan = commit_verified(
        ring,
        seq=0,
        first_position=10,
        accepted=1,
        is_boundary=[False, True],
        in_thinking=[False, False],
    )
    assert [s.token_position for s in plan.saves] == [11]


def test_a_verify_batch_whose_second_row_shares_the_first_rows_ring_changes_nothing() -> None:
    """Before, the first row's record stayed when the second raised: (1,) -> (1, 6)."""
    shared = SsmDecodeRing(4)
    shared.record(1)
    with pytest.raises(OutOfOrderError, match="same ring earlier in this step"):
        commit_verified_batch(
            [shared, shared],
            first_positions=[6, 3],
            accepted=[0, 0],
            is_boundary=[[True], [True]],
            in_thinking=[[False], [False]],
        )
    assert shared.snapshot_positions() == (1,)


class _Failing(Mapping[int, SsmDecodeRing]):
    def __getitem__(self, row: int) -> SsmDecodeRing:
        raise RuntimeError("the scheduler's table is locked")

    def __iter__(self) -> Iterator[int]:
        return iter(())

    def __len__(self) -> int:
        return 2


@pytest.mark.parametrize("rings", [None, {SsmDecodeRing(2)}, 3, _Failing()])
def test_batch_calls_name_a_rings_container_that_is_none_or_fails(rings: object) -> None:
    with pytest.raises(InvalidArgumentError, match="'rings"):
        snapshot_boundaries(
            rings,  # type: ignore[arg-type]
            positions=[1, 2],
            is_boundary=[True, True],
            in_thinking=[False, False],
        )
    with pytest.raises(InvalidArgumentError, match="'rings"):
        commit_verified_batch(
            rings,  # type: ignore[arg-type]
            first_positions=[1, 2],
            accepted=[0, 0],
            is_boundary=[[True], [True]],
            in_thinking=[[False], [False]],
        )


def test_a_zero_d_array_is_no_column() -> None:
    rings = [SsmDecodeRing(2)]
    with pytest.raises(InvalidArgumentError, match="'is_boundary' must be a sequence"):
        snapshot_boundaries(rings, positions=[1], is_boundary=np.array(True), in_thinking=[False])
    with pytest.raises(InvalidArgumentError, match="'is_boundary' must be a sequence"):
        commit_verified(
            rings[0],
            seq=0,
            first_position=1,
            accepted=0,
            is_boundary=np.array(True),  # type: ignore[arg-type]
            in_thinking=[False],
        )
    assert rings[0].entries == ()


def test_a_save_batch_column_generator_that_raises_is_named() -> None:
    def seqs() -> Iterator[int]:
        yield 0
        raise RuntimeError("lost the row table")

    with pytest.raises(InvalidArgumentError, match="'seqs' must be an iterable of ints"):
        SaveBatch(seqs(), [0], [1], [1])


def test_a_steps_saves_applied_twice_are_refused_and_copy_nothing() -> None:
    """A verify step's saves applied again after the intermediate buffer changed: before, the
    slot kept its tag but took other state, and a later rollback restored it."""
    from ssm_rollback import StaleSnapshotError, apply_effects
    from ssm_rollback.backends.fake import FakeSnapshotPool

    rings = [SsmDecodeRing(2)]
    pool = FakeSnapshotPool(1, 2)
    pool.live[0] = "after 4"
    step = snapshot_boundaries(rings, positions=[4], is_boundary=[True], in_thinking=[False])
    apply_effects(pool, [step], rings)
    pool.live[0] = "after 5, not 4"
    with pytest.raises(StaleSnapshotError, match="already holds that ticket"):
        apply_effects(pool, [step], rings)
    with pytest.raises(StaleSnapshotError, match="already holds that ticket"):
        pool.save(step)
    (save,) = step
    assert pool.stored_ticket(0, save.slot) == save.ticket
    pool.live[0] = None
    restore = rings[0].entry_for(4)
    assert restore is not None
    from ssm_rollback import SsmSnapshotRestore

    pool.restore([SsmSnapshotRestore(0, restore.snapshot_slot, 4, restore.ticket)])
    assert pool.live[0] == "after 4"  # the first copy, untouched
