"""The ring: the seed's own scenarios, the new strictness, and every error path."""

from __future__ import annotations

import copy
import pickle
from collections.abc import Callable

import attrs
import pytest

from ssm_rollback import (
    InvalidArgumentError,
    InvariantError,
    OutOfOrderError,
    SsmDecodeRing,
    SsmRingEntry,
    SsmRollbackError,
    UnknownSnapshotError,
    snapshot_boundaries,
)
from ssm_rollback.testing import INVALID_INDICES


def live(ring: SsmDecodeRing) -> list[tuple[int, int]]:
    return [(e.token_position, e.snapshot_slot) for e in ring.entries]


def filled(capacity: int, *positions: int) -> SsmDecodeRing:
    ring = SsmDecodeRing(capacity)
    for position in positions:
        ring.record(position)
    return ring


# -- the seed's scenarios -----------------------------------------------------


def test_record_assigns_slots_round_robin_and_evicts_the_owner() -> None:
    ring = SsmDecodeRing(3)
    assert [ring.record(p) for p in (2, 4, 5)] == [0, 1, 2]
    assert ring.next_slot == 0
    assert ring.record(7) == 0  # wraps onto slot 0 and evicts its owner, position 2
    assert live(ring) == [(4, 1), (5, 2), (7, 0)]
    assert ring.snapshot_positions() == (4, 5, 7)
    assert ring.slot_for_position(5) == 2
    assert ring.slot_for_position(2) is None
    assert len(ring) == 3


def test_eviction_follows_slot_ownership_after_truncate_moved_the_cursor() -> None:
    ring = filled(4, 1, 2, 3, 4, 5)  # 5 took slot 0 from 1
    assert live(ring) == [(2, 1), (3, 2), (4, 3), (5, 0)]
    ring.truncate_after(2)
    assert live(ring) == [(2, 1)]
    assert ring.next_slot == 2  # right after the newest survivor's slot
    # The dropped entries' slots (2, 3, 0) are reused before the survivor's.
    assert [ring.record(p) for p in (6, 7, 8)] == [2, 3, 0]
    assert live(ring) == [(2, 1), (6, 2), (7, 3), (8, 0)]
    assert ring.record(9) == 1  # only now is the survivor, owner of slot 1, evicted
    assert live(ring) == [(6, 2), (7, 3), (8, 0), (9, 1)]


def test_owner_evicted_is_not_the_oldest_after_a_discard() -> None:
    ring = filled(3, 1, 2, 3)
    ring.discard(1)  # a failed save: slot 0 is free, the cursor stays at 0
    assert ring.next_slot == 0
    assert ring.record(4) == 0
    assert live(ring) == [(2, 1), (3, 2), (4, 0)]
    ring.discard(3)  # not the newest: slot 2 is free until the cursor comes round
    assert ring.record(5) == 1  # evicts 2, the owner of slot 1, while slot 2 is free
    assert live(ring) == [(4, 0), (5, 1)]
    assert ring.record(6) == 2
    assert live(ring) == [(4, 0), (5, 1), (6, 2)]


def test_cursor_resumes_after_the_newest_survivor() -> None:
    ring = filled(3, 10, 20, 30)
    ring.truncate_after(25)  # keeps 10@0 and 20@1
    assert live(ring) == [(10, 0), (20, 1)]
    assert ring.next_slot == 2
    ring.truncate_after(20)  # keeps the entry at exactly keep_len
    assert live(ring) == [(10, 0), (20, 1)]
    ring.truncate_after(9)
    assert live(ring) == []
    assert ring.next_slot == 0  # none survive: back to 0


def test_cursor_wraps_when_the_newest_survivor_holds_the_last_slot() -> None:
    ring = filled(3, 1, 2, 3)
    ring.truncate_after(3)
    assert ring.next_slot == 0


def test_capacity_zero_is_a_disabled_ring() -> None:
    ring = SsmDecodeRing(0)
    assert not ring.is_enabled
    assert ring.capacity == 0
    assert ring.record(5) is None
    assert ring.record(5) is None  # nothing was recorded, so no order to break
    assert ring.slot_for_position(5) is None
    ring.truncate_after(0)
    ring.clear()
    assert ring.entries == ()
    assert ring.snapshot_positions() == ()
    assert len(ring) == 0
    assert ring.next_slot == 0
    with pytest.raises(UnknownSnapshotError):
        ring.discard(5)
    ring.check_valid()


def test_capacity_one_keeps_only_the_newest() -> None:
    ring = filled(1, 3, 8)
    assert live(ring) == [(8, 0)]
    assert ring.next_slot == 0


# -- new members ----------------------------------------------------------------


def test_discard_of_the_newest_moves_the_cursor_back_onto_its_slot() -> None:
    ring = filled(4, 1, 2, 3)
    assert ring.discard(3) == 2
    assert ring.next_slot == 2
    assert ring.record(4) == 2  # the failed save's slot is reused at once
    assert live(ring) == [(1, 0), (2, 1), (4, 2)]


def test_discard_then_record_at_a_lower_position_is_in_order() -> None:
    ring = filled(4, 1, 5)
    ring.discard(5)
    assert ring.record(3) == 1


def test_the_newest_is_found_past_an_empty_slot_before_the_cursor() -> None:
    """Two discards leave the slot before the cursor empty: the newest is further back. A
    batched step that is refused puts every ring's newest position back from the slots."""
    ring = SsmDecodeRing(4)
    for position in (1, 2, 3):
        ring.record(position)
    ring.discard(2)  # not the newest: slot 1 empties, the cursor stays
    ring.discard(3)  # the newest: the cursor moves back onto slot 2, after the empty slot 1
    assert (ring.next_slot, ring.snapshot_positions()) == (2, (1,))
    ring.check_valid()
    other = SsmDecodeRing(2)
    other.record(5)
    with pytest.raises(OutOfOrderError):  # row 0 passes first, then row 1 is late: refused
        snapshot_boundaries(
            [ring, other],
            positions=[9, 5],
            is_boundary=[True, True],
            in_thinking=[False, False],
        )
    ring.check_valid()
    with pytest.raises(OutOfOrderError):
        ring.record(1)  # still the newest live position
    assert ring.record(4) == 2


def test_clear_drops_everything_and_resets_the_cursor() -> None:
    ring = filled(3, 1, 2)
    ring.clear()
    assert live(ring) == []
    assert ring.next_slot == 0
    assert ring.record(1) == 0  # a reused row starts afresh, even at a low position


def test_huge_capacity_and_positions_cost_nothing_up_front() -> None:
    ring = SsmDecodeRing(2**62)
    assert ring.record(2**70) == 0
    assert ring.record(2**70 + 1) == 1
    assert ring.slot_for_position(2**70) == 0


def test_int_subclasses_are_accepted_as_their_plain_value() -> None:
    class Pos(int):
        pass

    ring = SsmDecodeRing(Pos(2))
    assert ring.record(Pos(4)) == 0
    assert type(ring.capacity) is int
    assert type(ring.snapshot_positions()[0]) is int


# -- the new strictness -------------------------------------------------------------


def test_record_at_or_before_the_newest_is_out_of_order_and_changes_nothing() -> None:
    ring = filled(3, 4, 6)
    before = (ring.entries, ring.next_slot)
    for position in (6, 5, 0):
        with pytest.raises(OutOfOrderError, match=r"'token_position'.*newest.*6.*got"):
            ring.record(position)
    assert (ring.entries, ring.next_slot) == before


def test_unknown_discard_names_the_live_positions() -> None:
    ring = filled(3, 4, 6)
    with pytest.raises(UnknownSnapshotError, match=r"'token_position'.*live: 4, 6.*got 5"):
        ring.discard(5)
    many = filled(64, *range(20))
    with pytest.raises(UnknownSnapshotError, match=r"live: 0 \.\.\. 19 \(20 in all\)"):
        many.discard(99)


_METHODS: dict[str, Callable[[SsmDecodeRing, object], object]] = {
    "record": lambda ring, v: ring.record(v),  # type: ignore[arg-type]
    "slot_for_position": lambda ring, v: ring.slot_for_position(v),  # type: ignore[arg-type]
    "truncate_after": lambda ring, v: ring.truncate_after(v),  # type: ignore[arg-type]
    "discard": lambda ring, v: ring.discard(v),  # type: ignore[arg-type]
}
_ARG_NAMES = {
    "record": "token_position",
    "slot_for_position": "keep_len",
    "truncate_after": "keep_len",
    "discard": "token_position",
}


@pytest.mark.parametrize("bad", INVALID_INDICES, ids=repr)
@pytest.mark.parametrize("method", sorted(_METHODS))
@pytest.mark.parametrize("capacity", [0, 3])
def test_bad_positions_raise_naming_the_argument_and_change_nothing(
    method: str, bad: object, capacity: int
) -> None:
    ring = filled(capacity, 1, 2)
    before = (ring.entries, ring.next_slot)
    with pytest.raises(InvalidArgumentError, match=rf"'{_ARG_NAMES[method]}' must be an int >= 0"):
        _METHODS[method](ring, bad)
    assert (ring.entries, ring.next_slot) == before
    ring.check_valid()


@pytest.mark.parametrize("bad", INVALID_INDICES, ids=repr)
def test_bad_capacity_raises_naming_it(bad: object) -> None:
    with pytest.raises(InvalidArgumentError, match=r"'capacity' must be an int >= 0, got"):
        SsmDecodeRing(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(("bad", "is_type_error"), [(-1, False), (True, True), ("3", True)])
def test_type_mismatches_are_also_type_errors(bad: object, is_type_error: bool) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        SsmDecodeRing(bad)  # type: ignore[arg-type]
    assert isinstance(info.value, TypeError) is is_type_error
    assert isinstance(info.value, ValueError)
    assert "bool" in str(info.value) or "str" in str(info.value) or "-1" in str(info.value)


def test_every_error_is_in_the_family() -> None:
    for error in (InvalidArgumentError, OutOfOrderError, UnknownSnapshotError, InvariantError):
        assert issubclass(error, SsmRollbackError)


# -- the invariant checker catches corruption -----------------------------------------


def _corrupt(ring: SsmDecodeRing, field: str, value: object) -> None:
    # Reaching into private state is the only way to break a correct ring.
    object.__setattr__(ring, field, value)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"_positions": [1, 2, 3, 4], "_tickets": [1, 2, 3, 4]}, "4 positions .* capacity 3"),
        ({"_tickets": [1]}, "2 positions and 1 tickets"),
        ({"_positions": [1, 1]}, "share a position"),
        ({"_positions": [-5, 2]}, "one is negative"),
        ({"_positions": [2, 1]}, "not strictly ascending"),
        ({"_tickets": [9, 3]}, "tickets are missing or not ascending"),
        ({"_tickets": [0, 3]}, "tickets are missing or not ascending"),
        ({"_cursor": 3}, "cursor 3 outside"),
        ({"_positions": [1], "_tickets": [1]}, "past the slots used"),
        ({"_newest": 7}, "cached newest position 7"),
    ],
)
def test_check_valid_names_the_broken_invariant(fields: dict[str, object], message: str) -> None:
    ring = filled(3, 1, 2)
    ring.check_valid()
    for field, value in fields.items():
        _corrupt(ring, field, value)
    with pytest.raises(InvariantError, match=message):
        ring.check_valid()


# -- values, copies and pickles --------------------------------------------------------


def test_entries_are_frozen_hashable_values() -> None:
    entry = SsmRingEntry(4, 1, 9)
    assert entry == SsmRingEntry(token_position=4, snapshot_slot=1, ticket=9)
    assert entry != SsmRingEntry(4, 2, 9)
    assert entry != SsmRingEntry(4, 1, 10)  # same position and slot, another snapshot
    assert hash(entry) == hash(SsmRingEntry(4, 1, 9))
    assert pickle.loads(pickle.dumps(entry)) == entry
    assert copy.deepcopy(entry) == entry
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        entry.token_position = 5  # type: ignore[misc]
    assert repr(entry) == "SsmRingEntry(token_position=4, snapshot_slot=1, ticket=9)"


@pytest.mark.parametrize("bad", [-1, True, "1", None])
def test_entries_validate_their_fields(bad: object) -> None:
    with pytest.raises(InvalidArgumentError, match="'token_position'"):
        SsmRingEntry(bad, 0, 0)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="'snapshot_slot'"):
        SsmRingEntry(0, bad, 0)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="'ticket'"):
        SsmRingEntry(0, 0, bad)  # type: ignore[arg-type]


def test_rings_pickle_and_copy_with_their_state() -> None:
    ring = filled(3, 1, 2, 3, 4)
    ring.truncate_after(3)
    for clone in (pickle.loads(pickle.dumps(ring)), copy.deepcopy(ring)):
        assert isinstance(clone, SsmDecodeRing)
        assert clone.entries == ring.entries
        assert clone.next_slot == ring.next_slot
        assert clone.capacity == ring.capacity
        clone.check_valid()
        clone.record(9)
        assert clone.entries != ring.entries  # independent state


def test_rings_compare_by_identity() -> None:
    assert SsmDecodeRing(2) != SsmDecodeRing(2)


def test_repr_shows_capacity_cursor_and_entries() -> None:
    ring = filled(3, 4, 6)
    first, second = (entry.ticket for entry in ring.entries)
    assert repr(ring) == (
        f"SsmDecodeRing(capacity=3, next_slot=2, entries=[4@0#{first}, 6@1#{second}])"
    )
