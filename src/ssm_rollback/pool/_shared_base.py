"""The shared slots' half of the pool skeleton (SPEC 13): ``SharedSlotsBase``.

``save_shared`` and ``restore_shared`` run the two steps ``PoolBase`` runs
for the rows' ring slots: check the batch against the tags' shared record
(``_shared_rules``), then the trusted part - check the memory is still
owned, decide which saves fail, copy, tag. A backend supplies the copies
(``_copy_shared_saves``, ``_copy_shared_restores``); ``PoolBase`` supplies
the tags and the ownership check.
"""

from __future__ import annotations

from collections.abc import Sequence

from .._core.effect_dict import SsmPrefixRestore, SsmPrefixSave
from ._faults import SharedFailPredicate, check_fail_predicate
from ._protocols import SaveOutcome
from ._shared_rules import CheckedSharedRestores, CheckedSharedSaves
from ._slot_tags import SlotTags

__all__ = ["SharedSlotsBase"]


class SharedSlotsBase:
    """Save and restore over the shared slots (a ``SharedSnapshotPool``); with
    ``shared_slots=0`` every prefix effect is refused, naming the slot."""

    _tags: SlotTags
    _fail_shared: SharedFailPredicate | None = None

    @property
    def shared_slots(self) -> int:
        """Shared slots for prefix snapshots (SPEC 13), apart from every row's ring slots."""
        return self._tags.shared_slots

    def stored_shared_ticket(self, slot: int) -> int | None:
        """The ticket of the save shared ``slot`` holds, or ``None``."""
        return self._tags.stored_shared_ticket(slot)

    def save_shared(self, saves: Sequence[SsmPrefixSave], /) -> SaveOutcome:
        """Copy each save's live row into its shared slot; failures in ``failed_shared``.

        A save whose ticket its shared slot already holds (applied twice) is
        ``StaleSnapshotError``; bad ids, a row or a shared slot twice are
        ``InvalidArgumentError``: nothing copied either way.
        """
        checked = self._tags.check_shared_saves(saves)
        return SaveOutcome(failed_shared=self._save_shared_checked(checked, saves))

    def restore_shared(self, restores: Sequence[SsmPrefixRestore], /) -> None:
        """Copy each restore's shared slot into its live row; a stale one copies nothing.

        Only when every shared slot holds exactly its restore's ticket and
        length; several rows may read one shared slot.
        """
        self._restore_shared_checked(self._tags.check_shared_restores(restores))

    def fail_shared_when(self, predicate: SharedFailPredicate | None) -> None:
        """Fault injection for shared saves, as ``fail_when`` is for ring saves."""
        self._fail_shared = check_fail_predicate(predicate, "SsmPrefixSave")

    def _save_shared_checked(
        self, checked: CheckedSharedSaves, saves: Sequence[SsmPrefixSave], /
    ) -> tuple[SsmPrefixSave, ...]:
        """Copy and tag shared saves this pool's tags checked; return the failed ones."""
        self._check_owned()
        rows, slots, lengths, tickets = checked
        fail = self._fail_shared
        failed = [] if fail is None else [k for k in range(len(rows)) if fail(saves[k])]
        copy_rows, copy_slots = rows, slots
        if failed:
            skip = set(failed)
            copy_rows = [row for k, row in enumerate(rows) if k not in skip]
            copy_slots = [slot for k, slot in enumerate(slots) if k not in skip]
        try:
            if copy_rows:
                self._copy_shared_saves(copy_rows, copy_slots)
        except BaseException:
            self._tags._forget_shared(slots)  # maybe half written: no restore may read them
            raise
        self._tags._commit_shared(slots, lengths, tickets, failed)
        return tuple(saves[k] for k in failed)

    def _restore_shared_checked(self, checked: CheckedSharedRestores, /) -> None:
        """Copy shared restores this pool's tags checked."""
        self._check_owned()
        if checked.rows:
            self._copy_shared_restores(checked.rows, checked.slots)

    # -- what PoolBase and a backend supply -----------------------------------------

    def _check_owned(self) -> None:
        """Raise ``InvalidArgumentError`` if the memory the pool copies is no longer its own."""

    def _copy_shared_saves(self, rows: list[int], slots: list[int]) -> None:
        """Copy live row ``rows[k]`` into shared slot ``slots[k]`` (rows and slots are unique)."""
        raise NotImplementedError

    def _copy_shared_restores(self, rows: list[int], slots: list[int]) -> None:
        """Copy shared slot ``slots[k]`` into live row ``rows[k]`` (rows are unique, slots not)."""
        raise NotImplementedError
