"""apply_effects: order, batching, failed saves, and refusals before any copy."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from ssm_rollback import (
    Effect,
    InvalidArgumentError,
    SaveOutcome,
    SlotTags,
    SsmDecodeRing,
    SsmSnapshotRestore,
    SsmSnapshotSave,
    SsmStateAccept,
    StaleSnapshotError,
    apply_effects,
    snapshot_boundary_if_ssm,
)
from ssm_rollback.backends.fake import FakeSnapshotPool

Save, Restore = SsmSnapshotSave, SsmSnapshotRestore


def setup(rows: int = 3, slots: int = 2) -> tuple[FakeSnapshotPool, list[SsmDecodeRing]]:
    pool = FakeSnapshotPool(rows, slots)
    pool.live[:] = [f"row{seq}@0" for seq in range(rows)]
    return pool, [SsmDecodeRing(slots) for _ in range(rows)]


def test_consecutive_effects_of_a_kind_are_one_call_in_order() -> None:
    pool, rings = setup()
    effects: list[Effect] = [
        Save(0, 0, 1, 1),
        Save(1, 0, 1, 1),
        Restore(0, 0, 1, 1),
        Save(2, 1, 4, 4),
        Restore(1, 0, 1, 1),
    ]
    for ring in rings:
        ring.record(1)
    assert apply_effects(pool, effects, rings) == SaveOutcome(())
    assert (pool.save_calls, pool.restore_calls, pool.copies) == (2, 2, 5)


def test_a_save_after_a_restore_sees_the_restored_state() -> None:
    pool, rings = setup()
    pool.save([Save(0, 0, 3, 3)])
    pool.live[0] = "later"
    apply_effects(pool, [Restore(0, 0, 3, 3), Save(0, 1, 3, 3)], rings)
    assert pool.stored_value(0, 1) == "row0@0"


def test_failed_saves_are_discarded_from_rings_given_as_a_mapping() -> None:
    pool = FakeSnapshotPool(8, 2)
    rings = {5: SsmDecodeRing(2), 7: SsmDecodeRing(2)}
    saves = []
    for seq, ring in rings.items():
        save = snapshot_boundary_if_ssm(
            ring, seq=seq, token_position=10, is_boundary=True, in_thinking=False
        )
        assert save is not None
        saves.append(save)
    pool.fail_when(lambda save: save.seq == 7)
    outcome = apply_effects(pool, saves, rings)
    assert outcome.failed == (saves[1],)
    assert rings[5].snapshot_positions() == (10,)
    assert rings[7].snapshot_positions() == ()


def test_a_failed_save_the_ring_already_dropped_is_left_alone() -> None:
    pool, rings = setup()
    rings[0].record(5)
    rings[0].truncate_after(4)  # the scheduler rolled back before applying
    rings[0].record(5)  # ...and recorded 5 again, in slot 0 again
    pool.fail_when(lambda save: True)
    apply_effects(pool, [Save(0, 1, 5, 5)], rings)  # a save for a slot the ring does not use
    assert rings[0].snapshot_positions() == (5,)


def test_every_effect_is_checked_before_the_first_copy() -> None:
    pool, rings = setup()
    with pytest.raises(InvalidArgumentError, match=r"'effects\[1\]' must be an SsmSnapshotSave"):
        apply_effects(pool, [Save(0, 0, 1, 1), "save"], rings)  # type: ignore[list-item]
    with pytest.raises(InvalidArgumentError, match="got none for seq 9"):
        apply_effects(FakeSnapshotPool(10, 1), [Save(0, 0, 1, 1), Save(9, 0, 1, 1)], rings)
    assert pool.save_calls == 0


def test_a_stale_restore_is_refused_before_the_batches_before_it_copy() -> None:
    pool, rings = setup()
    rings[0].record(1)
    with pytest.raises(StaleSnapshotError, match=r"'effects\[1\]'.* holds nothing"):
        apply_effects(pool, [Save(0, 0, 1, 1), Restore(1, 0, 1, 1), Save(2, 0, 1, 1)], rings)
    assert pool.stored_position(0, 0) is None  # nothing ran
    assert pool.save_calls == 0


def test_an_out_of_range_restore_is_refused_before_an_earlier_save_batch_copies() -> None:
    pool, rings = setup()
    with pytest.raises(InvalidArgumentError, match=r"'effects\[1\].seq' must be < the pool's"):
        apply_effects(pool, [Save(0, 0, 1, 1), Restore(3, 0, 1, 1)], rings)
    with pytest.raises(InvalidArgumentError, match=r"'effects\[1\].slot' must be < the pool's"):
        apply_effects(pool, [Save(0, 0, 1, 1), Restore(0, 2, 1, 1)], rings)
    assert (pool.save_calls, pool.stored_position(0, 0)) == (0, None)


def test_a_restore_of_a_slot_saved_earlier_in_the_same_call_is_accepted() -> None:
    pool, rings = setup()
    apply_effects(pool, [Save(0, 0, 1, 1), Restore(0, 0, 1, 1)], rings)
    assert pool.live[0] == "row0@0"
    with pytest.raises(StaleSnapshotError, match="position 1 ticket 1"):
        apply_effects(pool, [Save(0, 1, 2, 2), Restore(0, 0, 1, 9)], rings)
    assert pool.stored_position(0, 1) is None


def test_a_restore_that_needed_a_failed_save_is_refused_after_the_batches_before_it() -> None:
    pool, rings = setup()
    pool.fail_when(lambda save: save.seq == 0)
    with pytest.raises(StaleSnapshotError, match="holds nothing"):
        apply_effects(pool, [Save(0, 0, 1, 1), Save(1, 0, 1, 1), Restore(0, 0, 1, 1)], rings)
    assert (pool.stored_position(0, 0), pool.stored_position(1, 0)) == (None, 1)
    assert pool.live[0] == "row0@0"


@pytest.mark.parametrize(
    ("pool", "effects", "rings", "message"),
    [
        (None, [], [], "'pool' must be a SnapshotPool"),
        ([], [], [], "'pool' must be a SnapshotPool"),
        (FakeSnapshotPool(1, 1), None, [], "'effects' must be an iterable"),
        (FakeSnapshotPool(1, 1), "ab", [], "'effects' must be an iterable"),
        (FakeSnapshotPool(1, 1), [], None, "'rings' must be a sequence"),
        (FakeSnapshotPool(1, 1), [], 3, "'rings' must be a sequence"),
    ],
    ids=["pool None", "pool list", "effects None", "effects str", "rings None", "rings int"],
)
def test_foreign_arguments_are_library_errors(
    pool: object, effects: object, rings: object, message: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        apply_effects(pool, effects, rings)  # type: ignore[arg-type]


def test_no_effects_no_calls() -> None:
    pool, rings = setup()
    assert apply_effects(pool, [], rings).ok
    assert (pool.save_calls, pool.restore_calls) == (0, 0)


@pytest.mark.parametrize(
    ("write", "match"),
    [
        # -1 tagged the last slot (a Python index from the end): seq 1's, not seq 0's.
        (lambda t: t.commit([-1], [5], [7]), r"'flat\[0\]' must be an int >= 0"),
        (lambda t: t.commit([6], [5], [7]), r"'flat\[0\]' must be < 6"),
        (lambda t: t.commit([0], [-5], [7]), r"'positions\[0\]' must be an int >= 0"),
        (lambda t: t.commit([0], [5], ["t"]), r"'tickets\[0\]' must be an int >= 0"),
        (lambda t: t.commit([0, 1], [5], [7, 8]), "must have one length"),
        (lambda t: t.commit([0], [5], [7], failed=[1]), r"'failed\[0\]' must be < 1"),
        (lambda t: t.forget([-1]), r"'flat\[0\]' must be an int >= 0"),
        (lambda t: t.forget([99]), r"'flat\[0\]' must be < 6"),
        (lambda t: t.commit_accepts([2], [7]), r"'rows\[0\]' must be < 2"),
        (lambda t: t.commit_accepts([0], ["t"]), r"'tickets\[0\]' must be an int >= 0"),
        (lambda t: t.commit_shared([-1], [4], [7]), r"'slots\[0\]' must be an int >= 0"),
        (lambda t: t.commit_shared([2], [4], [7]), r"'slots\[0\]' must be < 2"),
        (lambda t: t.forget_shared([2]), r"'slots\[0\]' must be < 2"),
    ],
)
def test_slot_tags_refuse_writes_out_of_range_and_tag_nothing(
    write: Callable[[SlotTags], None], match: str
) -> None:
    tags = SlotTags(2, 3, shared_slots=2)
    with pytest.raises(InvalidArgumentError, match=match):
        write(tags)
    assert all(tags.stored_ticket(seq, slot) is None for seq in range(2) for slot in range(3))
    assert [tags.stored_shared_ticket(slot) for slot in range(2)] == [None, None]


def test_commit_accepts_never_lowers_a_rows_last_accept() -> None:
    """``commit_accepts`` took a ticket older than the row's last, or a row twice with the
    older ticket last: the row's mark went down, and rule 7 let the newer accept through
    again (an accept applied twice moves the live state back)."""
    tags = SlotTags(2, 1)
    tags.commit_accepts([0], [900])
    for rows, tickets, match in (
        ([0], [5], r"'tickets\[0\]' must be newer than row 0's last accept \(ticket 900\)"),
        ([0], [900], r"'tickets\[0\]' must be newer"),
        (
            [1, 1],
            [901, 902],
            r"'rows' must name each row at most once per batch, got seq 1 at rows\[0\] "
            r"and rows\[1\]",
        ),
        ([1, 0], [903, 6], r"'tickets\[1\]' must be newer"),  # row 1 not recorded either
    ):
        with pytest.raises(InvalidArgumentError, match=match):
            tags.commit_accepts(rows, tickets)
    with pytest.raises(StaleSnapshotError, match="not newer than the last accept"):
        tags.check_accepts([SsmStateAccept(0, 0, 900)])
    assert tags.check_accepts([SsmStateAccept(1, 0, 1)]).tickets == [1]  # row 1: nothing held
    tags.commit_accepts([0, 1], [901, None])  # an unticketed accept records nothing
    with pytest.raises(StaleSnapshotError, match="ticket 901"):
        tags.check_accepts([SsmStateAccept(0, 0, 901)])


def test_slot_tags_on_their_own() -> None:
    tags = SlotTags(2, 3)
    assert (tags.num_sequences, tags.slots_per_sequence) == (2, 3)
    assert tags.index(1, 2) == 5
    saves = [Save(1, 2, 4, 40), Save(0, 1, 4, 41)]
    assert tags.check_saves(saves) == ([1, 0], [5, 1], [4, 4], [40, 41], None)
    tags.commit([5, 1], [4, 4], [40, 41], failed=[1])
    assert (tags.stored_position(1, 2), tags.stored_ticket(1, 2)) == (4, 40)
    assert (tags.stored_position(0, 1), tags.stored_ticket(0, 1)) == (None, None)
    assert tags.check_restores([Restore(1, 2, 4, 40)]) == ([1], [5])
    with pytest.raises(StaleSnapshotError, match="holds position 4 ticket 40"):
        tags.check_restores([Restore(1, 2, 4, 39)])
    tags.forget([5])
    assert tags.stored_position(1, 2) is None
    assert repr(tags) == "SlotTags(num_sequences=2, slots_per_sequence=3, held=0)"
    with pytest.raises(InvalidArgumentError, match="must be a sequence"):
        tags.check_saves(iter([Save(0, 0, 1, 1)]))  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="'seq' must be an int"):
        tags.stored_position(-1, 0)


@pytest.mark.parametrize(("seq", "slot", "name"), [(0, 3, "'slot'"), (2, 0, "'seq'")])
def test_slot_tags_index_refuses_ids_out_of_range(seq: int, slot: int, name: str) -> None:
    # (0, 3) on a 3-slot row would name row 1's slot 0 if unchecked.
    with pytest.raises(InvalidArgumentError, match=name):
        SlotTags(2, 3).index(seq, slot)


def test_a_slot_count_the_process_cannot_hold_is_a_library_error() -> None:
    with pytest.raises(InvalidArgumentError, match="'slots_per_sequence'"):
        SlotTags(2, 10**15)
    with pytest.raises(InvalidArgumentError, match="'slots_per_sequence'"):
        FakeSnapshotPool(2, 10**15)


def test_many_stale_restores_are_summarised() -> None:
    tags = SlotTags(8, 1)
    with pytest.raises(StaleSnapshotError, match=r"\(and 4 more\)"):
        tags.check_restores([Restore(seq, 0, 1, 1) for seq in range(8)])


class _ProtocolPool:
    """A pool of the protocol alone, over a fake one; ``sizes`` and ``outcome`` break it."""

    def __init__(self, sizes: dict[str, object], outcome: bool = True) -> None:
        self._inner = FakeSnapshotPool(1, 1)
        self._outcome = outcome
        for name, value in sizes.items():
            setattr(self, name, value)

    def save(self, saves: object) -> SaveOutcome | None:
        outcome = self._inner.save(saves)  # type: ignore[arg-type]
        return outcome if self._outcome else None

    def restore(self, restores: object) -> None:
        self._inner.restore(restores)  # type: ignore[arg-type]

    def stored_position(self, seq: int, slot: int) -> int | None:
        return self._inner.stored_position(seq, slot)

    def stored_ticket(self, seq: int, slot: int) -> int | None:
        return self._inner.stored_ticket(seq, slot)


@pytest.mark.parametrize(
    ("sizes", "match"),
    [
        ({"slots_per_sequence": 1}, "with a num_sequences attribute"),
        ({"num_sequences": 1}, "with a slots_per_sequence attribute"),
        (
            {"num_sequences": 1, "slots_per_sequence": "1"},
            "'pool.slots_per_sequence' must be an int",
        ),
        ({"num_sequences": True, "slots_per_sequence": 1}, "'pool.num_sequences' must be an int"),
        ({"num_sequences": -1, "slots_per_sequence": 1}, "'pool.num_sequences' must be an int"),
    ],
)
def test_a_protocol_pool_without_int_sizes_is_named_before_any_copy(
    sizes: dict[str, object], match: str
) -> None:
    """A pool of the protocol alone without ``num_sequences`` raised AttributeError, one with a
    str size TypeError, and a bool or negative size was used as it was."""
    pool, ring = _ProtocolPool(sizes), SsmDecodeRing(1)
    save = snapshot_boundary_if_ssm(
        ring, seq=0, token_position=1, is_boundary=True, in_thinking=False
    )
    with pytest.raises(InvalidArgumentError, match=match):
        apply_effects(pool, [save], [ring])  # type: ignore[arg-type, list-item]
    assert pool._inner.save_calls == 0


def test_a_protocol_pool_whose_save_returns_no_outcome_is_named() -> None:
    """Its ``save`` returning ``None`` raised AttributeError from ``apply_effects``."""
    from ssm_rollback import InvariantError

    pool = _ProtocolPool({"num_sequences": 1, "slots_per_sequence": 1}, outcome=False)
    ring = SsmDecodeRing(1)
    save = snapshot_boundary_if_ssm(
        ring, seq=0, token_position=1, is_boundary=True, in_thinking=False
    )
    with pytest.raises(InvariantError, match=r"the pool's save\(\) must return a SaveOutcome"):
        apply_effects(pool, [save], [ring])  # type: ignore[arg-type, list-item]
