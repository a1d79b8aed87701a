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
    """Consecutive effects of one kind: one call to the pool. One of the lists is empty.

    A save run keeps its pieces (single saves and whole ``SaveBatch`` es) and
    the index in ``effects`` of each; ``batch()`` hands the pool one value.
    """

    first: int
    saves: list[SsmSnapshotSave | SaveBatch] = attrs.field(factory=list)
    restores: list[SsmSnapshotRestore] = attrs.field(factory=list)

    def batch(self) -> Sequence[SsmSnapshotSave] | SaveBatch:
        pieces = self.saves
        if len(pieces) == 1 and type(pieces[0]) is SaveBatch:
            return pieces[0]
        if not any(type(piece) is SaveBatch for piece in pieces):
            return cast(list[SsmSnapshotSave], pieces)
        columns: tuple[list[int], list[int], list[int], list[int]] = ([], [], [], [])
        for piece in pieces:
            if isinstance(piece, SaveBatch):
                parts = (piece.seqs, piece.slots, piece.positions, piece.tickets)
            else:
                parts = ((piece.seq,), (piece.slot,), (piece.token_position,), (piece.ticket,))
            for column, part in zip(columns, parts, strict=True):
                column.extend(part)
        return SaveBatch._trusted(*columns)  # every piece's values were checked when made


def _runs(effects: Iterable[Effect]) -> list[_Run]:
    """``effects`` split into runs of one kind: the batches the pool receives."""
    if isinstance(effects, str | bytes | Mapping) or not isinstance(effects, Iterable):
        raise InvalidArgumentTypeError(
            f"'effects' must be an iterable of effects, got {type(effects).__name__}"
        )
    runs: list[_Run] = []
    saving: bool | None = None
    for i, effect in enumerate(effects):
        if type(effect) is SsmSnapshotSave or type(effect) is SaveBatch:
            if saving is not True:
                runs.append(_Run(i))
                saving = True
            runs[-1].saves.append(effect)
        elif type(effect) is SsmSnapshotRestore:
            if saving is not False:
                runs.append(_Run(i))
                saving = False
            runs[-1].restores.append(effect)
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


def _check_runs(
    pool: SnapshotPool, runs: list[_Run], ring_for: Callable[[int], SsmDecodeRing | None]
) -> None:
    """Check every effect of every run before the first copy; raise naming ``effects[i]``.

    Restores are checked against what their slots will hold once the saves
    before them in this call are written.
    """
    rows, slots = pool.num_sequences, pool.slots_per_sequence
    # (seq, slot) -> (position, ticket) it will hold once the earlier saves ran.
    pending: dict[tuple[int, int], tuple[int | None, int | None]] = {}
    has_restores = any(run.restores for run in runs)
    for run in runs:
        seen: dict[int, str] = {}
        i = run.first
        for piece in run.saves or run.restores:
            if type(piece) is SaveBatch and _batch_fits(piece, rows, slots, seen, ring_for):
                if has_restores:
                    keys = zip(piece.seqs, piece.slots, strict=True)
                    values = zip(piece.positions, piece.tickets, strict=True)
                    pending.update(zip(keys, values, strict=True))
                i += 1
                continue
            for name, seq, slot, position, ticket in _rows_of(piece, i):
                _check_row(name, seq, slot, rows, slots, seen)
                if type(piece) is SsmSnapshotRestore:
                    held = pending.get((seq, slot))
                    if held is None:
                        held = (pool.stored_position(seq, slot), pool.stored_ticket(seq, slot))
                    if held != (position, ticket):
                        what = (
                            "nothing" if held[1] is None else f"position {held[0]} ticket {held[1]}"
                        )
                        raise StaleSnapshotError(
                            f"refusing '{name}' {piece!r}, copying nothing: its slot holds {what}"
                        )
                    continue
                if ring_for(seq) is None:
                    raise InvalidArgumentError(
                        f"'rings' must hold a ring for every saved row, got none for seq "
                        f"{seq} ({name})"
                    )
                pending[seq, slot] = (position, ticket)
            i += 1


def _batch_fits(
    batch: SaveBatch,
    rows: int,
    slots: int,
    seen: dict[int, str],
    ring_for: Callable[[int], SsmDecodeRing | None],
) -> bool:
    """Whether a ``SaveBatch`` passes every check, tested at C speed (``False``: look closer)."""
    seqs = batch.seqs
    if not seqs:
        return True
    if max(seqs) >= rows or max(batch.slots) >= slots or len(set(seqs)) != len(seqs):
        return False
    if not seen.keys().isdisjoint(seqs) or None in map(ring_for, seqs):
        return False
    seen.update(dict.fromkeys(seqs, "an earlier SaveBatch"))
    return True


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
    _check_runs(pool, runs, ring_for)
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
