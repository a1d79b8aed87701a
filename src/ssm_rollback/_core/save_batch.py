"""``SaveBatch``: one step's saves as columns, so no value is built per row."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import ClassVar, Final

import attrs

from .._errors import InvalidArgumentError, InvalidArgumentTypeError, shown
from . import columns
from .effects import SsmSnapshotSave, trusted_save

__all__ = ["COLUMNS", "LIVE", "SaveBatch", "int_column"]

COLUMNS: Final = ("seqs", "slots", "positions", "tickets")

#: In a ``sources`` column: the row's live state (``source=None`` of a single save).
LIVE: Final = -1


def int_column(name: str, values: object, *, least: int = 0) -> tuple[int, ...]:
    """``values`` (any iterable of ints ``>= least``, read once) as a tuple; bad ones raise."""
    if (
        isinstance(values, Iterable)
        and not isinstance(values, Sequence | Mapping)
        and not hasattr(values, "tolist")
    ):
        try:
            values = list(values)  # a generator, a set: read once, then checked as a column
        except Exception as error:  # the caller's iterable failed: named as ours
            raise InvalidArgumentError(
                f"'{name}' must be an iterable of ints, but reading it raised "
                f"{type(error).__name__}: {error}"
            ) from error
    return tuple(columns.int_column(name, values, least=least))


@attrs.frozen(init=False)
class SaveBatch:
    """One step's saves as a structure of arrays: ``seqs``, ``slots``, ``positions``, ``tickets``.

    ``snapshot_boundaries`` and ``commit_verified_batch`` return one; every
    pool's ``save`` and ``apply_effects`` take it wherever they take a
    sequence of saves, without building a value per row. ``sources`` is
    ``None`` when every row saves its live state, else one int per row: an
    intermediate index, or ``LIVE`` (-1). ``len``, indexing and iteration
    give the rows as ``SsmSnapshotSave`` values.
    """

    seqs: tuple[int, ...]
    slots: tuple[int, ...]
    positions: tuple[int, ...]
    tickets: tuple[int, ...]
    sources: tuple[int, ...] | None
    #: Each row's state and each slot at most once, as the library built it: a pool
    #: need not look again (STYLE 12). ``False`` for a batch made from the caller's columns,
    #: ``attrs.evolve`` included: it goes through ``__init__``, so a changed batch is checked.
    distinct: bool = attrs.field(default=False, eq=False, repr=False, init=False)

    kind: ClassVar[str] = "save_batch"

    def __init__(
        self,
        seqs: Iterable[int],
        slots: Iterable[int],
        positions: Iterable[int],
        tickets: Iterable[int],
        sources: Iterable[int] | None = None,
    ) -> None:
        given = (seqs, slots, positions, tickets)
        columns = [int_column(name, v) for name, v in zip(COLUMNS, given, strict=True)]
        lengths = {name: len(c) for name, c in zip(COLUMNS, columns, strict=True)}
        source_column = None if sources is None else int_column("sources", sources, least=LIVE)
        if source_column is not None:
            lengths["sources"] = len(source_column)
        if len(set(lengths.values())) > 1:
            raise InvalidArgumentError(f"the columns must have one length, got {lengths}")
        seq_column, slot_column, position_column, ticket_column = columns
        self.__attrs_init__(seq_column, slot_column, position_column, ticket_column, source_column)

    @classmethod
    def _trusted(
        cls,
        seqs: Sequence[int],
        slots: Sequence[int],
        positions: Sequence[int],
        tickets: Sequence[int],
        sources: list[int] | None = None,
        *,
        distinct: bool = False,
    ) -> SaveBatch:
        """A batch from columns the library built from values it already checked.

        ``distinct``: the builder guarantees each row's state (live, or one
        intermediate index) and each slot at most once.
        """
        batch = object.__new__(cls)
        batch.__attrs_init__(
            tuple(seqs),
            tuple(slots),
            tuple(positions),
            tuple(tickets),
            None if sources is None or set(sources) <= {LIVE} else tuple(sources),
        )
        object.__setattr__(batch, "distinct", distinct)
        return batch

    def __len__(self) -> int:
        return len(self.seqs)

    def source(self, index: int) -> int | None:
        """Row ``index``'s source: ``None`` (live) or an intermediate index."""
        return self._source(self._index(index))

    def __getitem__(self, index: int) -> SsmSnapshotSave:
        """Row ``index`` as an ``SsmSnapshotSave`` (an int, negative from the end; no slices)."""
        return self._row(self._index(index))

    def __iter__(self) -> Iterator[SsmSnapshotSave]:
        for index in range(len(self.seqs)):
            yield self._row(index)

    def _index(self, index: object) -> int:
        n = len(self.seqs)
        if type(index) is not int:
            raise InvalidArgumentTypeError(
                f"'index' must be an int row of the batch, got {shown(index)} of type "
                f"{type(index).__name__}"
            )
        if not -n <= index < n:
            raise InvalidArgumentError(f"'index' must be in [-{n}, {n}), got {shown(index)}")
        return index

    def _source(self, index: int) -> int | None:
        if self.sources is None:
            return None
        source = self.sources[index]
        return None if source == LIVE else source

    def _row(self, index: int) -> SsmSnapshotSave:
        return trusted_save(
            self.seqs[index],
            self.slots[index],
            self.positions[index],
            self.tickets[index],
            self._source(index),
        )

    def to_dict(self) -> dict[str, str | list[int] | None]:
        """A plain dict (``"kind"`` and one list per column) for ``effect_from_dict``."""
        return {
            "kind": self.kind,
            "seqs": list(self.seqs),
            "slots": list(self.slots),
            "positions": list(self.positions),
            "tickets": list(self.tickets),
            "sources": None if self.sources is None else list(self.sources),
        }
