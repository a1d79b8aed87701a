"""The conformance cases of verify buffers (SPEC 9, 15), run when a pool stages intermediate states.

``SnapshotPoolConformance`` inherits them. An adapter whose
``set_intermediate`` returns ``False`` (the default) skips them.
"""

from __future__ import annotations

from typing import ClassVar, TypeVar

import pytest

from ssm_rollback._core.effect_dict import SsmSnapshotRestore, SsmSnapshotSave, SsmStateAccept
from ssm_rollback._errors import StaleSnapshotError
from ssm_rollback.pool import SnapshotPool, VerifyBufferPool, apply_effects

from ._pool_adapter import PoolAdapter

__all__ = ["Restore", "Save", "VerifyBufferConformance"]

P = TypeVar("P", bound=SnapshotPool)


def Save(
    seq: int, slot: int, position: int, ticket: int | None = None, source: int | None = None
) -> SsmSnapshotSave:
    """A save whose ticket defaults to its position: distinct enough for a pool's own tests."""
    return SsmSnapshotSave(seq, slot, position, position if ticket is None else ticket, source)


def Restore(seq: int, slot: int, position: int, ticket: int | None = None) -> SsmSnapshotRestore:
    """A restore whose ticket defaults to its position, to match ``Save``."""
    return SsmSnapshotRestore(seq, slot, position, position if ticket is None else ticket)


class VerifyBufferConformance(PoolAdapter[P]):
    """Pytest test methods for a pool's verify buffers; ``SnapshotPoolConformance`` has them all."""

    num_sequences: ClassVar[int] = 6
    slots_per_sequence: ClassVar[int] = 3

    def _verify_pool(self) -> tuple[P, VerifyBufferPool]:
        """A fresh pool whose rows hold ``1 + seq``, typed twice: as the adapter's and as one
        with verify buffers (its ``accept`` is what a third-party pool must guard itself)."""
        pool = self.make_pool(self.num_sequences, self.slots_per_sequence)
        for seq in range(self.num_sequences):
            self.set_live(pool, seq, 1 + seq)
        self._staging(pool, 0, [90, 91, 92])
        assert isinstance(pool, VerifyBufferPool)
        return pool, pool

    def _staging(self, pool: P, seq: int, values: list[int]) -> None:
        if not self.set_intermediate(pool, seq, values):
            pytest.skip("this backend keeps no intermediate states")
        # A pool with intermediate states says so: apply_effects asks the protocol.
        assert isinstance(pool, VerifyBufferPool), f"{type(pool).__name__} is no VerifyBufferPool"

    def _lives(self, pool: P) -> list[int]:
        return [self.get_live(pool, seq) for seq in range(pool.num_sequences)]

    def _slots(self, pool: P) -> list[tuple[int | None, int | None]]:
        return [
            (pool.stored_position(seq, slot), pool.stored_ticket(seq, slot))
            for seq in range(pool.num_sequences)
            for slot in range(pool.slots_per_sequence)
        ]

    def test_an_accept_makes_exactly_its_intermediate_state_live(self) -> None:
        pool, _ = self._verify_pool()
        self._staging(pool, 2, [60, 61, 62])
        self._staging(pool, 4, [70, 71, 72])
        apply_effects(pool, [SsmStateAccept(2, 1), SsmStateAccept(4, 2)], [])
        assert self._lives(pool) == [1, 2, 61, 4, 72, 6]

    def test_saves_from_intermediate_states_hold_exactly_their_own_state(self) -> None:
        pool, _ = self._verify_pool()
        self._staging(pool, 1, [30, 31, 32])
        self._staging(pool, 3, [40, 41, 42])
        saves = [Save(1, 0, 5, 1, source=0), Save(1, 2, 7, 2, source=2), Save(3, 1, 9, 3, 1)]
        assert pool.save(saves).ok
        self.set_live(pool, 1, 99)
        pool.restore([Restore(1, 0, 5, 1), Restore(3, 1, 9, 3)])
        assert (self.get_live(pool, 1), self.get_live(pool, 3)) == (30, 41)
        pool.restore([Restore(1, 2, 7, 2)])
        assert self.get_live(pool, 1) == 32

    def test_an_intermediate_index_the_row_lacks_is_refused_copying_nothing(self) -> None:
        pool, _ = self._verify_pool()
        self._staging(pool, 0, [50, 51, 52])
        live, tags = self._lives(pool), self._slots(pool)
        with pytest.raises(StaleSnapshotError, match="intermediate state 3"):
            pool.save([Save(1, 0, 2, 2), Save(0, 0, 5, 5, source=3)])
        with pytest.raises(StaleSnapshotError, match="intermediate state 3"):
            apply_effects(pool, [SsmStateAccept(0, 3)], [])
        assert (self._lives(pool), self._slots(pool)) == (live, tags)

    # -- an accept applied twice, or an older step's (SPEC 15) ----------------------------

    @pytest.mark.parametrize("through", ["pool", "apply_effects"])
    def test_an_accept_applied_twice_is_refused_copying_nothing(self, through: str) -> None:
        pool, verify = self._verify_pool()
        self._staging(pool, 2, [60, 61, 62])
        self._staging(pool, 4, [70, 71, 72])
        step = [SsmStateAccept(2, 1, ticket=500), SsmStateAccept(4, 0, ticket=501)]
        verify.accept(step)
        # The engine moved on: decoding changed both rows since the step was accepted.
        self.set_live(pool, 2, 20)
        self.set_live(pool, 4, 40)
        before, tags = self._lives(pool), self._slots(pool)
        with pytest.raises(StaleSnapshotError, match="not newer than the last accept"):
            self._accept(pool, verify, step, through)
        with pytest.raises(StaleSnapshotError, match="not newer than the last accept"):
            self._accept(pool, verify, [step[1]], through)
        assert (self._lives(pool), self._slots(pool)) == (before, tags)

    @pytest.mark.parametrize("through", ["pool", "apply_effects"])
    def test_an_older_steps_accept_after_a_newer_one_is_refused(self, through: str) -> None:
        pool, verify = self._verify_pool()
        self._staging(pool, 3, [30, 31, 32])
        verify.accept([SsmStateAccept(3, 2, ticket=700)])
        assert self.get_live(pool, 3) == 32
        self._staging(pool, 1, [10, 11, 12])
        before = self._lives(pool)
        # A good accept on row 1 beside the stale one on row 3: the batch copies nothing.
        late = [SsmStateAccept(1, 1, ticket=800), SsmStateAccept(3, 0, ticket=699)]
        with pytest.raises(StaleSnapshotError, match=r"\(seq 3, ticket 699\) is not newer"):
            self._accept(pool, verify, late, through)
        assert self._lives(pool) == before
        self._accept(pool, verify, late[:1], through)  # the newer step's own accept is taken
        assert self.get_live(pool, 1) == 11

    @pytest.mark.parametrize("through", ["pool", "apply_effects"])
    def test_an_unticketed_accept_is_taken_after_a_ticketed_one(self, through: str) -> None:
        """An accept built by hand carries no ticket: nothing to compare, so it is copied."""
        pool, verify = self._verify_pool()
        self._staging(pool, 5, [50, 51, 52])
        self._accept(pool, verify, [SsmStateAccept(5, 1, ticket=900)], through)
        self.set_live(pool, 5, 7)
        self._accept(pool, verify, [SsmStateAccept(5, 2)], through)
        assert self.get_live(pool, 5) == 52
        self._accept(pool, verify, [SsmStateAccept(5, 0)], through)  # again: still taken
        assert self.get_live(pool, 5) == 50
        with pytest.raises(StaleSnapshotError, match="not newer"):  # the ticketed one still holds
            self._accept(pool, verify, [SsmStateAccept(5, 1, ticket=900)], through)
        assert self.get_live(pool, 5) == 50

    def _accept(
        self, pool: P, verify: VerifyBufferPool, accepts: list[SsmStateAccept], through: str
    ) -> None:
        if through == "pool":
            verify.accept(accepts)
        else:
            apply_effects(pool, accepts, [])
