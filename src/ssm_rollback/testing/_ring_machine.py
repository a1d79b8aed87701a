"""A hypothesis state machine that checks an ``SsmDecodeRing`` against the seed's list port."""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from ssm_rollback._core.ring import SsmDecodeRing, SsmRingEntry
from ssm_rollback._errors import InvalidArgumentError, OutOfOrderError, UnknownSnapshotError

from ._reference import ReferenceRing

__all__ = ["INVALID_INDICES", "SsmDecodeRingMachine"]

#: Values no capacity or position may take: negative, bool, float, str, None, huge negative.
INVALID_INDICES: tuple[object, ...] = (-1, -(2**70), True, False, 1.0, 0.5, "1", None, b"1", [1])

_Observed = tuple[tuple[SsmRingEntry, ...], int, int, tuple[int, ...]]


def _observe(ring: SsmDecodeRing) -> _Observed:
    return ring.entries, ring.next_slot, len(ring), ring.snapshot_positions()


def _observe_reference(ref: ReferenceRing) -> _Observed:
    entries = tuple(SsmRingEntry(p, s, t) for p, s, t in ref.entries)
    return entries, ref.next_slot, len(ref.entries), ref.snapshot_positions()


class SsmDecodeRingMachine(RuleBasedStateMachine):
    """Drive a ring and the seed reference with the same operations; compare every observable.

    Covers recording (with eviction by slot ownership), rollback-style
    truncation, failed-save ``discard``, ``clear``, disabled rings
    (capacity 0) and misuse, which must raise a library error and leave both
    models unchanged. ``check_valid()`` runs after every step.

    Subclass and override ``make_ring`` to check a ring built another way
    (restored from a pickle, owned by your scheduler's sequence object...);
    run it with ``TestMyRing = MyMachine.TestCase``.
    """

    def make_ring(self, capacity: int) -> SsmDecodeRing:
        """Build the ring under test; override to test rings made another way."""
        return SsmDecodeRing(capacity)

    def __init__(self) -> None:
        super().__init__()
        self.ring = SsmDecodeRing(0)
        self.ref = ReferenceRing(0)
        self.last_ticket = 0

    @initialize(capacity=st.integers(0, 6) | st.sampled_from([16, 256, 2**40]))
    def start(self, capacity: int) -> None:
        self.ring = self.make_ring(capacity)
        self.ref = ReferenceRing(capacity)

    # -- helpers -----------------------------------------------------------

    def _newest(self) -> int:
        return self.ref.entries[-1][0] if self.ref.entries else -1

    def _expect_unchanged(self, call: Callable[[], object], error: type[Exception]) -> None:
        before = _observe(self.ring)
        try:
            call()
        except error:
            pass
        else:
            raise AssertionError(f"expected {error.__name__}")
        assert _observe(self.ring) == before, "a call that raised changed the ring"

    def _positions(self) -> st.SearchStrategy[int]:
        live = [p for p, _, _ in self.ref.entries]
        near = [q for p in live for q in (p - 1, p, p + 1) if q >= 0]
        anywhere = st.integers(0, self._newest() + 3)
        return st.sampled_from(near) | anywhere if near else anywhere

    # -- rules ---------------------------------------------------------------

    @rule(step=st.integers(1, 4))
    def record_next(self, step: int) -> None:
        position = self._newest() + step
        slot = self.ring.record(position)
        entry = self.ring.entry_for(position)
        if slot is None:
            assert entry is None
            assert self.ref.record(position) is None
            return
        assert entry is not None
        assert entry.snapshot_slot == slot
        # Rule 10: a ticket no record had before, in this machine or anywhere.
        assert entry.ticket > self.last_ticket
        self.last_ticket = entry.ticket
        assert slot == self.ref.record(position, entry.ticket)

    @precondition(lambda self: bool(self.ref.entries))
    @rule(data=st.data())
    def record_out_of_order(self, data: st.DataObject) -> None:
        position = data.draw(st.integers(0, self._newest()), label="position")
        self._expect_unchanged(lambda: self.ring.record(position), OutOfOrderError)

    @rule(data=st.data())
    def truncate_after(self, data: st.DataObject) -> None:
        keep_len = data.draw(self._positions(), label="keep_len")
        self.ring.truncate_after(keep_len)
        self.ref.truncate_after(keep_len)

    @precondition(lambda self: bool(self.ref.entries))
    @rule(data=st.data())
    def discard_failed_save(self, data: st.DataObject) -> None:
        position = data.draw(st.sampled_from([p for p, _, _ in self.ref.entries]), label="position")
        assert self.ring.discard(position) == self.ref.discard(position)

    @rule(data=st.data())
    def discard_unknown(self, data: st.DataObject) -> None:
        live = {p for p, _, _ in self.ref.entries}
        position = data.draw(self._positions().filter(lambda p: p not in live), label="position")
        self._expect_unchanged(lambda: self.ring.discard(position), UnknownSnapshotError)

    @rule()
    def clear(self) -> None:
        self.ring.clear()
        self.ref.clear()

    @rule(data=st.data())
    def lookup(self, data: st.DataObject) -> None:
        keep_len = data.draw(self._positions(), label="keep_len")
        assert self.ring.slot_for_position(keep_len) == self.ref.slot_for_position(keep_len)
        entry = self.ring.entry_for(keep_len)
        ticket = self.ref.ticket_for_position(keep_len)
        assert (entry and entry.ticket) == ticket

    @rule(
        method=st.sampled_from(
            ["record", "slot_for_position", "entry_for", "truncate_after", "discard"]
        ),
        bad=st.sampled_from(INVALID_INDICES),
    )
    def misuse(self, method: str, bad: object) -> None:
        call = getattr(self.ring, method)
        self._expect_unchanged(lambda: call(bad), InvalidArgumentError)

    # -- invariants ----------------------------------------------------------

    @invariant()
    def agrees_with_reference(self) -> None:
        assert _observe(self.ring) == _observe_reference(self.ref)
        assert self.ring.capacity == self.ref.capacity
        assert self.ring.is_enabled == (self.ref.capacity > 0)

    @invariant()
    def is_valid(self) -> None:
        self.ring.check_valid()
