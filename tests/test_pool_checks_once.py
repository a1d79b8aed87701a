"""One home per rule: every batch is checked once, by the pool's batch rules, wherever it enters.

A batch the library built goes through ``apply_effects`` to the pool's copy
with one check; a direct ``pool.save`` is still checked in full; a pool that
implements only ``SnapshotPool`` is held to the same rules by
``apply_effects``; and verify buffers are a declared capability
(``VerifyBufferPool``), not a probed attribute.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import ParamSpec, TypeVar

import pytest
import torch

from ssm_rollback import (
    Effect,
    InvalidArgumentError,
    SaveBatch,
    SaveOutcome,
    SsmDecodeRing,
    SsmSnapshotRestore,
    SsmSnapshotSave,
    SsmStateAccept,
    StaleSnapshotError,
    VerifyBufferPool,
    apply_effects,
    snapshot_boundaries,
)
from ssm_rollback.backends.fake import FakeSnapshotPool
from ssm_rollback.backends.torch import TorchSnapshotPool
from ssm_rollback.pool import SnapshotPool
from ssm_rollback.pool._batch_rules import BatchChecks

Save, Restore = SsmSnapshotSave, SsmSnapshotRestore
P = ParamSpec("P")
R = TypeVar("R")


def step(rings: list[SsmDecodeRing], position: int) -> SaveBatch:
    rows = len(rings)
    return snapshot_boundaries(
        rings, positions=[position] * rows, is_boundary=[True] * rows, in_thinking=[False] * rows
    )


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """How often each batch check ran (every path to a copy goes through one of these)."""
    calls = {"saves": 0, "restores": 0, "accepts": 0}

    def spy(name: str, check: Callable[P, R]) -> Callable[P, R]:
        def counting(*args: P.args, **kwargs: P.kwargs) -> R:
            calls[name] += 1
            return check(*args, **kwargs)

        return counting

    monkeypatch.setattr(
        BatchChecks, "_check_save_columns", spy("saves", BatchChecks._check_save_columns)
    )
    monkeypatch.setattr(BatchChecks, "check_restores", spy("restores", BatchChecks.check_restores))
    monkeypatch.setattr(BatchChecks, "check_accepts", spy("accepts", BatchChecks.check_accepts))
    return calls


# -- checked once ---------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["fake", "torch"])
def test_a_library_built_batch_is_checked_once_on_its_way_to_the_copy(
    counted: dict[str, int], backend: str
) -> None:
    rings = [SsmDecodeRing(4) for _ in range(8)]
    pool: SnapshotPool = (
        FakeSnapshotPool(8, 4) if backend == "fake" else TorchSnapshotPool([torch.zeros(8, 4)], 4)
    )
    batch = step(rings, 5)
    assert apply_effects(pool, [batch], rings).ok
    assert counted == {"saves": 1, "restores": 0, "accepts": 0}
    assert [pool.stored_ticket(seq, batch.slots[seq]) for seq in range(8)] == list(batch.tickets)


def test_a_direct_save_is_still_checked_in_full(counted: dict[str, int]) -> None:
    pool = FakeSnapshotPool(2, 2)
    assert pool.save(SaveBatch(seqs=[0, 1], slots=[1, 1], positions=[3, 3], tickets=[3, 4])).ok
    assert counted["saves"] == 1
    with pytest.raises(InvalidArgumentError, match=r"'saves\[1\]\.seq' must be < the pool's"):
        pool.save([Save(0, 0, 4, 5), Save(2, 0, 4, 6)])
    with pytest.raises(InvalidArgumentError, match=r"each slot at most once per batch"):
        pool.save([Save(0, 0, 4, 5, source=0), Save(0, 0, 5, 6, source=1)])
    assert (pool.save_calls, pool.stored_position(0, 0)) == (1, None)


def test_a_step_of_saves_restores_and_accepts_is_checked_once_per_call(
    counted: dict[str, int],
) -> None:
    pool = FakeSnapshotPool(2, 2)
    pool.live[:] = ["a", "b"]
    pool.intermediate[1] = ["b+1", "b+2"]
    rings = [SsmDecodeRing(2), SsmDecodeRing(2)]
    effects: list[Effect] = [
        Save(0, 0, 1, 1),
        Restore(0, 0, 1, 1),
        SsmStateAccept(1, 1),
        Save(1, 1, 2, 2, source=0),
    ]
    apply_effects(pool, effects, rings)
    assert counted == {"saves": 2, "restores": 1, "accepts": 1}
    assert (pool.live, pool.stored_value(1, 1)) == (["a", "b+2"], "b+1")


def test_a_restore_after_a_failed_save_is_checked_again_and_refused(
    counted: dict[str, int],
) -> None:
    pool, rings = FakeSnapshotPool(2, 1), [SsmDecodeRing(1), SsmDecodeRing(1)]
    pool.fail_when(lambda save: save.seq == 0)
    with pytest.raises(StaleSnapshotError, match=r"'effects\[2\]' \(seq 0, slot 0\) holds nothing"):
        apply_effects(pool, [Save(0, 0, 1, 1), Save(1, 0, 1, 2), Restore(0, 0, 1, 1)], rings)
    # Once before the first copy, once more when a save the restore needed had failed.
    assert counted["restores"] == 2
    assert (pool.save_calls, pool.restore_calls) == (1, 0)


# -- a pool that implements only the protocol ------------------------------------------------


class PlainPool:
    """A third-party pool: ``SnapshotPool`` and nothing more, recording every call it gets."""

    def __init__(self, num_sequences: int, slots_per_sequence: int) -> None:
        self.num_sequences = num_sequences
        self.slots_per_sequence = slots_per_sequence
        self.held: dict[tuple[int, int], tuple[int, int]] = {}
        self.calls: list[str] = []

    def save(self, saves: Sequence[SsmSnapshotSave] | SaveBatch, /) -> SaveOutcome:
        self.calls.append("save")
        for save in saves:
            self.held[save.seq, save.slot] = (save.token_position, save.ticket)
        return SaveOutcome(())

    def restore(self, restores: Sequence[SsmSnapshotRestore], /) -> None:
        self.calls.append("restore")

    def stored_position(self, seq: int, slot: int) -> int | None:
        held = self.held.get((seq, slot))
        return None if held is None else held[0]

    def stored_ticket(self, seq: int, slot: int) -> int | None:
        held = self.held.get((seq, slot))
        return None if held is None else held[1]


class PlainVerifyPool(PlainPool):
    """A third-party pool that declares verify buffers: two intermediate states a row."""

    def accept(self, accepts: Sequence[SsmStateAccept], /) -> None:
        self.calls.append("accept")

    def intermediate_count(self, seq: int) -> int:
        return 2


@pytest.mark.parametrize(
    ("effects", "error", "message"),
    [
        ([Save(0, 0, 1, 1), Save(3, 0, 1, 2)], InvalidArgumentError, r"'effects\[1\]\.seq' must"),
        ([Save(0, 2, 1, 1)], InvalidArgumentError, r"'effects\[0\]\.slot' must be < the pool's"),
        (
            [
                Save(0, 1, 1, 1),
                SaveBatch(seqs=[1, 0], slots=[0, 1], positions=[1, 2], tickets=[2, 3]),
            ],
            InvalidArgumentError,
            r"row's state at most once per run of one kind, got seq 0 at effects\[0\] and "
            r"effects\[1\]\[1\]",
        ),
        (
            [Save(0, 1, 1, 1, source=0), Save(0, 1, 2, 2, source=1)],
            InvalidArgumentError,
            r"each slot at most once per run of one kind, got \(seq 0, slot 1\)",
        ),
        (
            [Save(0, 0, 1, 1), Restore(1, 0, 1, 1)],
            StaleSnapshotError,
            r"'effects\[1\]' \(seq 1, slot 0\) holds nothing",
        ),
        (
            [Save(0, 0, 1, 1), Restore(0, 0, 1, 2)],
            StaleSnapshotError,
            r"holds position 1 ticket 1, not position 1 ticket 2",
        ),
        ([Save(2, 0, 1, 1)], InvalidArgumentError, r"got none for seq 2 \(effects\[0\]\)"),
    ],
    ids=["row", "slot", "row twice", "slot twice", "stale", "other ticket", "no ring"],
)
@pytest.mark.parametrize("pool_type", [PlainPool, PlainVerifyPool])
def test_a_pool_with_only_the_protocol_gets_every_check_and_nothing_is_copied(
    effects: list[SsmSnapshotSave | SaveBatch | SsmSnapshotRestore],
    error: type[Exception],
    message: str,
    pool_type: type[PlainPool],
) -> None:
    pool = pool_type(3, 2)
    rings = [SsmDecodeRing(2), SsmDecodeRing(2)]  # none for row 2
    if pool_type is PlainPool and any(
        isinstance(e, Save) and e.source is not None for e in effects
    ):
        error, message = InvalidArgumentError, r"'pool' must be a VerifyBufferPool"
    with pytest.raises(error, match=message):
        apply_effects(pool, effects, rings)
    assert (pool.calls, pool.held) == ([], {})


def test_a_pool_with_only_the_protocol_takes_a_restore_of_a_slot_saved_earlier_in_the_step() -> (
    None
):
    pool, rings = PlainPool(2, 2), [SsmDecodeRing(2), SsmDecodeRing(2)]
    batch = step(rings, 4)
    restores = [Restore(seq, batch.slots[seq], 4, batch.tickets[seq]) for seq in range(2)]
    assert apply_effects(pool, [batch, *restores], rings).ok
    assert pool.calls == ["save", "restore"]


def test_a_verify_pool_of_a_third_party_is_checked_against_its_buffers() -> None:
    pool, rings = PlainVerifyPool(2, 2), [SsmDecodeRing(2), SsmDecodeRing(2)]
    assert isinstance(pool, VerifyBufferPool)
    with pytest.raises(StaleSnapshotError, match=r"'effects\[1\]' names intermediate state 2"):
        apply_effects(pool, [SsmStateAccept(0, 1), SsmStateAccept(1, 2)], rings)
    with pytest.raises(StaleSnapshotError, match=r"'effects\[0\]' names intermediate state 2"):
        apply_effects(pool, [Save(0, 0, 1, 1, source=2)], rings)
    assert pool.calls == []
    apply_effects(pool, [SsmStateAccept(0, 1), Save(0, 0, 1, 1, source=1)], rings)
    assert pool.calls == ["accept", "save"]


# -- declared capabilities -----------------------------------------------------------------


def test_verify_buffers_are_a_declared_capability() -> None:
    assert isinstance(FakeSnapshotPool(1, 1), VerifyBufferPool)
    assert isinstance(TorchSnapshotPool([torch.zeros(1, 2)], 1), VerifyBufferPool)
    assert isinstance(PlainPool(1, 1), SnapshotPool)
    assert not isinstance(PlainPool(1, 1), VerifyBufferPool)


@pytest.mark.parametrize(
    ("effects", "needed"),
    [
        ([SsmStateAccept(0, 0)], r"for SsmStateAccept effects"),
        ([Save(0, 0, 1, 1, source=0)], r"for 'effects\[0\]' \(a save from intermediate state 0\)"),
    ],
    ids=["accept", "save from a buffer"],
)
def test_a_pool_without_verify_buffers_gets_a_clear_error(
    effects: list[SsmStateAccept | SsmSnapshotSave], needed: str
) -> None:
    pool = PlainPool(1, 1)
    with pytest.raises(
        InvalidArgumentError,
        match=rf"'pool' must be a VerifyBufferPool \(with accept\(\).*{needed}",
    ):
        apply_effects(pool, effects, [SsmDecodeRing(1)])
    assert pool.calls == []


def test_only_a_batch_the_library_built_is_trusted_to_be_distinct() -> None:
    """``SaveBatch.distinct`` skips rules 2-3 only for the library's own batches; a caller's
    batch (or one rebuilt from its dict) with a row twice is refused, and equality ignores it."""
    from ssm_rollback import InvalidArgumentError, SaveBatch, effect_from_dict, snapshot_boundaries
    from ssm_rollback.backends.fake import FakeSnapshotPool

    rings = [SsmDecodeRing(2) for _ in range(3)]
    built = snapshot_boundaries(
        rings, positions=[1, 1, 1], is_boundary=[True] * 3, in_thinking=[False] * 3
    )
    assert built.distinct
    rebuilt = effect_from_dict(built.to_dict())
    assert isinstance(rebuilt, SaveBatch)
    assert not rebuilt.distinct
    assert rebuilt == built
    twice = SaveBatch([0, 0], [0, 1], [1, 2], [7, 8])
    assert not twice.distinct
    pool = FakeSnapshotPool(3, 2)
    with pytest.raises(InvalidArgumentError, match="each row's state at most once"):
        pool.save(twice)
    assert pool.stored_ticket(0, 0) is None
    pool.save(built)
    assert [pool.stored_ticket(s, 0) for s in range(3)] == list(built.tickets)


def test_an_evolved_library_batch_is_checked_again_and_never_trusted() -> None:
    """``attrs.evolve`` of a library-built batch goes through ``SaveBatch``'s checks: its
    columns are checked and it is not ``distinct``, so a row made to appear twice is refused
    by the pool (it used to raise ``TypeError`` over the ``distinct`` field)."""
    import attrs

    rings = [SsmDecodeRing(2) for _ in range(2)]
    built = step(rings, 1)
    assert built.distinct
    moved = attrs.evolve(built, slots=(1, 1))
    assert moved.slots == (1, 1)
    assert moved.seqs == built.seqs
    assert not moved.distinct
    twice = attrs.evolve(built, seqs=(0, 0))
    assert not twice.distinct
    pool = FakeSnapshotPool(2, 2)
    with pytest.raises(InvalidArgumentError, match="each row's state at most once"):
        pool.save(twice)
    assert pool.stored_ticket(0, 0) is None
    with pytest.raises(InvalidArgumentError, match=r"'seqs\[1\]' must be an int >= 0"):
        attrs.evolve(built, seqs=(0, -1))


def test_a_third_party_pool_gets_no_sources_column_when_every_save_reads_the_live_state() -> None:
    """Single saves from the live state reach the pool as one batch without ``sources``:
    a pool that only copies live states never sees an intermediate column."""
    received: list[SaveBatch] = []

    class Recording(PlainPool):
        def save(self, saves: Sequence[SsmSnapshotSave] | SaveBatch, /) -> SaveOutcome:
            assert isinstance(saves, SaveBatch)
            received.append(saves)
            return super().save(saves)

    pool = Recording(2, 2)
    rings = [SsmDecodeRing(2), SsmDecodeRing(2)]
    apply_effects(pool, [Save(0, 0, 1, 1), Save(1, 1, 2, 2)], rings)
    assert [batch.sources for batch in received] == [None]
