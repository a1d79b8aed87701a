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

from ._effects import Effect, SaveBatch, SsmSnapshotRestore, SsmSnapshotSave
from ._errors import InvalidArgumentError, InvalidArgumentTypeError, StaleSnapshotError
from ._ring import SsmDecodeRing
from ._slots import SlotTags

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


@attrs.define
class _Run:
    """Consecutive effects of one kind: one call to the pool. One of them is empty.

    A save run keeps its rows as four columns, filled as the effects are read,
    and its pieces (single saves and whole ``SaveBatch`` es) only to name a
    bad one; ``batch()`` hands the pool one ``SaveBatch``.
    """

    first: int
    saves: list[SsmSnapshotSave | SaveBatch] = attrs.field(factory=list)
    restores: list[SsmSnapshotRestore] = attrs.field(factory=list)
    seqs: list[int] = attrs.field(factory=list)
    slots: list[int] = attrs.field(factory=list)
    positions: list[int] = attrs.field(factory=list)
    tickets: list[int] = attrs.field(factory=list)

    def batch(self) -> SaveBatch:
        # Every value was checked when its effect was made, and the rows
        # against the pool in _check_runs: the pool need not look again.
        return SaveBatch._trusted(self.seqs, self.slots, self.positions, self.tickets)


def _runs(effects: Iterable[Effect]) -> list[_Run]:
    """``effects`` split into runs of one kind: the batches the pool receives."""
    if isinstance(effects, str | bytes | Mapping) or not isinstance(effects, Iterable):
        raise InvalidArgumentTypeError(
            f"'effects' must be an iterable of effects, got {type(effects).__name__}"
        )
    runs: list[_Run] = []
    run = _Run(-1)
    saving: bool | None = None
    # Bound once per run, not per effect: this loop sees every save of a step.
    add_save = run.saves.append
    add_seq = add_slot = add_position = add_ticket = run.seqs.append
    for i, effect in enumerate(effects):
        if isinstance(effect, SsmSnapshotSave):
            if saving is not True:
                runs.append(run := _Run(i))
                saving = True
                add_save, add_seq, add_slot = run.saves.append, run.seqs.append, run.slots.append
                add_position, add_ticket = run.positions.append, run.tickets.append
            add_save(effect)
            add_seq(effect.seq)
            add_slot(effect.slot)
            add_position(effect.token_position)
            add_ticket(effect.ticket)
        elif isinstance(effect, SaveBatch):
            if saving is not True:
                runs.append(run := _Run(i))
                saving = True
                add_save, add_seq, add_slot = run.saves.append, run.seqs.append, run.slots.append
                add_position, add_ticket = run.positions.append, run.tickets.append
            add_save(effect)
            run.seqs.extend(effect.seqs)
            run.slots.extend(effect.slots)
            run.positions.extend(effect.positions)
            run.tickets.extend(effect.tickets)
        elif isinstance(effect, SsmSnapshotRestore):
            if saving is not False:
                runs.append(run := _Run(i))
                saving = False
            run.restores.append(effect)
        else:
            raise InvalidArgumentTypeError(
                f"'effects[{i}]' must be an SsmSnapshotSave, SaveBatch or SsmSnapshotRestore, "
                f"got {effect!r}"
            )
    return runs


def _rows_of(
    piece: SsmSnapshotSave | SsmSnapshotRestore | SaveBatch, i: int
) -> list[tuple[str, int, int, int, int]]:
    """``(name, seq, slot, position, ticket)`` per row of one effect, for the checks."""
    if isinstance(piece, SaveBatch):
        return [
            (f"effects[{i}][{j}]", *row)
            for j, row in enumerate(
                zip(piece.seqs, piece.slots, piece.positions, piece.tickets, strict=True)
            )
        ]
    return [(f"effects[{i}]", piece.seq, piece.slot, piece.token_position, piece.ticket)]


def _check_runs(pool: SnapshotPool, runs: list[_Run], rings: Rings) -> None:
    """Check every effect of every run before the first copy; raise naming ``effects[i]``.

    A save run is checked over its columns at C speed, and row by row only
    to name what failed. Restores are checked against what their slots will
    hold once the saves before them in this call are written.
    """
    rows, slots = pool.num_sequences, pool.slots_per_sequence
    # (seq, slot) -> (position, ticket) it will hold once the earlier saves ran.
    pending: dict[tuple[int, int], tuple[int | None, int | None]] = {}
    has_restores = any(run.restores for run in runs)
    for run in runs:
        if run.saves:
            if not _saves_fit(run, rows, slots, rings):
                _name_bad_save(run, rows, slots, _ring_lookup(rings))
            if has_restores:
                keys = zip(run.seqs, run.slots, strict=True)
                values = zip(run.positions, run.tickets, strict=True)
                pending.update(zip(keys, values, strict=True))
            continue
        seen: dict[int, str] = {}
        for i, restore in enumerate(run.restores, start=run.first):
            name = f"effects[{i}]"
            _check_row(name, restore.seq, restore.slot, rows, slots, seen)
            held = pending.get((restore.seq, restore.slot))
            if held is None:
                held = (
                    pool.stored_position(restore.seq, restore.slot),
                    pool.stored_ticket(restore.seq, restore.slot),
                )
            if held != (restore.token_position, restore.ticket):
                what = "nothing" if held[1] is None else f"position {held[0]} ticket {held[1]}"
                raise StaleSnapshotError(
                    f"refusing '{name}' {restore!r}, copying nothing: its slot holds {what}"
                )


def _saves_fit(run: _Run, rows: int, slots: int, rings: Rings) -> bool:
    """Whether a save run passes every check, tested at C speed (``False``: look closer)."""
    seqs = run.seqs
    if not seqs:
        return True
    if max(seqs) >= rows or max(run.slots) >= slots or len(set(seqs)) != len(seqs):
        return False
    if isinstance(rings, Mapping):
        return all(map(rings.__contains__, seqs))
    return max(seqs) < len(rings)


def _name_bad_save(
    run: _Run, rows: int, slots: int, ring_for: Callable[[int], SsmDecodeRing | None]
) -> None:
    """Raise naming the first save of ``run`` that fails a check."""
    seen: dict[int, str] = {}
    for i, piece in enumerate(run.saves, start=run.first):
        for name, seq, slot, _, _ in _rows_of(piece, i):
            _check_row(name, seq, slot, rows, slots, seen)
            if ring_for(seq) is None:
                raise InvalidArgumentError(
                    f"'rings' must hold a ring for every saved row, got none for seq {seq} ({name})"
                )


def _check_row(name: str, seq: int, slot: int, rows: int, slots: int, seen: dict[int, str]) -> None:
    if seq >= rows:
        raise InvalidArgumentError(
            f"'{name}.seq' must be < the pool's num_sequences {rows}, got {seq}"
        )
    if slot >= slots:
        raise InvalidArgumentError(
            f"'{name}.slot' must be < the pool's slots_per_sequence {slots}, got {slot}"
        )
    first = seen.setdefault(seq, name)
    if first != name:
        raise InvalidArgumentError(
            f"'effects' must name each row at most once per run of one kind, got seq "
            f"{seq} at {first} and {name}"
        )


def apply_effects(pool: SnapshotPool, effects: Iterable[Effect], rings: Rings) -> SaveOutcome:
    """Run a step's effects through ``pool`` in order; discard failed saves from their rings.

    Consecutive saves go to the pool as one ``save`` call, consecutive
    restores as one ``restore`` call. Every effect is checked before the
    first copy - its kind, its row and slot against the pool, each row at
    most once per call to the pool, a ring for every saved row, and each
    restore against what its slot will hold once the saves before it are
    written - and a bad one raises, naming ``effects[i]``, with nothing
    copied. A save that fails is discarded from ``rings[save.seq]``, so no
    ring points at a slot that was not written; a restore that needed it
    then raises ``StaleSnapshotError`` when its batch comes, after the
    batches before it were applied. Returns every failed save.
    """
    pool = _check_pool(pool)
    ring_for = _ring_lookup(rings)
    runs = _runs(effects)
    _check_runs(pool, runs, rings)
    failed: list[SsmSnapshotSave] = []
    for run in runs:
        if run.saves:
            outcome = pool.save(run.batch())
            for save in outcome.failed:
                _forget(ring_for(save.seq), save)
            failed.extend(outcome.failed)
        else:
            pool.restore(run.restores)
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
