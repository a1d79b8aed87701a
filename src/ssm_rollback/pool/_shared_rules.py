"""The per-batch rules of the shared slots of prefix snapshots (SPEC 13): ``SharedChecks``.

The shared slots obey the rules of ``_batch_rules`` with ``shared_slots`` in
place of ``slots_per_sequence`` (a shared save copies live state only, so
rule 4 has nothing to check), with one difference: several restores may
read one shared slot - every request with that prefix does - so rule 3
counts only the saves' writes. Rule 5 compares the ticket, and the length
where the record keeps one (a third-party pool reports only tickets).
Checked here and nowhere else; what passes comes back as plain lists.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple, NoReturn

from .._core.effect_dict import SsmPrefixRestore, SsmPrefixSave
from .._errors import InvalidArgumentError, StaleSnapshotError, shown
from ._batch_rules import BatchChecks, refuse_replayed, replayed
from ._batch_values import RESTORES, SAVES, Names, check_kinds

__all__ = [
    "CheckedSharedRestores",
    "CheckedSharedSaves",
    "SharedChecks",
    "SharedHeld",
    "SharedPending",
    "check_rows_once",
    "row_twice",
]


class CheckedSharedSaves(NamedTuple):
    """Shared saves that passed the rules: rows, shared slots, and the tags they give them."""

    rows: list[int]
    slots: list[int]
    lengths: list[int]
    tickets: list[int]


class CheckedSharedRestores(NamedTuple):
    """Shared restores that passed the rules: the rows and the shared slots they copy from."""

    rows: list[int]
    slots: list[int]


#: ``pending[slot]``: the ``(length, ticket)`` a shared slot will hold once earlier saves ran.
SharedPending = Mapping[int, tuple[int, int]]
#: What shared slots hold: their lengths (``None`` where not recorded) and their tickets.
SharedHeld = tuple[list[int | None] | None, list[int | None]]


def row_twice(names: Names, seq: int, first: int, k: int) -> InvalidArgumentError:
    """Rule 2's refusal: row ``seq`` at ``first`` and again at ``k`` (one state, two slots)."""
    return InvalidArgumentError(
        f"'{names.batch}' must name each row at most once per {names.unit}, "
        f"got seq {seq} at {names.of(first)} and {names.of(k)}"
    )


def check_rows_once(seqs: list[int], names: Names) -> None:
    """Rule 2 alone, before any pool has the rows to check ids against."""
    if len(set(seqs)) != len(seqs):
        rows: dict[int, int] = {}
        k = next(k for k, seq in enumerate(seqs) if rows.setdefault(seq, k) != k)
        raise row_twice(names, seqs[k], rows[seqs[k]], k)


class SharedChecks(BatchChecks):
    """Rules 1-6 over a pool's ring slots and its shared slots; a subclass says what each holds."""

    _shared_slots: int

    @property
    def shared_slots(self) -> int:
        """Shared slots tracked."""
        return self._shared_slots

    def check_shared_saves(
        self,
        saves: Sequence[SsmPrefixSave],
        names: Names = SAVES,
        pending: SharedPending | None = None,
    ) -> CheckedSharedSaves:
        """Rules 1-3 and 6 for a sequence of ``SsmPrefixSave``; raise, or the lists.

        ``pending``: what shared slots will hold once the saves before these
        in the same step are written (a save applied twice in one step).
        """
        check_kinds(saves, SsmPrefixSave, names)
        seqs, slots = [s.seq for s in saves], [s.slot for s in saves]
        tickets = [s.ticket for s in saves]
        self._check_shared_ids(seqs, slots, names, writes=True)
        held = self._seen_shared(slots, pending)
        if any(map(replayed, tickets, held)):
            k = next(k for k, pair in enumerate(zip(tickets, held, strict=True)) if replayed(*pair))
            where = f"seq {seqs[k]}, shared slot {slots[k]}"
            raise refuse_replayed(names.of(k), where, tickets[k], held[k])
        return CheckedSharedSaves(seqs, slots, [s.length for s in saves], tickets)

    def check_shared_restores(
        self,
        restores: Sequence[SsmPrefixRestore],
        names: Names = RESTORES,
        pending: SharedPending | None = None,
    ) -> CheckedSharedRestores:
        """Rules 1, 2 and 5 for a sequence of ``SsmPrefixRestore``; raise, or rows and slots.

        ``pending`` as for ``check_shared_saves``: restores after saves in
        the same step are checked against what those saves will write.
        """
        check_kinds(restores, SsmPrefixRestore, names)
        seqs, slots = [r.seq for r in restores], [r.slot for r in restores]
        self._check_shared_ids(seqs, slots, names, writes=False)
        lengths, tickets = self._held_shared(slots, pending)
        if tickets != [r.ticket for r in restores] or (
            lengths is not None and lengths != [r.length for r in restores]
        ):
            _refuse_stale_shared(restores, names, lengths, tickets)
        return CheckedSharedRestores(seqs, slots)

    def _check_shared_ids(
        self, seqs: list[int], slots: list[int], names: Names, *, writes: bool
    ) -> None:
        """Rules 1-3 over shared slots (rule 3 only for ``writes``); the loop only names one."""
        shared = self.shared_slots
        if not seqs or (
            max(seqs) < self._num_sequences
            and max(slots) < shared
            and len(set(seqs)) == len(seqs)
            and (not writes or len(set(slots)) == len(slots))
        ):
            return
        rows: dict[int, int] = {}
        targets: dict[int, int] = {}
        for k, (seq, slot) in enumerate(zip(seqs, slots, strict=True)):
            name = names.of(k)
            self._check_ids(f"{name}.seq", seq, None, 0)
            if slot >= shared:
                raise InvalidArgumentError(
                    f"'{name}.slot' must be < the pool's shared_slots {shared}, got {shown(slot)}"
                )
            first = rows.setdefault(seq, k)
            if first != k:
                raise row_twice(names, seq, first, k)
            first = targets.setdefault(slot, k) if writes else k
            if first != k:
                raise InvalidArgumentError(
                    f"'{names.batch}' must name each shared slot at most once per {names.unit}, "
                    f"got shared slot {slot} at {names.of(first)} and {name}"
                )
        raise AssertionError(f"the fast check refused '{names.batch}', yet every element passes")

    def _held_shared(self, slots: list[int], pending: SharedPending | None) -> SharedHeld:
        """What the shared slots will hold: lengths (``None``: not recorded) and tickets."""
        return _with_pending(slots, pending, *self._held_shared_now(slots))

    def _held_shared_now(self, slots: list[int]) -> SharedHeld:
        """The lengths (``None``: not recorded) and tickets the shared slots hold (new lists)."""
        raise NotImplementedError

    def _seen_shared(self, slots: list[int], pending: SharedPending | None) -> list[int | None]:
        """Rule 6's comparison: the ticket of the newest save each shared slot took (kept
        when a later one failed, where the pool knows it), or will take from the saves
        before these in the step."""
        return _with_pending(slots, pending, None, self._seen_shared_now(slots))[1]

    def _seen_shared_now(self, slots: list[int]) -> list[int | None]:
        """The ticket of the newest save each shared slot took (new list); what it holds,
        where the pool reports no more (a third-party pool)."""
        return self._held_shared_now(slots)[1]


def _with_pending(
    slots: list[int],
    pending: SharedPending | None,
    lengths: list[int | None] | None,
    tickets: list[int | None],
) -> SharedHeld:
    """``lengths`` and ``tickets`` of ``slots`` (lists the caller owns, changed in place) with
    what the saves before them in the step write there (``pending``)."""
    if pending:
        for k, slot in enumerate(slots):
            if slot in pending:
                length, tickets[k] = pending[slot]
                if lengths is not None:
                    lengths[k] = length
    return lengths, tickets


def _refuse_stale_shared(
    restores: Sequence[SsmPrefixRestore],
    names: Names,
    lengths: list[int | None] | None,
    tickets: list[int | None],
) -> NoReturn:
    """Rule 5's refusal over shared slots: name up to four restores whose slot holds another."""

    def held(k: int) -> str:
        if tickets[k] is None:
            return "nothing"
        return f"ticket {tickets[k]}" + ("" if lengths is None else f" length {lengths[k]}")

    stale = [
        k
        for k, r in enumerate(restores)
        if tickets[k] != r.ticket or (lengths is not None and lengths[k] != r.length)
    ]
    described = "; ".join(
        f"'{names.of(k)}' (seq {restores[k].seq}, shared slot {restores[k].slot}) holds "
        f"{held(k)}, not ticket {shown(restores[k].ticket)} length {shown(restores[k].length)}"
        for k in stale[:4]
    )
    more = f" (and {len(stale) - 4} more)" if len(stale) > 4 else ""
    raise StaleSnapshotError(
        f"refusing a batch of {len(restores)} shared restores, copying nothing: {described}{more}"
    )
