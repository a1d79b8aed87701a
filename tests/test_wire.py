"""The wire format of ``ssm_rollback.distributed``: round trips and refusals, without processes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ssm_rollback import (
    Effect,
    InvalidArgumentError,
    SaveBatch,
    SsmPrefixRestore,
    SsmPrefixSave,
    SsmRollbackError,
    SsmSnapshotRestore,
    SsmSnapshotSave,
    SsmStateAccept,
)
from ssm_rollback._tp import wire as _wire
from ssm_rollback._tp import wire_values as _wire_values

ints = st.integers(0, 2**62)
small = st.integers(0, 64)
lengths = st.integers(1, 2**62)  # a prefix is at least one token
sources = st.none() | small


def save_batches() -> st.SearchStrategy[SaveBatch]:
    def build(n: int) -> st.SearchStrategy[SaveBatch]:
        column = st.lists(ints, min_size=n, max_size=n)
        source_column = st.none() | st.lists(st.integers(-1, 8), min_size=n, max_size=n)
        return st.builds(SaveBatch, column, column, column, column, source_column)

    return st.integers(0, 8).flatmap(build)


effects: st.SearchStrategy[Effect] = st.one_of(
    st.builds(SsmSnapshotSave, ints, ints, ints, ints, sources),
    st.builds(SsmSnapshotRestore, ints, ints, ints, ints),
    st.builds(SsmStateAccept, ints, small),
    save_batches(),
    st.builds(SsmPrefixSave, ints, ints, lengths, ints),
    st.builds(SsmPrefixRestore, ints, ints, lengths, ints),
)
#: Every type a payload may decode to.
KINDS = (
    SsmSnapshotSave,
    SsmSnapshotRestore,
    SsmStateAccept,
    SaveBatch,
    SsmPrefixSave,
    SsmPrefixRestore,
)


@given(st.lists(effects, max_size=8))
def test_decode_inverts_encode(step: list[Effect]) -> None:
    words = _wire.encode(step)
    assert all(-(2**63) <= w < 2**63 for w in words)
    decoded = _wire.decode(words)
    assert decoded == tuple(step)
    assert [type(e) for e in decoded] == [type(e) for e in step]
    assert all(hash(a) == hash(b) for a, b in zip(decoded, step, strict=True))


prefix_effects = st.builds(SsmPrefixSave, small, small, lengths, ints) | st.builds(
    SsmPrefixRestore, small, small, lengths, ints
)


@given(st.lists(effects | prefix_effects, max_size=12))
def test_prefix_effects_mixed_with_ring_effects_arrive_in_order(step: list[Effect]) -> None:
    """A step that restores a shared prefix, then saves ring and shared slots, keeps its order."""
    decoded = _wire.decode(_wire.encode(step))
    assert decoded == tuple(step)
    assert [type(e) for e in decoded] == [type(e) for e in step]


@given(st.lists(effects, min_size=1, max_size=6), st.data())
def test_a_cut_payload_is_refused(step: list[Effect], data: st.DataObject) -> None:
    words = _wire.encode(step)
    cut = data.draw(st.integers(0, len(words) - 1))
    with pytest.raises(_wire.WireError):
        _wire.decode(words[:cut])


@given(st.lists(effects, max_size=6), st.lists(st.integers(0, 5), min_size=1, max_size=4))
def test_trailing_words_are_refused(step: list[Effect], extra: list[int]) -> None:
    with pytest.raises(_wire.WireError, match="must end after"):
        _wire.decode([*_wire.encode(step), *extra])


@given(st.lists(effects, max_size=6), st.integers(-(2**63), 2**63 - 1), st.data())
def test_any_corrupted_word_decodes_to_effects_or_a_wire_error(
    step: list[Effect], value: int, data: st.DataObject
) -> None:
    words = _wire.encode(step)
    at = data.draw(st.integers(0, len(words) - 1))
    words[at] = value
    try:
        decoded = _wire.decode(words)
    except _wire.WireError:
        return
    assert all(type(e) in KINDS for e in decoded)


def test_the_payload_layout_is_the_documented_one() -> None:
    step: list[Effect] = [
        SsmSnapshotSave(1, 2, 3, 4),
        SsmSnapshotSave(1, 3, 5, 6, source=2),
        SsmSnapshotRestore(0, 1, 2, 3),
        SsmStateAccept(3, 2, 40),
        SaveBatch([1, 2], [0, 1], [5, 6], [7, 8]),
        SaveBatch([4], [0], [9], [10], sources=[-1]),
        SsmPrefixRestore(2, 0, 100, 11),
        SsmPrefixSave(2, 1, 140, 12),
        SsmPrefixSave(3, 2, 150, 13),
        SsmStateAccept(1, 0),
    ]
    assert _wire.encode(step) == [
        _wire.MAGIC, 8,
        _wire.SAVES, 2, 1, 1, 2, 3, 3, 5, 4, 6, 0, 3,  # sources + 1: live is 0
        _wire.RESTORES, 1, 0, 1, 2, 3,
        _wire.ACCEPTS, 1, 3, 2, 41,  # ticket + 1
        _wire.SAVE_BATCH, 2, 0, 1, 2, 0, 1, 5, 6, 7, 8,
        _wire.SAVE_BATCH, 1, _wire.HAS_SOURCES, 4, 0, 9, 10, 0,
        _wire.PREFIX_RESTORES, 1, 2, 0, 100, 11,
        _wire.PREFIX_SAVES, 2, 2, 3, 1, 2, 140, 150, 12, 13,  # a run is one record
        _wire.ACCEPTS, 1, 1, 0, 0,  # no ticket is 0
    ]  # fmt: skip
    assert _wire.MAGIC & 0xFFFF == _wire.VERSION == 5
    assert (_wire.PREFIX_SAVES, _wire.PREFIX_RESTORES) == (5, 6)


def test_a_payload_of_format_version_4_is_refused_naming_the_version() -> None:
    """Version 4 had no prefix records: its payloads (and peers, at the handshake) are refused."""
    words = _wire.encode([SsmStateAccept(0, 1)])
    words[0] = (0x53534D52 << 16) | 4
    with pytest.raises(
        _wire.WireError, match=f"magic word {_wire.MAGIC:#x} \\(format version 5\\)"
    ):
        _wire.decode(words)


@pytest.mark.parametrize("kind", [_wire.PREFIX_SAVES, _wire.PREFIX_RESTORES])
@pytest.mark.parametrize(
    ("body", "message"),
    [
        ([], "a kind and a row count at word 2"),
        ([1], "of 1 rows needs 4 words from word 4"),
        ([1, 0, 0, 0], "of 1 rows needs 4 words from word 4"),
        ([2, 0, 0, 0, 0, 0, 0, 0], "of 2 rows needs 8 words from word 4"),
        ([2**40, 0, 0, 0, 0], "of 1099511627776 rows needs"),
        ([1, -1, 0, 0, 0], "ints >= 0, got -1 at word 4"),
        ([1, 0, 0, -(2**63), 0], "ints >= 0, got -9223372036854775808 at word 6"),
        ([1, 0, 0, 0, -7], "ints >= 0, got -7 at word 7"),
        ([1, 0, 0, 1, 0, 9], "must end after its 1 records, at word 8, got 9 words"),
        ([1, 0, 0, 0, 0], r"must hold lengths >= 1 \(a prefix of at least one token\)"),
        ([2, 0, 1, 0, 0, 5, 0, 7, 7], r"at word 4 must hold lengths >= 1"),
    ],
)
def test_malformed_prefix_records_are_refused(kind: int, body: list[int], message: str) -> None:
    words = [_wire.MAGIC, 1, *([kind] if body else []), *body]
    name = "prefix saves" if kind == _wire.PREFIX_SAVES else "prefix restores"
    with pytest.raises(_wire.WireError, match=message) as caught:
        _wire.decode(words)
    if "rows needs" in message:
        assert f"record 0 ({name})" in str(caught.value)


@given(st.lists(prefix_effects, min_size=1, max_size=6), st.data())
def test_a_prefix_payload_cut_or_corrupted_is_a_wire_error_or_prefix_effects(
    step: list[Effect], data: st.DataObject
) -> None:
    words = _wire.encode(step)
    with pytest.raises(_wire.WireError):
        _wire.decode(words[: data.draw(st.integers(0, len(words) - 1))])
    at = data.draw(st.integers(0, len(words) - 1))
    words[at] = data.draw(st.integers(-(2**63), 2**63 - 1))
    try:
        decoded = _wire.decode(words)
    except _wire.WireError:
        return
    assert all(type(e) in KINDS for e in decoded)


def test_decoded_prefix_effects_are_the_values_a_sender_builds() -> None:
    step: list[Effect] = [SsmPrefixSave(1, 2, 3, 4), SsmPrefixRestore(1, 2, 3, 4)]
    decoded = _wire.decode(_wire.encode(step))
    assert decoded == (SsmPrefixSave(1, 2, 3, 4), SsmPrefixRestore(1, 2, 3, 4))
    assert len(set(decoded)) == 2  # the same fields, another kind: not equal
    save, restore = decoded
    assert save.to_dict() == {
        "kind": "ssm_prefix_save",
        "seq": 1,
        "slot": 2,
        "length": 3,
        "ticket": 4,
    }
    assert restore.to_dict()["kind"] == "ssm_prefix_restore"
    assert hash(save) == hash(step[0])


def test_an_unknown_kind_is_refused_naming_the_record() -> None:
    words = _wire.encode([SsmStateAccept(0, 1)])
    words[2] = 99  # the first record's kind
    with pytest.raises(_wire.WireError, match="record 0 at word 2 must have a kind"):
        _wire.decode(words)


@pytest.mark.parametrize(
    ("words", "message"),
    [
        ([], "magic word"),
        ([_wire.MAGIC + 1, 0], "magic word"),
        ([_wire.MAGIC, -1], "ints >= 0, got -1 at word 1"),
        ([_wire.MAGIC, 5], "record count"),
        ([_wire.MAGIC, 1, _wire.ACCEPTS], "a kind and a row count"),
        ([_wire.MAGIC, 1, _wire.SAVE_BATCH, 2, 7], "flags 0 or 1"),
        ([_wire.MAGIC, 1, _wire.SAVE_BATCH, 2], "flags 0 or 1, got None"),
        ([_wire.MAGIC, 1, _wire.SAVE_BATCH, -3, 0], "ints >= 0, got -3 at word 3"),
        ([_wire.MAGIC, 1, _wire.SAVE_BATCH, 1, 0, 0, 0, 0], "of 1 rows needs 4 words"),
        ([_wire.MAGIC, 1, _wire.ACCEPTS, 1, 0], "of 1 rows needs 3 words"),
        ([_wire.MAGIC, 1, _wire.ACCEPTS, 1, -1, 0], "ints >= 0, got -1 at word 4"),
        ([_wire.MAGIC, 1, _wire.ACCEPTS, 1, 0, -1], "ints >= 0, got -1 at word 5"),
        ([_wire.MAGIC, 1, _wire.SAVES, 1, 0, 0, 0, 0, -1], "ints >= 0, got -1 at word 8"),
        ([_wire.MAGIC, 1, _wire.RESTORES, 1, 0, 0, -5, 0], "ints >= 0, got -5"),
        ([_wire.MAGIC, 1, _wire.SAVE_BATCH, 1, 1, 0, 0, 0, 0, -1], "ints >= 0, got -1"),
    ],
)
def test_malformed_payloads_are_refused(words: list[int], message: str) -> None:
    with pytest.raises(_wire.WireError, match=message):
        _wire.decode(words)


def test_a_wire_error_is_a_library_error_and_a_value_error() -> None:
    with pytest.raises(ValueError, match="magic word") as caught:
        _wire.decode([0])
    assert isinstance(caught.value, SsmRollbackError)


@pytest.mark.parametrize("bad", [[object()], [{"kind": "ssm_state_accept"}], "abc", 3])
def test_encode_refuses_what_is_not_effects(bad: object) -> None:
    with pytest.raises(InvalidArgumentError):
        _wire.encode(bad)  # type: ignore[arg-type]


def test_encode_refuses_a_value_int64_cannot_carry() -> None:
    with pytest.raises(InvalidArgumentError, match=r"fit int64, got 9223372036854775808 at word 4"):
        _wire.encode([SsmStateAccept(2**63, 0)])
    assert _wire.encode([SsmStateAccept(2**63, 0)], ranged=False)[4] == 2**63  # the caller checks


def test_decode_may_leave_rule_5_to_its_caller() -> None:
    words = _wire.encode([SsmStateAccept(1, 2)])
    words[5] = -4
    with pytest.raises(_wire.WireError, match="ints >= 0, got -4 at word 5"):
        _wire.decode(words)
    (trusted,) = _wire.decode(words, checked=True)  # the caller vouched: taken as is
    assert isinstance(trusted, SsmStateAccept)
    assert (trusted.seq, trusted.index) == (1, -4)


def test_accepts_travel_with_their_tickets_and_unticketed_ones_stay_unticketed() -> None:
    step: list[Effect] = [SsmStateAccept(s, s % 4, None if s % 3 else 7 * s) for s in range(40)]
    decoded = _wire.decode(_wire.encode(step))
    assert decoded == tuple(step)
    assert [a.ticket for a in decoded if isinstance(a, SsmStateAccept)][:4] == [0, None, None, 21]


def test_accept_columns_of_different_lengths_are_refused() -> None:
    with pytest.raises(ValueError, match="accept columns of 2, 1 and 2 rows"):
        _wire_values.accepts((1, 2), (0,), (0, 0))


def test_a_decoded_save_batch_keeps_its_columns_as_sent() -> None:
    batch = SaveBatch([1, 2], [0, 1], [5, 6], [7, 8], sources=[-1, -1])
    (decoded,) = _wire.decode(_wire.encode([batch]))
    assert isinstance(decoded, SaveBatch)
    assert decoded.sources == (-1, -1)
    assert all(type(c) is tuple for c in (decoded.seqs, decoded.slots, decoded.tickets))


def test_a_senders_words_are_a_refusal_whatever_its_effects_do() -> None:
    """Its peers wait for the sender's words: a step it cannot encode is refused, never raised."""

    def breaks() -> Iterator[Effect]:
        yield SsmStateAccept(0, 0)
        raise KeyError("row 7")

    refused, words = _wire.sender_words(breaks(), 100)
    assert isinstance(refused, InvalidArgumentError)
    assert str(refused) == "iterating 'effects' raised KeyError: 'row 7'"
    assert bytes(words).decode() == str(refused)
    refused, words = _wire.sender_words([SsmStateAccept(0, 0)] * 3, 12)
    assert str(refused) == "'effects' must encode to at most 12 words, got 13"
    refused, _ = _wire.sender_words([object()], 100)  # type: ignore[list-item]
    assert str(refused).startswith("'effects[0]' must be an SsmSnapshotSave")
    assert _wire.sender_words(None, 100) == (None, [_wire.MAGIC, 0])
    assert _wire.sender_words([SsmStateAccept(0, 0)] * 3, 13) == (
        None,
        _wire.encode([SsmStateAccept(0, 0)] * 3),
    )
