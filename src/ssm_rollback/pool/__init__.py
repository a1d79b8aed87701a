"""Snapshot pools: the protocol every copy backend implements, and the glue that drives them.

A pool owns the snapshot memory - ``slots_per_sequence`` slots for each of
``num_sequences`` rows, allocated up front - and copies between row ``seq``'s
live SSM state and snapshot ``(seq, slot)``. Copies are batched: one
``save`` (or ``restore``) call per step, one copy per state tensor inside it.

Every pool also remembers which ``token_position`` and ticket each slot last
received (``SlotTags``, shared by all backends), so a restore of a slot that
holds another ticket, or nothing, raises ``StaleSnapshotError`` before
copying anything: a bookkeeping bug can never silently restore the wrong
state.
``apply_effects`` runs a step's effects through a pool and discards failed
saves from their rings, so no ring ever points at a slot that was not written.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Protocol, TypeAlias, cast, runtime_checkable

import attrs

from .._core.effect_dict import Effect, SaveBatch, SsmSnapshotRestore, SsmSnapshotSave
from .._core.ring import SsmDecodeRing
from .._errors import InvalidArgumentTypeError
from ._runs import check_runs, runs_of
from ._slot_tags import SlotTags

__all__ = ["Rings", "SaveOutcome", "SlotTags", "SnapshotPool", "apply_effects"]


@attrs.frozen
class SaveOutcome:
    """What a batched ``save`` did: ``failed`` lists the saves that did not happen."""

    failed: tuple[SsmSnapshotSave, ...] = ()

    @property
    def ok(self) -> bool:
        """True when every save happened."""
        return not self.failed


@runtime_checkable
class SnapshotPool(Protocol):
    """Snapshot memory for ``num_sequences`` rows of ``slots_per_sequence`` slots each.

    ``save`` and ``restore`` are batched: one call per step, one copy per
    state tensor inside it, never one per sequence or layer. A failed save
    leaves its slot holding nothing; a restore of a slot that does not hold
    the restore's exact ticket raises ``StaleSnapshotError`` and copies
    nothing.
    ``ssm_rollback.testing.SnapshotPoolConformance`` checks all of this.
    """

    @property
    def num_sequences(self) -> int:
        """Rows (decode-batch entries) the pool holds snapshots for."""
        ...

    @property
    def slots_per_sequence(self) -> int:
        """Snapshot slots per row: the capacity of each row's ring."""
        ...

    def save(self, saves: Sequence[SsmSnapshotSave] | SaveBatch, /) -> SaveOutcome:
        """Copy each save's live row into its slot; report the saves that failed."""
        ...

    def restore(self, restores: Sequence[SsmSnapshotRestore], /) -> None:
        """Copy each restore's slot back into its live row, or raise and copy nothing."""
        ...

    def stored_position(self, seq: int, slot: int) -> int | None:
        """The ``token_position`` snapshot ``(seq, slot)`` holds; ``None`` if nothing."""
        ...

    def stored_ticket(self, seq: int, slot: int) -> int | None:
        """The ticket of the save snapshot ``(seq, slot)`` holds; ``None`` if nothing."""
        ...


Rings: TypeAlias = Sequence[SsmDecodeRing] | Mapping[int, SsmDecodeRing]
"""The scheduler's rings, indexed by ``seq``: a list by row, or a mapping from row."""


def _ring_lookup(rings: Rings) -> Callable[[int], SsmDecodeRing | None]:
    """``seq -> ring or None`` for either shape of ``rings`` (decided once, not per effect)."""
    if isinstance(rings, Mapping):
        return rings.get
    if not isinstance(rings, Sequence) or isinstance(rings, str | bytes):
        raise InvalidArgumentTypeError(
            f"'rings' must be a sequence of SsmDecodeRing indexed by seq, or a mapping from "
            f"seq, got {type(rings).__name__}"
        )
    count = len(rings)
    return lambda seq: rings[seq] if seq < count else None


def _check_pool(pool: object) -> SnapshotPool:
    for member in ("save", "restore", "stored_position", "stored_ticket"):
        if not callable(getattr(pool, member, None)):
            raise InvalidArgumentTypeError(
                f"'pool' must be a SnapshotPool (with a {member}() method), got "
                f"{type(pool).__name__}"
            )
    return cast(SnapshotPool, pool)


def apply_effects(pool: SnapshotPool, effects: Iterable[Effect], rings: Rings) -> SaveOutcome:
    """Run a step's effects through ``pool`` in order; discard failed saves from their rings.

    Consecutive saves (single ones and ``SaveBatch`` es) go to the pool as
    one ``save`` call, consecutive restores as one ``restore`` call,
    consecutive ``SsmStateAccept`` s as one ``accept`` call. Every effect is
    checked before the first copy - its kind, its row and slot against the
    pool, each row at most once per call to the pool, a ring for every saved
    row, each restore against what its slot will hold once the saves before
    it are written, each accept and intermediate-sourced save against the
    intermediate states the pool holds - and a bad one raises, naming
    ``effects[i]``, with nothing copied. A save that fails is discarded from
    ``rings[save.seq]``, so no ring points at a slot that was not written; a
    restore that needed it then raises ``StaleSnapshotError`` when its batch
    comes, after the batches before it were applied. Returns every failed
    save.
    """
    pool = _check_pool(pool)
    ring_for = _ring_lookup(rings)
    runs = runs_of(effects)
    accept = getattr(pool, "accept", None)
    staged = getattr(pool, "intermediate_count", None)
    if any(run.accepts for run in runs) and not callable(accept):
        raise InvalidArgumentTypeError(
            f"'pool' must have an accept() method for SsmStateAccept effects, got "
            f"{type(pool).__name__}"
        )
    check_runs(pool, runs, rings, ring_for, staged if callable(staged) else None)
    failed: list[SsmSnapshotSave] = []
    for run in runs:
        if run.saves:
            outcome = pool.save(run.batch())
            for save in outcome.failed:
                _forget(ring_for(save.seq), save)
            failed.extend(outcome.failed)
        elif run.restores:
            pool.restore(run.restores)
        else:
            assert callable(accept)
            accept(run.accepts)
    return SaveOutcome(tuple(failed))


def _forget(ring: SsmDecodeRing | None, save: SsmSnapshotSave) -> None:
    # The ring may already have moved on (a rollback truncated the entry, a
    # later record took the slot): then nothing points at what the failed save
    # was for, and there is nothing to forget.
    if ring is None:
        return
    entry = ring.entry_for(save.token_position)
    if entry is not None and entry.ticket == save.ticket and entry.snapshot_slot == save.slot:
        ring.discard(save.token_position)
