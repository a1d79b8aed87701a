"""The one save/restore/accept skeleton every backend runs.

``PoolBase`` runs every batch through the same steps - check the memory is
still owned, check the batch (``SlotTags``), decide which saves fail, copy,
commit the tags in one call - so tickets, ownership checks and fault
handling cannot differ between backends; a backend supplies only the copies.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import cast

from .._core.effect_dict import SaveBatch, SsmSnapshotRestore, SsmSnapshotSave, SsmStateAccept
from .._core.save_batch import LIVE
from .._errors import InvalidArgumentError, InvalidArgumentTypeError, StaleSnapshotError
from ._slot_tags import SlotTags

__all__ = ["FailPredicate", "PoolBase", "check_fail_predicate"]

#: A fault predicate: saves for which it returns true fail.
FailPredicate = Callable[[SsmSnapshotSave], bool]


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

    def intermediate_count(self, seq: int) -> int:
        """How many intermediate states row ``seq`` holds now (0 when the pool keeps none)."""
        if type(seq) is not int or not 0 <= seq < self.num_sequences:
            raise InvalidArgumentError(
                f"'seq' must be an int in [0, {self.num_sequences}), got {seq!r}"
            )
        return self._intermediate_count(seq)

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
        rows, flat, positions, tickets, sources = self._tags.check_saves(saves)
        if sources is not None:
            self._check_indices("saves", rows, sources)
        fail = self._fail
        # Fault injection costs nothing when no fault is set.
        failed = [] if fail is None else [k for k in range(len(rows)) if fail(saves[k])]
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
            self._tags.forget(flat)
            raise
        self._tags.commit(flat, positions, tickets, failed)
        return tuple(saves[k] for k in failed)

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

    def _restore_batch(self, restores: Sequence[SsmSnapshotRestore]) -> None:
        """Run the restore steps."""
        self._check_owned()
        rows, flat = self._tags.check_restores(restores)
        if rows:
            self._copy_restores(rows, flat)

    def _accept_batch(self, accepts: Sequence[SsmStateAccept]) -> None:
        """Run the accept steps: every row once, every index one the row's buffer holds."""
        self._check_owned()
        if not isinstance(accepts, Sequence):
            raise InvalidArgumentTypeError(
                f"'accepts' must be a sequence of SsmStateAccept, got {type(accepts).__name__}"
            )
        rows: list[int] = []
        indices: list[int] = []
        seen: dict[int, int] = {}
        for i, accept in enumerate(accepts):
            if type(accept) is not SsmStateAccept:
                raise InvalidArgumentTypeError(
                    f"'accepts[{i}]' must be an SsmStateAccept, got {accept!r}"
                )
            if accept.seq >= self.num_sequences:
                raise InvalidArgumentError(
                    f"'accepts[{i}].seq' must be < num_sequences {self.num_sequences}, "
                    f"got {accept.seq}"
                )
            first = seen.setdefault(accept.seq, i)
            if first != i:
                raise InvalidArgumentError(
                    f"'accepts' must name each row at most once per batch, got seq "
                    f"{accept.seq} at accepts[{first}] and accepts[{i}]"
                )
            rows.append(accept.seq)
            indices.append(accept.index)
        self._check_indices("accepts", rows, indices)
        if rows:
            self._copy_accepts(rows, indices)

    def _check_indices(self, name: str, rows: list[int], sources: list[int]) -> None:
        """Refuse an intermediate index the row's buffer does not hold, copying nothing."""
        for k, (seq, index) in enumerate(zip(rows, sources, strict=True)):
            if index == LIVE:
                continue
            held = self._intermediate_count(seq)
            if index >= held:
                what = "no intermediate states" if not held else f"{held} intermediate states"
                raise StaleSnapshotError(
                    f"refusing a batch of {len(rows)} {name}, copying nothing: {name}[{k}] names "
                    f"intermediate state {index} of seq {seq}, which holds {what}"
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
