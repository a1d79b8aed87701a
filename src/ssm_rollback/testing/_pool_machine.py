"""A hypothesis state machine that checks a ``SnapshotPool`` against a plain dict of slots."""

from __future__ import annotations

import itertools
from typing import ClassVar, TypeVar, cast

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from ssm_rollback._core.effect_dict import (
    Effect,
    SsmPrefixRestore,
    SsmPrefixSave,
    SsmSnapshotRestore,
    SsmSnapshotSave,
    SsmStateAccept,
)
from ssm_rollback._errors import StaleSnapshotError
from ssm_rollback.pool import SharedSnapshotPool, SnapshotPool, apply_effects

from ._pool_adapter import PoolAdapter

__all__ = ["SnapshotPoolMachine"]

P = TypeVar("P", bound=SnapshotPool)

#: (position, ticket, marker of the live state it copied)
_Held = tuple[int, int, int]


class SnapshotPoolMachine(RuleBasedStateMachine):
    """Random batches of decodes, saves (some failing) and restores (some stale) on one pool.

    The model is a dict ``(seq, slot) -> (position, ticket, marker)``; after
    every step each row's live marker and each slot's position and ticket
    must agree with it. Restores are drawn valid, or stale in every way a
    scheduler gets wrong: another position, the same position under another
    ticket, a slot that holds nothing. A stale batch must raise
    ``StaleSnapshotError`` and copy nothing.

    When the adapter builds pools with shared slots (``make_shared_pool``),
    shared saves (some failing, some applied twice) and shared restores
    (several rows from one slot; some stale) join in, directly and through
    ``apply_effects`` - a save then a restore of the same slot in one call -
    against a second dict ``slot -> (length, ticket, marker)``.

    Build the test case from the adapter your conformance suite already is::

        TestMyPoolMachine = SnapshotPoolMachine.for_adapter(TestMyPool()).TestCase
    """

    adapter: ClassVar[PoolAdapter[SnapshotPool]]
    num_sequences: ClassVar[int] = 5
    slots_per_sequence: ClassVar[int] = 3
    shared_slots: ClassVar[int] = 3

    @classmethod
    def for_adapter(cls, adapter: PoolAdapter[P]) -> type[SnapshotPoolMachine]:
        """A machine class over the pools ``adapter`` builds."""
        name = f"{type(adapter).__name__}Machine"
        # The machine only hands the adapter pools the adapter itself built.
        return type(name, (cls,), {"adapter": cast(PoolAdapter[SnapshotPool], adapter)})

    #: Intermediate states a row holds after ``stage`` (a verify step of two drafts).
    staged_states: ClassVar[int] = 3

    def __init__(self) -> None:
        super().__init__()
        rows, slots = self.num_sequences, self.slots_per_sequence
        pool = self.adapter.make_shared_pool(rows, slots, self.shared_slots)
        self.shared: SharedSnapshotPool | None = None
        if pool is None:
            pool = self.adapter.make_pool(rows, slots)
        else:
            assert isinstance(pool, SharedSnapshotPool)
            self.shared = pool
        self.pool = pool
        self.can_fail = self.adapter.fail_saves(self.pool, lambda save: False)
        self.can_fail_shared = self.adapter.fail_shared_saves(self.pool, lambda save: False)
        # Shared slot -> (length, ticket, marker of the live state it copied).
        self.shared_stored: dict[int, _Held] = {}
        # Row -> the markers of its intermediate states (what a verify step produced).
        self.staged: dict[int, list[int]] = {}
        self.can_stage = True
        self.live = dict.fromkeys(range(rows), 0)
        self.stored: dict[tuple[int, int], _Held] = {}
        self.marker = 0
        self.tickets = itertools.count(1)
        for seq in range(rows):
            self.adapter.set_live(self.pool, seq, 0)
        # Every row starts with a staged buffer: a pool of fixed-size buffers
        # (the torch pool's) holds k + 1 states for every row at all times.
        for seq in range(rows):
            values = [self._marker() for _ in range(self.staged_states)]
            if not self.adapter.set_intermediate(self.pool, seq, values):
                self.can_stage = False
                break
            self.staged[seq] = values

    def _rows(self) -> st.SearchStrategy[list[int]]:
        return st.lists(
            st.integers(0, self.num_sequences - 1), max_size=self.num_sequences, unique=True
        )

    @rule(data=st.data())
    def decode(self, data: st.DataObject) -> None:
        for seq in data.draw(self._rows(), label="rows"):
            self.live[seq] = self._marker()
            self.adapter.set_live(self.pool, seq, self.live[seq])

    def _marker(self) -> int:
        self.marker = self.marker % 199 + 1  # markers below 200: exact in every dtype
        return self.marker

    @rule(data=st.data())
    def stage(self, data: st.DataObject) -> None:
        """A verify step fills some rows' intermediate buffers."""
        for seq in data.draw(self._rows(), label="rows"):
            values = [self._marker() for _ in range(self.staged_states)]
            if not self.adapter.set_intermediate(self.pool, seq, values):
                self.can_stage = False
                return
            self.staged[seq] = values

    @rule(data=st.data())
    def accept(self, data: st.DataObject) -> None:
        """Accept an intermediate state per row; an index the row lacks is refused."""
        if not self.can_stage or not self.staged:
            return
        accepts = [
            SsmStateAccept(seq, data.draw(st.integers(0, self.staged_states), label="index"))
            for seq in data.draw(self._rows(), label="rows")
        ]
        if any(a.index >= len(self.staged.get(a.seq, [])) for a in accepts):
            with pytest.raises(StaleSnapshotError):
                apply_effects(self.pool, accepts, [])
            return
        apply_effects(self.pool, accepts, [])
        for a in accepts:
            self.live[a.seq] = self.staged[a.seq][a.index]

    @rule(data=st.data())
    def save_staged(self, data: st.DataObject) -> None:
        """Saves from intermediate states: a row may save two of them into two slots."""
        if not self.can_stage or not self.staged:
            return
        seq = data.draw(st.sampled_from(sorted(self.staged)), label="seq")
        count = min(self.staged_states, self.slots_per_sequence)
        slots = data.draw(
            st.lists(
                st.integers(0, self.slots_per_sequence - 1), min_size=1, max_size=count, unique=True
            ),
            label="slots",
        )
        sources = data.draw(
            st.lists(
                st.integers(0, self.staged_states - 1),
                min_size=len(slots),
                max_size=len(slots),
                unique=True,
            ),
            label="sources",
        )
        saves = [
            SsmSnapshotSave(seq, slot, data.draw(st.integers(0, 9)), next(self.tickets), source=j)
            for slot, j in zip(slots, sources, strict=True)
        ]
        assert self.pool.save(saves).ok
        for s, j in zip(saves, sources, strict=True):
            self.stored[s.seq, s.slot] = (s.token_position, s.ticket, self.staged[seq][j])

    @rule(data=st.data())
    def save(self, data: st.DataObject) -> None:
        slots = st.integers(0, self.slots_per_sequence - 1)
        saves = [
            SsmSnapshotSave(seq, data.draw(slots), data.draw(st.integers(0, 9)), next(self.tickets))
            for seq in data.draw(self._rows(), label="rows")
        ]
        failing = set()
        if self.can_fail:
            failing = {s for s in saves if data.draw(st.booleans(), label=f"fail {s}")}
            self.adapter.fail_saves(self.pool, lambda save: save in failing)
        outcome = self.pool.save(saves)
        assert set(outcome.failed) == failing
        for s in saves:
            if s in failing:
                self.stored.pop((s.seq, s.slot), None)
            else:
                self.stored[s.seq, s.slot] = (s.token_position, s.ticket, self.live[s.seq])

    @rule(data=st.data())
    def restore(self, data: st.DataObject) -> None:
        restores = [self._draw_restore(seq, data) for seq in data.draw(self._rows(), label="rows")]
        stale = [r for r in restores if self._held_by(r) is None]
        if stale:
            with pytest.raises(StaleSnapshotError):
                self.pool.restore(restores)
            return
        self.pool.restore(restores)
        for r in restores:
            self.live[r.seq] = self.stored[r.seq, r.slot][2]

    def _draw_restore(self, seq: int, data: st.DataObject) -> SsmSnapshotRestore:
        held = sorted((slot, h) for (s, slot), h in self.stored.items() if s == seq)
        how = data.draw(st.sampled_from(["valid", "other ticket", "other position", "any"]))
        if held and how != "any":
            slot, (position, ticket, _) = data.draw(st.sampled_from(held))
            if how == "other ticket":
                ticket += data.draw(st.sampled_from([-1, 1]))
            elif how == "other position":
                position += 1
            return SsmSnapshotRestore(seq, slot, position, max(ticket, 0))
        slot = data.draw(st.integers(0, self.slots_per_sequence - 1))
        return SsmSnapshotRestore(
            seq, slot, data.draw(st.integers(0, 9)), data.draw(st.integers(0, 9))
        )

    def _held_by(self, restore: SsmSnapshotRestore) -> _Held | None:
        held = self.stored.get((restore.seq, restore.slot))
        if held is None or held[:2] != (restore.token_position, restore.ticket):
            return None
        return held

    # -- shared slots (SPEC 13) -------------------------------------------------------

    def _shared_saves(self, data: st.DataObject) -> list[SsmPrefixSave]:
        """Saves of distinct rows into distinct shared slots; some repeat a held ticket."""
        rows = data.draw(self._rows(), label="rows")
        slots = data.draw(
            st.lists(
                st.integers(0, self.shared_slots - 1),
                min_size=min(len(rows), self.shared_slots),
                max_size=min(len(rows), self.shared_slots),
                unique=True,
            ),
            label="shared slots",
        )
        saves = []
        for seq, slot in zip(rows, slots, strict=False):
            held = self.shared_stored.get(slot)
            again = held is not None and data.draw(st.integers(0, 9), label="again") == 0
            ticket = held[1] if again and held is not None else next(self.tickets)
            saves.append(SsmPrefixSave(seq, slot, data.draw(st.integers(1, 9)), ticket))
        return saves

    def _shared_restores(
        self, data: st.DataObject, held: dict[int, _Held]
    ) -> list[SsmPrefixRestore]:
        """Restores into distinct rows, several from one slot; some stale in every way."""
        restores = []
        # Half the batches are valid throughout, so that several rows restore at once.
        valid = data.draw(st.booleans(), label="all valid")
        for seq in data.draw(self._rows(), label="rows"):
            how = "valid" if valid else data.draw(st.sampled_from(["valid", "stale", "any"]))
            if held and how != "any":
                slot, (length, ticket, _) = data.draw(st.sampled_from(sorted(held.items())))
                if how == "stale":
                    ticket, length = data.draw(
                        st.sampled_from([(ticket + 1, length), (ticket, length + 1)])
                    )
            else:
                slot = data.draw(st.integers(0, self.shared_slots - 1))
                length, ticket = data.draw(st.integers(1, 9)), data.draw(st.integers(0, 9))
            restores.append(SsmPrefixRestore(seq, slot, length, ticket))
        return restores

    def _stale_shared(self, restores: list[SsmPrefixRestore], held: dict[int, _Held]) -> bool:
        return any(held.get(r.slot, (None, None))[:2] != (r.length, r.ticket) for r in restores)

    def _again(self, saves: list[SsmPrefixSave]) -> bool:
        return any(self.shared_stored.get(s.slot, (0, -1, 0))[1] == s.ticket for s in saves)

    @rule(data=st.data())
    def save_shared(self, data: st.DataObject) -> None:
        if self.shared is None:
            return
        saves = self._shared_saves(data)
        if self._again(saves):
            with pytest.raises(StaleSnapshotError, match="applied twice"):
                self.shared.save_shared(saves)
            return
        failing = set()
        if self.can_fail_shared:
            failing = {s for s in saves if data.draw(st.booleans(), label=f"fail {s}")}
            self.adapter.fail_shared_saves(self.pool, lambda save: save in failing)
        outcome = self.shared.save_shared(saves)
        assert set(outcome.failed_shared) == failing
        assert outcome.failed == ()
        self._commit_shared(saves, failing)

    def _commit_shared(self, saves: list[SsmPrefixSave], failing: set[SsmPrefixSave]) -> None:
        for s in saves:
            if s in failing:
                self.shared_stored.pop(s.slot, None)
            else:
                self.shared_stored[s.slot] = (s.length, s.ticket, self.live[s.seq])

    @rule(data=st.data())
    def restore_shared(self, data: st.DataObject) -> None:
        if self.shared is None:
            return
        restores = self._shared_restores(data, self.shared_stored)
        if self._stale_shared(restores, self.shared_stored):
            with pytest.raises(StaleSnapshotError):
                self.shared.restore_shared(restores)
            return
        self.shared.restore_shared(restores)
        for r in restores:
            self.live[r.seq] = self.shared_stored[r.slot][2]

    @rule(data=st.data())
    def apply_shared(self, data: st.DataObject) -> None:
        """One call of shared saves, then restores checked against what those saves write."""
        if self.shared is None:
            return
        saves = self._shared_saves(data)
        after = dict(self.shared_stored)
        for s in saves:
            after[s.slot] = (s.length, s.ticket, self.live[s.seq])
        restores = self._shared_restores(data, after)
        effects: list[Effect] = [*saves, *restores]
        if self._again(saves) or self._stale_shared(restores, after):
            with pytest.raises(StaleSnapshotError):
                apply_effects(self.pool, effects, [])
            return
        if self.can_fail_shared:
            self.adapter.fail_shared_saves(self.pool, lambda save: False)
        assert apply_effects(self.pool, effects, []).ok
        self._commit_shared(saves, set())
        for r in restores:
            self.live[r.seq] = after[r.slot][2]

    @invariant()
    def agrees(self) -> None:
        for seq in range(self.num_sequences):
            assert self.adapter.get_live(self.pool, seq) == self.live[seq], f"row {seq}"
            for slot in range(self.slots_per_sequence):
                held = self.stored.get((seq, slot))
                tag = (self.pool.stored_position(seq, slot), self.pool.stored_ticket(seq, slot))
                assert tag == ((None, None) if held is None else held[:2]), (seq, slot)
        if self.shared is not None:
            for slot in range(self.shared_slots):
                held = self.shared_stored.get(slot)
                ticket = self.shared.stored_shared_ticket(slot)
                assert ticket == (None if held is None else held[1]), f"shared slot {slot}"
