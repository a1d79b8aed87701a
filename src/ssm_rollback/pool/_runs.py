"""How ``apply_effects`` splits a step's effects into pool calls and checks them all first.

Consecutive effects of one kind form a run: one ``save``, ``restore`` or
``accept`` call. A save run is gathered into columns as the effects are
read and checked over the columns at C speed (row by row only to name a bad
one); restores are checked against what their slots will hold once the
saves before them in the same call are written; accepts and
intermediate-sourced saves against the intermediate states the pool holds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Protocol

import attrs

from .._core.effect_dict import (
    Effect,
    SaveBatch,
    SsmSnapshotRestore,
    SsmSnapshotSave,
    SsmStateAccept,
)
from .._core.ring import SsmDecodeRing
from .._core.save_batch import LIVE
from .._errors import InvalidArgumentError, InvalidArgumentTypeError, StaleSnapshotError

__all__ = ["Run", "check_runs", "runs_of"]

Rings = Sequence[SsmDecodeRing] | Mapping[int, SsmDecodeRing]


class _Pool(Protocol):
    @property
    def num_sequences(self) -> int: ...
    @property
    def slots_per_sequence(self) -> int: ...
    def stored_position(self, seq: int, slot: int) -> int | None: ...
    def stored_ticket(self, seq: int, slot: int) -> int | None: ...


@attrs.define
class Run:
    """Consecutive effects of one kind: one call to the pool. Two of the three lists are empty.

    A save run keeps its rows as columns, filled as the effects are read,
    and its pieces (single saves and whole ``SaveBatch`` es) only to name a
    bad one; ``batch()`` hands the pool one ``SaveBatch``.
    """

    first: int
    saves: list[SsmSnapshotSave | SaveBatch] = attrs.field(factory=list)
    restores: list[SsmSnapshotRestore] = attrs.field(factory=list)
    accepts: list[SsmStateAccept] = attrs.field(factory=list)
    seqs: list[int] = attrs.field(factory=list)
    slots: list[int] = attrs.field(factory=list)
    positions: list[int] = attrs.field(factory=list)
    tickets: list[int] = attrs.field(factory=list)
    sources: list[int] = attrs.field(factory=list)

    def batch(self) -> SaveBatch:
        # Every value was checked when its effect was made, and the rows
        # against the pool in check_runs: the pool need not look again.
        return SaveBatch._trusted(self.seqs, self.slots, self.positions, self.tickets, self.sources)


def runs_of(effects: Iterable[Effect]) -> list[Run]:
    """``effects`` split into runs of one kind: the calls the pool receives."""
    if isinstance(effects, str | bytes | Mapping) or not isinstance(effects, Iterable):
        raise InvalidArgumentTypeError(
            f"'effects' must be an iterable of effects, got {type(effects).__name__}"
        )
    runs: list[Run] = []
    run = Run(-1)
    kind: type | None = None
    # Bound once per run, not per effect: this loop sees every save of a step.
    add_save = run.saves.append
    add_seq = add_slot = add_position = add_ticket = add_source = run.seqs.append
    for i, effect in enumerate(effects):
        if isinstance(effect, SsmSnapshotSave | SaveBatch):
            if kind is not SsmSnapshotSave:
                runs.append(run := Run(i))
                kind = SsmSnapshotSave
                add_save, add_seq, add_slot = run.saves.append, run.seqs.append, run.slots.append
                add_position, add_ticket = run.positions.append, run.tickets.append
                add_source = run.sources.append
            add_save(effect)
            if isinstance(effect, SaveBatch):
                run.seqs.extend(effect.seqs)
                run.slots.extend(effect.slots)
                run.positions.extend(effect.positions)
                run.tickets.extend(effect.tickets)
                run.sources.extend(effect.sources or (LIVE,) * len(effect.seqs))
                continue
            add_seq(effect.seq)
            add_slot(effect.slot)
            add_position(effect.token_position)
            add_ticket(effect.ticket)
            add_source(LIVE if effect.source is None else effect.source)
        elif isinstance(effect, SsmSnapshotRestore):
            if kind is not SsmSnapshotRestore:
                runs.append(run := Run(i))
                kind = SsmSnapshotRestore
            run.restores.append(effect)
        elif isinstance(effect, SsmStateAccept):
            if kind is not SsmStateAccept:
                runs.append(run := Run(i))
                kind = SsmStateAccept
            run.accepts.append(effect)
        else:
            raise InvalidArgumentTypeError(
                f"'effects[{i}]' must be an SsmSnapshotSave, SaveBatch, SsmSnapshotRestore or "
                f"SsmStateAccept, got {effect!r}"
            )
    return runs


def check_runs(
    pool: _Pool,
    runs: list[Run],
    rings: Rings,
    ring_for: Callable[[int], SsmDecodeRing | None],
    staged: Callable[[int], int] | None,
) -> None:
    """Check every effect of every run before the first copy; raise naming ``effects[i]``.

    ``staged(seq)`` is how many intermediate states row ``seq`` holds
    (``None``: the pool keeps none).
    """
    rows, slots = pool.num_sequences, pool.slots_per_sequence
    # (seq, slot) -> (position, ticket) it will hold once the earlier saves ran.
    pending: dict[tuple[int, int], tuple[int | None, int | None]] = {}
    has_restores = any(run.restores for run in runs)
    for run in runs:
        if run.saves:
            if not _saves_fit(run, rows, slots, rings):
                _name_bad_save(run, rows, slots, ring_for)
            if max(run.sources, default=LIVE) != LIVE:
                _check_staged(run, staged)
            if has_restores:
                keys = zip(run.seqs, run.slots, strict=True)
                values = zip(run.positions, run.tickets, strict=True)
                pending.update(zip(keys, values, strict=True))
        elif run.restores:
            _check_restores(pool, run, pending)
        else:
            seen: dict[object, str] = {}
            for i, accept in enumerate(run.accepts, start=run.first):
                name = f"effects[{i}]"
                _check_row(name, accept.seq, 0, rows, 1, seen)
                _check_index(name, accept.seq, accept.index, staged)


def _check_restores(
    pool: _Pool, run: Run, pending: dict[tuple[int, int], tuple[int | None, int | None]]
) -> None:
    rows, slots = pool.num_sequences, pool.slots_per_sequence
    seen: dict[object, str] = {}
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


def _check_staged(run: Run, staged: Callable[[int], int] | None) -> None:
    """Every intermediate-sourced save of ``run`` names a state its row holds."""
    k = 0
    for i, piece in enumerate(run.saves, start=run.first):
        for j in range(len(piece) if isinstance(piece, SaveBatch) else 1):
            source = run.sources[k]
            if source != LIVE:
                name = f"effects[{i}][{j}]" if isinstance(piece, SaveBatch) else f"effects[{i}]"
                _check_index(name, run.seqs[k], source, staged)
            k += 1


def _check_index(name: str, seq: int, index: int, staged: Callable[[int], int] | None) -> None:
    if staged is None:
        raise InvalidArgumentError(
            f"'pool' must keep intermediate states for '{name}' (an accept, or a save from "
            f"intermediate state {index}), and this pool keeps none"
        )
    held = staged(seq)
    if index >= held:
        raise StaleSnapshotError(
            f"refusing '{name}', copying nothing: it names intermediate state {index} of seq "
            f"{seq}, which holds {held}"
        )


def _saves_fit(run: Run, rows: int, slots: int, rings: Rings) -> bool:
    """Whether a save run passes every check, tested at C speed (``False``: look closer)."""
    seqs = run.seqs
    if not seqs:
        return True
    if max(seqs) >= rows or max(run.slots) >= slots:
        return False
    count = len(seqs)
    if len(set(seqs)) != count and not (
        len(set(zip(seqs, run.sources, strict=True))) == count
        and len(set(zip(seqs, run.slots, strict=True))) == count
    ):
        return False
    if isinstance(rings, Mapping):
        return all(map(rings.__contains__, seqs))
    return max(seqs) < len(rings)


def _name_bad_save(
    run: Run, rows: int, slots: int, ring_for: Callable[[int], SsmDecodeRing | None]
) -> None:
    """Raise naming the first save of ``run`` that fails a check."""
    seen: dict[object, str] = {}
    k = 0
    for i, piece in enumerate(run.saves, start=run.first):
        if isinstance(piece, SaveBatch):
            pairs = list(zip(piece.seqs, piece.slots, strict=True))
            names = [f"effects[{i}][{j}]" for j in range(len(pairs))]
        else:
            pairs, names = [(piece.seq, piece.slot)], [f"effects[{i}]"]
        for name, (seq, slot) in zip(names, pairs, strict=True):
            # A row's state (live, or one intermediate index) once; a slot once.
            _check_row(name, seq, slot, rows, slots, seen, (seq, run.sources[k]), "row's state")
            _check_row(name, seq, slot, rows, slots, seen, (seq, "slot", slot), "slot")
            k += 1
            if ring_for(seq) is None:
                raise InvalidArgumentError(
                    f"'rings' must hold a ring for every saved row, got none for seq {seq} ({name})"
                )


def _check_row(
    name: str,
    seq: int,
    slot: int,
    rows: int,
    slots: int,
    seen: dict[object, str],
    key: object = None,
    what: str = "row",
) -> None:
    if seq >= rows:
        raise InvalidArgumentError(
            f"'{name}.seq' must be < the pool's num_sequences {rows}, got {seq}"
        )
    if slot >= slots:
        raise InvalidArgumentError(
            f"'{name}.slot' must be < the pool's slots_per_sequence {slots}, got {slot}"
        )
    first = seen.setdefault(seq if key is None else key, name)
    if first != name:
        raise InvalidArgumentError(
            f"'effects' must name each {what} at most once per run of one kind, got seq "
            f"{seq}{'' if what != 'slot' else f' slot {slot}'} at {first} and {name}"
        )
