"""Effects: the copies the core decides on and a pool performs.

The ring and rollback code never touch a tensor; they return these values,
and the scheduler hands them to a ``SnapshotPool`` (``apply_effects``). Each
is a frozen, slotted, hashable, picklable value, and round-trips through a
plain dict so a scheduler can broadcast a step's effects to tensor-parallel
workers.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import ClassVar, Final, TypeAlias

import attrs

from ._errors import InvalidArgumentError, InvalidArgumentTypeError, check_non_negative_int

__all__ = ["Effect", "SaveBatch", "SsmSnapshotRestore", "SsmSnapshotSave", "effect_from_dict"]

_FIELDS: Final = ("seq", "slot", "token_position", "ticket")


def _non_negative_int(_instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if type(value) is not int or value < 0:  # effects are made per boundary: fast path first
        check_non_negative_int(attribute.name, value)


@attrs.frozen
class _SnapshotEffect:
    """The fields and dict form both effects share; the subclass says which copy it is.

    ``ticket`` is the one the ring minted when it recorded the snapshot: a
    pool restores a slot only when the slot holds exactly this ticket.
    """

    seq: int = attrs.field(validator=_non_negative_int)
    slot: int = attrs.field(validator=_non_negative_int)
    token_position: int = attrs.field(validator=_non_negative_int)
    ticket: int = attrs.field(validator=_non_negative_int)

    kind: ClassVar[str]

    def to_dict(self) -> dict[str, int | str]:
        """A plain dict (with a ``"kind"`` key) that ``effect_from_dict`` turns back into this."""
        return {
            "kind": self.kind,
            "seq": self.seq,
            "slot": self.slot,
            "token_position": self.token_position,
            "ticket": self.ticket,
        }


@attrs.frozen
class SsmSnapshotSave(_SnapshotEffect):
    """Copy row ``seq``'s live SSM state (after ``token_position`` tokens) into ``slot``.

    The slot is tagged with ``ticket`` once the copy succeeds.
    """

    kind: ClassVar[str] = "ssm_snapshot_save"


@attrs.frozen
class SsmSnapshotRestore(_SnapshotEffect):
    """Copy snapshot ``slot`` back into row ``seq``'s live state.

    Only when the slot holds exactly ``ticket`` (and ``token_position``):
    anything else is a ``StaleSnapshotError`` and nothing is copied.
    """

    kind: ClassVar[str] = "ssm_snapshot_restore"


_new = object.__new__
_set = object.__setattr__


def trusted_save(seq: int, slot: int, position: int, ticket: int) -> SsmSnapshotSave:
    """An ``SsmSnapshotSave`` from values the library already checked: no validators.

    The per-boundary path builds one per boundary row per step; the attrs
    validators would double its cost for ints that are known good.
    """
    save = _new(SsmSnapshotSave)
    _set(save, "seq", seq)
    _set(save, "slot", slot)
    _set(save, "token_position", position)
    _set(save, "ticket", ticket)
    return save


_COLUMNS: Final = ("seqs", "slots", "positions", "tickets")


def _column(name: str, values: object) -> tuple[int, ...]:
    """``values`` as a tuple of ints >= 0; anything else raises naming ``name[i]``."""
    if hasattr(values, "tolist"):  # a numpy array or a CPU torch tensor, without importing either
        values = values.tolist()
    if isinstance(values, str | bytes | Mapping) or not isinstance(values, Iterable):
        raise InvalidArgumentTypeError(
            f"'{name}' must be a sequence of ints >= 0, got {type(values).__name__}"
        )
    column = tuple(values)
    # C-speed checks first; the element loop runs only to name a bad one.
    if column and (set(map(type, column)) != {int} or min(column) < 0):
        for i, value in enumerate(column):
            check_non_negative_int(f"{name}[{i}]", value)
    return column


@attrs.frozen(init=False)
class SaveBatch:
    """One step's saves as a structure of arrays: ``seqs``, ``slots``, ``positions``, ``tickets``.

    ``snapshot_boundaries`` returns one; every pool's ``save`` and
    ``apply_effects`` take it wherever they take a sequence of saves, without
    building a value per row. ``len``, indexing and iteration give the rows as
    ``SsmSnapshotSave`` values, for code that wants them one by one.
    """

    seqs: tuple[int, ...]
    slots: tuple[int, ...]
    positions: tuple[int, ...]
    tickets: tuple[int, ...]

    kind: ClassVar[str] = "save_batch"

    def __init__(
        self,
        seqs: Iterable[int],
        slots: Iterable[int],
        positions: Iterable[int],
        tickets: Iterable[int],
    ) -> None:
        columns = [
            _column(name, v)
            for name, v in zip(_COLUMNS, (seqs, slots, positions, tickets), strict=True)
        ]
        lengths = {name: len(c) for name, c in zip(_COLUMNS, columns, strict=True)}
        if len(set(lengths.values())) > 1:
            raise InvalidArgumentError(
                f"'seqs', 'slots', 'positions' and 'tickets' must have one length, got {lengths}"
            )
        self.__attrs_init__(*columns)

    @classmethod
    def _trusted(
        cls, seqs: list[int], slots: list[int], positions: list[int], tickets: list[int]
    ) -> SaveBatch:
        """A batch from columns the library built from values it already checked."""
        batch = object.__new__(cls)
        batch.__attrs_init__(tuple(seqs), tuple(slots), tuple(positions), tuple(tickets))
        return batch

    def __len__(self) -> int:
        return len(self.seqs)

    def __getitem__(self, index: int) -> SsmSnapshotSave:
        return SsmSnapshotSave(
            self.seqs[index], self.slots[index], self.positions[index], self.tickets[index]
        )

    def __iter__(self) -> Iterator[SsmSnapshotSave]:
        for seq, slot, position, ticket in zip(
            self.seqs, self.slots, self.positions, self.tickets, strict=True
        ):
            yield SsmSnapshotSave(seq, slot, position, ticket)

    def to_dict(self) -> dict[str, str | list[int]]:
        """A plain dict (``"kind"`` and one list per column) for ``effect_from_dict``."""
        return {
            "kind": self.kind,
            "seqs": list(self.seqs),
            "slots": list(self.slots),
            "positions": list(self.positions),
            "tickets": list(self.tickets),
        }


Effect: TypeAlias = SsmSnapshotSave | SsmSnapshotRestore | SaveBatch
"""Any effect the core returns."""

_KINDS: Final[dict[str, type[SsmSnapshotSave] | type[SsmSnapshotRestore]]] = {
    "ssm_snapshot_save": SsmSnapshotSave,
    "ssm_snapshot_restore": SsmSnapshotRestore,
}


def _keys(d: Mapping[str, object], fields: tuple[str, ...]) -> None:
    keys = set(d) - {"kind"}
    if keys != set(fields):
        missing = sorted(set(fields) - keys)
        extra = sorted(keys - set(fields))
        raise InvalidArgumentError(
            f"'d' must have exactly the keys 'kind', {', '.join(map(repr, fields))}; "
            f"missing {missing}, unexpected {extra}"
        )


def effect_from_dict(d: Mapping[str, object]) -> Effect:
    """Rebuild an effect from ``effect.to_dict()``; bad input: ``InvalidArgumentError``."""
    if not isinstance(d, Mapping):
        raise InvalidArgumentTypeError(
            f"'d' must be a mapping from effect.to_dict(), got {d!r} of type {type(d).__name__}"
        )
    kind = d.get("kind")
    if kind == SaveBatch.kind:
        _keys(d, _COLUMNS)
        columns = []
        for name in _COLUMNS:
            value = d[name]
            if not isinstance(value, list | tuple):
                raise InvalidArgumentTypeError(
                    f"'d[\"{name}\"]' must be a list of ints >= 0, got {type(value).__name__}"
                )
            columns.append(_column(f'd["{name}"]', value))
        return SaveBatch(*columns)
    cls = _KINDS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        kinds = sorted([*_KINDS, SaveBatch.kind])
        raise InvalidArgumentError(f"'d[\"kind\"]' must be one of {kinds}, got {kind!r}")
    _keys(d, _FIELDS)
    values = [check_non_negative_int(f'd["{name}"]', d[name]) for name in _FIELDS]
    return cls(*values)
