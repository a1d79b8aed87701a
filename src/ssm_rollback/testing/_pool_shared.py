"""The conformance cases of shared slots (SPEC 13), run when a pool is a ``SharedSnapshotPool``.

``SnapshotPoolConformance`` inherits them. A pool is built for them by the
adapter's ``make_shared_pool``; an adapter that returns ``None`` there (the
default) skips them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar, TypeVar

import pytest

from ssm_rollback._core.effect_dict import (
    Effect,
    SsmPrefixRestore,
    SsmPrefixSave,
    SsmSnapshotRestore,
    SsmSnapshotSave,
)
from ssm_rollback._core.prefix import PrefixSnapshotIndex
from ssm_rollback._errors import InvalidArgumentError, StaleSnapshotError
from ssm_rollback.pool import SaveOutcome, SharedSnapshotPool, SnapshotPool, apply_effects

from ._pool_adapter import PoolAdapter

__all__ = ["SharedSlotConformance"]

P = TypeVar("P", bound=SnapshotPool)

Share, Reuse = SsmPrefixSave, SsmPrefixRestore


class SharedSlotConformance(PoolAdapter[P]):
    """Pytest test methods for a pool's shared slots; ``SnapshotPoolConformance`` has them all."""

    num_sequences: ClassVar[int] = 6
    slots_per_sequence: ClassVar[int] = 3
    shared_slots: ClassVar[int] = 4

    def _shared_pool(self) -> tuple[P, SharedSnapshotPool]:
        """A fresh pool, typed twice: as the adapter's and as a ``SharedSnapshotPool``."""
        pool = self.make_shared_pool(self.num_sequences, self.slots_per_sequence, self.shared_slots)
        if pool is None:
            pytest.skip("this backend keeps no shared slots")
        # A pool with shared slots says so: apply_effects asks the protocol.
        assert isinstance(pool, SharedSnapshotPool), f"{type(pool).__name__} is not shared"
        for seq in range(self.num_sequences):
            self.set_live(pool, seq, 1 + seq)
        return pool, pool

    def _rows(self, pool: P) -> list[int]:
        return [self.get_live(pool, seq) for seq in range(pool.num_sequences)]

    def _shared(self, pool: SharedSnapshotPool) -> list[int | None]:
        return [pool.stored_shared_ticket(slot) for slot in range(pool.shared_slots)]

    def _failing_shared(self, pool: P, predicate: Callable[[SsmPrefixSave], bool]) -> None:
        if not self.fail_shared_saves(pool, predicate):
            pytest.skip("this backend cannot be made to fail shared saves")

    def test_shared_slots_start_holding_nothing(self) -> None:
        pool, shared = self._shared_pool()
        assert shared.shared_slots == self.shared_slots
        assert self._shared(shared) == [None] * self.shared_slots
        with pytest.raises(StaleSnapshotError, match="holds nothing"):
            shared.restore_shared([Reuse(0, 0, 5, 1)])
        assert self._rows(pool) == [1 + seq for seq in range(self.num_sequences)]

    def test_one_shared_slot_restores_into_many_rows_in_one_call(self) -> None:
        pool, shared = self._shared_pool()
        assert shared.save_shared([Share(1, 2, 30, 7), Share(4, 0, 12, 8)]) == SaveOutcome()
        assert self._shared(shared) == [8, None, 7, None]
        for seq in range(self.num_sequences):
            self.set_live(pool, seq, 100 + seq)
        shared.restore_shared([Reuse(0, 2, 30, 7), Reuse(5, 2, 30, 7), Reuse(3, 0, 12, 8)])
        assert self._rows(pool) == [2, 101, 102, 5, 104, 2]

    def test_shared_slots_are_apart_from_every_rings_slots(self) -> None:
        pool, shared = self._shared_pool()
        pool.save([SsmSnapshotSave(0, 0, 3, 3)])
        self.set_live(pool, 0, 50)
        shared.save_shared([Share(0, 0, 9, 9)])
        self.set_live(pool, 0, 60)
        pool.restore([SsmSnapshotRestore(0, 0, 3, 3)])
        assert self.get_live(pool, 0) == 1
        shared.restore_shared([Reuse(0, 0, 9, 9)])
        assert self.get_live(pool, 0) == 50
        assert (pool.stored_position(0, 0), pool.stored_ticket(0, 0)) == (3, 3)

    def test_a_shared_slot_holding_another_ticket_restores_nothing(self) -> None:
        # The index re-used the slot for another prefix: the old prefix's restore is stale.
        pool, shared = self._shared_pool()
        shared.save_shared([Share(2, 1, 20, 40)])
        self.set_live(pool, 2, 70)
        shared.save_shared([Share(2, 1, 25, 41)])
        before = self._rows(pool)
        with pytest.raises(StaleSnapshotError, match=r"holds ticket 41.*not ticket 40"):
            shared.restore_shared([Reuse(0, 1, 20, 40)])
        with pytest.raises(StaleSnapshotError, match=r"\(seq 3, shared slot 3\) holds nothing"):
            shared.restore_shared([Reuse(0, 1, 25, 41), Reuse(3, 3, 25, 41)])
        assert self._rows(pool) == before
        shared.restore_shared([Reuse(0, 1, 25, 41)])
        assert self.get_live(pool, 0) == 70

    def test_a_shared_save_applied_twice_is_refused(self) -> None:
        pool, shared = self._shared_pool()
        shared.save_shared([Share(1, 0, 10, 5)])
        self.set_live(pool, 1, 90)
        with pytest.raises(StaleSnapshotError, match="already took that ticket"):
            shared.save_shared([Share(3, 1, 10, 6), Share(1, 0, 10, 5)])
        assert self._shared(shared) == [5, None, None, None]
        shared.restore_shared([Reuse(2, 0, 10, 5)])
        assert self.get_live(pool, 2) == 2  # what the first save copied, not row 1's new state

    @pytest.mark.parametrize(
        ("bad", "match"),
        [
            ([Share(99, 0, 1, 1)], r"'saves\[0\]\.seq' must be < the pool's num_sequences"),
            ([Share(0, 4, 1, 1)], r"'saves\[0\]\.slot' must be < the pool's shared_slots 4"),
            ([Share(0, 0, 1, 1), Share(0, 1, 2, 2)], "each row at most once"),
            ([Share(0, 0, 1, 1), Share(1, 0, 1, 2)], "each shared slot at most once"),
            ([Reuse(0, 0, 1, 1)], r"'saves\[0\]' must be a SsmPrefixSave"),
        ],
        ids=["seq out of range", "slot out of range", "row twice", "slot twice", "wrong kind"],
    )
    def test_bad_shared_saves_raise_and_change_nothing(self, bad: list[Effect], match: str) -> None:
        pool, shared = self._shared_pool()
        shared.save_shared([Share(5, 3, 1, 1)])
        held, rows = self._shared(shared), self._rows(pool)
        with pytest.raises(InvalidArgumentError, match=match):
            shared.save_shared(bad)  # type: ignore[arg-type]
        assert (self._shared(shared), self._rows(pool)) == (held, rows)

    @pytest.mark.parametrize(
        ("bad", "match"),
        [
            ([Reuse(99, 0, 1, 1)], r"'restores\[0\]\.seq' must be < the pool's num_sequences"),
            ([Reuse(0, 7, 1, 1)], r"'restores\[0\]\.slot' must be < the pool's shared_slots 4"),
            ([Reuse(2, 0, 1, 1), Reuse(2, 0, 1, 1)], "each row at most once"),
            ([Share(0, 0, 1, 1)], r"'restores\[0\]' must be a SsmPrefixRestore"),
        ],
        ids=["seq out of range", "slot out of range", "row twice", "wrong kind"],
    )
    def test_bad_shared_restores_raise_and_change_nothing(
        self, bad: list[Effect], match: str
    ) -> None:
        pool, shared = self._shared_pool()
        shared.save_shared([Share(0, 0, 1, 1)])
        self.set_live(pool, 2, 40)
        held, rows = self._shared(shared), self._rows(pool)
        with pytest.raises(InvalidArgumentError, match=match):
            shared.restore_shared(bad)  # type: ignore[arg-type]
        assert (self._shared(shared), self._rows(pool)) == (held, rows)

    def test_stored_shared_ticket_refuses_slots_out_of_range(self) -> None:
        _, shared = self._shared_pool()
        with pytest.raises(InvalidArgumentError, match="'slot' must be < the pool's shared_slots"):
            shared.stored_shared_ticket(self.shared_slots)

    def test_failed_shared_saves_hold_nothing_and_the_rest_succeed(self) -> None:
        pool, shared = self._shared_pool()
        shared.save_shared([Share(1, 1, 4, 4)])  # an older snapshot the failed save overwrites
        self._failing_shared(pool, lambda save: save.seq == 1)
        saves = [Share(0, 0, 5, 5), Share(1, 1, 5, 6), Share(2, 2, 5, 7)]
        assert shared.save_shared(saves) == SaveOutcome(failed_shared=(saves[1],))
        assert self._shared(shared) == [5, None, 7, None]
        with pytest.raises(StaleSnapshotError, match="holds nothing"):
            shared.restore_shared([Reuse(3, 1, 4, 4)])
        self.fail_shared_saves(pool, lambda save: False)
        assert shared.save_shared([Share(1, 1, 6, 8)]).ok

    def test_apply_effects_restores_what_a_shared_save_before_it_wrote(self) -> None:
        pool, _ = self._shared_pool()
        index = PrefixSnapshotIndex(self.shared_slots)
        save = index.publish(1, [3, 1, 4, 1, 5], 4)
        assert save is not None
        plan = index.plan_prefill(4, [3, 1, 4, 1, 9, 9])
        assert plan.hit is not None
        effects: list[Effect] = [save, plan.hit.restore]
        outcome = apply_effects(pool, effects, [], prefix_index=index)
        assert outcome == SaveOutcome()
        assert self.get_live(pool, 4) == 2  # row 1's state, shared through the slot
        with pytest.raises(StaleSnapshotError, match="already took that ticket"):
            apply_effects(pool, effects, [], prefix_index=index)  # the step applied twice

    def test_apply_effects_discards_a_failed_shared_save_from_the_index(self) -> None:
        pool, _ = self._shared_pool()
        index = PrefixSnapshotIndex(self.shared_slots)
        self._failing_shared(pool, lambda save: save.seq == 0)
        lost = index.publish(0, [1, 2, 3], 2)
        kept = index.publish(1, [4, 5, 6], 2)
        assert lost is not None
        assert kept is not None
        outcome = apply_effects(pool, [lost, kept], [], prefix_index=index)
        assert outcome.failed_shared == (lost,)
        assert outcome.failed == ()
        assert not outcome.ok
        assert index.match([1, 2, 3]) is None
        assert index.match([4, 5, 6]) is not None
        index.check_valid()

    def test_a_pool_without_shared_slots_refuses_every_prefix_effect(self) -> None:
        pool = self.make_shared_pool(2, 1, 0)
        if pool is None:
            pytest.skip("this backend keeps no shared slots")
        with pytest.raises(InvalidArgumentError, match="shared_slots 0"):
            apply_effects(pool, [Share(0, 0, 1, 1)], [])
