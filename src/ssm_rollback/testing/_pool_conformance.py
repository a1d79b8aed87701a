"""The conformance suite every ``SnapshotPool`` passes, ours and third parties' alike."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar, TypeVar

import pytest

from ssm_rollback._core.effect_dict import SsmSnapshotRestore, SsmSnapshotSave
from ssm_rollback._core.ring import SsmDecodeRing
from ssm_rollback._errors import InvalidArgumentError, StaleSnapshotError
from ssm_rollback.pool import SaveOutcome, SnapshotPool, apply_effects

from ._pool_adapter import PoolAdapter
from ._pool_shared import SharedSlotConformance
from ._pool_verify import Restore, Save, VerifyBufferConformance

__all__ = ["PoolAdapter", "SnapshotPoolConformance"]

P = TypeVar("P", bound=SnapshotPool)


class SnapshotPoolConformance(SharedSlotConformance[P], VerifyBufferConformance[P]):
    """Pytest test methods for a ``SnapshotPool``; subclass it as ``TestMyPool``.

    It is a ``PoolAdapter``: implement the adapter's methods on the subclass,
    and ``SnapshotPoolMachine.for_adapter(TestMyPool())`` runs the state
    machine over the same pools. The cases of shared slots (SPEC 13,
    ``SharedSlotConformance``) run when the adapter's ``make_shared_pool``
    builds a ``SharedSnapshotPool``; those of verify buffers (SPEC 9 and 15,
    ``VerifyBufferConformance``) when its ``set_intermediate`` can stage states.
    """

    num_sequences: ClassVar[int] = 6
    slots_per_sequence: ClassVar[int] = 3

    # -- helpers -----------------------------------------------------------

    def _pool(self) -> P:
        pool = self.make_pool(self.num_sequences, self.slots_per_sequence)
        for seq in range(self.num_sequences):
            self.set_live(pool, seq, 1 + seq)
        return pool

    def _live(self, pool: P) -> list[int]:
        return [self.get_live(pool, seq) for seq in range(pool.num_sequences)]

    def _tags(self, pool: P) -> list[tuple[int, int] | None]:
        """What each slot holds, ``(position, ticket)`` or ``None``, checking the two agree."""
        tags: list[tuple[int, int] | None] = []
        for seq in range(pool.num_sequences):
            for slot in range(pool.slots_per_sequence):
                position = pool.stored_position(seq, slot)
                ticket = pool.stored_ticket(seq, slot)
                assert (position is None) == (ticket is None), (seq, slot, position, ticket)
                tags.append(None if position is None or ticket is None else (position, ticket))
        return tags

    def _failing(self, pool: P, predicate: Callable[[SsmSnapshotSave], bool]) -> None:
        if not self.fail_saves(pool, predicate):
            pytest.skip("this backend cannot be made to fail saves")

    # -- the suite -----------------------------------------------------------

    def test_reports_its_shape(self) -> None:
        pool = self._pool()
        assert pool.num_sequences == self.num_sequences
        assert pool.slots_per_sequence == self.slots_per_sequence
        assert isinstance(pool, SnapshotPool)

    def test_starts_holding_nothing(self) -> None:
        pool = self._pool()
        assert set(self._tags(pool)) == {None}
        with pytest.raises(StaleSnapshotError, match="holds nothing"):
            pool.restore([Restore(0, 0, 0)])
        assert self._live(pool) == [1 + seq for seq in range(self.num_sequences)]

    def test_round_trip_of_many_rows_in_one_call(self) -> None:
        pool = self._pool()
        rows = range(self.num_sequences)
        outcome = pool.save([Save(seq, 1, 7) for seq in rows])
        assert outcome == SaveOutcome(())
        assert [pool.stored_position(seq, 1) for seq in rows] == [7] * len(rows)
        for seq in rows:
            self.set_live(pool, seq, 100 + seq)
        pool.restore([Restore(seq, 1, 7) for seq in rows])
        assert self._live(pool) == [1 + seq for seq in rows]

    def test_save_changes_neither_live_state_nor_other_slots(self) -> None:
        pool = self._pool()
        pool.save([Save(2, 0, 4)])
        assert self._live(pool) == [1 + seq for seq in range(self.num_sequences)]
        assert [t for t in self._tags(pool) if t is not None] == [(4, 4)]
        assert pool.stored_position(2, 0) == 4

    def test_restore_touches_only_the_rows_it_names(self) -> None:
        pool = self._pool()
        pool.save([Save(seq, 2, 9) for seq in range(self.num_sequences)])
        for seq in range(self.num_sequences):
            self.set_live(pool, seq, 50 + seq)
        pool.restore([Restore(3, 2, 9), Restore(0, 2, 9)])
        expected = [50 + seq for seq in range(self.num_sequences)]
        expected[0], expected[3] = 1, 4
        assert self._live(pool) == expected

    def test_batches_mix_rows_slots_and_positions(self) -> None:
        pool = self._pool()
        # rows at different positions, in shuffled order, into different slots
        saves = [Save(4, 1, 40), Save(1, 0, 11), Save(5, 2, 52), Save(0, 1, 3)]
        assert pool.save(saves).ok
        for seq in range(self.num_sequences):
            self.set_live(pool, seq, 150 + seq)
        pool.restore([Restore(5, 2, 52), Restore(0, 1, 3), Restore(4, 1, 40)])
        assert self._live(pool) == [1, 151, 152, 153, 5, 6]
        assert pool.stored_position(1, 0) == 11

    def test_shuffled_neighbouring_rows_restore_into_their_own_rows(self) -> None:
        pool = self._pool()
        order = [0, 2, 1, 3]  # a range of rows, out of order
        assert pool.save([Save(seq, 1, 20 + seq) for seq in order]).ok
        for seq in range(self.num_sequences):
            self.set_live(pool, seq, 120 + seq)
        pool.restore([Restore(seq, 1, 20 + seq) for seq in order])
        assert self._live(pool) == [1, 2, 3, 4, 124, 125]

    def test_same_position_under_another_ticket_is_stale(self) -> None:
        # A branch re-recorded after a rollback, or a reused row, reaches the
        # same position with a new ticket: the old snapshot must not serve it.
        pool = self._pool()
        pool.save([Save(1, 0, 5, ticket=900)])
        assert (pool.stored_position(1, 0), pool.stored_ticket(1, 0)) == (5, 900)
        self.set_live(pool, 1, 60)
        with pytest.raises(StaleSnapshotError, match="ticket 900, not position 5 ticket 901"):
            pool.restore([Restore(1, 0, 5, ticket=901)])
        with pytest.raises(StaleSnapshotError, match="not position 4 ticket 900"):
            pool.restore([Restore(1, 0, 4, ticket=900)])
        assert self.get_live(pool, 1) == 60
        pool.restore([Restore(1, 0, 5, ticket=900)])
        assert self.get_live(pool, 1) == 2

    def test_stored_ticket_is_the_last_successful_save(self) -> None:
        pool = self._pool()
        assert pool.stored_ticket(0, 0) is None
        pool.save([Save(0, 0, 3, ticket=11)])
        pool.save([Save(0, 0, 4, ticket=12)])
        assert (pool.stored_position(0, 0), pool.stored_ticket(0, 0)) == (4, 12)
        with pytest.raises(InvalidArgumentError, match="'seq'"):
            pool.stored_ticket(self.num_sequences, 0)
        with pytest.raises(InvalidArgumentError, match="'slot'"):
            pool.stored_ticket(0, self.slots_per_sequence)

    def test_a_raising_fault_predicate_changes_nothing(self) -> None:
        pool = self._pool()
        pool.save([Save(0, 0, 1)])

        def boom(save: SsmSnapshotSave) -> bool:
            if save.seq == 2:
                raise RuntimeError("predicate failed")
            return False

        self._failing(pool, boom)
        tags, live = self._tags(pool), self._live(pool)
        with pytest.raises(RuntimeError, match="predicate failed"):
            pool.save([Save(0, 0, 5), Save(2, 0, 5)])
        assert (self._tags(pool), self._live(pool)) == (tags, live)
        self.set_live(pool, 0, 80)
        pool.restore([Restore(0, 0, 1)])
        assert self.get_live(pool, 0) == 1

    def test_repeated_saves_to_one_slot_keep_the_latest(self) -> None:
        pool = self._pool()
        pool.save([Save(1, 0, 3)])
        self.set_live(pool, 1, 77)
        pool.save([Save(1, 0, 5)])
        assert pool.stored_position(1, 0) == 5
        self.set_live(pool, 1, 0)
        with pytest.raises(StaleSnapshotError, match="holds position 5 ticket 5, not position 3"):
            pool.restore([Restore(1, 0, 3)])
        assert self.get_live(pool, 1) == 0
        pool.restore([Restore(1, 0, 5)])
        assert self.get_live(pool, 1) == 77

    def test_a_stale_restore_in_a_batch_copies_nothing(self) -> None:
        pool = self._pool()
        pool.save([Save(0, 0, 2), Save(1, 0, 2)])
        for seq in range(self.num_sequences):
            self.set_live(pool, seq, 30 + seq)
        before = self._live(pool)
        with pytest.raises(StaleSnapshotError, match=r"\(seq 1, slot 1\) holds nothing"):
            pool.restore([Restore(0, 0, 2), Restore(1, 1, 2)])
        with pytest.raises(StaleSnapshotError, match="holds position 2 ticket 2, not position 3"):
            pool.restore([Restore(0, 0, 2), Restore(1, 0, 3)])
        assert self._live(pool) == before

    @pytest.mark.parametrize(
        "bad",
        [
            [Save(99, 0, 1)],
            [Save(0, 99, 1)],
            [Save(0, 0, 1), Save(0, 1, 1)],
            [Restore(0, 0, 1)],
        ],
        ids=["seq out of range", "slot out of range", "row twice", "wrong effect kind"],
    )
    def test_bad_save_batches_raise_and_change_nothing(self, bad: list[SsmSnapshotSave]) -> None:
        pool = self._pool()
        pool.save([Save(0, 0, 1)])
        tags, live = self._tags(pool), self._live(pool)
        with pytest.raises(InvalidArgumentError):
            pool.save(bad)
        assert (self._tags(pool), self._live(pool)) == (tags, live)

    @pytest.mark.parametrize(
        "bad",
        [
            [Restore(99, 0, 1)],
            [Restore(0, 99, 1)],
            [Restore(0, 0, 1), Restore(0, 0, 1)],
            [Save(0, 0, 1)],
        ],
        ids=["seq out of range", "slot out of range", "row twice", "wrong effect kind"],
    )
    def test_bad_restore_batches_raise_and_change_nothing(
        self, bad: list[SsmSnapshotRestore]
    ) -> None:
        pool = self._pool()
        pool.save([Save(0, 0, 1)])
        self.set_live(pool, 0, 99)
        tags, live = self._tags(pool), self._live(pool)
        with pytest.raises(InvalidArgumentError):
            pool.restore(bad)
        assert (self._tags(pool), self._live(pool)) == (tags, live)

    def test_empty_batches_do_nothing(self) -> None:
        pool = self._pool()
        assert pool.save([]) == SaveOutcome(())
        pool.restore([])
        assert set(self._tags(pool)) == {None}

    def test_stored_position_refuses_ids_out_of_range(self) -> None:
        pool = self._pool()
        with pytest.raises(InvalidArgumentError, match="'seq'"):
            pool.stored_position(self.num_sequences, 0)
        with pytest.raises(InvalidArgumentError, match="'slot'"):
            pool.stored_position(0, self.slots_per_sequence)

    def test_a_pool_without_slots_refuses_every_save(self) -> None:
        pool = self.make_pool(2, 0)
        with pytest.raises(InvalidArgumentError, match="slots_per_sequence 0"):
            pool.save([Save(0, 0, 1)])

    def test_failed_saves_hold_nothing_and_the_rest_succeed(self) -> None:
        pool = self._pool()
        pool.save([Save(1, 0, 3)])  # an older snapshot the failed save overwrites
        self._failing(pool, lambda save: save.seq == 1)
        saves = [Save(0, 0, 5), Save(1, 0, 5), Save(2, 0, 5)]
        assert pool.save(saves).failed == (saves[1],)
        assert [pool.stored_position(seq, 0) for seq in range(3)] == [5, None, 5]
        for position in (3, 5):
            with pytest.raises(StaleSnapshotError):
                pool.restore([Restore(1, 0, position)])
        self.fail_saves(pool, lambda save: False)
        assert pool.save([Save(1, 0, 6)]).ok
        assert pool.stored_position(1, 0) == 6

    def test_apply_effects_discards_failed_saves_from_their_rings(self) -> None:
        pool = self._pool()
        rings = [SsmDecodeRing(self.slots_per_sequence) for _ in range(self.num_sequences)]
        self._failing(pool, lambda save: save.seq % 2 == 1)
        effects = []
        for seq, ring in enumerate(rings):
            slot = ring.record(8)
            entry = ring.entry_for(8)
            assert slot is not None
            assert entry is not None
            effects.append(SsmSnapshotSave(seq, slot, 8, entry.ticket))
        outcome = apply_effects(pool, effects, rings)
        assert {save.seq for save in outcome.failed} == {1, 3, 5}
        for seq, ring in enumerate(rings):
            assert ring.snapshot_positions() == (() if seq % 2 else (8,))
            assert ring.next_slot == (0 if seq % 2 else 1)  # the failed slot is reused next
