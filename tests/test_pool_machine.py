"""Pools under random batches of saves, restores and faults, against a plain dict model."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from ssm_rollback import SsmSnapshotRestore, SsmSnapshotSave, StaleSnapshotError
from ssm_rollback.backends.fake import FakeSnapshotPool

ROWS, SLOTS = 5, 3


class Harness:
    """How a machine builds a pool and reads and writes a row's marker."""

    def make(self) -> object:
        raise NotImplementedError

    def set_live(self, pool: object, seq: int, marker: int) -> None:
        raise NotImplementedError

    def get_live(self, pool: object, seq: int) -> int:
        raise NotImplementedError

    def fail_when(self, pool: object, predicate: Callable[[SsmSnapshotSave], bool]) -> None:
        raise NotImplementedError


class FakeHarness(Harness):
    def make(self) -> FakeSnapshotPool:
        return FakeSnapshotPool(ROWS, SLOTS)

    def set_live(self, pool: object, seq: int, marker: int) -> None:
        assert isinstance(pool, FakeSnapshotPool)
        pool.live[seq] = marker

    def get_live(self, pool: object, seq: int) -> int:
        assert isinstance(pool, FakeSnapshotPool)
        value = pool.live[seq]
        assert isinstance(value, int)
        return value

    def fail_when(self, pool: object, predicate: Callable[[SsmSnapshotSave], bool]) -> None:
        assert isinstance(pool, FakeSnapshotPool)
        pool.fail_when(predicate)


class TorchHarness(Harness):
    def make(self) -> object:
        import torch

        from ssm_rollback.backends.torch import TorchSnapshotPool

        conv = torch.zeros(2, ROWS, 6, 3, dtype=torch.bfloat16)
        ssm = torch.zeros(2, ROWS, 2, 4, 5, dtype=torch.float32)
        return TorchSnapshotPool([conv, ssm], SLOTS, batch_dim=1)

    def set_live(self, pool: object, seq: int, marker: int) -> None:
        for state in pool.live_states:  # type: ignore[attr-defined]
            state.select(1, seq).fill_(marker)

    def get_live(self, pool: object, seq: int) -> int:
        values: set[float] = set()
        for state in pool.live_states:  # type: ignore[attr-defined]
            values.update(state.select(1, seq).float().flatten().tolist())
        assert len(values) == 1, f"row {seq} holds a mix: {values}"
        return int(values.pop())

    def fail_when(self, pool: object, predicate: Callable[[SsmSnapshotSave], bool]) -> None:
        pool.fail_when(predicate)  # type: ignore[attr-defined]


rows = st.lists(st.integers(0, ROWS - 1), min_size=0, max_size=ROWS, unique=True)


class PoolMachine(RuleBasedStateMachine):
    def make_harness(self) -> Harness:
        return FakeHarness()

    def __init__(self) -> None:
        super().__init__()
        self.harness = self.make_harness()
        self.pool = self.harness.make()
        self.live = dict.fromkeys(range(ROWS), 0)
        self.stored: dict[
            tuple[int, int], tuple[int, int]
        ] = {}  # (seq, slot) -> (position, marker)
        self.marker = 0
        for seq in range(ROWS):
            self.harness.set_live(self.pool, seq, 0)

    @rule(seqs=rows)
    def decode(self, seqs: list[int]) -> None:
        for seq in seqs:  # markers stay below 200: exact in every dtype
            self.marker = self.marker % 199 + 1
            self.live[seq] = self.marker
            self.harness.set_live(self.pool, seq, self.marker)

    @rule(seqs=rows, data=st.data())
    def save(self, seqs: list[int], data: st.DataObject) -> None:
        saves = [
            SsmSnapshotSave(seq, data.draw(st.integers(0, SLOTS - 1)), data.draw(st.integers(0, 9)))
            for seq in seqs
        ]
        failing = {s for s in saves if data.draw(st.booleans(), label=f"fail {s}")}
        self.harness.fail_when(self.pool, lambda save: save in failing)
        outcome = self.pool.save(saves)  # type: ignore[attr-defined]
        assert set(outcome.failed) == failing
        for s in saves:
            if s in failing:
                self.stored.pop((s.seq, s.slot), None)
            else:
                self.stored[s.seq, s.slot] = (s.token_position, self.live[s.seq])

    @rule(seqs=rows, data=st.data())
    def restore(self, seqs: list[int], data: st.DataObject) -> None:
        restores = []
        for seq in seqs:
            held = [(slot, pos) for (s, slot), (pos, _) in self.stored.items() if s == seq]
            valid: bool = data.draw(st.booleans(), label="valid")
            if held and valid:
                slot, position = data.draw(st.sampled_from(held))
            else:
                slot, position = data.draw(st.integers(0, SLOTS - 1)), data.draw(st.integers(0, 9))
            restores.append(SsmSnapshotRestore(seq, slot, position))
        stale = any(
            self.stored.get((r.seq, r.slot), (None, 0))[0] != r.token_position for r in restores
        )
        if stale:
            with pytest.raises(StaleSnapshotError):
                self.pool.restore(restores)  # type: ignore[attr-defined]
            return
        self.pool.restore(restores)  # type: ignore[attr-defined]
        for r in restores:
            marker = self.stored[r.seq, r.slot][1]
            self.live[r.seq] = marker

    @invariant()
    def agrees(self) -> None:
        for seq in range(ROWS):
            assert self.harness.get_live(self.pool, seq) == self.live[seq]
            for slot in range(SLOTS):
                held = self.stored.get((seq, slot))
                expected = None if held is None else held[0]
                assert self.pool.stored_position(seq, slot) == expected  # type: ignore[attr-defined]


TestFakePoolMachine = PoolMachine.TestCase


class TorchPoolMachine(PoolMachine):
    def make_harness(self) -> Harness:
        return TorchHarness()


@pytest.fixture(autouse=True)
def _needs_torch(request: pytest.FixtureRequest) -> None:
    if "Torch" in request.node.nodeid:
        pytest.importorskip("torch")


TestTorchPoolMachine = TorchPoolMachine.TestCase
