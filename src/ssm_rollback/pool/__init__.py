"""Snapshot pools: the protocol every copy backend implements, and the glue that drives them.

A pool owns the snapshot memory - ``slots_per_sequence`` slots for each of
``num_sequences`` rows, allocated up front - and copies between row ``seq``'s
live SSM state and snapshot ``(seq, slot)``. Copies are batched: one
``save`` (or ``restore``) call per step, one copy per state tensor inside it.

Every pool also remembers which ``token_position`` and ticket each slot last
received (``SlotTags``, shared by all backends), so a restore of a slot that
holds another ticket, or nothing, raises ``StaleSnapshotError`` before
copying anything: a bookkeeping bug can never silently restore the wrong
state. Optional capabilities are protocols of their own
(``VerifyBufferPool``).
``apply_effects`` runs a step's effects through a pool and discards failed
saves from their rings, so no ring ever points at a slot that was not written.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import cast

from .._core.effect_dict import Effect, SsmSnapshotSave
from .._core.ring import SsmDecodeRing
from .._errors import InvalidArgumentTypeError
from ._base import TaggedPool
from ._batch_rules import BatchChecks, CheckedRestores, CheckedSaves
from ._protocols import Rings, SaveOutcome, SnapshotPool, VerifyBufferPool, verify_buffers
from ._runs import check_runs, ring_lookup, runs_of
from ._slot_tags import PoolTagsView, SlotTags

__all__ = [
    "Rings",
    "SaveOutcome",
    "SlotTags",
    "SnapshotPool",
    "VerifyBufferPool",
    "apply_effects",
]


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
    consecutive ``SsmStateAccept`` s as one ``accept`` call (the pool must
    be a ``VerifyBufferPool`` for those, and for saves from intermediate
    states). Every effect is checked before the first copy, once, by the
    pool's batch rules (``SlotTags``; for a pool that implements only the
    protocol, the same rules over its ``num_sequences``,
    ``slots_per_sequence`` and ``stored_*``) - its row and slot, each row's
    state and each slot at most once per call, each restore against what its
    slot will hold once the saves before it are written, each accept and
    intermediate-sourced save against the intermediate states the pool
    holds - and a ring for every saved row; a bad one raises, naming
    ``effects[i]``, with nothing copied. A save that fails is discarded from
    ``rings[save.seq]``, so no ring points at a slot that was not written; a
    restore that needed it then raises ``StaleSnapshotError`` when its batch
    comes, after the batches before it were applied. Returns every failed
    save.
    """
    # A pool built on PoolBase checks against its own SlotTags and copies
    # what they checked: each batch is checked here, once, and trusted there.
    tagged = cast(TaggedPool, pool) if issubclass(type(pool), TaggedPool) else None
    if tagged is None:
        pool = _check_pool(pool)
    ring_for = ring_lookup(rings)
    runs = runs_of(effects)
    checks: BatchChecks = PoolTagsView(pool) if tagged is None else tagged._slot_tags()
    if any(run.accepts for run in runs):
        verify_buffers(pool, "SsmStateAccept effects")
    checked = check_runs(checks, runs, rings, _staged_counts(pool, tagged))
    failed: list[SsmSnapshotSave] = []
    for run, batch in zip(runs, checked, strict=True):
        if isinstance(batch, CheckedSaves):
            if tagged is not None:
                lost = tagged._save_checked(batch, run.values())
            else:
                lost = pool.save(run.batch(batch, checks.slots_per_sequence)).failed
            for save in lost:
                _forget(ring_for(save.seq), save)
            failed.extend(lost)
        elif isinstance(batch, CheckedRestores):
            if tagged is None:
                pool.restore(run.restores)
            elif failed:
                # A failed save left its slot holding nothing, which the
                # check before the first copy could not know: look again.
                tagged._restore_checked(checks.check_restores(run.restores, run.names()))
            else:
                tagged._restore_checked(batch)
        elif tagged is not None:
            tagged._accept_checked(batch)
        else:
            verify_buffers(pool, "SsmStateAccept effects").accept(run.accepts)
    return SaveOutcome(tuple(failed))


def _staged_counts(
    pool: SnapshotPool, tagged: TaggedPool | None
) -> Callable[[str], Callable[[int], int]]:
    """For ``check_runs``: the pool's intermediate-state count per row, once a run needs it."""
    if tagged is not None:
        # Its own count, exactly as its own save would check against.
        return lambda what: tagged._intermediate_count
    return lambda what: verify_buffers(pool, what).intermediate_count


def _forget(ring: SsmDecodeRing | None, save: SsmSnapshotSave) -> None:
    # The ring may already have moved on (a rollback truncated the entry, a
    # later record took the slot): then nothing points at what the failed save
    # was for, and there is nothing to forget.
    if ring is None:
        return
    entry = ring.entry_for(save.token_position)
    if entry is not None and entry.ticket == save.ticket and entry.snapshot_slot == save.slot:
        ring.discard(save.token_position)
