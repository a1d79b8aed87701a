"""The one save/restore/accept skeleton every backend runs.

``PoolBase`` runs every batch through the same two steps - check it against
the pool's ``SlotTags`` (the per-batch rules, ``_batch_rules``), then the
trusted part: check the memory is still owned, decide which saves fail,
copy, tag - so tickets, ownership checks and fault handling cannot differ
between backends; a backend supplies only the copies.

The shared slots of prefix snapshots (SPEC 13) run the same two steps
(``SharedSlotsBase``, in ``_shared_base``, which ``PoolBase`` extends).

``TaggedPool`` declares the split: a pool whose batches its ``SlotTags``
check takes a batch they checked (``_save_checked`` and friends) without
checking it again. ``apply_effects`` checks each batch of a step once,
against those tags, and hands it over (validate once, then trust: STYLE 12).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from .._core.effect_dict import (
    SaveBatch,
    SsmPrefixSave,
    SsmSnapshotRestore,
    SsmSnapshotSave,
    SsmStateAccept,
)
from .._core.effects import trusted_save
from .._core.save_batch import LIVE
from .._errors import InvalidArgumentError, shown
from ._batch_values import CheckedAccepts, CheckedRestores, CheckedSaves
from ._faults import FailPredicate, check_fail_predicate
from ._shared_base import SharedSlotsBase
from ._shared_rules import CheckedSharedRestores, CheckedSharedSaves
from ._slot_tags import SlotTags

__all__ = ["PoolBase", "TaggedPool"]


@runtime_checkable
class TaggedPool(Protocol):
    """A pool that keeps its slot tags in a ``SlotTags`` and copies batches they checked.

    ``apply_effects`` checks each batch once against ``_slot_tags()`` (with
    ``_intermediate_count`` for rule 4) and hands it to ``_save_checked``,
    ``_restore_checked`` or ``_accept_checked``, which take it as it is.
    Methods only, so ``issubclass(type(pool), TaggedPool)`` answers from the
    ABC cache in well under a microsecond; ``isinstance`` on a protocol with
    properties walks every member on every call (over 10 us on CPython
    3.11), more than a small step's checks.
    """

    def _slot_tags(self) -> SlotTags: ...

    def _intermediate_count(self, seq: int) -> int: ...

    def _save_checked(
        self, checked: CheckedSaves, saves: Sequence[SsmSnapshotSave] | SaveBatch | None = None, /
    ) -> tuple[SsmSnapshotSave, ...]: ...

    def _restore_checked(self, checked: CheckedRestores, /) -> None: ...

    def _accept_checked(self, checked: CheckedAccepts, /) -> None: ...

    def _save_shared_checked(
        self, checked: CheckedSharedSaves, saves: Sequence[SsmPrefixSave], /
    ) -> tuple[SsmPrefixSave, ...]: ...

    def _restore_shared_checked(self, checked: CheckedSharedRestores, /) -> None: ...


class PoolBase(SharedSlotsBase, TaggedPool):
    """The save, restore and accept steps every backend shares; subclasses supply the copies.

    It declares ``TaggedPool``: ``apply_effects`` checks a step's batches
    against its tags once, then runs only the steps after the check.

    ``save``: check the batch (``SlotTags``, rules 1-4), check ownership,
    decide which saves fail (asking the fault predicate about every save
    before copying any, so a predicate that raises changes nothing), copy
    the rest, then commit the tags in one call. If the copy raises, the
    whole batch's slots hold nothing. ``restore``: check every slot holds
    its restore's exact ticket (rule 5), check ownership, copy. ``accept``:
    check the rows and indices, check ownership, copy. ``save_shared`` and
    ``restore_shared``: the same as ``save`` and ``restore`` over the shared
    slots (a ``SharedSnapshotPool``; with ``shared_slots=0`` every prefix
    effect is refused, naming the slot).
    """

    def __init__(self, num_sequences: int, slots_per_sequence: int, shared_slots: int = 0) -> None:
        self._tags = SlotTags(num_sequences, slots_per_sequence, shared_slots=shared_slots)
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

    def intermediate_count(self, seq: int) -> int:
        """How many intermediate states row ``seq`` holds now (0 when the pool keeps none)."""
        if type(seq) is not int or not 0 <= seq < self.num_sequences:
            raise InvalidArgumentError(
                f"'seq' must be an int in [0, {self.num_sequences}), got {shown(seq)}"
            )
        return self._intermediate_count(seq)

    def fail_when(self, predicate: FailPredicate | None) -> None:
        """Fault injection: later saves for which ``predicate(save)`` holds fail (``None``: none).

        A failed save copies nothing, its slot holds nothing afterwards, and
        it is listed in ``SaveOutcome.failed``.
        """
        self._fail = check_fail_predicate(predicate)

    # -- check, then the trusted steps -------------------------------------------

    def _slot_tags(self) -> SlotTags:
        return self._tags

    def _save_batch(
        self, saves: Sequence[SsmSnapshotSave] | SaveBatch
    ) -> tuple[SsmSnapshotSave, ...]:
        """Check ``saves``, then run the save steps; return the saves that failed."""
        checked = self._tags.check_saves(saves, staged=self._intermediate_count)
        return self._save_checked(checked, saves)

    def _restore_batch(self, restores: Sequence[SsmSnapshotRestore]) -> None:
        """Check ``restores`` (every slot holds its restore's ticket), then copy them."""
        self._restore_checked(self._tags.check_restores(restores))

    def _accept_batch(self, accepts: Sequence[SsmStateAccept]) -> None:
        """Check ``accepts`` (every row once, every index one its buffer holds), then copy."""
        self._accept_checked(self._tags.check_accepts(accepts, staged=self._intermediate_count))

    def _save_checked(
        self, checked: CheckedSaves, saves: Sequence[SsmSnapshotSave] | SaveBatch | None = None, /
    ) -> tuple[SsmSnapshotSave, ...]:
        """Copy and tag saves this pool's tags checked; return the failed ones.

        ``saves`` is what was checked, when there is one value to report
        failures from (else they are rebuilt from the columns).
        """
        self._check_owned()
        rows, flat, positions, tickets, sources = checked
        # Fault injection costs nothing when no fault is set.
        failed = [] if self._fail is None else self._failing(checked, saves, self._fail)
        if failed:
            skip = set(failed)
            kept = [k for k in range(len(rows)) if k not in skip]
            copy_rows, copy_flat = [rows[k] for k in kept], [flat[k] for k in kept]
            copy_sources = None if sources is None else [sources[k] for k in kept]
        else:
            copy_rows, copy_flat, copy_sources = rows, flat, sources
        try:
            self._copy_by_source(copy_rows, copy_flat, copy_sources)
        except BaseException:
            # Some state may hold the new rows and some the old: no restore
            # may read any slot of this batch.
            self._tags._forget(flat)
            raise
        self._tags._commit(flat, positions, tickets, failed)
        return tuple(self._save(k, checked, saves) for k in failed)

    def _restore_checked(self, checked: CheckedRestores, /) -> None:
        """Copy restores this pool's tags checked."""
        self._check_owned()
        if checked.rows:
            self._copy_restores(checked.rows, checked.flat)

    def _accept_checked(self, checked: CheckedAccepts, /) -> None:
        """Copy accepts this pool checked."""
        self._check_owned()
        if checked.rows:
            self._copy_accepts(checked.rows, checked.indices)
            self._tags._commit_accepts(checked.rows, checked.tickets)

    def _failing(
        self,
        checked: CheckedSaves,
        saves: Sequence[SsmSnapshotSave] | SaveBatch | None,
        fail: FailPredicate,
    ) -> list[int]:
        """The rows ``fail`` says fail, all asked before any copy (a predicate may raise)."""
        return [k for k in range(len(checked.rows)) if fail(self._save(k, checked, saves))]

    def _save(
        self, k: int, checked: CheckedSaves, saves: Sequence[SsmSnapshotSave] | SaveBatch | None
    ) -> SsmSnapshotSave:
        """Save ``k`` of a checked batch as a value (for the fault predicate and the outcome)."""
        if saves is not None:
            return saves[k]
        rows, flat, positions, tickets, sources = checked
        slot = flat[k] - rows[k] * self._tags.slots_per_sequence
        source = None if sources is None or sources[k] == LIVE else sources[k]
        return trusted_save(rows[k], slot, positions[k], tickets[k], source)

    def _copy_by_source(self, rows: list[int], flat: list[int], sources: list[int] | None) -> None:
        """The live-sourced rows in one copy, the intermediate-sourced ones in another."""
        if sources is None:
            if rows:
                self._copy_saves(rows, flat)
            return
        live = [k for k, source in enumerate(sources) if source == LIVE]
        staged = [k for k, source in enumerate(sources) if source != LIVE]
        if live:
            self._copy_saves([rows[k] for k in live], [flat[k] for k in live])
        if staged:
            self._copy_intermediate_saves(
                [rows[k] for k in staged], [flat[k] for k in staged], [sources[k] for k in staged]
            )

    # -- what a backend supplies -------------------------------------------------

    def _check_owned(self) -> None:
        """Raise ``InvalidArgumentError`` if the memory the pool copies is no longer its own."""

    def _copy_saves(self, rows: list[int], flat: list[int]) -> None:
        """Copy live row ``rows[k]`` into storage row ``flat[k]`` (rows are unique)."""
        raise NotImplementedError

    def _copy_restores(self, rows: list[int], flat: list[int]) -> None:
        """Copy storage row ``flat[k]`` into live row ``rows[k]`` (rows are unique)."""
        raise NotImplementedError

    def _intermediate_count(self, seq: int) -> int:
        """How many intermediate states row ``seq`` holds now (0: the pool keeps none)."""
        return 0

    def _copy_intermediate_saves(
        self, rows: list[int], flat: list[int], indices: list[int]
    ) -> None:
        """Copy intermediate state ``indices[k]`` of row ``rows[k]`` into storage ``flat[k]``."""
        raise NotImplementedError

    def _copy_accepts(self, rows: list[int], indices: list[int]) -> None:
        """Copy intermediate state ``indices[k]`` of row ``rows[k]`` into its live state."""
        raise NotImplementedError
