"""How ``apply_effects`` splits a step's effects into pool calls and has each checked once.

Consecutive effects of one kind form a run: one ``save``, ``restore``,
``accept``, ``save_shared`` or ``restore_shared`` call. Every run is checked
before the first copy by the pool's own ``SharedChecks`` (its ``SlotTags``,
or a ``PoolTagsView`` of a third-party pool): the rules live there, and here
only what is
``apply_effects``' own - which effect each row came from (``Names``), a ring
for every saved row, and what ring and shared slots will hold once the
saves before a restore in the same step are written.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterable, Mapping, Sequence
from itertools import accumulate
from typing import Final, cast

import attrs

from .._core.effect_dict import (
    Effect,
    SaveBatch,
    SsmPrefixRestore,
    SsmPrefixSave,
    SsmSnapshotRestore,
    SsmSnapshotSave,
    SsmStateAccept,
)
from .._core.ring import SsmDecodeRing
from .._core.save_batch import LIVE
from .._errors import InvalidArgumentError, InvalidArgumentTypeError, StaleSnapshotError, shown
from ._batch_rules import replayed
from ._batch_values import CheckedAccepts, CheckedRestores, CheckedSaves, Names
from ._protocols import Rings
from ._shared_rules import CheckedSharedRestores, CheckedSharedSaves, SharedChecks

__all__ = ["Checked", "Run", "check_rings", "check_runs", "ring_lookup", "runs_of"]

#: One run, checked: what the pool's trusted path copies.
Checked = (
    CheckedSaves | CheckedRestores | CheckedAccepts | CheckedSharedSaves | CheckedSharedRestores
)


@attrs.define
class Run:
    """Consecutive effects of one kind, from ``effects[first]`` on: one call to the pool.

    One of the lists holds the run, the others are empty. A save run keeps
    its pieces - single saves and whole ``SaveBatch`` es - as given;
    ``columns()`` lays them out as the columns the checks take.
    """

    first: int
    saves: list[SsmSnapshotSave | SaveBatch] = attrs.field(factory=list)
    restores: list[SsmSnapshotRestore] = attrs.field(factory=list)
    accepts: list[SsmStateAccept] = attrs.field(factory=list)
    shared_saves: list[SsmPrefixSave] = attrs.field(factory=list)
    shared_restores: list[SsmPrefixRestore] = attrs.field(factory=list)
    #: How many of ``saves`` are whole ``SaveBatch`` es (counted as they come, not rescanned).
    batches: int = 0
    #: Where each element stands in the run as given, once some were left out (``keep``).
    offsets: list[int] | None = None

    def names(self) -> Names:
        """Row ``k`` of the run as ``effects[i]``, or ``effects[i][j]`` inside a ``SaveBatch``."""
        return Names("effects", "run of one kind", self._element)

    def keep_shared_saves(self, kept: list[int]) -> None:
        """Keep only the shared saves at ``kept``; each keeps its name (``effects[i]``)."""
        self.shared_saves = [self.shared_saves[k] for k in kept]
        self.offsets = kept

    def empty(self) -> bool:
        """Whether nothing is left in the run."""
        lists = (self.saves, self.restores, self.accepts, self.shared_saves, self.shared_restores)
        return not any(lists)

    def _element(self, k: int) -> str:
        if not self.saves:
            return f"effects[{self.first + (k if self.offsets is None else self.offsets[k])}]"
        starts = [0, *accumulate(len(p) if isinstance(p, SaveBatch) else 1 for p in self.saves)]
        piece = bisect_right(starts, k) - 1
        if isinstance(self.saves[piece], SaveBatch):
            return f"effects[{self.first + piece}][{k - starts[piece]}]"
        return f"effects[{self.first + piece}]"

    def columns(
        self,
    ) -> tuple[list[int], Sequence[int], Sequence[int], Sequence[int], list[int] | None]:
        """The save run as ``seqs, slots, positions, tickets, sources`` (``None``: all live)."""
        if len(self.saves) == 1 and isinstance(self.saves[0], SaveBatch):
            batch = self.saves[0]  # a step's saves: one list per column, no loop over the rows
            sources = None if batch.sources is None else list(batch.sources)
            # Only the rows as a list (the copier compares them with a list); the
            # other columns are read, never changed: their tuples serve as they are.
            return list(batch.seqs), batch.slots, batch.positions, batch.tickets, sources
        if not self.batches:
            # Single saves only: a comprehension per column, no appends.
            saves = cast(list[SsmSnapshotSave], self.saves)
            given = [s.source for s in saves]
            columns = (
                [s.seq for s in saves],
                [s.slot for s in saves],
                [s.token_position for s in saves],
                [s.ticket for s in saves],
            )
            if given.count(None) == len(given):
                return (*columns, None)
            return (*columns, [LIVE if s is None else s for s in given])
        seqs: list[int] = []
        slots: list[int] = []
        positions: list[int] = []
        tickets: list[int] = []
        sources_column: list[int] = []
        for piece in self.saves:
            if isinstance(piece, SaveBatch):
                seqs.extend(piece.seqs)
                slots.extend(piece.slots)
                positions.extend(piece.positions)
                tickets.extend(piece.tickets)
                sources_column.extend(piece.sources or (LIVE,) * len(piece.seqs))
            else:
                seqs.append(piece.seq)
                slots.append(piece.slot)
                positions.append(piece.token_position)
                tickets.append(piece.ticket)
                sources_column.append(LIVE if piece.source is None else piece.source)
        return seqs, slots, positions, tickets, sources_column

    def values(self) -> Sequence[SsmSnapshotSave] | SaveBatch | None:
        """The save run as one value whose row ``k`` is row ``k`` of its columns, if it is one."""
        if len(self.saves) == 1 and isinstance(self.saves[0], SaveBatch):
            return self.saves[0]
        if self.batches:
            return None
        return cast(list[SsmSnapshotSave], self.saves)

    def batch(self, checked: CheckedSaves, slots_per_sequence: int) -> SaveBatch:
        """The checked save run as one ``SaveBatch``, for a pool that takes only the protocol."""
        if len(self.saves) == 1 and isinstance(self.saves[0], SaveBatch):
            return self.saves[0]
        rows, flat, positions, tickets, sources = checked
        slots = [i - seq * slots_per_sequence for seq, i in zip(rows, flat, strict=True)]
        return SaveBatch._trusted(rows, slots, positions, tickets, sources)


#: The run list each kind of effect other than a save goes to (saves: see ``runs_of``).
_RUN_LISTS: Final[dict[type, str]] = {
    SsmSnapshotRestore: "restores",
    SsmStateAccept: "accepts",
    SsmPrefixSave: "shared_saves",
    SsmPrefixRestore: "shared_restores",
}


def runs_of(effects: Iterable[Effect]) -> list[Run]:
    """``effects`` split into runs of one kind: the calls the pool receives."""
    if isinstance(effects, str | bytes | Mapping) or not isinstance(effects, Iterable):
        raise InvalidArgumentTypeError(
            f"'effects' must be an iterable of effects, got {type(effects).__name__}"
        )
    runs: list[Run] = []
    kind: type | None = None
    add_save = None
    for i, effect in enumerate(effects):
        # A step's single saves are most of what comes one by one: the cheapest test first,
        # and the run's list bound once per run, not looked up per effect.
        if type(effect) is SsmSnapshotSave and add_save is not None:
            add_save(effect)
        elif isinstance(effect, SsmSnapshotSave | SaveBatch):
            if kind is not SsmSnapshotSave:
                runs.append(Run(i))
                kind = SsmSnapshotSave
                add_save = runs[-1].saves.append
            runs[-1].saves.append(effect)
            if isinstance(effect, SaveBatch):
                runs[-1].batches += 1
        elif (field := _RUN_LISTS.get(type(effect))) is not None:
            if kind is not type(effect):
                runs.append(Run(i))
                kind, add_save = type(effect), None
            getattr(runs[-1], field).append(effect)
        else:
            raise InvalidArgumentTypeError(
                f"'effects[{i}]' must be an SsmSnapshotSave, SaveBatch, SsmSnapshotRestore, "
                f"SsmStateAccept, SsmPrefixSave or SsmPrefixRestore, got {shown(effect)}"
            )
    return runs


def check_runs(
    checks: SharedChecks,
    runs: list[Run],
    rings: Rings,
    staged: Callable[[str], Callable[[int], int]],
) -> list[Checked]:
    """Every run checked by ``checks`` before the first copy; raise naming ``effects[i]``.

    ``staged(what)`` gives the pool's intermediate-state count per row,
    asked only when a run needs it (``what`` names the first effect that
    did), so a pool without verify buffers is refused only then.
    """
    # flat slot index -> (position, ticket) it will hold once the earlier saves ran.
    pending: dict[int, tuple[int, int]] = {}
    # shared slot -> (length, ticket), the same for the shared slots.
    shared: dict[int, tuple[int, int]] = {}
    # seq -> ticket of the last accept on that row earlier in this call (rule 7).
    accepted: dict[int, int] = {}
    # A later save run must also not repeat an earlier one's (rule 6 within the call).
    track = any(run.restores for run in runs) or sum(1 for run in runs if run.saves) > 1
    checked: list[Checked] = []
    for run in runs:
        names = run.names()
        if run.saves:
            seqs, slots, positions, tickets, sources = run.columns()
            counts = None
            if sources is not None and max(sources, default=LIVE) != LIVE:
                k = next(k for k, source in enumerate(sources) if source != LIVE)
                counts = staged(f"'{names.of(k)}' (a save from intermediate state {sources[k]})")
            values = run.values()
            saves = checks._check_save_columns(
                seqs,
                slots,
                positions,
                tickets,
                sources,
                names,
                counts,
                distinct=isinstance(values, SaveBatch) and values.distinct,
            )
            check_rings(saves.rows, rings, checks.num_sequences, names)
            if track:
                _check_saved_once(saves, pending, names)
                pending.update(zip(saves.flat, zip(positions, tickets, strict=True), strict=True))
            checked.append(saves)
        elif run.restores:
            checked.append(checks.check_restores(run.restores, names, pending))
        elif run.shared_saves:
            saved = checks.check_shared_saves(run.shared_saves, names, shared)
            tags = zip(saved.lengths, saved.tickets, strict=True)
            shared.update(zip(saved.slots, tags, strict=True))
            checked.append(saved)
        elif run.shared_restores:
            checked.append(checks.check_shared_restores(run.shared_restores, names, shared))
        else:
            counts = staged("SsmStateAccept effects")
            accepts = checks.check_accepts(run.accepts, names, counts)
            _check_accepted_once(accepts, accepted, names)
            checked.append(accepts)
    return checked


def _check_saved_once(
    checked: CheckedSaves, pending: dict[int, tuple[int, int]], names: Names
) -> None:
    """Rule 6 across the runs of one call: a save not newer than the one an earlier run of
    the call writes into its slot (the same save again, or an older step's after it)."""
    if not pending:
        return
    for k, (i, ticket) in enumerate(zip(checked.flat, checked.tickets, strict=True)):
        earlier = pending.get(i)
        if earlier is not None and replayed(ticket, earlier[1]):
            why = (
                "repeats a save earlier in the same call - a save applied twice"
                if ticket == earlier[1]
                else f"is older than the save earlier in the same call into its slot (ticket "
                f"{earlier[1]}) - an older step's save, applied late or twice"
            )
            raise StaleSnapshotError(
                f"refusing the effects, copying nothing: '{names.of(k)}' (seq "
                f"{checked.rows[k]}, ticket {ticket}) {why}"
            )


def _check_accepted_once(checked: CheckedAccepts, accepted: dict[int, int], names: Names) -> None:
    """Rule 7 across the runs of one call: the tags know only the accepts of earlier calls."""
    for k, (seq, ticket) in enumerate(zip(checked.rows, checked.tickets, strict=True)):
        if ticket is None:
            continue
        last = accepted.get(seq)
        if replayed(ticket, last):
            raise StaleSnapshotError(
                f"refusing the effects, copying nothing: '{names.of(k)}' (seq {seq}, ticket "
                f"{ticket}) is not newer than an accept before it in the same call (ticket "
                f"{last}) - a verify step's accept applied twice, or an older step's"
            )
        accepted[seq] = ticket


def ring_lookup(rings: Rings) -> Callable[[int], SsmDecodeRing | None]:
    """``seq -> ring or None`` for either shape of ``rings`` (decided once, not per effect);
    an entry that is neither raises naming ``rings[seq]``. Asked only of the rows a failed
    save or a dispute names, never per effect."""
    if isinstance(rings, Mapping):
        get: Callable[[int], object] = rings.get
    elif not isinstance(rings, Sequence) or isinstance(rings, str | bytes):
        raise InvalidArgumentTypeError(
            f"'rings' must be a sequence of SsmDecodeRing indexed by seq, or a mapping from "
            f"seq, got {type(rings).__name__}"
        )
    else:
        count = len(rings)
        get = lambda seq: rings[seq] if seq < count else None  # noqa: E731

    def ring_for(seq: int) -> SsmDecodeRing | None:
        ring = get(seq)
        if ring is None or type(ring) is SsmDecodeRing:
            return ring
        raise InvalidArgumentTypeError(
            f"'rings[{seq}]' must be an SsmDecodeRing (or None), got {type(ring).__name__}"
        )

    return ring_for


def check_rings(rows: list[int], rings: Rings, num_sequences: int | None, names: Names) -> None:
    """A ring for every saved row, so a failed save can be discarded from it.

    ``num_sequences``: the pool's rows, which ``rows`` were checked against
    (``None`` before any pool has seen them: the scheduler's check of a step
    before it is broadcast)."""
    if isinstance(rings, Mapping):
        if all(map(rings.__contains__, rows)):
            return
    # The rows were checked against the pool: as many rings as rows need no scan.
    elif (
        (num_sequences is not None and len(rings) >= num_sequences)
        or not rows
        or max(rows) < len(rings)
    ):
        return
    ring_for = ring_lookup(rings)
    k = next(k for k, seq in enumerate(rows) if ring_for(seq) is None)
    raise InvalidArgumentError(
        f"'rings' must hold a ring for every saved row, got none for seq {rows[k]} ({names.of(k)})"
    )
