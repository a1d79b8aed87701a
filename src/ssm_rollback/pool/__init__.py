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
(``VerifyBufferPool``; ``SharedSnapshotPool`` for the shared slots of prefix
snapshots, SPEC 13).
``apply_effects`` runs a step's effects through a pool and discards failed
saves from their rings (and failed shared saves from the prefix index), so
nothing ever points at a slot that was not written.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import cast

from .._core.effect_dict import Effect, SsmPrefixSave, SsmSnapshotSave
from .._core.prefix import PrefixSnapshotIndex
from .._core.ring import SsmDecodeRing
from .._errors import (
    InvalidArgumentError,
    InvalidArgumentTypeError,
    InvariantError,
    check_non_negative_int,
    shown,
)
from ._base import TaggedPool
from ._batch_values import CheckedRestores, CheckedSaves
from ._protocols import (
    Rings,
    SaveOutcome,
    SharedSnapshotPool,
    SnapshotPool,
    VerifyBufferPool,
    shared_buffers,
    verify_buffers,
)
from ._runs import Run, check_rings, check_runs, ring_lookup, runs_of
from ._shared_rules import (
    CheckedSharedRestores,
    CheckedSharedSaves,
    SharedChecks,
    check_rows_once,
)
from ._slot_tags import SlotTags
from ._tags_view import PoolTagsView

__all__ = [
    "Rings",
    "SaveOutcome",
    "SharedSnapshotPool",
    "SlotTags",
    "SnapshotPool",
    "VerifyBufferPool",
    "apply_effects",
    "scheduler_step",
]


def _check_pool(pool: object) -> SnapshotPool:
    """``pool`` as a ``SnapshotPool`` (its four methods callable, its two sizes ints >= 0);
    else raise naming it."""
    for member in ("save", "restore", "stored_position", "stored_ticket"):
        if not callable(getattr(pool, member, None)):
            raise InvalidArgumentTypeError(
                f"'pool' must be a SnapshotPool (with a {member}() method), got "
                f"{type(pool).__name__}"
            )
    for size in ("num_sequences", "slots_per_sequence"):
        if not hasattr(pool, size):
            raise InvalidArgumentTypeError(
                f"'pool' must be a SnapshotPool (with a {size} attribute), got "
                f"{type(pool).__name__}"
            )
        check_non_negative_int(f"pool.{size}", getattr(pool, size))
    return cast(SnapshotPool, pool)


def apply_effects(
    pool: SnapshotPool,
    effects: Iterable[Effect],
    rings: Rings,
    *,
    prefix_index: PrefixSnapshotIndex | None = None,
) -> SaveOutcome:
    """Run a step's effects through ``pool`` in order; discard failed saves from their rings.

    Consecutive saves (single ones and ``SaveBatch`` es) go to the pool as
    one ``save`` call, consecutive restores as one ``restore`` call,
    consecutive ``SsmStateAccept`` s as one ``accept`` call (the pool must
    be a ``VerifyBufferPool`` for those, and for saves from intermediate
    states), consecutive ``SsmPrefixSave`` s as one ``save_shared`` and
    ``SsmPrefixRestore`` s as one ``restore_shared`` call (the pool must be
    a ``SharedSnapshotPool`` for those). Every effect is checked before the
    first copy, once, by the pool's batch rules (``SlotTags``; for a pool
    that implements only the protocols, the same rules over its
    ``num_sequences``, ``slots_per_sequence``, ``shared_slots`` and
    ``stored_*``) - its row and slot, each row's state and each slot at most
    once per call, each restore against what its slot (ring or shared) will
    hold once the saves before it are written, each accept and
    intermediate-sourced save against the intermediate states the pool
    holds - and a ring for every saved row; a bad one raises, naming
    ``effects[i]``, with nothing copied. A save that fails is discarded from
    ``rings[save.seq]``, and a shared save that fails from ``prefix_index``
    (when given), so nothing points at a slot that was not written; a
    restore that needed it then raises ``StaleSnapshotError`` when its batch
    comes, after the batches before it were applied. With ``prefix_index``,
    a shared save whose entry left the index before the call is left out
    (superseded; a row saved twice is refused all the same), and one the
    index never placed, or of another length than its entry, is refused.
    Returns every failed save (``failed``) and shared save (``failed_shared``).
    """
    # A pool built on PoolBase checks against its own SlotTags and copies
    # what they checked: each batch is checked here, once, and trusted there.
    tagged = cast(TaggedPool, pool) if issubclass(type(pool), TaggedPool) else None
    if tagged is None:
        pool = _check_pool(pool)
    _check_index(prefix_index)
    ring_for = ring_lookup(rings)
    runs = runs_of(effects)
    checks: SharedChecks = PoolTagsView(pool) if tagged is None else tagged._slot_tags()
    if prefix_index is not None:
        runs = _without_superseded(runs, prefix_index, checks)
    if any(run.accepts for run in runs):
        verify_buffers(pool, "SsmStateAccept effects")
    shared = _shared_pool(pool, runs) if tagged is None else None
    checked = check_runs(checks, runs, rings, _staged_counts(pool, tagged))
    failed: list[SsmSnapshotSave] = []
    failed_shared: list[SsmPrefixSave] = []
    for run, batch in zip(runs, checked, strict=True):
        if isinstance(batch, CheckedSaves):
            if tagged is not None:
                lost = tagged._save_checked(batch, run.values())
            else:
                lost = _outcome(pool.save(run.batch(batch, checks.slots_per_sequence))).failed
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
        elif isinstance(batch, CheckedSharedSaves):
            if tagged is not None:
                lost_shared = tagged._save_shared_checked(batch, run.shared_saves)
            else:
                outcome = cast(SharedSnapshotPool, shared).save_shared(run.shared_saves)
                lost_shared = _outcome(outcome, "save_shared").failed_shared
            for prefix_save in lost_shared:
                _forget_prefix(prefix_index, prefix_save)
            failed_shared.extend(lost_shared)
        elif isinstance(batch, CheckedSharedRestores):
            if failed_shared:  # as for ring restores: a failed shared save holds nothing
                batch = checks.check_shared_restores(run.shared_restores, run.names())
            if tagged is None:
                cast(SharedSnapshotPool, shared).restore_shared(run.shared_restores)
            else:
                tagged._restore_shared_checked(batch)
        elif tagged is not None:
            tagged._accept_checked(batch)
        else:
            verify_buffers(pool, "SsmStateAccept effects").accept(run.accepts)
    return SaveOutcome(tuple(failed), tuple(failed_shared))


def scheduler_step(
    effects: Iterable[Effect], rings: Rings | None, prefix_index: PrefixSnapshotIndex | None
) -> list[Effect]:
    """The step every rank is to apply, decided by what only the scheduler holds.

    ``apply_effects`` on the scheduler checks a step against its ``rings``
    (a ring for every saved row) and ``prefix_index`` (shared saves it
    placed, at their entries' lengths; those whose entry has left since are
    left out), which a worker does not have. On tensor-parallel ranks that
    decision is made here, before the step is broadcast
    (``broadcast_effects(..., rings=, prefix_index=)``), so that a refusal
    reaches every rank and every rank applies the same effects. What the
    pool checks (ids, slots, tickets) is every rank's own, after.
    """
    _check_index(prefix_index)
    runs = runs_of(effects)
    if prefix_index is not None:
        runs = _without_superseded(runs, prefix_index, None)
    if rings is not None:
        ring_lookup(rings)  # its type, named
        for run in runs:
            if run.saves:
                check_rings(run.columns()[0], rings, None, run.names())
    return [
        effect
        for run in runs
        for effect in (
            *run.saves,
            *run.restores,
            *run.accepts,
            *run.shared_saves,
            *run.shared_restores,
        )
    ]


def _check_index(prefix_index: object) -> None:
    """Refuse a ``prefix_index`` that is neither a ``PrefixSnapshotIndex`` nor ``None``."""
    if prefix_index is not None and not isinstance(prefix_index, PrefixSnapshotIndex):
        raise InvalidArgumentTypeError(
            f"'prefix_index' must be a PrefixSnapshotIndex or None, got "
            f"{type(prefix_index).__name__}"
        )


def _without_superseded(
    runs: list[Run], index: PrefixSnapshotIndex, checks: SharedChecks | None
) -> list[Run]:
    """The runs without the shared saves whose entry ``index`` no longer holds.

    An entry can be evicted, its slot given to another prefix, between the
    call that placed it and the step that applies its save (a later publish
    in the same step, say). Its save would then write a slot another entry
    owns - and, beside that entry's own save, name the slot twice in one
    call. Nothing points at it any more, so it is left out, as a failed save
    would be discarded. The rows, ids and lengths are checked on the saves
    as given, before any is left out: a row saved twice in one call is
    refused whether or not one of its saves is superseded, and a save whose
    length is not its entry's was not placed by ``index``.
    """
    live: dict[int, tuple[int, int]] | None = None
    for run in runs:
        if not run.shared_saves:
            continue
        saves, names = run.shared_saves, run.names()
        # The batch rules' row check, on the saves as given (their slot check comes after);
        # before any pool (``checks`` None: the scheduler's step), the row check alone.
        seqs = [s.seq for s in saves]
        if checks is None:
            check_rows_once(seqs, names)
        else:
            checks._check_shared_ids(seqs, [s.slot for s in saves], names, writes=False)
        if live is None:
            live = {entry.slot: (entry.ticket, entry.length) for entry in index.entries()}
        kept = []
        for k, save in enumerate(saves):
            ticket, length = live.get(save.slot, (None, None))
            if ticket == save.ticket and length == save.length:
                kept.append(k)
            elif ticket == save.ticket or not index._left_lately(save.ticket):
                raise InvalidArgumentError(
                    f"'{names.of(k)}' ({shown(save)}) must be a save that 'prefix_index' "
                    f"placed, got one it holds no entry of, live or left lately: another "
                    f"index's, one whose entry left long ago, or one of another length"
                )
        if len(kept) != len(saves):
            run.keep_shared_saves(kept)
    return [run for run in runs if not run.empty()]


def _shared_pool(pool: SnapshotPool, runs: list[Run]) -> SharedSnapshotPool | None:
    """``pool`` as a ``SharedSnapshotPool`` if a run holds prefix effects (refused if none).

    Asked of a third-party pool only: one on ``PoolBase`` is one by construction,
    and the runtime protocol check walks every member (microseconds).
    """
    for run in runs:
        prefix = run.shared_saves or run.shared_restores
        if prefix:
            kind = type(prefix[0]).__name__
            return shared_buffers(pool, f"'effects[{run.first}]' (an {kind})")
    return None


def _staged_counts(
    pool: SnapshotPool, tagged: TaggedPool | None
) -> Callable[[str], Callable[[int], int]]:
    """For ``check_runs``: the pool's intermediate-state count per row, once a run needs it."""
    if tagged is not None:
        # Its own count, exactly as its own save would check against.
        return lambda what: tagged._intermediate_count
    return lambda what: verify_buffers(pool, what).intermediate_count


def _outcome(outcome: object, method: str = "save") -> SaveOutcome:
    """What a third-party pool's ``save`` / ``save_shared`` returned, once it is a
    ``SaveOutcome`` (its copies are done by now: a pool that breaks the protocol is named)."""
    if not isinstance(outcome, SaveOutcome):
        raise InvariantError(
            f"the pool's {method}() must return a SaveOutcome (the SnapshotPool protocol), got "
            f"{type(outcome).__name__}: its copies ran, but which saves failed is unknown"
        )
    return outcome


def _forget(ring: SsmDecodeRing | None, save: SsmSnapshotSave) -> None:
    # The ring may already have moved on (a rollback truncated the entry, a
    # later record took the slot): then nothing points at what the failed save
    # was for, and there is nothing to forget.
    if ring is None:
        return
    entry = ring.entry_for(save.token_position)
    if entry is not None and entry.ticket == save.ticket and entry.snapshot_slot == save.slot:
        ring.discard(save.token_position)


def _forget_prefix(index: PrefixSnapshotIndex | None, save: SsmPrefixSave) -> None:
    # The index may already have moved on (the entry was evicted or discarded,
    # its slot given to another prefix with another ticket): then nothing
    # points at what the failed save was for.
    if index is None:
        return
    for entry in index.entries():
        if entry.slot == save.slot and entry.ticket == save.ticket:
            index.discard(entry)
            return
