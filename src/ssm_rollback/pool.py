"""Snapshot pools: the protocol every copy backend implements, and the glue that drives them.

A pool owns the snapshot memory - ``slots_per_sequence`` slots for each of
``num_sequences`` rows, allocated up front - and copies between row ``seq``'s
live SSM state and snapshot ``(seq, slot)``. Copies are batched: one
``save`` (or ``restore``) call per step, one copy per state tensor inside it.

Every pool also remembers which ``token_position`` each slot last received
(``SlotTags``, shared by all backends), so a restore of a slot that holds
another position, or nothing, raises ``StaleSnapshotError`` before copying
anything: a bookkeeping bug can never silently restore the wrong state.
``apply_effects`` runs a step's effects through a pool and discards failed
saves from their rings, so no ring ever points at a slot that was not written.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Protocol, TypeAlias, final, runtime_checkable

import attrs

from ._effects import Effect, SsmSnapshotRestore, SsmSnapshotSave
from ._errors import (
    InvalidArgumentError,
    InvalidArgumentTypeError,
    StaleSnapshotError,
    check_non_negative_int,
)
from ._ring import SsmDecodeRing

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
    the named position raises ``StaleSnapshotError`` and copies nothing.
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

    def save(self, saves: Sequence[SsmSnapshotSave], /) -> SaveOutcome:
        """Copy each save's live row into its slot; report the saves that failed."""
        ...

    def restore(self, restores: Sequence[SsmSnapshotRestore], /) -> None:
        """Copy each restore's slot back into its live row, or raise and copy nothing."""
        ...

    def stored_position(self, seq: int, slot: int) -> int | None:
        """The ``token_position`` snapshot ``(seq, slot)`` holds; ``None`` if nothing."""
        ...


def _num_sequences_arg(value: int) -> int:
    return check_non_negative_int("num_sequences", value)


def _slots_arg(value: int) -> int:
    return check_non_negative_int("slots_per_sequence", value)


@final
@attrs.define(eq=False, repr=False, on_setattr=attrs.setters.NO_OP)
class SlotTags:
    """Which ``token_position`` each ``(seq, slot)`` holds: the stale-restore guard of every pool.

    A backend calls ``check_saves`` / ``check_restores`` before it copies
    anything (they raise, changing nothing, on bad or stale input), then
    ``mark_saved`` / ``mark_failed`` once it knows which saves happened.
    """

    _num_sequences: int = attrs.field(converter=_num_sequences_arg)
    _slots_per_sequence: int = attrs.field(converter=_slots_arg)
    _tags: list[int | None] = attrs.field(init=False)

    def __attrs_post_init__(self) -> None:
        self._tags = [None] * (self._num_sequences * self._slots_per_sequence)

    @property
    def num_sequences(self) -> int:
        """Rows tracked."""
        return self._num_sequences

    @property
    def slots_per_sequence(self) -> int:
        """Slots per row."""
        return self._slots_per_sequence

    def __repr__(self) -> str:
        held = sum(tag is not None for tag in self._tags)
        return (
            f"SlotTags(num_sequences={self._num_sequences}, "
            f"slots_per_sequence={self._slots_per_sequence}, held={held})"
        )

    def index(self, seq: int, slot: int) -> int:
        """Flat index of ``(seq, slot)``: ``seq * slots_per_sequence + slot``."""
        return seq * self._slots_per_sequence + slot

    def stored_position(self, seq: int, slot: int) -> int | None:
        """The position ``(seq, slot)`` holds, or ``None``; out-of-range ids raise."""
        seq = check_non_negative_int("seq", seq)
        slot = check_non_negative_int("slot", slot)
        self._check_ids("seq", seq, "slot", slot)
        return self._tags[self.index(seq, slot)]

    def check_saves(self, saves: Sequence[SsmSnapshotSave]) -> None:
        """Raise ``InvalidArgumentError`` unless ``saves`` is a valid batch; changes nothing."""
        self._check_batch("saves", saves, SsmSnapshotSave)

    def check_restores(self, restores: Sequence[SsmSnapshotRestore]) -> None:
        """Raise unless every restore names a slot holding its position; changes nothing."""
        self._check_batch("restores", restores, SsmSnapshotRestore)
        tags = self._tags
        stale = [r for r in restores if tags[self.index(r.seq, r.slot)] != r.token_position]
        if stale:
            described = "; ".join(
                f"(seq {r.seq}, slot {r.slot}) holds "
                f"{_held(tags[self.index(r.seq, r.slot)])}, not position {r.token_position}"
                for r in stale[:4]
            )
            more = f" (and {len(stale) - 4} more)" if len(stale) > 4 else ""
            raise StaleSnapshotError(
                f"refusing a batch of {len(restores)} restores, copying nothing: {described}{more}"
            )

    def mark_saved(self, saves: Iterable[SsmSnapshotSave]) -> None:
        """Record that each save's slot now holds its position."""
        tags, slots = self._tags, self._slots_per_sequence
        for save in saves:
            tags[save.seq * slots + save.slot] = save.token_position

    def mark_failed(self, saves: Iterable[SsmSnapshotSave]) -> None:
        """Record that each failed save's slot holds nothing (it may be half written)."""
        for save in saves:
            self._tags[self.index(save.seq, save.slot)] = None

    def _check_ids(self, seq_name: str, seq: int, slot_name: str, slot: int) -> None:
        if seq >= self._num_sequences:
            raise InvalidArgumentError(
                f"'{seq_name}' must be < num_sequences {self._num_sequences}, got {seq}"
            )
        if slot >= self._slots_per_sequence:
            raise InvalidArgumentError(
                f"'{slot_name}' must be < slots_per_sequence {self._slots_per_sequence}, got {slot}"
            )

    def _check_batch(
        self,
        name: str,
        batch: Sequence[SsmSnapshotSave] | Sequence[SsmSnapshotRestore],
        kind: type[SsmSnapshotSave] | type[SsmSnapshotRestore],
    ) -> None:
        if not isinstance(batch, Sequence):
            raise InvalidArgumentTypeError(
                f"'{name}' must be a sequence of {kind.__name__}, got {type(batch).__name__}"
            )
        rows: dict[int, int] = {}
        num_sequences, slots = self._num_sequences, self._slots_per_sequence
        for i, effect in enumerate(batch):
            if type(effect) is not kind:
                raise InvalidArgumentTypeError(
                    f"'{name}[{i}]' must be a {kind.__name__}, got {effect!r}"
                )
            seq = effect.seq
            if seq >= num_sequences or effect.slot >= slots:
                self._check_ids(f"{name}[{i}].seq", seq, f"{name}[{i}].slot", effect.slot)
            first = rows.setdefault(seq, i)
            if first != i:
                # A row's live state holds one position: two copies of it in one
                # batch mean the effects of two steps were applied at once.
                raise InvalidArgumentError(
                    f"'{name}' must name each row at most once per batch, got seq "
                    f"{seq} at {name}[{first}] and {name}[{i}]"
                )


def _held(tag: int | None) -> str:
    return "nothing" if tag is None else f"position {tag}"


Rings: TypeAlias = Sequence[SsmDecodeRing] | Mapping[int, SsmDecodeRing]
"""The scheduler's rings, indexed by ``seq``: a list by row, or a mapping from row."""


def _ring_lookup(rings: Rings) -> Callable[[int], SsmDecodeRing | None]:
    """``seq -> ring or None`` for either shape of ``rings`` (decided once, not per effect)."""
    if isinstance(rings, Mapping):
        return rings.get
    count = len(rings)
    return lambda seq: rings[seq] if seq < count else None


def apply_effects(pool: SnapshotPool, effects: Iterable[Effect], rings: Rings) -> SaveOutcome:
    """Run a step's effects through ``pool`` in order; discard failed saves from their rings.

    Consecutive saves go to the pool as one ``save`` call, consecutive
    restores as one ``restore`` call. A save that fails is discarded from
    ``rings[save.seq]``, so no ring points at a slot that was not written.
    Every effect is checked before the first copy; if the pool refuses a
    batch (say, a ``StaleSnapshotError``) the batches before it have been
    applied and the ones after it have not. Returns every failed save.
    """
    batch = tuple(effects)
    ring_for = _ring_lookup(rings)
    for i, effect in enumerate(batch):
        if type(effect) is SsmSnapshotSave:
            if ring_for(effect.seq) is None:
                raise InvalidArgumentError(
                    f"'rings' must hold a ring for every saved row, got none for seq "
                    f"{effect.seq} (effects[{i}])"
                )
        elif type(effect) is not SsmSnapshotRestore:
            raise InvalidArgumentTypeError(
                f"'effects[{i}]' must be an SsmSnapshotSave or SsmSnapshotRestore, got {effect!r}"
            )
    failed: list[SsmSnapshotSave] = []
    saves: list[SsmSnapshotSave] = []
    restores: list[SsmSnapshotRestore] = []

    def flush_saves() -> None:
        outcome = pool.save(saves)
        for save in outcome.failed:
            _forget(ring_for(save.seq), save)
        failed.extend(outcome.failed)
        saves.clear()

    def flush_restores() -> None:
        pool.restore(restores)
        restores.clear()

    for effect in batch:
        if isinstance(effect, SsmSnapshotSave):
            if restores:
                flush_restores()
            saves.append(effect)
        else:
            if saves:
                flush_saves()
            restores.append(effect)
    if saves:
        flush_saves()
    if restores:
        flush_restores()
    return SaveOutcome(tuple(failed))


def _forget(ring: SsmDecodeRing | None, save: SsmSnapshotSave) -> None:
    # The ring may already have moved on (a rollback truncated the entry):
    # then nothing points at the slot and there is nothing to forget.
    if ring is not None and ring.slot_for_position(save.token_position) == save.slot:
        ring.discard(save.token_position)
