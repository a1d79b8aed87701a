"""The per-batch rules of every pool call: the one place they are checked.

Every batch a pool copies - saves, restores, accepts; handed to the pool
directly or through ``apply_effects`` - obeys these rules, checked here and
nowhere else:

1. Ids in range: ``seq < num_sequences``, ``slot < slots_per_sequence``.
2. Each row's state at most once per batch: a row's live state holds one
   position, so two copies of it in one batch are the effects of two steps
   at once. (A verify step's saves read distinct intermediate states: a row
   may save several of those.)
3. Each slot at most once per batch: a second write would decide what it holds.
4. An intermediate index (a save's ``source``, an accept's ``index``) names a
   state the row's buffer holds now.
5. A restore copies only from a slot that holds exactly its position and
   ticket (SPEC 7); otherwise ``StaleSnapshotError`` naming the stale slots.
6. A save whose ticket is not newer than the one its slot holds was applied
   before (a step's effects applied twice, SPEC 15), or comes from a step
   older than the save that wrote the slot since (applied late, or again
   after the slot was reused): ``StaleSnapshotError``, nothing copied - its
   source may hold other state by now, and the slot holds a snapshot a ring
   may still restore. Tickets only grow (rule 10 of the ring).
7. An accept whose ticket is not newer than the last one accepted on its row
   was applied before, or belongs to an older step (SPEC 15):
   ``StaleSnapshotError``, nothing copied - the live state must not move back.

A bad batch raises naming its element (``saves[3]``; ``effects[2][3]``
inside ``apply_effects``, see ``Names``) and nothing changes. The checks run
at C speed over the batch's columns (``max``, ``set``, list equality); a loop
over the elements runs only to name a bad one. What passes comes back as
plain lists (``CheckedSaves`` and friends, in ``_batch_values`` with
``Names``) that a pool copies and tags from without looking again.

``BatchChecks`` holds the rules over a pool's shape (``SharedChecks``, in
``_shared_rules``, extends them to the shared slots) and is all of them: a
pool's ``SlotTags`` (``_slot_tags``) is a ``BatchChecks`` with the record of
what each slot holds, and ``PoolTagsView`` one that reads that record through
a third-party pool's ``stored_position`` / ``stored_ticket``, so
``apply_effects`` holds such a pool to the same rules.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NoReturn

from .._core.effect_dict import SaveBatch, SsmSnapshotRestore, SsmSnapshotSave, SsmStateAccept
from .._core.save_batch import LIVE
from .._errors import InvalidArgumentError, StaleSnapshotError, shown
from ._batch_values import (
    ACCEPTS,
    RESTORES,
    SAVES,
    CheckedAccepts,
    CheckedRestores,
    CheckedSaves,
    IndexTable,
    Names,
    Staged,
    check_kinds,
)

__all__ = ["BatchChecks"]


class BatchChecks:
    """Rules 1-6 over a pool's shape; a subclass says what each slot holds (``_held``)."""

    _num_sequences: int
    _slots_per_sequence: int
    _slot_index: IndexTable

    @property
    def num_sequences(self) -> int:
        """Rows tracked."""
        return self._num_sequences

    @property
    def slots_per_sequence(self) -> int:
        """Slots per row."""
        return self._slots_per_sequence

    def check_saves(
        self,
        saves: Sequence[SsmSnapshotSave] | SaveBatch,
        names: Names = SAVES,
        staged: Staged | None = None,
    ) -> CheckedSaves:
        """Rules 1-4 for a ``SaveBatch`` or a sequence of ``SsmSnapshotSave``; raise, or the lists.

        ``staged`` checks intermediate sources (rule 4); without it they are
        taken as they are (``SlotTags`` alone knows no buffers).
        """
        if isinstance(saves, SaveBatch):  # its columns are ints >= 0 already
            sources = None if saves.sources is None else list(saves.sources)
            # Only the rows as a list (the copier compares them with a list); the
            # other columns are read, never changed, so their tuples serve as they are.
            seqs: list[int] = list(saves.seqs)
            slots: Sequence[int] = saves.slots
            positions: Sequence[int] = saves.positions
            tickets: Sequence[int] = saves.tickets
        else:
            check_kinds(saves, SsmSnapshotSave, names)
            seqs, slots = [s.seq for s in saves], [s.slot for s in saves]
            positions, tickets = [s.token_position for s in saves], [s.ticket for s in saves]
            sources = [LIVE if s.source is None else s.source for s in saves]
        distinct = isinstance(saves, SaveBatch) and saves.distinct
        return self._check_save_columns(
            seqs, slots, positions, tickets, sources, names, staged, distinct=distinct
        )

    def _check_save_columns(
        self,
        seqs: list[int],
        slots: Sequence[int],
        positions: Sequence[int],
        tickets: Sequence[int],
        sources: list[int] | None,
        names: Names = SAVES,
        staged: Staged | None = None,
        *,
        distinct: bool = False,
    ) -> CheckedSaves:
        """``check_saves`` over columns of ints >= 0 (``sources``: ``LIVE`` or an index).

        ``distinct``: the columns come from one ``SaveBatch`` the library built,
        which holds rules 2 and 3 by construction (``SaveBatch.distinct``).
        """
        if sources is not None and max(sources, default=LIVE) == LIVE:
            sources = None
        flat = self._flat(seqs, slots)
        if flat is None or not (distinct or _distinct(seqs, slots, sources)):
            self._name_bad(seqs, slots, sources, names)
        if sources is not None and staged is not None:
            _check_staged("saves", seqs, sources, names, staged)
        if (
            tickets
            and self._may_hold(tickets)
            and any(map(replayed, tickets, self._held_tickets(seqs, slots, flat)))
        ):
            held = self._held_tickets(seqs, slots, flat)
            k = next(k for k, pair in enumerate(zip(tickets, held, strict=True)) if replayed(*pair))
            where = f"seq {seqs[k]}, slot {slots[k]}"
            raise refuse_replayed(names.of(k), where, tickets[k], held[k])
        return CheckedSaves(seqs, flat, positions, tickets, sources)

    def check_restores(
        self,
        restores: Sequence[SsmSnapshotRestore],
        names: Names = RESTORES,
        pending: Mapping[int, tuple[int, int]] | None = None,
    ) -> CheckedRestores:
        """Rules 1-3 and 5 for a sequence of ``SsmSnapshotRestore``; raise, or rows and slots.

        ``pending`` maps a flat index to the ``(position, ticket)`` its slot
        will hold once saves that come first in the same step are written.
        """
        check_kinds(restores, SsmSnapshotRestore, names)
        seqs, slots = [r.seq for r in restores], [r.slot for r in restores]
        flat = self._flat(seqs, slots)
        if flat is None or not _distinct(seqs, slots, None):
            self._name_bad(seqs, slots, None, names)
        held_positions, held_tickets = self._held(seqs, slots, flat)
        if pending:
            for k, i in enumerate(flat):
                if i in pending:
                    held_positions[k], held_tickets[k] = pending[i]
        if held_tickets != [r.ticket for r in restores] or held_positions != [
            r.token_position for r in restores
        ]:
            _refuse_stale(restores, names, held_positions, held_tickets)
        return CheckedRestores(seqs, flat)

    def check_accepts(
        self,
        accepts: Sequence[SsmStateAccept],
        names: Names = ACCEPTS,
        staged: Staged | None = None,
    ) -> CheckedAccepts:
        """Rules 1, 2, 4 (with ``staged``) and 7 for a sequence of ``SsmStateAccept``."""
        check_kinds(accepts, SsmStateAccept, names)
        seqs, indices = [a.seq for a in accepts], [a.index for a in accepts]
        tickets = [a.ticket for a in accepts]
        if seqs and (max(seqs) >= self._num_sequences or len(set(seqs)) != len(seqs)):
            self._name_bad(seqs, None, None, names)
        if staged is not None:
            _check_staged("accepts", seqs, indices, names, staged)
        held = self._accepted(seqs)
        if held is not None:
            for k, (ticket, last) in enumerate(zip(tickets, held, strict=True)):
                if ticket is not None and replayed(ticket, last):
                    raise StaleSnapshotError(
                        f"refusing a batch of {len(seqs)} accepts, copying nothing: "
                        f"'{names.of(k)}' (seq {seqs[k]}, ticket {ticket}) is not newer than "
                        f"the last accept on that row (ticket {last}) - a verify step's accept "
                        f"applied twice, or an older step's"
                    )
        return CheckedAccepts(seqs, indices, tickets)

    def _flat(self, seqs: list[int], slots: Sequence[int]) -> list[int] | None:
        """Each row's flat slot index; ``None`` if an id is out of range (rule 1).

        One look-up per row does both: an id past the pool has no entry
        (ids are ints >= 0, so none counts from the end), and no int is
        made per row, which a multiply and an add would.
        """
        index = self._slot_index
        try:
            return [index[seq][slot] for seq, slot in zip(seqs, slots, strict=True)]
        except IndexError:
            return None

    def _held(
        self, seqs: list[int], slots: Sequence[int], flat: list[int]
    ) -> tuple[list[int | None], list[int | None]]:
        """The positions and tickets the slots hold now (new lists: the caller may change them)."""
        raise NotImplementedError

    def _held_tickets(
        self, seqs: list[int], slots: Sequence[int], flat: list[int]
    ) -> list[int | None]:
        """Rule 6's comparison: the ticket of the newest save each slot took (``SlotTags``
        keeps it when a later save into the slot failed); here, where a pool reports no
        more, what each holds now."""
        return self._held(seqs, slots, flat)[1]

    def _may_hold(self, tickets: Sequence[int]) -> bool:
        """Whether some slot could hold one of ``tickets`` (``False`` skips rule 6's lookups)."""
        return True

    def _accepted(self, seqs: list[int]) -> list[int | None] | None:
        """The ticket of the last accept on each row (rule 7); ``None``: not known here.

        A third-party pool's accepts are checked by its own ``accept``: the
        protocol reports no accept tickets.
        """
        return None

    def _check_ids(self, seq_name: str, seq: int, slot_name: str | None, slot: int) -> None:
        """Rule 1, naming ``seq_name`` or ``slot_name`` (``None``: no slot to check)."""
        if seq >= self._num_sequences:
            raise InvalidArgumentError(
                f"'{seq_name}' must be < the pool's num_sequences {self._num_sequences}, "
                f"got {shown(seq)}"
            )
        if slot_name is not None and slot >= self._slots_per_sequence:
            raise InvalidArgumentError(
                f"'{slot_name}' must be < the pool's slots_per_sequence "
                f"{self._slots_per_sequence}, got {shown(slot)}"
            )

    def _name_bad(
        self, seqs: list[int], slots: Sequence[int] | None, sources: list[int] | None, names: Names
    ) -> NoReturn:
        """Raise naming the first element breaking rule 1, 2 or 3 (``slots``: None for accepts)."""
        states: dict[tuple[int, int], int] = {}
        targets: dict[int, int] = {}
        per_row = self._slots_per_sequence
        for k, seq in enumerate(seqs):
            slot = 0 if slots is None else slots[k]
            if seq >= self._num_sequences or slot >= per_row:
                name = names.of(k)
                self._check_ids(f"{name}.seq", seq, None if slots is None else f"{name}.slot", slot)
            first = states.setdefault((seq, LIVE if sources is None else sources[k]), k)
            if first != k:
                raise InvalidArgumentError(
                    f"'{names.batch}' must name each row's state at most once per {names.unit}, "
                    f"got seq {seq} at {names.of(first)} and {names.of(k)}"
                )
            if slots is not None:
                first = targets.setdefault(seq * per_row + slot, k)
                if first != k:
                    raise InvalidArgumentError(
                        f"'{names.batch}' must name each slot at most once per {names.unit}, got "
                        f"(seq {seq}, slot {slot}) at {names.of(first)} and {names.of(k)}"
                    )
        raise AssertionError(f"the fast check refused '{names.batch}', yet every element passes")


def _distinct(seqs: Sequence[int], slots: Sequence[int], sources: Sequence[int] | None) -> bool:
    """Rules 2 and 3 at C speed (rows once imply slots once when every row saves live state)."""
    if sources is None:
        return len(set(seqs)) == len(seqs)
    count = len(seqs)
    return (
        len(set(zip(seqs, sources, strict=True)))
        == count
        == len(set(zip(seqs, slots, strict=True)))
    )


def _check_staged(
    kind: str, seqs: list[int], indices: list[int], names: Names, staged: Staged
) -> None:
    """Rule 4: every index other than ``LIVE`` is one its row's buffer holds."""
    for k, (seq, index) in enumerate(zip(seqs, indices, strict=True)):
        if index == LIVE:
            continue
        held = staged(seq)
        if index >= held:
            what = f"{held} intermediate states" if held else "no intermediate states"
            raise StaleSnapshotError(
                f"refusing a batch of {len(seqs)} {kind}, copying nothing: '{names.of(k)}' names "
                f"intermediate state {index} of seq {seq}, which holds {what}"
            )


def _refuse_stale(
    restores: Sequence[SsmSnapshotRestore],
    names: Names,
    positions: list[int | None],
    tickets: list[int | None],
) -> NoReturn:
    """Rule 5's refusal: name up to four restores whose slot holds something else."""
    stale = [
        k
        for k, r in enumerate(restores)
        if tickets[k] != r.ticket or positions[k] != r.token_position
    ]
    described = "; ".join(
        f"'{names.of(k)}' (seq {restores[k].seq}, slot {restores[k].slot}) holds "
        f"{_held(positions[k], tickets[k])}, not position {restores[k].token_position} "
        f"ticket {restores[k].ticket}"
        for k in stale[:4]
    )
    more = f" (and {len(stale) - 4} more)" if len(stale) > 4 else ""
    raise StaleSnapshotError(
        f"refusing a batch of {len(restores)} restores, copying nothing: {described}{more}"
    )


def replayed(ticket: int, held: int | None) -> bool:
    """Whether ``ticket`` is not newer than ``held``: a save into a slot holding ``held``
    (rule 6) or an accept on a row whose last accept had ``held`` (rule 7) was applied before
    (the same ticket) or comes late (an older one). Tickets only grow."""
    return held is not None and ticket <= held


def refuse_replayed(name: str, where: str, ticket: int, held: int | None) -> StaleSnapshotError:
    """Rule 6's error for the save ``name`` at ``where`` (``replayed`` said so)."""
    why = (
        "already took that ticket - a save applied twice"
        if ticket == held
        else f"took a newer save (ticket {held}) - an older step's save, applied late or twice"
    )
    return StaleSnapshotError(
        f"refusing '{name}' ({where}, ticket {ticket}), copying nothing: its slot {why}"
    )


def _held(position: int | None, ticket: int | None) -> str:
    return "nothing" if ticket is None else f"position {position} ticket {ticket}"
