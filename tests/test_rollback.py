"""Snapshot decisions and rollback planning."""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ssm_rollback import (
    DeclineReason,
    InvalidArgumentError,
    RollbackDeclined,
    RollbackPlan,
    SsmDecodeRing,
    SsmSnapshotRestore,
    SsmSnapshotSave,
    find_last_boundary_with_snapshot,
    rollback_to_boundary,
    snapshot_boundary_if_ssm,
)
from ssm_rollback.testing import INVALID_INDICES


def ring_with(capacity: int, *positions: int) -> SsmDecodeRing:
    ring = SsmDecodeRing(capacity)
    for position in positions:
        ring.record(position)
    return ring


# -- snapshot_boundary_if_ssm ---------------------------------------------------------


def test_a_boundary_outside_thinking_records_and_returns_a_save() -> None:
    ring = SsmDecodeRing(2)
    save = snapshot_boundary_if_ssm(
        ring, seq=5, token_position=3, is_boundary=True, in_thinking=False
    )
    entry = ring.entry_for(3)
    assert entry is not None
    assert save == SsmSnapshotSave(seq=5, slot=0, token_position=3, ticket=entry.ticket)
    assert ring.snapshot_positions() == (3,)


@pytest.mark.parametrize(
    ("capacity", "is_boundary", "in_thinking"),
    [(2, False, False), (2, True, True), (2, False, True), (0, True, False)],
)
def test_otherwise_nothing_is_recorded(capacity: int, is_boundary: bool, in_thinking: bool) -> None:
    ring = SsmDecodeRing(capacity)
    assert (
        snapshot_boundary_if_ssm(
            ring, seq=0, token_position=3, is_boundary=is_boundary, in_thinking=in_thinking
        )
        is None
    )
    assert len(ring) == 0
    assert ring.next_slot == 0


@pytest.mark.parametrize("is_boundary", [True, False], ids=["boundary", "no-boundary"])
@pytest.mark.parametrize("name", ["seq", "token_position"])
@pytest.mark.parametrize("bad", INVALID_INDICES, ids=repr)
def test_snapshot_rejects_bad_ids_and_changes_nothing(
    name: str, bad: object, is_boundary: bool
) -> None:
    """Checked on every row, boundary or not (the no-boundary rows take a fast path)."""
    ring = ring_with(2, 1)
    kwargs: dict[str, object] = {
        "seq": 0,
        "token_position": 5,
        "is_boundary": is_boundary,
        "in_thinking": False,
        name: bad,
    }
    with pytest.raises(InvalidArgumentError, match=f"'{name}' must be an int >= 0"):
        snapshot_boundary_if_ssm(ring, **kwargs)  # type: ignore[arg-type]
    assert ring.snapshot_positions() == (1,)


@pytest.mark.parametrize("other", [True, False])
@pytest.mark.parametrize("name", ["is_boundary", "in_thinking"])
@pytest.mark.parametrize("bad", [1, 0, None, "yes"])
def test_snapshot_flags_must_be_bools(name: str, bad: object, other: bool) -> None:
    ring = SsmDecodeRing(2)
    kwargs: dict[str, object] = {"is_boundary": other, "in_thinking": other, name: bad}
    with pytest.raises(InvalidArgumentError, match=f"'{name}' must be a bool"):
        snapshot_boundary_if_ssm(ring, seq=0, token_position=1, **kwargs)  # type: ignore[arg-type]
    assert len(ring) == 0


# -- find_last_boundary_with_snapshot ----------------------------------------------------


def test_find_returns_the_largest_boundary_with_a_live_snapshot() -> None:
    ring = ring_with(3, 2, 5, 9)
    boundaries = [1, 2, 4, 5, 7, 9]
    assert find_last_boundary_with_snapshot(ring, boundaries) == 9
    assert find_last_boundary_with_snapshot(ring, boundaries, at_most=8) == 5
    assert find_last_boundary_with_snapshot(ring, boundaries, at_most=4) == 2
    assert find_last_boundary_with_snapshot(ring, boundaries, at_most=1) is None
    assert find_last_boundary_with_snapshot(ring, [1, 4, 7]) is None  # no snapshot at a boundary
    assert find_last_boundary_with_snapshot(SsmDecodeRing(0), boundaries) is None


class CountingSequence:
    """A boundary history that counts how many elements are read (no slicing)."""

    def __init__(self, values: list[int]) -> None:
        self.values = values
        self.reads = 0

    def __getitem__(self, index: int) -> int:
        self.reads += 1
        return self.values[index]

    def __len__(self) -> int:
        return len(self.values)


Sequence.register(CountingSequence)


def test_a_long_history_is_bisected_not_scanned() -> None:
    counting = CountingSequence(list(range(0, 200_000, 2)))
    boundaries = cast("Sequence[int]", counting)
    ring = ring_with(4, 199_990, 199_992, 199_994, 199_997)  # the newest is not a boundary
    assert find_last_boundary_with_snapshot(ring, boundaries) == 199_994
    assert counting.reads < 4 * 2 * 20  # a few bisections, not 100,000 reads
    counting.reads = 0
    plan = rollback_to_boundary(ring, boundaries, seq=0, current_len=199_999)
    assert isinstance(plan, RollbackPlan)
    assert counting.reads < 4 * 2 * 20


# -- rollback_to_boundary: hybrid -----------------------------------------------------------


def test_hybrid_rollback_truncates_the_ring_and_plans_one_restore() -> None:
    ring = ring_with(3, 2, 5, 9)
    entry = ring.entry_for(5)
    assert entry is not None
    plan = rollback_to_boundary(ring, [2, 5, 9], seq=4, current_len=12, at_most=8)
    assert plan == RollbackPlan(
        seq=4,
        keep_len=5,
        tokens_dropped=7,
        effects=(SsmSnapshotRestore(4, 1, 5, entry.ticket),),
    )
    assert ring.snapshot_positions() == (2, 5)
    assert ring.next_slot == 2


def test_rolling_back_to_the_current_length_drops_nothing() -> None:
    ring = ring_with(2, 4)
    entry = ring.entry_for(4)
    assert entry is not None
    plan = rollback_to_boundary(ring, [4], seq=0, current_len=4)
    assert plan == RollbackPlan(0, 4, 0, (SsmSnapshotRestore(0, 0, 4, entry.ticket),))


@pytest.mark.parametrize(
    ("ring", "boundaries", "at_most", "reason"),
    [
        (ring_with(0), [2, 5], None, DeclineReason.RING_DISABLED),
        (ring_with(0), [], None, DeclineReason.RING_DISABLED),  # disabled wins
        (ring_with(3), [], None, DeclineReason.NO_BOUNDARY),
        (ring_with(3, 5), [5], 4, DeclineReason.NO_BOUNDARY),
        (ring_with(1, 2, 5), [2], None, DeclineReason.SNAPSHOT_EVICTED),
        (ring_with(3), [1, 3], None, DeclineReason.SNAPSHOT_EVICTED),
        (ring_with(3, 5), [1, 5], 4, DeclineReason.SNAPSHOT_EVICTED),
    ],
)
def test_hybrid_declines_name_the_reason_and_change_nothing(
    ring: SsmDecodeRing, boundaries: list[int], at_most: int | None, reason: DeclineReason
) -> None:
    before = (ring.entries, ring.next_slot)
    result = rollback_to_boundary(ring, boundaries, seq=3, current_len=6, at_most=at_most)
    assert result == RollbackDeclined(seq=3, reason=reason)
    assert (ring.entries, ring.next_slot) == before


# -- rollback_to_boundary: pure attention ---------------------------------------------------


def test_pure_attention_plans_a_truncation_and_leaves_the_ring_alone() -> None:
    ring = ring_with(2, 3)
    before = (ring.entries, ring.next_slot)
    plan = rollback_to_boundary(ring, [1, 3, 6], seq=2, current_len=9, at_most=5, hybrid=False)
    assert plan == RollbackPlan(seq=2, keep_len=3, tokens_dropped=6, effects=())
    assert (ring.entries, ring.next_slot) == before
    assert rollback_to_boundary(SsmDecodeRing(0), [4], seq=0, current_len=4, hybrid=False) == (
        RollbackPlan(0, 4, 0, ())
    )
    assert rollback_to_boundary(ring, [], seq=2, current_len=9, hybrid=False) == (
        RollbackDeclined(2, DeclineReason.NO_BOUNDARY)
    )


# -- misuse -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["seq", "current_len", "at_most"])
@pytest.mark.parametrize("bad", INVALID_INDICES, ids=repr)
def test_rollback_rejects_bad_ints(name: str, bad: object) -> None:
    if name == "at_most" and bad is None:
        return  # None means "no limit"
    ring = ring_with(2, 1)
    kwargs: dict[str, object] = {"seq": 0, "current_len": 3, "at_most": None, name: bad}
    with pytest.raises(InvalidArgumentError, match=f"'{name}' must be an int >= 0"):
        rollback_to_boundary(ring, [1], **kwargs)  # type: ignore[arg-type]
    assert ring.snapshot_positions() == (1,)


def test_hybrid_must_be_a_bool() -> None:
    with pytest.raises(InvalidArgumentError, match="'hybrid' must be a bool"):
        rollback_to_boundary(SsmDecodeRing(1), [], seq=0, current_len=0, hybrid=1)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("boundaries", "message"),
    [
        ([1, 9], "must all be <= current_len 6, got a last boundary of 9"),
        ([1, 5, 5], "strictly ascending"),
        ([1, 5, 3], "strictly ascending"),
        ([1, "5"], r"'boundaries\[1\]' must be an int >= 0"),
        ([1, -5], r"'boundaries\[1\]' must be an int >= 0"),
        ("15", "must be a sequence of ints, got str"),
        ({1, 5}, "must be a sequence of ints, got set"),
    ],
)
def test_a_violation_seen_in_boundaries_is_an_error(boundaries: object, message: str) -> None:
    ring = ring_with(3, 1, 5)
    with pytest.raises(InvalidArgumentError, match=message):
        rollback_to_boundary(ring, boundaries, seq=0, current_len=6)  # type: ignore[arg-type]
    assert ring.snapshot_positions() == (1, 5)


def test_find_rejects_non_sequences_and_bad_limits() -> None:
    ring = ring_with(2, 1)
    with pytest.raises(InvalidArgumentError, match="sequence of ints"):
        find_last_boundary_with_snapshot(ring, 7)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="'at_most'"):
        find_last_boundary_with_snapshot(ring, [1], at_most=-1)


def test_a_ring_ahead_of_the_sequence_is_a_bookkeeping_error() -> None:
    ring = ring_with(2, 8)
    with pytest.raises(InvalidArgumentError, match="'current_len' must be >= every live"):
        rollback_to_boundary(ring, [], seq=0, current_len=6)
    assert ring.snapshot_positions() == (8,)


# -- against a brute-force oracle ---------------------------------------------------------------


@given(
    capacity=st.integers(0, 5),
    steps=st.lists(st.tuples(st.booleans(), st.booleans()), max_size=40),
    at_most=st.none() | st.integers(0, 45),
    hybrid=st.booleans(),
)
def test_rollback_matches_a_brute_force_search(
    capacity: int, steps: list[tuple[bool, bool]], at_most: int | None, hybrid: bool
) -> None:
    ring = SsmDecodeRing(capacity)
    boundaries: list[int] = []
    for length, (is_boundary, in_thinking) in enumerate(steps, start=1):
        if is_boundary:
            boundaries.append(length)
        snapshot_boundary_if_ssm(
            ring, seq=0, token_position=length, is_boundary=is_boundary, in_thinking=in_thinking
        )
    current_len = len(steps)
    live = set(ring.snapshot_positions())
    limit = current_len if at_most is None else min(at_most, current_len)
    reachable = [b for b in boundaries if b <= limit and (b in live or not hybrid)]
    result = rollback_to_boundary(
        ring, boundaries, seq=0, current_len=current_len, at_most=at_most, hybrid=hybrid
    )
    if reachable:
        assert isinstance(result, RollbackPlan)
        assert result.keep_len == max(reachable)
        assert result.tokens_dropped == current_len - result.keep_len
        assert len(result.effects) == (1 if hybrid else 0)
    else:
        assert isinstance(result, RollbackDeclined)


# -- foreign arguments ---------------------------------------------------------------


@pytest.mark.parametrize("ring", [None, [], object()], ids=["None", "list", "object"])
def test_a_ring_that_is_not_a_ring_is_a_library_error(ring: object) -> None:
    for is_boundary in (True, False):  # a row that commits no boundary still names the ring
        with pytest.raises(InvalidArgumentError, match="'ring' must be an SsmDecodeRing"):
            snapshot_boundary_if_ssm(
                ring,  # type: ignore[arg-type]
                seq=0,
                token_position=1,
                is_boundary=is_boundary,
                in_thinking=False,
            )
    with pytest.raises(InvalidArgumentError, match="'ring' must be an SsmDecodeRing"):
        rollback_to_boundary(ring, [1], seq=0, current_len=2)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="'ring' must be an SsmDecodeRing"):
        find_last_boundary_with_snapshot(ring, [1])  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("boundaries", "name"),
    [
        ([1, "3", 5], r"boundaries\[1\]"),
        ([None, 2], r"boundaries\[0\]"),
        ([2, b"x"], r"boundaries\[1\]"),
    ],
)
def test_a_boundary_bisect_cannot_compare_is_named(boundaries: list[object], name: str) -> None:
    ring = ring_with(4, 2)
    before = ring.entries
    with pytest.raises(InvalidArgumentError, match=name):
        rollback_to_boundary(ring, boundaries, seq=0, current_len=9)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match=name):
        find_last_boundary_with_snapshot(ring, boundaries)  # type: ignore[arg-type]
    assert ring.entries == before
