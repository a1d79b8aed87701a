"""Hostile input to the core is refused with a named error, and nothing changes.

Each test names a case that failed open or raised a foreign error before: a verify
step behind the ring, a batch whose rows share a ring, a rings container that is no
container or fails, a 0-d array where a column belongs, a column generator that raises.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator, Mapping
from functools import partial

import numpy as np
import pytest

from ssm_rollback import (
    Effect,
    InvalidArgumentError,
    OutOfOrderError,
    PrefixSnapshotIndex,
    SaveBatch,
    SsmDecodeRing,
    SsmRollbackError,
    SsmSnapshotRestore,
    SsmSnapshotSave,
    SsmStateAccept,
    StaleSnapshotError,
    VerifyPlan,
    apply_effects,
    commit_verified,
    commit_verified_batch,
    effect_from_dict,
    snapshot_boundaries,
)
from ssm_rollback._errors import InvalidArgumentTypeError
from ssm_rollback.backends.fake import FakeSnapshotPool


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
    with pytest.raises(OutOfOrderError, match="row 0's, on the same ring earlier in this step"):
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


def test_a_verify_batch_row_behind_an_earlier_rows_snapshot_on_a_shared_ring_is_refused() -> None:
    """Row 1 feeds from 5 after row 0 recorded 10 on the same ring: the per-row calls in that
    order refuse it (SPEC 15), and so does the batch now; it passed, recording nothing for
    row 1, because only row 0 recorded a boundary for the ring to refuse."""
    shared = SsmDecodeRing(4)
    arguments = {
        "first_positions": [10, 5],
        "accepted": [0, 0],
        "is_boundary": [[True], [False]],
        "in_thinking": [[False], [False]],
    }
    with pytest.raises(OutOfOrderError, match=r"'first_positions\[1\]' must not lie behind.* 10"):
        commit_verified_batch([shared, shared], **arguments)  # type: ignore[arg-type]
    assert shared.entries == ()
    commit_verified(
        shared, seq=0, first_position=10, accepted=0, is_boundary=[True], in_thinking=[False]
    )
    with pytest.raises(OutOfOrderError, match="'first_position' must not lie behind"):
        commit_verified(
            shared, seq=1, first_position=5, accepted=0, is_boundary=[False], in_thinking=[False]
        )


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


@pytest.mark.parametrize("library", ["numpy", "torch"])
def test_an_array_of_two_dimensions_is_no_column(library: str) -> None:
    """An ``(n, 1)`` array's dtype says nothing about its ``tolist()``'s elements.

    A bool tensor of shape (2, 1) lists ``[[True], [False]]``: read as a
    column of flags by its dtype, both rows were boundaries (``[False]`` is
    truthy) and row 1 recorded a snapshot it was never asked for. An int
    array of that shape raised ``TypeError`` from comparing a list with 0.
    """
    make = np.array if library == "numpy" else pytest.importorskip("torch").tensor
    rings = [SsmDecodeRing(2), SsmDecodeRing(2)]
    with pytest.raises(
        InvalidArgumentError, match=r"'is_boundary' must be one-dimensional.*\(2, 1\)"
    ):
        snapshot_boundaries(
            rings, positions=[1, 1], is_boundary=make([[True], [False]]), in_thinking=[False, False]
        )
    with pytest.raises(InvalidArgumentError, match="'positions' must be one-dimensional"):
        snapshot_boundaries(
            rings, positions=make([[1], [1]]), is_boundary=[True, False], in_thinking=[False, False]
        )
    assert [ring.entries for ring in rings] == [(), ()]
    with pytest.raises(InvalidArgumentError, match="'seqs' must be one-dimensional"):
        SaveBatch(make([[0], [1]]), [0, 0], [1, 1], [1, 2])
    index = PrefixSnapshotIndex(2)
    input_ids = make([[5, 6, 7, 8]])  # a batch of one prompt, as a tokenizer returns it
    with pytest.raises(InvalidArgumentError, match=r"'tokens' must be one-dimensional.*\(1, 4\)"):
        index.publish(0, input_ids, 2)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="'tokens' must be one-dimensional"):
        index.plan_prefill(0, input_ids, publish_at=[2])  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="'tokens' must be one-dimensional"):
        index.match(input_ids)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="'publish_at' must be one-dimensional"):
        index.plan_prefill(0, [5, 6, 7, 8], publish_at=input_ids[:, :1])  # type: ignore[arg-type]
    assert (len(index), index.stats.misses) == (0, 0)
    index.check_valid()


def test_a_masked_array_is_checked_element_by_element_not_trusted_by_its_dtype() -> None:
    """A numpy masked array lists ``None`` where it is masked, whatever its dtype says: as
    ``in_thinking`` that row recorded a snapshot, as ``positions`` it raised ``TypeError``."""
    rings = [SsmDecodeRing(2) for _ in range(3)]
    masked = np.ma.array([True, True, True], mask=[False, True, False])
    with pytest.raises(InvalidArgumentError, match=r"'in_thinking\[1\]' must be a bool"):
        snapshot_boundaries(rings, positions=[5, 6, 7], is_boundary=[True] * 3, in_thinking=masked)
    with pytest.raises(InvalidArgumentError, match=r"'positions\[1\]' must be an int >= 0"):
        snapshot_boundaries(
            rings,
            positions=np.ma.array([5, 6, 7], mask=[False, True, False]),
            is_boundary=[True] * 3,
            in_thinking=[False] * 3,
        )
    assert [ring.entries for ring in rings] == [(), (), ()]


def test_a_column_whose_tolist_raises_is_named() -> None:
    torch = pytest.importorskip("torch")
    meta = torch.empty(2, dtype=torch.int64, device="meta")  # no data to list
    with pytest.raises(InvalidArgumentError, match=r"'positions' .*tolist\(\) raised"):
        snapshot_boundaries(
            [SsmDecodeRing(1)] * 2, positions=meta, is_boundary=[True] * 2, in_thinking=[False] * 2
        )
    with pytest.raises(InvalidArgumentError, match=r"'tokens' .*tolist\(\) raised"):
        PrefixSnapshotIndex(1).publish(0, meta, 1)


def test_a_save_batch_column_generator_that_raises_is_named() -> None:
    def seqs() -> Iterator[int]:
        yield 0
        raise RuntimeError("lost the row table")

    with pytest.raises(InvalidArgumentError, match="'seqs' must be an iterable of ints"):
        SaveBatch(seqs(), [0], [1], [1])


def test_a_column_sequence_that_fails_to_read_is_named() -> None:
    """A list subclass or a sequence whose iteration raises leaked its own error."""

    class Lost(list[int]):
        def __iter__(self) -> Iterator[int]:
            raise RuntimeError("lost the row table")

    with pytest.raises(InvalidArgumentError, match=r"'seqs' .*reading it raised RuntimeError"):
        SaveBatch(Lost([0]), [0], [1], [1])
    rings = [SsmDecodeRing(1)]
    with pytest.raises(InvalidArgumentError, match=r"'positions' .*reading it raised"):
        snapshot_boundaries(rings, positions=Lost([1]), is_boundary=[True], in_thinking=[False])
    assert rings[0].entries == ()


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
    with pytest.raises(StaleSnapshotError, match="already took that ticket"):
        apply_effects(pool, [step], rings)
    with pytest.raises(StaleSnapshotError, match="already took that ticket"):
        pool.save(step)
    (save,) = step
    assert pool.stored_ticket(0, save.slot) == save.ticket
    pool.live[0] = None
    restore = rings[0].entry_for(4)
    assert restore is not None
    from ssm_rollback import SsmSnapshotRestore

    pool.restore([SsmSnapshotRestore(0, restore.snapshot_slot, 4, restore.ticket)])
    assert pool.live[0] == "after 4"  # the first copy, untouched


@pytest.mark.parametrize("backend", ["fake", "torch"])
def test_a_save_applied_again_after_its_slots_next_save_failed_is_refused(backend: str) -> None:
    """A failed save left its slot holding nothing, and rule 6 compared with what a slot
    holds: an older step's save applied again then went in, and the old rollback plan applied
    again restored the newer state as the old position's."""
    from ssm_rollback import RollbackPlan, rollback_to_boundary, snapshot_boundary_if_ssm

    torch = pytest.importorskip("torch")
    from ssm_rollback.backends.torch import TorchSnapshotPool

    live = torch.zeros(1, 1)
    pool = FakeSnapshotPool(1, 1) if backend == "fake" else TorchSnapshotPool([live], 1)
    ring = SsmDecodeRing(1)

    def state(value: float) -> None:
        if isinstance(pool, FakeSnapshotPool):
            pool.live[0] = value
        else:
            live.fill_(value)

    def save_at(position: int) -> SsmSnapshotSave:
        save = snapshot_boundary_if_ssm(
            ring, seq=0, token_position=position, is_boundary=True, in_thinking=False
        )
        assert save is not None
        return save

    state(2.0)
    first = save_at(2)
    apply_effects(pool, [first], [ring])
    plan = rollback_to_boundary(ring, [2], seq=0, current_len=3)
    assert isinstance(plan, RollbackPlan)
    state(3.0)  # another token after the rollback, and its save fails
    pool.fail_when(lambda save: True)
    assert not apply_effects(pool, [save_at(3)], [ring]).ok
    pool.fail_when(None)
    assert pool.stored_ticket(0, 0) is None  # the slot holds nothing
    with pytest.raises(StaleSnapshotError, match="already took that ticket"):
        apply_effects(pool, [first], [ring])
    with pytest.raises(StaleSnapshotError):
        apply_effects(pool, plan.effects, [ring])
    assert pool.stored_ticket(0, 0) is None


def test_an_older_steps_save_applied_after_its_slot_was_reused_is_refused() -> None:
    """A save applied again once a newer save had reused its slot was accepted: the slot took
    the old tag over the newer state, the ring's newest snapshot no longer restored, and a
    restore planned for the old one got the newer state as its position's."""
    from ssm_rollback import (
        RollbackPlan,
        plan_rollback,
        rollback_to_boundary,
        snapshot_boundary_if_ssm,
    )

    pool, ring = FakeSnapshotPool(1, 1), SsmDecodeRing(1)

    def record(position: int) -> SsmSnapshotSave:
        pool.live[0] = f"after {position}"
        save = snapshot_boundary_if_ssm(
            ring, seq=0, token_position=position, is_boundary=True, in_thinking=False
        )
        assert save is not None
        apply_effects(pool, [save], [ring])
        return save

    old = record(5)
    stale = plan_rollback(ring, [5], seq=0, current_len=6)  # planned, never committed
    assert isinstance(stale, RollbackPlan)
    record(8)
    pool.live[0] = "after 9"
    with pytest.raises(StaleSnapshotError, match=r"took a newer save \(ticket \d+\)"):
        apply_effects(pool, [old], [ring])
    with pytest.raises(StaleSnapshotError, match=r"took a newer save \(ticket \d+\)"):
        pool.save([old])
    assert (pool.stored_position(0, 0), pool.stored_value(0, 0)) == (8, "after 8")
    with pytest.raises(StaleSnapshotError, match="not position 5"):
        pool.restore(stale.effects)
    back = rollback_to_boundary(ring, [5, 8], seq=0, current_len=9)
    assert isinstance(back, RollbackPlan)
    apply_effects(pool, back.effects, [ring])
    assert pool.live[0] == "after 8"  # the ring's newest snapshot still restores
    # A verify step's saves (from the intermediate buffer) likewise.
    pool, ring = FakeSnapshotPool(1, 1), SsmDecodeRing(1)
    steps = []
    for first in (4, 8):
        pool.intermediate[0] = [f"after {first}", f"after {first + 1}"]
        flags = {"is_boundary": [False, True], "in_thinking": [False, False]}
        steps.append(commit_verified(ring, seq=0, first_position=first, accepted=1, **flags))
        apply_effects(pool, steps[-1].effects, [ring])
    with pytest.raises(StaleSnapshotError, match="took a newer save"):
        apply_effects(pool, steps[0].saves, [ring])
    assert (pool.stored_position(0, 0), pool.stored_value(0, 0)) == (9, "after 9")


def test_an_older_save_after_a_newer_one_in_the_same_call_is_refused() -> None:
    """Within one ``apply_effects`` call (a restore between two save runs), an older save into
    the slot a newer save of the call writes was accepted: the slot ended with the older tag."""
    pool = FakeSnapshotPool(1, 1)
    pool.live[0] = "after 6"
    newer, older = SsmSnapshotSave(0, 0, 6, 200), SsmSnapshotSave(0, 0, 4, 150)
    step: list[Effect] = [newer, SsmSnapshotRestore(0, 0, 6, 200), older]
    with pytest.raises(StaleSnapshotError, match=r"'effects\[2\]' .* is older than the save"):
        apply_effects(pool, step, [SsmDecodeRing(1)])
    assert (pool.stored_ticket(0, 0), pool.save_calls) == (None, 0)  # nothing copied


def _verified_step(pool: FakeSnapshotPool, ring: SsmDecodeRing, first: int) -> VerifyPlan:
    """A verify step from ``first`` feeding 3 tokens, 2 accepted; the buffer names each state."""
    pool.intermediate[0] = [f"after {first + j}" for j in range(3)]
    return commit_verified(
        ring,
        seq=0,
        first_position=first,
        accepted=2,
        is_boundary=[False] * 3,
        in_thinking=[False] * 3,
    )


@pytest.mark.parametrize("how", ["pool", "apply_effects"])
def test_a_verify_steps_accept_applied_twice_is_refused(how: str) -> None:
    """An engine applying a step's accept again, after decoding went on, moved the live
    state back (SPEC 15); now the plan mints a ticket and the pool refuses it, copying
    nothing."""
    pool, ring = FakeSnapshotPool(1, 2), SsmDecodeRing(2)
    plan = _verified_step(pool, ring, first=5)
    apply_effects(pool, plan.effects, [ring])
    assert pool.live == ["after 7"]
    pool.live[0] = "after 8"  # the next token was fed
    accept = plan.effects[0]
    assert isinstance(accept, SsmStateAccept)
    again = (
        partial(pool.accept, [accept])
        if how == "pool"
        else partial(apply_effects, pool, plan.effects, [ring])
    )
    with pytest.raises(StaleSnapshotError, match="not newer than the last accept on that row"):
        again()
    assert pool.live[0] == "after 8"
    assert pool.accept_calls == 1


def test_an_older_steps_accept_is_refused_after_a_newer_one() -> None:
    pool, ring = FakeSnapshotPool(1, 2), SsmDecodeRing(2)
    old = _verified_step(pool, ring, first=5)
    new = _verified_step(pool, ring, first=8)
    apply_effects(pool, new.effects, [ring])
    with pytest.raises(StaleSnapshotError, match="an older step's"):
        apply_effects(pool, old.effects[:1], [ring])
    assert pool.live[0] == "after 10"


def test_one_accept_twice_in_one_call_is_refused_before_any_copy() -> None:
    pool, ring = FakeSnapshotPool(1, 2), SsmDecodeRing(2)
    plan = _verified_step(pool, ring, first=5)
    (accept,) = plan.effects
    pool.live[0] = "before"
    with pytest.raises(StaleSnapshotError, match="an accept before it in the same call"):
        apply_effects(pool, [accept, SaveBatch([], [], [], []), accept], [ring])
    assert pool.live[0] == "before"
    assert pool.accept_calls == 0


def test_the_batch_form_mints_one_accept_ticket_per_row_and_each_is_refused_twice() -> None:
    pool, rings = FakeSnapshotPool(2, 2), [SsmDecodeRing(2), SsmDecodeRing(2)]
    pool.intermediate = [["a0", "a1"], ["b0", "b1"]]
    batch = commit_verified_batch(
        rings,
        first_positions=[3, 4],
        accepted=[1, 0],
        is_boundary=[[False] * 2, [False]],
        in_thinking=[[False] * 2, [False]],
    )
    apply_effects(pool, batch.effects, rings)
    assert pool.live == ["a1", "b0"]
    pool.live = ["next a", "next b"]
    with pytest.raises(StaleSnapshotError, match="applied twice"):
        apply_effects(pool, batch.effects, rings)
    assert pool.live == ["next a", "next b"]


def test_an_unticketed_accept_built_by_hand_is_taken_as_before() -> None:
    pool = FakeSnapshotPool(1, 1)
    pool.intermediate[0] = ["x", "y"]
    pool.accept([SsmStateAccept(0, 1)])
    pool.accept([SsmStateAccept(0, 0)])
    assert pool.live[0] == "x"


def test_a_save_applied_twice_in_one_call_is_refused_before_any_copy() -> None:
    """save A, restore, save A in one apply_effects call: the second save passed, as the
    applied-twice rule looked only at what slots held before the call."""
    pool, ring = FakeSnapshotPool(1, 2), SsmDecodeRing(2)
    ring.record(3)
    entry = ring.entry_for(3)
    assert entry is not None
    save = SsmSnapshotSave(0, entry.snapshot_slot, 3, entry.ticket)
    restore = SsmSnapshotRestore(0, entry.snapshot_slot, 3, entry.ticket)
    pool.live[0] = "after 3"
    pool.intermediate[0] = ["after 3"]
    with pytest.raises(StaleSnapshotError, match="repeats a save earlier in the same call"):
        apply_effects(pool, [save, restore, save], [ring])
    with pytest.raises(StaleSnapshotError, match="repeats a save earlier in the same call"):
        apply_effects(pool, [save, SaveBatch([], [], [], []), SsmStateAccept(0, 0), save], [ring])
    assert pool.save_calls == 0
    assert pool.stored_ticket(0, entry.snapshot_slot) is None


class _RingOnly:
    """A third-party pool with the ``SnapshotPool`` protocol only: no verify buffers."""

    def __init__(self, inner: FakeSnapshotPool) -> None:
        self.inner = inner
        self.num_sequences = inner.num_sequences
        self.slots_per_sequence = inner.slots_per_sequence
        self.save = inner.save
        self.restore = inner.restore
        self.stored_position = inner.stored_position
        self.stored_ticket = inner.stored_ticket


def test_accepts_for_a_pool_without_verify_buffers_are_refused_before_any_copy() -> None:
    inner, ring = FakeSnapshotPool(1, 2), SsmDecodeRing(2)
    ring.record(3)
    entry = ring.entry_for(3)
    assert entry is not None
    save = SsmSnapshotSave(0, entry.snapshot_slot, 3, entry.ticket)
    with pytest.raises(InvalidArgumentTypeError, match="must be a VerifyBufferPool"):
        apply_effects(_RingOnly(inner), [save, SsmStateAccept(0, 0)], [ring])
    assert inner.save_calls == 0


def test_a_rings_mapping_without_a_saved_row_is_refused_naming_it() -> None:
    pool, ring = FakeSnapshotPool(2, 2), SsmDecodeRing(2)
    ring.record(3)
    entry = ring.entry_for(3)
    assert entry is not None
    save = SsmSnapshotSave(1, entry.snapshot_slot, 3, entry.ticket)
    with pytest.raises(InvalidArgumentError, match="every saved row, got none for seq 1"):
        apply_effects(pool, [save], {0: ring})
    assert pool.save_calls == 0


def test_bad_accept_batches_are_refused_naming_them() -> None:
    pool = FakeSnapshotPool(2, 1)
    pool.intermediate = [["a", "b"], ["c", "d"]]
    with pytest.raises(InvalidArgumentError, match="num_sequences 2, got 2"):
        pool.accept([SsmStateAccept(2, 0)])
    with pytest.raises(InvalidArgumentError, match="each row's state at most once"):
        pool.accept([SsmStateAccept(0, 0), SsmStateAccept(0, 1)])
    assert pool.live == [None, None]


@pytest.mark.parametrize("seq", [2, True, -1])
def test_intermediate_count_refuses_a_row_outside_the_pool(seq: object) -> None:
    with pytest.raises(InvalidArgumentError, match="'seq' must be an int in"):
        FakeSnapshotPool(2, 1).intermediate_count(seq)  # type: ignore[arg-type]


def test_a_fault_predicate_that_is_not_callable_is_refused() -> None:
    with pytest.raises(InvalidArgumentTypeError, match="'predicate' must be a callable"):
        FakeSnapshotPool(1, 1).fail_when(3)  # type: ignore[arg-type]


def test_an_unticketed_accept_leaves_the_rows_last_ticket_standing() -> None:
    """A hand-built accept (no ticket) is taken after a ticketed one, and an older step's
    ticketed accept is still refused after it: the row's last ticket is not forgotten."""
    pool, ring = FakeSnapshotPool(1, 2), SsmDecodeRing(2)
    old = _verified_step(pool, ring, first=5)
    new = _verified_step(pool, ring, first=8)
    apply_effects(pool, new.effects, [ring])
    pool.accept([SsmStateAccept(0, 0)])
    assert pool.live == ["after 8"]
    with pytest.raises(StaleSnapshotError, match="an older step's"):
        apply_effects(pool, old.effects[:1], [ring])
    assert pool.live == ["after 8"]


def _mixed_step(ring: SsmDecodeRing) -> list[Effect]:
    """One save run of a single save (row 1, slot 1, from intermediate state 1) and a
    SaveBatch (row 0): the run has no single value, so its saves are rebuilt from columns."""
    ring.record(3)
    ring.record(4)
    entry = ring.entry_for(4)
    assert entry is not None
    assert entry.snapshot_slot == 1
    single = SsmSnapshotSave(1, 1, 4, entry.ticket, source=1)
    batch = SaveBatch([0], [1], [4], [entry.ticket + 1])
    return [single, batch]


def test_a_mixed_save_run_reports_its_failed_saves_as_given() -> None:
    pool, rings = FakeSnapshotPool(2, 2), [SsmDecodeRing(2), SsmDecodeRing(2)]
    pool.intermediate[1] = ["x", "y"]
    step = _mixed_step(rings[1])
    pool.fail_when(lambda save: save.seq == 1)
    outcome = apply_effects(pool, step, rings)
    assert outcome.failed == (step[0],)


def test_a_mixed_save_run_copies_a_single_saves_intermediate_source() -> None:
    pool, rings = FakeSnapshotPool(2, 2), [SsmDecodeRing(2), SsmDecodeRing(2)]
    pool.intermediate[1] = ["x", "y"]
    pool.live = ["row 0", "row 1 live"]
    apply_effects(pool, _mixed_step(rings[1]), rings)
    pool.restore([SsmSnapshotRestore(1, 1, 4, rings[1].entries[-1].ticket)])
    assert pool.live == ["row 0", "y"]


def test_a_protocol_only_pool_gets_a_mixed_runs_slots_as_slots() -> None:
    inner, rings = FakeSnapshotPool(2, 2), [SsmDecodeRing(2), SsmDecodeRing(2)]
    inner.intermediate[1] = ["x", "y"]
    step = _mixed_step(rings[1])
    single = step[0]
    assert isinstance(single, SsmSnapshotSave)
    with pytest.raises(InvalidArgumentTypeError, match="VerifyBufferPool"):
        apply_effects(_RingOnly(inner), step, rings)  # an intermediate source needs buffers
    live_only = [SsmSnapshotSave(1, 1, 4, single.ticket), step[1]]
    apply_effects(_RingOnly(inner), live_only, rings)
    assert inner.stored_ticket(1, 1) == single.ticket
    assert inner.stored_ticket(0, 1) == single.ticket + 1


def test_a_mixed_save_run_copies_a_save_batchs_intermediate_sources() -> None:
    pool, rings = FakeSnapshotPool(2, 2), [SsmDecodeRing(2), SsmDecodeRing(2)]
    pool.intermediate = [["a0", "a1"], ["b0", "b1"]]
    single, _ = _mixed_step(rings[1])
    assert isinstance(single, SsmSnapshotSave)
    rings[0].record(4)
    rings[0].record(5)
    entry = rings[0].entry_for(5)
    assert entry is not None
    batch = SaveBatch([0], [entry.snapshot_slot], [5], [entry.ticket], sources=[1])
    apply_effects(pool, [single, batch], rings)
    pool.restore([SsmSnapshotRestore(0, entry.snapshot_slot, 5, entry.ticket)])
    assert pool.live[0] == "a1"


def test_a_protocol_only_pool_restores_what_it_saved_through_apply_effects() -> None:
    """Its batch rules read the positions and tickets the pool reports: a good restore passes."""
    inner, ring = FakeSnapshotPool(1, 2), SsmDecodeRing(2)
    ring.record(3)
    entry = ring.entry_for(3)
    assert entry is not None
    inner.live = ["after 3"]
    save = SsmSnapshotSave(0, entry.snapshot_slot, 3, entry.ticket)
    apply_effects(_RingOnly(inner), [save], [ring])
    inner.live = ["after 9"]
    restore = SsmSnapshotRestore(0, entry.snapshot_slot, 3, entry.ticket)
    apply_effects(_RingOnly(inner), [restore], [ring])
    assert inner.live == ["after 3"]


def test_a_save_batch_mixing_live_and_intermediate_sources_copies_both() -> None:
    pool, ring = FakeSnapshotPool(2, 2), SsmDecodeRing(2)
    rings = [ring, SsmDecodeRing(2)]
    pool.live = ["row 0 live", "row 1 live"]
    pool.intermediate[1] = ["b0", "b1"]
    ring.record(4)
    rings[1].record(6)
    e0, e1 = ring.entry_for(4), rings[1].entry_for(6)
    assert e0 is not None
    assert e1 is not None
    batch = SaveBatch(
        [0, 1], [e0.snapshot_slot, e1.snapshot_slot], [4, 6], [e0.ticket, e1.ticket], [-1, 1]
    )
    apply_effects(pool, [batch], rings)
    pool.live = [None, None]
    pool.restore([SsmSnapshotRestore(0, e0.snapshot_slot, 4, e0.ticket)])
    pool.restore([SsmSnapshotRestore(1, e1.snapshot_slot, 6, e1.ticket)])
    assert pool.live == ["row 0 live", "b1"]


@pytest.mark.parametrize("error", ["ranks disagree", None, ValueError("x")])
def test_retire_disputed_refuses_an_error_that_is_no_agreement_error(error: object) -> None:
    from ssm_rollback.distributed import retire_disputed

    ring = SsmDecodeRing(2)
    ring.record(1)
    with pytest.raises(InvalidArgumentTypeError, match="'error' must be the AgreementError"):
        retire_disputed([ring], error)  # type: ignore[arg-type]
    assert ring.snapshot_positions() == (1,)


def test_a_failed_save_whose_rings_entry_is_no_ring_is_named() -> None:
    """The rings are looked at only for a failed save: one that is no ring raised
    AttributeError there; now a named error (the step's copies before it had run)."""
    pool = FakeSnapshotPool(2, 1)
    pool.fail_when(lambda save: True)
    with pytest.raises(InvalidArgumentTypeError, match=r"'rings\[0\]' must be an SsmDecodeRing"):
        apply_effects(pool, [SsmSnapshotSave(0, 0, 1, 5)], ["x", "y"])  # type: ignore[list-item]
    outcome = apply_effects(pool, [SsmSnapshotSave(0, 0, 1, 6)], [None, None])  # type: ignore[list-item]
    assert [save.ticket for save in outcome.failed] == [6]  # no ring to discard it from


def test_an_int_column_of_int_subclasses_is_taken_as_plain_ints() -> None:
    """An IntEnum passed every element check and then hit ``AssertionError``; a single int
    argument already took its plain value, and a column does the same now."""

    class Row(enum.IntEnum):
        FIRST = 0
        SECOND = 1

    batch = SaveBatch([Row.SECOND], [0], [3], [7])
    assert batch.seqs == (1,)
    assert type(batch.seqs[0]) is int
    rings = [SsmDecodeRing(2), SsmDecodeRing(2)]
    saves = snapshot_boundaries(
        rings, positions=[Row.SECOND, Row.SECOND], is_boundary=[True, True], in_thinking=[False] * 2
    )
    assert saves.positions == (1, 1)


HUGE = 10**5000  # past str()'s 4,300-digit limit: printing it raised ValueError


def _deep(levels: int) -> list[object]:
    """A list nested ``levels`` deep: past the recursion limit, its repr raised."""
    value: list[object] = []
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: SsmDecodeRing(-HUGE), "'capacity' must be an int >= 0, got a negative int of"),
        (lambda: SsmDecodeRing(2).discard(HUGE), "got an int of 16,610 bits"),
        (lambda: SaveBatch([-HUGE], [0], [0], [0]), r"'seqs\[0\]' .* a negative int of 16,610"),
        (lambda: FakeSnapshotPool(1, 2).stored_ticket(HUGE, 0), "got an int of 16,610 bits"),
        (lambda: PrefixSnapshotIndex(-HUGE), "'capacity' must be an int >= 0, got a negative"),
        (
            lambda: SsmSnapshotSave(_deep(100_000), 0, 0, 0),  # type: ignore[arg-type]
            "'seq' must be an int >= 0, got a list nested too deep to print",
        ),
    ],
)
def test_a_value_too_large_or_deep_to_print_is_described_in_the_error(
    call: Callable[[], object], match: str
) -> None:
    with pytest.raises(SsmRollbackError, match=match):
        call()


def test_an_effect_dict_with_unorderable_extra_keys_or_that_fails_to_read_is_named() -> None:
    with pytest.raises(InvalidArgumentError, match=r"unexpected \['x', 1\]"):
        effect_from_dict({"kind": "ssm_state_accept", "seq": 1, "index": 2, 1: 0, "x": 0})  # type: ignore[dict-item]

    class Locked(Mapping[str, object]):
        def __getitem__(self, key: str) -> object:
            raise RuntimeError("locked")

        def __iter__(self) -> Iterator[str]:
            return iter(["kind"])

        def __len__(self) -> int:
            return 1

    with pytest.raises(InvalidArgumentError, match="reading it raised RuntimeError: locked"):
        effect_from_dict(Locked())


def test_retire_disputed_checks_every_dispute_and_ring_before_discarding_any() -> None:
    """A dispute of seq -1 retired the last row's entry (a Python index from the end); a
    ring that is no ring raised AttributeError after the first ring was already changed."""
    from ssm_rollback.distributed import AgreementError, SlotDispute, retire_disputed

    first, last = SsmDecodeRing(2), SsmDecodeRing(2)
    first.record(10)
    last.record(20)
    (a,), (b,) = first.entries, last.entries
    cases: list[tuple[object, tuple[object, ...], str]] = [
        ([first, last], (SlotDispute(-1, b.snapshot_slot, (b.ticket,)),), r"disputes\[0\]\.seq"),
        ([first, "x"], (SlotDispute(0, 0, (a.ticket,)), SlotDispute(1, 0, (5,))), r"'rings\[1\]'"),
        ([first, last], (SlotDispute(0, 0, (a.ticket,)), 5), r"'error\.disputes\[1\]' must be"),
        (None, (SlotDispute(0, 0, (a.ticket,)),), "'rings' must be a sequence"),
    ]
    for rings, disputes, match in cases:
        error = AgreementError("ranks disagree", 1, disputes)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError, match=match):
            retire_disputed(rings, error)  # type: ignore[arg-type]
        assert (first.entries, last.entries) == ((a,), (b,))


def test_retire_disputed_retires_a_slot_named_twice_once() -> None:
    """A dispute repeated in the error discarded the entry, then raised UnknownSnapshotError
    naming 'token_position' (no argument of it) with the ring already changed; a repeated
    shared dispute discarded the index's entry and raised naming 'entry'."""
    from ssm_rollback.distributed import (
        AgreementError,
        SharedSlotDispute,
        SlotDispute,
        retire_disputed,
    )

    ring = SsmDecodeRing(2)
    ring.record(10)
    (entry,) = ring.entries
    index = PrefixSnapshotIndex(2)
    save = index.publish(0, [1, 2, 3], 2)
    assert save is not None
    twice = (SlotDispute(0, entry.snapshot_slot, (entry.ticket,)),) * 2
    shared_twice = (SharedSlotDispute(save.slot, (save.ticket,)),) * 2
    error = AgreementError("ranks disagree", 1, twice, shared_twice)
    assert retire_disputed([ring], error, prefix_index=index) == (entry,)
    assert ring.entries == ()
    assert index.entries() == ()


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda d: d.check_agreement(None), "'pool' must be a SnapshotPool"),
        (lambda d: d.check_agreement(FakeSnapshotPool(1, 1), known=5), "'known' must be a dict"),
        (lambda d: d.check_agreement(FakeSnapshotPool(1, 1), group="x"), "'group' must be a"),
        (lambda d: d.broadcast_effects([], src=0, group="junk"), "'group' must be a"),
        (
            lambda d: d.broadcast_effects((1 // 0 for _ in [1]), src=0),
            "iterating 'effects' raised ZeroDivisionError",
        ),
    ],
)
def test_the_distributed_calls_check_their_arguments_on_one_rank_too(
    call: Callable[[object], object], match: str
) -> None:
    """Without a process group, check_agreement returned None for anything and a junk group
    was ignored; a broken effects iterable raised ZeroDivisionError, not the error the
    ranks of a group raise for it."""
    from ssm_rollback import distributed

    with pytest.raises(InvalidArgumentError, match=match):
        call(distributed)


def test_an_excused_slot_and_an_empty_one_digest_apart() -> None:
    """CPython hashes -1 as -2: with excused tags of -2, an excused slot on one rank and an
    empty slot on another gave one digest, and check_agreement passed over the difference."""
    from ssm_rollback._tp.agreement import _EXCUSED, _digest

    assert _digest([_EXCUSED, _EXCUSED]) != _digest([-1, -1])
