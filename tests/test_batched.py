"""Batched steps: ``snapshot_boundaries`` agrees with the per-row calls; ``SaveBatch`` anywhere."""

from __future__ import annotations

import array
import copy
import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ssm_rollback import (
    InvalidArgumentError,
    OutOfOrderError,
    SaveBatch,
    SsmDecodeRing,
    SsmRollbackError,
    SsmSnapshotRestore,
    SsmSnapshotSave,
    apply_effects,
    effect_from_dict,
    snapshot_boundaries,
    snapshot_boundary_if_ssm,
)
from ssm_rollback._errors import InvalidArgumentTypeError
from ssm_rollback.backends.fake import FakeSnapshotPool

# -- same rules, same results ----------------------------------------------------------


@st.composite
def steps(draw: st.DrawFn) -> tuple[list[SsmDecodeRing], list[list[tuple[int, bool, bool]]]]:
    """Rings (some disabled, some with history) and steps of (position, boundary, thinking)."""
    rows = draw(st.integers(0, 8))
    rings = []
    for _ in range(rows):
        ring = SsmDecodeRing(draw(st.integers(0, 3)))
        for position in sorted(set(draw(st.lists(st.integers(0, 6), max_size=4)))):
            ring.record(position)
        rings.append(ring)
    step_count = draw(st.integers(1, 4))
    columns = [
        [(draw(st.integers(0, 12)), draw(st.booleans()), draw(st.booleans())) for _ in range(rows)]
        for _ in range(step_count)
    ]
    return rings, columns


def _observe(rings: list[SsmDecodeRing]) -> list[tuple[tuple[tuple[int, int], ...], int]]:
    # Tickets are minted anew by each path; everything else must match.
    return [
        (tuple((e.token_position, e.snapshot_slot) for e in r.entries), r.next_slot) for r in rings
    ]


@given(steps(), st.sampled_from(["list", "array", "tolist"]))
def test_batched_and_per_row_paths_agree_on_every_observable(
    case: tuple[list[SsmDecodeRing], list[list[tuple[int, bool, bool]]]], form: str
) -> None:
    rings, columns = case
    per_row_rings, batched_rings = copy.deepcopy(rings), copy.deepcopy(rings)
    for column in columns:
        expected: list[SsmSnapshotSave] = []
        expected_error: type[Exception] | None = None
        try:
            for seq, (position, boundary, thinking) in enumerate(column):
                save = snapshot_boundary_if_ssm(
                    per_row_rings[seq],
                    seq=seq,
                    token_position=position,
                    is_boundary=boundary,
                    in_thinking=thinking,
                )
                if save is not None:
                    expected.append(save)
        except SsmRollbackError as error:
            expected_error = type(error)
        positions = [p for p, _, _ in column]
        boundaries = [b for _, b, _ in column]
        thinks = [t for _, _, t in column]
        args: tuple[object, object, object]
        if form == "array":
            args = (
                array.array("q", positions),
                array.array("b", boundaries),
                array.array("b", thinks),
            )
        elif form == "tolist":
            args = (_ToList(positions), _ToList(boundaries), _ToList(thinks))
        else:
            args = (positions, boundaries, thinks)
        if expected_error is not None:
            batched_before = _observe(batched_rings)
            with pytest.raises(expected_error):
                snapshot_boundaries(
                    batched_rings, positions=args[0], is_boundary=args[1], in_thinking=args[2]
                )
            assert _observe(batched_rings) == batched_before  # nothing changed
            # The per-row path changed the rows before the bad one; carry on from the
            # unchanged batched rings.
            per_row_rings = copy.deepcopy(batched_rings)
            continue
        batch = snapshot_boundaries(
            batched_rings, positions=args[0], is_boundary=args[1], in_thinking=args[2]
        )
        got = list(batch)
        assert [(s.seq, s.slot, s.token_position) for s in got] == [
            (s.seq, s.slot, s.token_position) for s in expected
        ]
        assert _observe(batched_rings) == _observe(per_row_rings)
        for save in got:  # each save carries the ticket its ring entry holds
            entry = batched_rings[save.seq].entry_for(save.token_position)
            assert entry is not None
            assert entry.ticket == save.ticket
        for ring in batched_rings:
            ring.check_valid()


class _ToList:
    """An array-like with ``tolist()``, as numpy arrays and CPU tensors are."""

    def __init__(self, values: list[int] | list[bool]) -> None:
        self.values = values

    def tolist(self) -> list[int] | list[bool]:
        return list(self.values)


def test_numpy_inputs_are_read_through_tolist() -> None:
    np = pytest.importorskip("numpy")
    rings = [SsmDecodeRing(2) for _ in range(4)]
    batch = snapshot_boundaries(
        rings,
        positions=np.array([3, 4, 5, 6]),
        is_boundary=np.array([True, False, True, True]),
        in_thinking=np.array([False, False, True, False]),
    )
    assert (batch.seqs, batch.slots, batch.positions) == ((0, 3), (0, 0), (3, 6))
    assert all(type(v) is int for v in batch.positions)


@pytest.mark.parametrize("library", ["numpy", "torch", "array"])
def test_typed_arrays_take_the_fast_path_and_still_refuse_bad_elements(library: str) -> None:
    """An integer or bool array skips the element type scan; its values are still checked."""

    def column(values: list[int] | list[bool], kind: str) -> object:
        if library == "array":
            return array.array("q" if kind == "int" else "b", values)
        module = pytest.importorskip(library)
        dtype = getattr(module, "int32" if kind == "int" else "bool")
        make = module.tensor if library == "torch" else module.array
        return make(values, dtype=dtype)

    rings = [SsmDecodeRing(2) for _ in range(3)]
    batch = snapshot_boundaries(
        rings,
        positions=column([3, 4, 5], "int"),
        is_boundary=column([True, False, True], "bool"),
        in_thinking=column([False, False, False], "bool"),
        rows=column([0, 1, 2], "int"),
    )
    assert (batch.seqs, batch.positions) == ((0, 2), (3, 5))
    assert all(type(v) is int for column_ in (batch.seqs, batch.positions) for v in column_)
    before = [ring.entries for ring in rings]
    with pytest.raises(InvalidArgumentError, match=r"'positions\[1\]' must be an int >= 0"):
        snapshot_boundaries(
            rings,
            positions=column([9, -4, 9], "int"),
            is_boundary=column([True, True, True], "bool"),
            in_thinking=column([False, False, False], "bool"),
        )
    assert [ring.entries for ring in rings] == before


@pytest.mark.parametrize("name", ["is_boundary", "in_thinking"])
@pytest.mark.parametrize("bad", [1.0, 0.0], ids=repr)
def test_float_flags_are_refused_though_they_equal_a_bool(name: str, bad: float) -> None:
    """``1.0 == True``: a check by equality would let a float column through."""
    arguments: dict[str, object] = {
        "positions": [1, 2],
        "is_boundary": [True, True],
        "in_thinking": [False, False],
    }
    arguments[name] = [bad, False]
    with pytest.raises(InvalidArgumentError, match=rf"'{name}\[0\]' must be a bool"):
        snapshot_boundaries([SsmDecodeRing(1), SsmDecodeRing(1)], **arguments)


def test_float_arrays_take_the_checked_path() -> None:
    np = pytest.importorskip("numpy")
    rings = [SsmDecodeRing(1), SsmDecodeRing(1)]
    with pytest.raises(InvalidArgumentError, match=r"'positions\[0\]'"):
        snapshot_boundaries(
            rings,
            positions=np.array([1.0, 2.0]),
            is_boundary=np.array([True, True]),
            in_thinking=np.array([False, False]),
        )
    with pytest.raises(InvalidArgumentError, match=r"'is_boundary\[0\]' must be a bool"):
        snapshot_boundaries(
            rings,
            positions=np.array([1, 2]),
            is_boundary=np.array([1.0, 1.0]),
            in_thinking=np.array([False, False]),
        )
    assert [len(ring) for ring in rings] == [0, 0]


def test_rows_pick_which_rings_the_columns_belong_to() -> None:
    rings = {7: SsmDecodeRing(2), 2: SsmDecodeRing(2)}
    batch = snapshot_boundaries(
        rings, positions=[4, 9], is_boundary=[True, True], in_thinking=[False, False], rows=[7, 2]
    )
    assert (batch.seqs, batch.positions) == ((7, 2), (4, 9))
    assert rings[7].snapshot_positions() == (4,)
    assert rings[2].snapshot_positions() == (9,)


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"positions": [1, -1]}, InvalidArgumentError, r"'positions\[1\]' must be an int >= 0"),
        ({"positions": [1, 2.0]}, InvalidArgumentError, r"'positions\[1\]'"),
        ({"is_boundary": [True, 2]}, InvalidArgumentError, r"'is_boundary\[1\]' must be a bool"),
        ({"in_thinking": [None, False]}, InvalidArgumentError, r"'in_thinking\[0\]'"),
        ({"positions": [1]}, InvalidArgumentError, "must have one length"),
        ({"rows": [0, 0]}, InvalidArgumentError, r"got 0 at rows\[0\] and rows\[1\]"),
        ({"rows": [0, 5]}, InvalidArgumentError, "got 2 rings and row 5"),
        ({"positions": "12"}, InvalidArgumentError, "'positions' must be a sequence"),
        ({"positions": [5, 1]}, OutOfOrderError, r"'positions\[1\]' must be greater than row 1's"),
    ],
)
def test_a_bad_element_is_named_and_nothing_changes(
    kwargs: dict[str, object], error: type[Exception], message: str
) -> None:
    rings = [SsmDecodeRing(2), SsmDecodeRing(2)]
    rings[1].record(3)
    arguments: dict[str, object] = {
        "positions": [5, 6],
        "is_boundary": [True, True],
        "in_thinking": [False, False],
    }
    arguments.update(kwargs)
    before = [ring.entries for ring in rings]
    with pytest.raises(error, match=message):
        snapshot_boundaries(rings, **arguments)
    assert [ring.entries for ring in rings] == before


def _per_row(
    rings: list[SsmDecodeRing], positions: list[int], boundary: list[bool]
) -> list[tuple[int, int, int]]:
    saves = []
    for seq, (ring, position, flag) in enumerate(zip(rings, positions, boundary, strict=True)):
        save = snapshot_boundary_if_ssm(
            ring, seq=seq, token_position=position, is_boundary=flag, in_thinking=False
        )
        if save is not None:
            saves.append((save.seq, save.slot, save.token_position))
    return saves


@pytest.mark.parametrize("capacity", [1, 2, 3])
def test_a_ring_named_for_two_rows_records_twice_as_the_per_row_calls_do(capacity: int) -> None:
    """Ascending positions on a shared ring: the same saves and the same ring as per row."""
    shared, other = SsmDecodeRing(capacity), SsmDecodeRing(capacity)
    batch = snapshot_boundaries(
        [shared, other, shared],
        positions=[4, 5, 6],
        is_boundary=[True, True, True],
        in_thinking=[False, False, False],
    )
    twin, twin_other = SsmDecodeRing(capacity), SsmDecodeRing(capacity)
    expected = _per_row([twin, twin_other, twin], [4, 5, 6], [True, True, True])
    assert list(zip(batch.seqs, batch.slots, batch.positions, strict=True)) == expected
    assert shared.snapshot_positions() == twin.snapshot_positions()
    assert shared.next_slot == twin.next_slot
    shared.check_valid()


@pytest.mark.parametrize("later", [6, 5])  # equal to, then below, the earlier row's position
def test_a_ring_named_for_two_rows_must_record_them_in_order(later: int) -> None:
    """The per-row calls raise at the second row; the batched step raises before any change."""
    shared, other = SsmDecodeRing(4), SsmDecodeRing(4)
    shared.record(2)
    before = (shared.entries, shared.next_slot, other.entries)
    with pytest.raises(
        OutOfOrderError, match=r"'positions\[2\]' must be greater than 6, which row 0"
    ):
        snapshot_boundaries(
            [shared, other, shared],
            positions=[6, 9, later],
            is_boundary=[True, True, True],
            in_thinking=[False, False, False],
        )
    assert (shared.entries, shared.next_slot, other.entries) == before
    with pytest.raises(OutOfOrderError):
        _per_row([shared, other, shared], [6, 9, later], [True, True, True])


def test_a_shared_ring_off_the_recording_rows_is_no_concern() -> None:
    """Only rows that record can collide: a ring shared by a row that does not is untouched."""
    shared = SsmDecodeRing(2)
    batch = snapshot_boundaries(
        [shared, SsmDecodeRing(2), shared],
        positions=[7, 3, 5],
        is_boundary=[True, True, False],
        in_thinking=[False, False, False],
    )
    assert batch.seqs == (0, 1)
    assert shared.snapshot_positions() == (7,)


@pytest.mark.parametrize("rings", [None, 3, [SsmDecodeRing(1), None]])
def test_rings_that_are_not_rings_are_refused(rings: object) -> None:
    with pytest.raises(InvalidArgumentError, match="'rings"):
        snapshot_boundaries(
            rings,  # type: ignore[arg-type]
            positions=[1, 2],
            is_boundary=[True, True],
            in_thinking=[False, False],
        )


# -- SaveBatch -----------------------------------------------------------------------------


def test_a_save_batch_is_a_value_with_rows_and_a_dict_form() -> None:
    batch = SaveBatch([0, 2], [1, 0], [5, 6], [10, 11])
    assert len(batch) == 2
    assert batch[1] == SsmSnapshotSave(2, 0, 6, 11)
    assert list(batch) == [SsmSnapshotSave(0, 1, 5, 10), SsmSnapshotSave(2, 0, 6, 11)]
    assert effect_from_dict(batch.to_dict()) == batch
    assert pickle.loads(pickle.dumps(batch)) == batch
    assert hash(batch) == hash(SaveBatch((0, 2), (1, 0), (5, 6), (10, 11)))


@pytest.mark.parametrize(
    ("columns", "message"),
    [
        (([0], [0, 1], [1, 1], [1, 1]), "must have one length"),
        (([0], [-1], [1], [1]), r"'slots\[0\]' must be an int >= 0"),
        (([True], [0], [1], [1]), r"'seqs\[0\]' must be an int >= 0"),
        ((None, [0], [1], [1]), "'seqs' must be a sequence"),
        # -1 (the live state) is a source: the message said ">= 0" for -2.
        (([0], [0], [1], [1], [-2]), r"'sources\[0\]' must be an int >= -1, got -2"),
        (([0], [0], [1], [1], [1.5]), r"'sources\[0\]' must be an int >= -1, got 1.5"),
        (([0], [0], [1], [1], [True]), r"'sources\[0\]' must be an int >= -1, got True"),
    ],
)
def test_a_bad_save_batch_is_refused(columns: tuple[object, ...], message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        SaveBatch(*columns)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("d", "message"),
    [
        (
            {"kind": "save_batch", "seqs": [0], "slots": [0], "positions": [1], "sources": None},
            r"missing \['tickets'\]",
        ),
        (
            {
                "kind": "save_batch",
                "seqs": 0,
                "slots": [0],
                "positions": [1],
                "tickets": [1],
                "sources": None,
            },
            "a list",
        ),
        (
            {
                "kind": "save_batch",
                "seqs": [0],
                "slots": [0],
                "positions": [-1],
                "tickets": [1],
                "sources": [0],
            },
            "-1",
        ),
    ],
)
def test_a_bad_save_batch_dict_is_refused(d: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        effect_from_dict(d)


def test_pools_and_apply_effects_take_a_save_batch() -> None:
    pool = FakeSnapshotPool(4, 2)
    pool.live[:] = ["a", "b", "c", "d"]
    rings = [SsmDecodeRing(2) for _ in range(4)]
    batch = snapshot_boundaries(
        rings,
        positions=[1, 1, 1, 1],
        is_boundary=[True, False, True, True],
        in_thinking=[False] * 4,
    )
    single = snapshot_boundary_if_ssm(
        rings[1], seq=1, token_position=2, is_boundary=True, in_thinking=False
    )
    assert single is not None
    pool.fail_when(lambda save: save.seq == 3)
    outcome = apply_effects(pool, [batch, single], rings)
    assert outcome.failed == (batch[2],)
    assert rings[3].snapshot_positions() == ()  # the failed save was discarded
    assert pool.save_calls == 1  # one batch: the SaveBatch and the single save together
    assert [pool.stored_value(seq, 0) for seq in range(4)] == ["a", "b", "c", None]
    pool.live[:] = ["w", "x", "y", "z"]
    restore = SsmSnapshotRestore(0, batch.slots[0], 1, batch.tickets[0])
    apply_effects(pool, [restore], rings)
    assert pool.live[0] == "a"


@pytest.mark.parametrize(
    ("batch", "message"),
    [
        (
            SaveBatch([0, 4], [0, 0], [1, 1], [1, 2]),
            r"'effects\[0\]\[1\].seq' must be < the pool's",
        ),
        (
            SaveBatch([0, 1], [0, 2], [1, 1], [1, 2]),
            r"'effects\[0\]\[1\].slot' must be < the pool's",
        ),
        (
            SaveBatch([1, 1], [0, 1], [1, 2], [1, 2]),
            r"seq 1 at effects\[0\]\[0\] and effects\[0\]\[1\]",
        ),
    ],
)
def test_a_bad_save_batch_is_named_by_apply_effects_and_nothing_copies(
    batch: SaveBatch, message: str
) -> None:
    pool = FakeSnapshotPool(4, 2)
    rings = [SsmDecodeRing(2) for _ in range(4)]
    with pytest.raises(InvalidArgumentError, match=message):
        apply_effects(pool, [batch], rings)
    with pytest.raises(InvalidArgumentError):
        pool.save(batch)
    assert pool.save_calls == 0


def test_a_save_batch_and_a_single_save_of_one_row_are_refused_together() -> None:
    pool = FakeSnapshotPool(4, 2)
    rings = [SsmDecodeRing(2) for _ in range(4)]
    batch = SaveBatch([0, 1], [0, 0], [1, 1], [1, 2])
    with pytest.raises(InvalidArgumentError, match="at most once per run"):
        apply_effects(pool, [batch, SsmSnapshotSave(1, 1, 2, 3)], rings)
    assert pool.save_calls == 0


def test_a_save_batch_is_indexed_by_an_int_row_only() -> None:
    """A slice gave an ``SsmSnapshotSave`` of tuples that no check had seen, and ``True``
    gave row 1; out of range raised ``IndexError``."""
    batch = SaveBatch((0, 2), (1, 0), (5, 6), (10, 11), (-1, 3))  # -1: row 0 saves its live state
    assert batch[-1] == batch[1] == SsmSnapshotSave(2, 0, 6, 11, 3)
    assert batch.source(0) is None
    for bad in (slice(0, 1), True, "0", 1.0):
        with pytest.raises(InvalidArgumentTypeError, match="'index' must be an int row"):
            batch[bad]  # type: ignore[index]
    for out in (2, -3):
        with pytest.raises(InvalidArgumentError, match=r"'index' must be in \[-2, 2\)"):
            batch[out]
        with pytest.raises(InvalidArgumentError, match=r"'index' must be in \[-2, 2\)"):
            batch.source(out)
    assert list(batch) == [batch[0], batch[1]]
