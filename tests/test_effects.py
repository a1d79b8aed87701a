"""Effects are frozen values that round-trip through dicts and pickles."""

from __future__ import annotations

import copy
import pickle

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ssm_rollback import (
    Effect,
    InvalidArgumentError,
    SaveBatch,
    SsmSnapshotRestore,
    SsmSnapshotSave,
    SsmStateAccept,
    effect_from_dict,
)
from ssm_rollback.testing import INVALID_INDICES

ids = st.integers(0, 2**40)
effects = (
    st.builds(SsmSnapshotSave, ids, ids, ids, ids, st.none() | st.integers(0, 8))
    | st.builds(SsmSnapshotRestore, ids, ids, ids, ids)
    | st.builds(SsmStateAccept, ids, st.integers(0, 8), st.none() | ids)
    | st.integers(0, 3).flatmap(
        lambda n: st.builds(
            SaveBatch,
            *[st.lists(ids, min_size=n, max_size=n)] * 4,
            st.none() | st.lists(st.integers(-1, 8), min_size=n, max_size=n),
        )
    )
)
KEYS = {
    SsmSnapshotSave: {"kind", "seq", "slot", "token_position", "ticket", "source"},
    SsmSnapshotRestore: {"kind", "seq", "slot", "token_position", "ticket"},
    SsmStateAccept: {"kind", "seq", "index", "ticket"},
    SaveBatch: {"kind", "seqs", "slots", "positions", "tickets", "sources"},
}


@given(effects)
def test_every_effect_round_trips_through_a_dict_and_a_pickle(effect: Effect) -> None:
    as_dict = effect.to_dict()
    assert set(as_dict) == KEYS[type(effect)]
    assert effect_from_dict(as_dict) == effect
    assert type(effect_from_dict(as_dict)) is type(effect)
    assert pickle.loads(pickle.dumps(effect)) == effect
    assert copy.copy(effect) == effect


def test_to_dict_names_the_kind() -> None:
    assert SsmSnapshotSave(1, 2, 3, 44).to_dict() == {
        "kind": "ssm_snapshot_save",
        "seq": 1,
        "slot": 2,
        "token_position": 3,
        "ticket": 44,
        "source": None,
    }
    assert SsmSnapshotSave(1, 2, 3, 44, source=2).to_dict()["source"] == 2
    assert SsmSnapshotRestore(1, 2, 3, 44).to_dict()["kind"] == "ssm_snapshot_restore"
    assert SsmStateAccept(1, 3, 9).to_dict() == {
        "kind": "ssm_state_accept",
        "seq": 1,
        "index": 3,
        "ticket": 9,
    }
    # A v0.2 dict, without a ticket, still reads back: an unticketed accept.
    v02 = {"kind": "ssm_state_accept", "seq": 1, "index": 3}
    assert effect_from_dict(v02) == SsmStateAccept(1, 3)


def test_effects_are_frozen_hashable_and_kind_sensitive() -> None:
    save = SsmSnapshotSave(seq=0, slot=1, token_position=2, ticket=7)
    assert save == SsmSnapshotSave(0, 1, 2, 7)
    assert save != SsmSnapshotSave(0, 1, 2, 8)  # same position, another snapshot
    restore: object = SsmSnapshotRestore(0, 1, 2, 7)
    assert save != restore
    assert len({save, SsmSnapshotSave(0, 1, 2, 7), SsmSnapshotRestore(0, 1, 2, 7)}) == 2
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        save.slot = 3  # type: ignore[misc]
    assert not hasattr(save, "__dict__")  # slotted
    match save:
        case SsmSnapshotSave(seq, slot, position, ticket):
            assert (seq, slot, position, ticket) == (0, 1, 2, 7)


@pytest.mark.parametrize("field", ["seq", "slot", "token_position", "ticket"])
@pytest.mark.parametrize("bad", INVALID_INDICES, ids=repr)
@pytest.mark.parametrize("cls", [SsmSnapshotSave, SsmSnapshotRestore])
def test_fields_must_be_non_negative_ints(cls: type[Effect], bad: object, field: str) -> None:
    values: dict[str, object] = {"seq": 0, "slot": 0, "token_position": 0, "ticket": 0}
    values[field] = bad
    with pytest.raises(InvalidArgumentError, match=f"'{field}' must be an int >= 0"):
        cls(**values)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"kind": "ssm_state_accept", "seq": 0}, r"missing \['index'\]"),
        ({"kind": "ssm_state_accept", "seq": 0, "index": -2}, r"'d\[\"index\"\]' must be an int"),
        (
            {
                "kind": "ssm_snapshot_save",
                "seq": 0,
                "slot": 0,
                "token_position": 0,
                "ticket": 1,
                "source": -1,
            },
            r"'d\[\"source\"\]' must be an int >= 0",
        ),
    ],
)
def test_malformed_accept_and_source_dicts_raise_clear_errors(bad: object, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        effect_from_dict(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [-1, True, 1.0, "1"], ids=repr)
def test_a_source_must_be_none_or_an_index(bad: object) -> None:
    with pytest.raises(InvalidArgumentError, match="'source'"):
        SsmSnapshotSave(0, 0, 1, 1, source=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ([("kind", "ssm_snapshot_save")], "'d' must be a mapping"),
        (
            {"seq": 0, "slot": 0, "token_position": 0, "ticket": 1},
            r"'d\[\"kind\"\]' must be one of",
        ),
        (
            {"kind": "teleport", "seq": 0, "slot": 0, "token_position": 0, "ticket": 1},
            "got 'teleport'",
        ),
        ({"kind": 3, "seq": 0, "slot": 0, "token_position": 0, "ticket": 1}, "got 3"),
        (
            {"kind": "ssm_snapshot_save", "seq": 0, "slot": 0},
            r"missing \['source', 'ticket', 'token_position'\]",
        ),
        (
            {"kind": "ssm_snapshot_save", "seq": 0, "slot": 0, "token_position": 0, "source": 1},
            r"missing \['ticket'\]",
        ),
        (
            {
                "kind": "ssm_snapshot_save",
                "seq": 0,
                "slot": 0,
                "token_position": 0,
                "ticket": 1,
                "x": 1,
            },
            r"unexpected \['x'\]",
        ),
        (
            {
                "kind": "ssm_snapshot_restore",
                "seq": -1,
                "slot": 0,
                "token_position": 0,
                "ticket": 1,
            },
            r"'d\[\"seq\"\]' must be an int >= 0, got -1",
        ),
        (
            {
                "kind": "ssm_snapshot_restore",
                "seq": 0,
                "slot": "0",
                "token_position": 0,
                "ticket": 1,
            },
            r"'d\[\"slot\"\]' must be an int >= 0, got '0'",
        ),
    ],
)
def test_malformed_dicts_raise_clear_errors(bad: object, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        effect_from_dict(bad)  # type: ignore[arg-type]


def test_a_kind_that_is_no_str_or_a_key_whose_repr_raises_is_refused_by_name() -> None:
    """An array as the kind (its ``==`` is no bool) or a key whose ``__repr__`` raises leaked
    a ValueError or the key's own error."""

    class Array:
        def __eq__(self, other: object) -> bool:
            raise ValueError("the truth value of an array is ambiguous")

        __hash__ = None  # type: ignore[assignment]

    class Loud:
        def __repr__(self) -> str:
            raise RuntimeError("no repr")

    base = SsmSnapshotRestore(1, 2, 3, 4).to_dict()
    with pytest.raises(InvalidArgumentError, match=r"'d\[\"kind\"\]' must be one of .*Array"):
        effect_from_dict({**base, "kind": Array()})
    with pytest.raises(InvalidArgumentError, match=r"unexpected \[a Loud whose repr\(\) raised"):
        effect_from_dict({**base, Loud(): 1})  # type: ignore[dict-item]


def test_a_kind_given_as_a_str_enum_is_read_as_its_value() -> None:
    """A StrEnum's member is a str: read as its value, as before the kind had to be a str."""
    from enum import StrEnum

    class Kind(StrEnum):
        RESTORE = SsmSnapshotRestore.kind

    restore = SsmSnapshotRestore(1, 2, 3, 4)
    assert effect_from_dict({**restore.to_dict(), "kind": Kind.RESTORE}) == restore


def test_a_dict_with_a_key_its_kind_does_not_have_is_refused() -> None:
    extra = {**SsmSnapshotRestore(1, 2, 3, 4).to_dict(), "source": None}
    with pytest.raises(InvalidArgumentError, match=r"unexpected \['source'\]"):
        effect_from_dict(extra)


@pytest.mark.parametrize(("ticket", "error"), [(-1, InvalidArgumentError), ("7", TypeError)])
def test_an_accepts_ticket_must_be_none_or_an_int_at_least_0(
    ticket: object, error: type[Exception]
) -> None:
    with pytest.raises(error, match="'ticket'"):
        SsmStateAccept(0, 1, ticket)  # type: ignore[arg-type]
