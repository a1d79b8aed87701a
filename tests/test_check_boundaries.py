"""Exact boundaries of every check: the cases hand-made mutants showed no other test pinned.

Each test names the bug class it pins. ``tests/mutation/`` holds the mutants
and the script that shows each of these tests killing its mutant.
"""

from __future__ import annotations

import array

import pytest

from ssm_rollback import (
    Effect,
    InvalidArgumentError,
    InvariantError,
    SaveBatch,
    SlotTags,
    SsmDecodeRing,
    SsmPrefixRestore,
    SsmPrefixSave,
    SsmRingEntry,
    SsmSnapshotRestore,
    SsmSnapshotSave,
    StaleSnapshotError,
    apply_effects,
    rollback_to_boundary,
    snapshot_boundaries,
    snapshot_boundary_if_ssm,
)
from ssm_rollback._core.ring._tickets import _BLOCK
from ssm_rollback.backends.fake import FakeSnapshotPool
from ssm_rollback.reserve import (
    DepthRule,
    decode_rollback_ring_slots,
    shipped_config,
    state_spec_from_hf_config,
)

Save, Restore = SsmSnapshotSave, SsmSnapshotRestore


def ring_with(capacity: int, *positions: int) -> SsmDecodeRing:
    ring = SsmDecodeRing(capacity)
    for position in positions:
        ring.record(position)
    return ring


def _corrupt(ring: SsmDecodeRing, field: str, value: object) -> None:
    # Reaching into private state is the only way to break a correct ring.
    object.__setattr__(ring, field, value)


# -- apply_effects: row ids equal to the count ------------------------------------------------


def test_a_row_equal_to_num_sequences_is_refused_before_any_copy() -> None:
    """Off by one in apply_effects' row bound (``seq >= rows`` as ``seq > rows``)."""
    pool = FakeSnapshotPool(2, 2)
    # A ring for the bad row too: only the bound can refuse it.
    rings = [SsmDecodeRing(2) for _ in range(3)]
    with pytest.raises(InvalidArgumentError, match=r"'effects\[1\]\.seq' must be < the pool's"):
        apply_effects(pool, [Save(0, 0, 1, 1), Save(2, 0, 1, 2)], rings)
    with pytest.raises(InvalidArgumentError, match=r"'effects\[1\]\.seq' must be < the pool's"):
        apply_effects(pool, [Save(0, 0, 1, 1), Restore(2, 0, 1, 2)], rings)
    assert pool.save_calls == 0


def test_a_slot_equal_to_slots_per_sequence_is_refused_before_any_copy() -> None:
    """Off by one in apply_effects' slot bound (``slot >= slots`` as ``slot > slots``)."""
    pool = FakeSnapshotPool(2, 2)
    rings = [SsmDecodeRing(2) for _ in range(2)]
    with pytest.raises(InvalidArgumentError, match=r"'effects\[1\]\.slot' must be < the pool's"):
        apply_effects(pool, [Save(0, 0, 1, 1), Restore(1, 2, 1, 2)], rings)
    assert pool.save_calls == 0


def test_a_saved_row_equal_to_the_number_of_rings_is_a_library_error() -> None:
    """Off by one in the ring lookup (``seq < len(rings)`` as ``<=``: a bare ``IndexError``)."""
    pool = FakeSnapshotPool(3, 2)
    rings = [SsmDecodeRing(2) for _ in range(2)]
    with pytest.raises(InvalidArgumentError, match="got none for seq 2"):
        apply_effects(pool, [Save(2, 0, 1, 1)], rings)
    assert pool.save_calls == 0


# -- rollback_to_boundary ----------------------------------------------------------------------


def test_a_snapshot_one_past_the_current_length_is_a_bookkeeping_error() -> None:
    """Off by one in the ``current_len`` guard: a ring one token ahead must raise."""
    ring = ring_with(2, 7)
    with pytest.raises(InvalidArgumentError, match="'current_len' must be >= every live"):
        rollback_to_boundary(ring, [3], seq=0, current_len=6)
    assert ring.snapshot_positions() == (7,)


def test_the_first_boundary_is_validated() -> None:
    """``boundaries[0]`` never read through the checks: ``[-1, 5]`` must not give keep_len -1."""
    ring = ring_with(2, 5)
    for hybrid in (True, False):
        with pytest.raises(InvalidArgumentError, match=r"'boundaries\[0\]' must be an int >= 0"):
            rollback_to_boundary(ring, [-1, 5], seq=0, current_len=6, at_most=3, hybrid=hybrid)
    assert ring.snapshot_positions() == (5,)


def test_the_pair_at_indices_0_and_1_is_validated() -> None:
    """The order check skipping the first pair (``index > 0`` as ``index > 1``)."""
    ring = ring_with(2, 3)
    for boundaries in ([-1, 5], [5, 3]):
        for hybrid in (True, False):
            with pytest.raises(InvalidArgumentError, match=r"boundaries\[0\]"):
                rollback_to_boundary(ring, boundaries, seq=0, current_len=6, hybrid=hybrid)
    assert ring.snapshot_positions() == (3,)


def test_a_negative_position_is_refused_even_when_nothing_would_be_recorded() -> None:
    """The per-row fast path without ``token_position < 0``: the ring's own check is only
    reached for a boundary outside thinking, so the other calls must refuse it too."""
    ring = ring_with(2, 3)
    for is_boundary, in_thinking in ((False, False), (True, True), (False, True)):
        with pytest.raises(InvalidArgumentError, match="'token_position' must be an int >= 0"):
            snapshot_boundary_if_ssm(
                ring, seq=0, token_position=-1, is_boundary=is_boundary, in_thinking=in_thinking
            )
    assert ring.snapshot_positions() == (3,)


# -- the ring's invariant checker ---------------------------------------------------------------


def test_check_valid_refuses_slot_tables_one_longer_than_the_capacity() -> None:
    """Off by one in check_valid's length check: a table of ``capacity + 1`` slots."""
    ring = ring_with(3, 1, 2)
    tickets = list(ring._tickets)
    _corrupt(ring, "_positions", [1, 2, -1, -1])
    _corrupt(ring, "_tickets", [*tickets, 0, 0])
    with pytest.raises(InvariantError, match="4 positions and 4 tickets for capacity 3"):
        ring.check_valid()
    full = ring_with(3, 1, 2, 3)
    assert len(full._positions) == full.capacity
    full.check_valid()


def test_check_valid_refuses_a_cursor_equal_to_the_capacity_on_a_full_table() -> None:
    """Off by one in check_valid's cursor bound (``cursor < capacity`` as ``<=``).

    On a table shorter than the capacity the past-the-slots-used check also
    refuses such a cursor; on a full one only the bound does.
    """
    ring = ring_with(3, 1, 2, 3)
    ring.check_valid()
    _corrupt(ring, "_cursor", 3)
    with pytest.raises(InvariantError, match=r"cursor 3 outside \[0, 3\)"):
        ring.check_valid()


# -- the ring's tickets --------------------------------------------------------------------------


def test_tickets_stay_unique_across_batched_steps_and_single_records() -> None:
    """A batched step's block of tickets overlapping the next mint (rule 10).

    A step of four rows takes four tickets with one mint; a record on
    another ring right after must not get one of them, and every later
    ticket is larger than every earlier one.
    """
    rings = [SsmDecodeRing(2) for _ in range(4)]
    columns = {"is_boundary": [True] * 4, "in_thinking": [False] * 4}
    first = snapshot_boundaries(rings, positions=[1] * 4, **columns)
    other = SsmDecodeRing(2)
    other.record(1)
    entry = other.entry_for(1)
    assert entry is not None
    second = snapshot_boundaries(rings, positions=[2] * 4, **columns)
    tickets = [*first.tickets, entry.ticket, *second.tickets]
    assert len(set(tickets)) == len(tickets)
    assert tickets == sorted(tickets)
    for ring in rings:
        ring.check_valid()


def test_a_batched_step_of_more_rows_than_one_block_of_tickets() -> None:
    """The block count rounded down: a step of ``_BLOCK + 1`` recording rows mints two blocks."""
    count = _BLOCK + 1
    rings = [SsmDecodeRing(1) for _ in range(count)]
    batch = snapshot_boundaries(
        rings, positions=[1] * count, is_boundary=[True] * count, in_thinking=[False] * count
    )
    assert len(batch) == count
    assert len(set(batch.tickets)) == count
    assert list(batch.tickets) == sorted(batch.tickets)
    for k in (0, _BLOCK - 1, _BLOCK):
        assert rings[k].entries == (SsmRingEntry(1, 0, batch.tickets[k]),)


# -- the ring depth policy -----------------------------------------------------------------------


def test_a_fit_of_exactly_max_slots_is_the_maximum_rule() -> None:
    """Off by one in the policy (``fit >= max_slots`` as ``>``): a fit of exactly 8 is MAXIMUM."""
    spec = state_spec_from_hf_config(shipped_config("nemotron-h-8b"))
    per = spec.bytes_per_snapshot
    exact = decode_rollback_ring_slots(spec, max_sequences=4, free_bytes=8 * 4 * per, env={})
    assert (exact.slots, exact.rule, exact.fit) == (8, DepthRule.MAXIMUM, 8)
    short = decode_rollback_ring_slots(spec, max_sequences=4, free_bytes=8 * 4 * per - 1, env={})
    assert (short.slots, short.rule, short.fit) == (7, DepthRule.MEMORY, 7)


# -- the invariant checker, failed saves, stale restores and copy errors ------------------------


def test_the_newest_slot_is_found_across_the_wrap() -> None:
    """The newest-slot guess at ``cursor - 1`` when the cursor has wrapped to 0."""
    ring = ring_with(3, 1, 2, 3)
    assert ring.next_slot == 0
    assert ring.slot_for_position(3) == 2
    entry = ring.entry_for(3)
    assert entry is not None
    assert entry.snapshot_slot == 2
    ring.discard(3)
    assert (ring.next_slot, ring.slot_for_position(2)) == (2, 1)


def test_check_valid_refuses_tickets_out_of_order() -> None:
    """The ticket-order check dropped: an older entry with a newer ticket than a later one."""
    ring = ring_with(3, 1, 2)
    first, second = ring._tickets
    _corrupt(ring, "_tickets", [second, first])
    with pytest.raises(InvariantError, match="not ascending"):
        ring.check_valid()


def test_a_late_failed_save_leaves_the_re_recorded_entry_at_its_position() -> None:
    """Forgetting a failed save by position and slot alone, without its ticket.

    The save for position 5 was made, then the scheduler rolled back and
    recorded 5 again - the same slot, a new ticket - before the old save
    failed: the new entry is not the failed save's, and must stay.
    """
    pool = FakeSnapshotPool(1, 2)
    ring = SsmDecodeRing(2)
    ring.record(5)
    old = ring.entry_for(5)
    ring.truncate_after(4)
    ring.record(5)
    new = ring.entry_for(5)
    assert old is not None
    assert new is not None
    assert (old.snapshot_slot, old.token_position) == (new.snapshot_slot, new.token_position)
    pool.fail_when(lambda save: True)
    outcome = apply_effects(pool, [Save(0, old.snapshot_slot, 5, old.ticket)], [ring])
    assert len(outcome.failed) == 1
    assert ring.entry_for(5) == new


def test_a_failed_save_for_another_slot_leaves_the_entry() -> None:
    """Forgetting a failed save by ticket alone, without its slot: the entry's slot is intact."""
    pool = FakeSnapshotPool(1, 2)
    ring = SsmDecodeRing(2)
    ring.record(5)
    entry = ring.entry_for(5)
    assert entry is not None
    assert entry.snapshot_slot == 0
    pool.fail_when(lambda save: True)
    apply_effects(pool, [Save(0, 1, 5, entry.ticket)], [ring])
    assert ring.entry_for(5) == entry


def test_a_restore_with_the_right_ticket_but_another_position_is_stale() -> None:
    """The position comparison dropped from SlotTags.check_restores: both must match."""
    tags = SlotTags(1, 2)
    flat = [tags.index(0, 0)]
    tags.commit(flat, [4], [40])
    assert tags.check_restores([Restore(0, 0, 4, 40)]) == ([0], flat)
    with pytest.raises(StaleSnapshotError, match="holds position 4 ticket 40"):
        tags.check_restores([Restore(0, 0, 5, 40)])


class _Unreadable:
    """A live list whose reads raise: the copy of a save batch fails half way."""

    def __init__(self, values: list[object]) -> None:
        self.values = values

    def __getitem__(self, seq: int) -> object:
        if seq == 2:
            raise RuntimeError("device error")
        return self.values[seq]

    def __setitem__(self, seq: int, value: object) -> None:
        self.values[seq] = value


def test_a_copy_that_raises_leaves_every_slot_of_the_batch_holding_nothing() -> None:
    """Forgetting only the copied slots (or only positions) when a copy raises half way.

    The batch's failed save and the rows copied before the error must all
    hold nothing - position and ticket - afterwards.
    """
    pool = FakeSnapshotPool(3, 1)
    pool.live[:] = ["a", "b", "c"]
    assert pool.save([Save(0, 0, 1, 1), Save(1, 0, 1, 2), Save(2, 0, 1, 3)]).ok
    pool.live = _Unreadable(["a2", "b2", "c2"])  # type: ignore[assignment]
    pool.fail_when(lambda save: save.seq == 1)
    with pytest.raises(RuntimeError, match="device error"):
        pool.save([Save(0, 0, 2, 4), Save(1, 0, 2, 5), Save(2, 0, 2, 6)])
    for seq in range(3):
        assert (pool.stored_position(seq, 0), pool.stored_ticket(seq, 0)) == (None, None)


def test_a_shared_copy_that_raises_leaves_every_shared_slot_of_the_batch_holding_nothing() -> None:
    """The same for the shared slots (SPEC 13): the slots copied before the error, the failed
    save's and the rest all hold nothing, so no restore reads a half-written one."""
    pool = FakeSnapshotPool(3, 1, shared_slots=3)
    pool.live[:] = ["a", "b", "c"]
    assert pool.save_shared([SsmPrefixSave(seq, seq, 4, 1 + seq) for seq in range(3)]).ok
    pool.live = _Unreadable(["a2", "b2", "c2"])  # type: ignore[assignment]
    pool.fail_shared_when(lambda save: save.seq == 1)
    with pytest.raises(RuntimeError, match="device error"):
        pool.save_shared([SsmPrefixSave(seq, seq, 5, 4 + seq) for seq in range(3)])
    assert [pool.stored_shared_ticket(slot) for slot in range(3)] == [None, None, None]
    with pytest.raises(StaleSnapshotError):
        pool.restore_shared([SsmPrefixRestore(0, 0, 4, 1)])


def test_a_failed_shared_save_copies_nothing_into_its_slot() -> None:
    """A shared save the fault predicate fails copies nothing: the other saves of its batch
    are copied, and its slot's storage keeps what it held."""
    pool = FakeSnapshotPool(2, 1, shared_slots=2)
    pool.live[:] = ["a", "b"]
    pool.fail_shared_when(lambda save: save.seq == 1)
    outcome = pool.save_shared([SsmPrefixSave(0, 0, 3, 1), SsmPrefixSave(1, 1, 3, 2)])
    assert outcome.failed_shared == (SsmPrefixSave(1, 1, 3, 2),)
    assert pool.copies == 1
    assert pool.stored_shared_value(0) == "a"
    assert pool.stored_shared_ticket(1) is None


class _PoolWithoutTickets:
    """A v0.1-style pool: positions only, no ``stored_ticket``."""

    num_sequences = 1
    slots_per_sequence = 1

    def save(self, saves: object) -> None:
        raise AssertionError("must be refused before any copy")

    def restore(self, restores: object) -> None:
        raise AssertionError("must be refused before any copy")

    def stored_position(self, seq: int, slot: int) -> int | None:
        return None


def test_a_pool_without_stored_ticket_is_refused_naming_the_method() -> None:
    """A pool check that forgets ``stored_ticket``: such a pool cannot refuse stale restores."""
    for effects in ([Save(0, 0, 1, 1)], [Restore(0, 0, 1, 1)]):
        with pytest.raises(
            InvalidArgumentError, match=r"'pool' must be a SnapshotPool .*stored_ticket"
        ):
            apply_effects(_PoolWithoutTickets(), effects, [SsmDecodeRing(1)])  # type: ignore[arg-type]


# -- the batched step ----------------------------------------------------------------------------


def test_a_batched_step_row_equal_to_the_number_of_rings_is_a_library_error() -> None:
    """Off by one in snapshot_boundaries' ring lookup (``row >= len(rings)``): no IndexError."""
    rings = [SsmDecodeRing(2), SsmDecodeRing(2)]
    with pytest.raises(InvalidArgumentError, match="got 2 rings and row 2"):
        snapshot_boundaries(rings, positions=[1], is_boundary=[True], in_thinking=[False], rows=[2])
    assert [len(ring) for ring in rings] == [0, 0]


def test_a_batched_step_with_fewer_rings_than_rows_is_a_library_error() -> None:
    """The in-order fast path trusting a list of rings one short: nothing recorded, no crash."""
    rings = [SsmDecodeRing(2)]
    with pytest.raises(InvalidArgumentError, match="got 1 rings and row 1"):
        snapshot_boundaries(
            rings, positions=[1, 1], is_boundary=[True, True], in_thinking=[False, False]
        )
    assert len(rings[0]) == 0


def _typed(library: str, values: list[int] | list[float] | list[bool], kind: str) -> object:
    """``values`` as an ``array.array``, a numpy array or a torch tensor of ``kind``."""
    if library == "array":
        return array.array({"float": "d", "int": "b"}[kind], values)
    module = pytest.importorskip(library)
    dtype = getattr(module, {"float": "float32", "int": "int64", "bool": "bool"}[kind])
    make = module.tensor if library == "torch" else module.array
    return make(values, dtype=dtype)


@pytest.mark.parametrize("library", ["array", "numpy", "torch"])
def test_typed_arrays_of_another_element_type_take_the_checked_path(library: str) -> None:
    """The known-dtype table too wide: only integer arrays are positions or rows, and only
    bool arrays are flags without a look at their values.

    A float array (``array('d')``, ``float32``) or a bool array must not pass
    as positions, nor an integer array holding a 2 as flags.
    """
    rings = [SsmDecodeRing(2), SsmDecodeRing(2)]
    flags = {"is_boundary": [True, True], "in_thinking": [False, False]}
    bad_positions = [_typed(library, [1.0, 2.0], "float")]
    if library != "array":  # array.array holds no bools
        bad_positions.append(_typed(library, [True, True], "bool"))
    for positions in bad_positions:
        with pytest.raises(InvalidArgumentError, match=r"'positions\[0\]' must be an int >= 0"):
            snapshot_boundaries(rings, positions=positions, **flags)
        with pytest.raises(InvalidArgumentError, match=r"'rows\[0\]' must be an int >= 0"):
            snapshot_boundaries(rings, positions=[1, 2], rows=positions, **flags)
    for name in ("is_boundary", "in_thinking"):
        columns: dict[str, object] = {**flags, name: _typed(library, [2, 0], "int")}
        with pytest.raises(InvalidArgumentError, match=rf"'{name}\[0\]' must be a bool"):
            snapshot_boundaries(rings, positions=[1, 2], **columns)
    assert [len(ring) for ring in rings] == [0, 0]
    batch = snapshot_boundaries(
        rings,
        positions=_typed(library, [1, 2], "int"),
        is_boundary=_typed(library, [1, 0], "int"),
        in_thinking=_typed(library, [0, 0], "int"),
    )
    assert (batch.seqs, batch.positions) == ((0,), (1,))


def test_the_saves_name_the_rows_given_when_only_some_rows_record() -> None:
    """The selected rows taken as the saves' seqs without mapping them through ``rows``.

    Row ids are not column indices: with ``rows`` given, a step where some
    rows do not record must still name each save by its row.
    """
    for boundary, thinking in (
        ([True, False, True], [False] * 3),
        ([True] * 3, [False, True, False]),
    ):
        rings = {7: SsmDecodeRing(2), 2: SsmDecodeRing(2), 5: SsmDecodeRing(2)}
        batch = snapshot_boundaries(
            rings, positions=[4, 9, 6], is_boundary=boundary, in_thinking=thinking, rows=[7, 2, 5]
        )
        assert (batch.seqs, batch.positions) == ((7, 5), (4, 6))
        assert (rings[7].snapshot_positions(), rings[2].snapshot_positions()) == ((4,), ())
        assert rings[5].snapshot_positions() == (6,)


def test_a_save_batch_row_equal_to_num_sequences_is_refused_before_any_copy() -> None:
    """Off by one in apply_effects' fast check of a SaveBatch (``max(seqs) >= rows``)."""
    pool = FakeSnapshotPool(2, 2)
    rings = [SsmDecodeRing(2) for _ in range(3)]  # a ring for row 2: only the bound refuses it
    effects: list[Effect] = [
        Save(0, 0, 1, 1),
        Restore(0, 0, 1, 1),
        SaveBatch(seqs=[2], slots=[0], positions=[1], tickets=[2]),
    ]
    with pytest.raises(
        InvalidArgumentError, match=r"'effects\[2\]\[0\]\.seq' must be < the pool's"
    ):
        apply_effects(pool, effects, rings)
    assert (pool.save_calls, pool.restore_calls) == (0, 0)


def test_a_save_batch_naming_a_row_saved_earlier_in_its_run_is_refused_before_any_copy() -> None:
    """apply_effects' fast check of a SaveBatch skipping the rows earlier saves of its run named."""
    pool = FakeSnapshotPool(2, 2)
    rings = [SsmDecodeRing(2) for _ in range(2)]
    effects: list[Effect] = [
        Save(0, 0, 1, 1),
        Restore(0, 0, 1, 1),
        Save(1, 0, 2, 2),
        SaveBatch(seqs=[1], slots=[1], positions=[3], tickets=[3]),
    ]
    with pytest.raises(InvalidArgumentError, match=r"seq 1 at effects\[2\] and effects\[3\]"):
        apply_effects(pool, effects, rings)
    assert (pool.save_calls, pool.restore_calls) == (0, 0)


def test_a_save_batch_for_a_row_without_a_ring_is_refused_before_any_copy() -> None:
    """apply_effects' fast check of a SaveBatch skipping the ring lookup of its rows."""
    pool = FakeSnapshotPool(3, 2)
    rings = [SsmDecodeRing(2) for _ in range(2)]
    batch = SaveBatch(seqs=[0, 2], slots=[0, 0], positions=[1, 1], tickets=[1, 2])
    with pytest.raises(InvalidArgumentError, match="got none for seq 2"):
        apply_effects(pool, [batch], rings)
    assert pool.save_calls == 0


# -- the torch pool's owned-memory check --------------------------------------------------------


def test_a_live_tensor_shrunk_in_place_is_refused() -> None:
    """The owned-memory fingerprint without the shape: ``resize_`` to fewer rows keeps the
    address and the strides, and a restore must still refuse it."""
    torch = pytest.importorskip("torch")
    from ssm_rollback.backends.torch import TorchSnapshotPool

    live = torch.zeros(4, 3)
    pool = TorchSnapshotPool([live], 1)
    assert pool.save([Save(1, 0, 1, 1)]).ok
    pointer, strides = live.data_ptr(), live.stride()
    live.resize_(2, 3)
    assert (live.data_ptr(), live.stride()) == (pointer, strides)
    with pytest.raises(InvalidArgumentError, match=r"'live_states\[0\]' must still be the memory"):
        pool.restore([Restore(1, 0, 1, 1)])
    with pytest.raises(InvalidArgumentError, match=r"'live_states\[0\]' must still be the memory"):
        pool.save([Save(0, 0, 2, 2)])


def test_a_restore_of_a_slot_a_save_batch_wrote_earlier_in_the_call_is_accepted() -> None:
    """apply_effects' fast check of a SaveBatch not recording what its slots will hold."""
    pool = FakeSnapshotPool(2, 2)
    rings = [SsmDecodeRing(2) for _ in range(2)]
    pool.live[:] = ["row0@1", "row1@1"]
    batch = SaveBatch(seqs=[0, 1], slots=[0, 0], positions=[1, 1], tickets=[7, 8])
    apply_effects(pool, [batch, Restore(1, 0, 1, 8)], rings)
    assert (pool.save_calls, pool.restore_calls) == (1, 1)
    assert pool.live == ["row0@1", "row1@1"]
