"""What each snapshot slot holds: the stale-restore guard every pool shares.

``SlotTags`` keeps, for every ``(seq, slot)``, the position and the ticket
(SPEC 7) of the save that last wrote it, and owns the flat index
``seq * slots_per_sequence + slot`` with its bounds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import final

import attrs

from .._core.effect_dict import SaveBatch, SsmSnapshotRestore, SsmSnapshotSave
from .._core.save_batch import LIVE
from .._errors import (
    InvalidArgumentError,
    InvalidArgumentTypeError,
    StaleSnapshotError,
    check_non_negative_int,
)

__all__ = ["SlotTags"]


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
    ) -> tuple[list[int], list[int], list[int], list[int], list[int] | None]:
        """The batch's rows, flat indices, positions, tickets and sources; a bad batch raises.

        A ``SaveBatch`` is checked column by column at C speed (its values are
        ints >= 0 already); a sequence of saves element by element. Sources
        are ``None`` when every save reads the live state, else one int per
        save (``LIVE`` or an intermediate index).
        """
        if type(saves) is SaveBatch:
            seqs, slots = list(saves.seqs), list(saves.slots)
            if seqs and (
                max(seqs) >= self._num_sequences
                or max(slots) >= self._slots_per_sequence
                or not _distinct(seqs, slots, saves.sources)
            ):
                self._check_batch("saves", saves, SsmSnapshotSave)  # names the bad element
            per_row = self._slots_per_sequence
            flat = [seq * per_row + slot for seq, slot in zip(seqs, slots, strict=True)]
            sources = None if saves.sources is None else list(saves.sources)
            return seqs, flat, list(saves.positions), list(saves.tickets), sources
        flat = self._check_batch("saves", saves, SsmSnapshotSave)
        live = all(s.source is None for s in saves)
        return (
            [s.seq for s in saves],
            flat,
            [s.token_position for s in saves],
            [s.ticket for s in saves],
            None if live else [LIVE if s.source is None else s.source for s in saves],
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
        states: dict[tuple[int, int | None], int] = {}
        targets: dict[int, int] = {}
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
            first = states.setdefault((seq, getattr(effect, "source", None)), i)
            if first != i:
                # A row's live state holds one position: two copies of it in one
                # batch mean the effects of two steps were applied at once. (A
                # verify step's saves read distinct intermediate states.)
                raise InvalidArgumentError(
                    f"'{name}' must name each row's state at most once per batch, got seq "
                    f"{seq} at {name}[{first}] and {name}[{i}]"
                )
            index = seq * slots + slot
            first = targets.setdefault(index, i)
            if first != i:
                raise InvalidArgumentError(
                    f"'{name}' must name each slot at most once per batch, got (seq {seq}, slot "
                    f"{slot}) at {name}[{first}] and {name}[{i}]"
                )
            flat.append(index)
        return flat


def _distinct(seqs: Sequence[int], slots: Sequence[int], sources: Sequence[int] | None) -> bool:
    """Each row's state (live, or one intermediate index) and each slot at most once (C speed)."""
    if sources is None:
        return len(set(seqs)) == len(seqs)
    count = len(seqs)
    return (
        len(set(zip(seqs, sources, strict=True)))
        == count
        == len(set(zip(seqs, slots, strict=True)))
    )


def _held(position: int | None, ticket: int | None) -> str:
    return "nothing" if ticket is None else f"position {position} ticket {ticket}"
