"""What each snapshot slot holds, and the one save/restore skeleton every backend runs.

``SlotTags`` is the stale-restore guard: for every ``(seq, slot)`` it keeps
the position and the ticket (SPEC 7) of the save that last wrote it, and it
owns the flat index ``seq * slots_per_sequence + slot`` with its bounds.
``PoolBase`` runs every batch through the same steps - check the memory is
still owned, check the batch, decide which saves fail, copy, commit the tags
in one call - so tickets, ownership checks and fault handling cannot differ
between backends; a backend supplies only the copies.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import cast, final

import attrs

from ._effects import SaveBatch, SsmSnapshotRestore, SsmSnapshotSave
from ._errors import (
    InvalidArgumentError,
    InvalidArgumentTypeError,
    StaleSnapshotError,
    check_non_negative_int,
)

__all__ = ["PoolBase", "SlotTags"]

#: A fault predicate: saves for which it returns true fail.
FailPredicate = Callable[[SsmSnapshotSave], bool]


def _num_sequences_arg(value: int) -> int:
    return check_non_negative_int("num_sequences", value)


def _slots_arg(value: int) -> int:
    return check_non_negative_int("slots_per_sequence", value)


@final
@attrs.define(eq=False, repr=False, on_setattr=attrs.setters.NO_OP)
class SlotTags:
    """Which position and ticket each ``(seq, slot)`` holds: the stale-restore guard of every pool.

    A backend calls ``check_saves`` / ``check_restores`` before it copies
    anything (they raise, changing nothing, on bad or stale input, and return
    the batch's rows and flat indices), then ``commit`` once it knows which
    saves happened.
    """

    _num_sequences: int = attrs.field(converter=_num_sequences_arg)
    _slots_per_sequence: int = attrs.field(converter=_slots_arg)
    _positions: list[int | None] = attrs.field(init=False)
    _tickets: list[int | None] = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        count = self._num_sequences * self._slots_per_sequence
        try:
            self._positions = [None] * count
            self._tickets = [None] * count
        except (MemoryError, OverflowError):
            raise InvalidArgumentError(
                f"'slots_per_sequence' * 'num_sequences' must be a slot count this process "
                f"can hold, got {self._slots_per_sequence} * {self._num_sequences} = {count}"
            ) from None

    @property
    def num_sequences(self) -> int:
        """Rows tracked."""
        return self._num_sequences

    @property
    def slots_per_sequence(self) -> int:
        """Slots per row."""
        return self._slots_per_sequence

    def __repr__(self) -> str:
        held = sum(tag is not None for tag in self._tickets)
        return (
            f"SlotTags(num_sequences={self._num_sequences}, "
            f"slots_per_sequence={self._slots_per_sequence}, held={held})"
        )

    def index(self, seq: int, slot: int) -> int:
        """Flat index ``seq * slots_per_sequence + slot``; ids out of range raise."""
        seq = check_non_negative_int("seq", seq)
        slot = check_non_negative_int("slot", slot)
        self._check_ids("seq", seq, "slot", slot)
        return seq * self._slots_per_sequence + slot

    def stored_position(self, seq: int, slot: int) -> int | None:
        """The position ``(seq, slot)`` holds, or ``None``; out-of-range ids raise."""
        return self._positions[self.index(seq, slot)]

    def stored_ticket(self, seq: int, slot: int) -> int | None:
        """The ticket of the save ``(seq, slot)`` holds, or ``None``; out-of-range ids raise."""
        return self._tickets[self.index(seq, slot)]

    def check_saves(
        self, saves: Sequence[SsmSnapshotSave] | SaveBatch
    ) -> tuple[list[int], list[int], list[int], list[int]]:
        """The batch's rows, flat indices, positions and tickets; a bad batch raises.

        A ``SaveBatch`` is checked column by column at C speed (its values are
        ints >= 0 already); a sequence of saves element by element.
        """
        if type(saves) is SaveBatch:
            seqs, slots = list(saves.seqs), list(saves.slots)
            if seqs and (
                max(seqs) >= self._num_sequences
                or max(slots) >= self._slots_per_sequence
                or len(set(seqs)) != len(seqs)
            ):
                self._check_batch("saves", saves, SsmSnapshotSave)  # names the bad element
            per_row = self._slots_per_sequence
            flat = [seq * per_row + slot for seq, slot in zip(seqs, slots, strict=True)]
            return seqs, flat, list(saves.positions), list(saves.tickets)
        flat = self._check_batch("saves", saves, SsmSnapshotSave)
        return (
            [s.seq for s in saves],
            flat,
            [s.token_position for s in saves],
            [s.ticket for s in saves],
        )

    def check_restores(self, restores: Sequence[SsmSnapshotRestore]) -> tuple[list[int], list[int]]:
        """The batch's rows and flat indices; raise unless each slot holds its exact ticket."""
        flat = self._check_batch("restores", restores, SsmSnapshotRestore)
        positions, tickets = self._positions, self._tickets
        stale = [
            (r, i)
            for r, i in zip(restores, flat, strict=True)
            if tickets[i] != r.ticket or positions[i] != r.token_position
        ]
        if stale:
            described = "; ".join(
                f"(seq {r.seq}, slot {r.slot}) holds {_held(positions[i], tickets[i])}, "
                f"not position {r.token_position} ticket {r.ticket}"
                for r, i in stale[:4]
            )
            more = f" (and {len(stale) - 4} more)" if len(stale) > 4 else ""
            raise StaleSnapshotError(
                f"refusing a batch of {len(restores)} restores, copying nothing: {described}{more}"
            )
        return [r.seq for r in restores], flat

    def commit(
        self,
        flat: Sequence[int],
        positions: Sequence[int],
        tickets: Sequence[int],
        failed: Sequence[int] = (),
    ) -> None:
        """Tag slot ``flat[k]`` with ``positions[k]`` and ``tickets[k]``, except the ``failed`` k.

        A failed save's slot holds nothing afterwards: it may be half written.
        """
        held_positions, held_tickets = self._positions, self._tickets
        for i, position, ticket in zip(flat, positions, tickets, strict=True):
            held_positions[i] = position
            held_tickets[i] = ticket
        for k in failed:
            i = flat[k]
            held_positions[i] = held_tickets[i] = None

    def forget(self, flat: Sequence[int]) -> None:
        """Mark the slots at ``flat`` as holding nothing (a copy that raised half way)."""
        positions, tickets = self._positions, self._tickets
        for i in flat:
            positions[i] = tickets[i] = None

    def _check_ids(self, seq_name: str, seq: int, slot_name: str, slot: int) -> None:
        if seq >= self._num_sequences:
            raise InvalidArgumentError(
                f"'{seq_name}' must be < num_sequences {self._num_sequences}, got {seq}"
            )
        if slot >= self._slots_per_sequence:
            raise InvalidArgumentError(
                f"'{slot_name}' must be < slots_per_sequence {self._slots_per_sequence}, got {slot}"
            )

    def _check_batch(
        self,
        name: str,
        batch: Sequence[SsmSnapshotSave] | Sequence[SsmSnapshotRestore] | SaveBatch,
        kind: type[SsmSnapshotSave] | type[SsmSnapshotRestore],
    ) -> list[int]:
        if not isinstance(batch, Sequence | SaveBatch):
            raise InvalidArgumentTypeError(
                f"'{name}' must be a sequence of {kind.__name__}, got {type(batch).__name__}"
            )
        rows: dict[int, int] = {}
        flat: list[int] = []
        num_sequences, slots = self._num_sequences, self._slots_per_sequence
        for i, effect in enumerate(batch):
            if type(effect) is not kind:  # a SaveBatch yields SsmSnapshotSave
                raise InvalidArgumentTypeError(
                    f"'{name}[{i}]' must be a {kind.__name__}, got {effect!r}"
                )
            seq, slot = effect.seq, effect.slot
            if seq >= num_sequences or slot >= slots:
                self._check_ids(f"{name}[{i}].seq", seq, f"{name}[{i}].slot", slot)
            first = rows.setdefault(seq, i)
            if first != i:
                # A row's live state holds one position: two copies of it in one
                # batch mean the effects of two steps were applied at once.
                raise InvalidArgumentError(
                    f"'{name}' must name each row at most once per batch, got seq "
                    f"{seq} at {name}[{first}] and {name}[{i}]"
                )
            flat.append(seq * slots + slot)
        return flat


def _held(position: int | None, ticket: int | None) -> str:
    return "nothing" if ticket is None else f"position {position} ticket {ticket}"


def check_fail_predicate(predicate: object) -> FailPredicate | None:
    """``predicate`` if it is callable or ``None``; else ``InvalidArgumentError``."""
    if predicate is None:
        return None
    if not callable(predicate):
        raise InvalidArgumentTypeError(
            f"'predicate' must be a callable taking an SsmSnapshotSave, or None, got "
            f"{predicate!r} of type {type(predicate).__name__}"
        )
    return cast(FailPredicate, predicate)


class PoolBase:
    """The save and restore steps every backend shares; subclasses supply the copies.

    ``save``: check ownership, check the batch, decide which saves fail
    (asking the fault predicate about every save before copying any, so a
    predicate that raises changes nothing), copy the rest, then commit the
    tags in one call. If the copy raises, the whole batch's slots hold
    nothing. ``restore``: check ownership, check every slot holds its
    restore's exact ticket, copy.
    """

    def __init__(self, num_sequences: int, slots_per_sequence: int) -> None:
        self._tags = SlotTags(num_sequences, slots_per_sequence)
        self._fail: FailPredicate | None = None

    @property
    def num_sequences(self) -> int:
        """Rows the pool holds snapshots for."""
        return self._tags.num_sequences

    @property
    def slots_per_sequence(self) -> int:
        """Snapshot slots per row."""
        return self._tags.slots_per_sequence

    def stored_position(self, seq: int, slot: int) -> int | None:
        """The position snapshot ``(seq, slot)`` holds, or ``None``."""
        return self._tags.stored_position(seq, slot)

    def stored_ticket(self, seq: int, slot: int) -> int | None:
        """The ticket of the save snapshot ``(seq, slot)`` holds, or ``None``."""
        return self._tags.stored_ticket(seq, slot)

    def fail_when(self, predicate: FailPredicate | None) -> None:
        """Fault injection: later saves for which ``predicate(save)`` holds fail (``None``: none).

        A failed save copies nothing, its slot holds nothing afterwards, and
        it is listed in ``SaveOutcome.failed``.
        """
        self._fail = check_fail_predicate(predicate)

    def _save_batch(
        self, saves: Sequence[SsmSnapshotSave] | SaveBatch
    ) -> tuple[SsmSnapshotSave, ...]:
        """Run the save steps; return the saves that failed."""
        self._check_owned()
        rows, flat, positions, tickets = self._tags.check_saves(saves)
        fail = self._fail
        # Fault injection costs nothing when no fault is set.
        failed = [] if fail is None else [k for k in range(len(rows)) if fail(saves[k])]
        if failed:
            skip = set(failed)
            kept = [k for k in range(len(rows)) if k not in skip]
            copy_rows, copy_flat = [rows[k] for k in kept], [flat[k] for k in kept]
        else:
            copy_rows, copy_flat = rows, flat
        if copy_rows:
            try:
                self._copy_saves(copy_rows, copy_flat)
            except BaseException:
                # Some state may hold the new rows and some the old: no
                # restore may read any slot of this batch.
                self._tags.forget(flat)
                raise
        self._tags.commit(flat, positions, tickets, failed)
        return tuple(saves[k] for k in failed)

    def _restore_batch(self, restores: Sequence[SsmSnapshotRestore]) -> None:
        """Run the restore steps."""
        self._check_owned()
        rows, flat = self._tags.check_restores(restores)
        if rows:
            self._copy_restores(rows, flat)

    # -- what a backend supplies -------------------------------------------------

    def _check_owned(self) -> None:
        """Raise ``InvalidArgumentError`` if the memory the pool copies is no longer its own."""

    def _copy_saves(self, rows: list[int], flat: list[int]) -> None:
        """Copy live row ``rows[k]`` into storage row ``flat[k]`` (rows are unique)."""
        raise NotImplementedError

    def _copy_restores(self, rows: list[int], flat: list[int]) -> None:
        """Copy storage row ``flat[k]`` into live row ``rows[k]`` (rows are unique)."""
        raise NotImplementedError
