"""What the per-batch rules (``_batch_rules``) hand out and how they name a batch.

``Names`` says how a refusal names a batch and its elements; the
``Checked*`` tuples are the plain lists a batch that passed comes back as,
which a pool copies and tags from without looking again; ``check_kinds``
is the first check of every batch (its elements' type).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple, Protocol

import attrs

from .._errors import InvalidArgumentTypeError, shown

__all__ = [
    "ACCEPTS",
    "RESTORES",
    "SAVES",
    "CheckedAccepts",
    "CheckedRestores",
    "CheckedSaves",
    "IndexTable",
    "Names",
    "Staged",
    "check_kinds",
]

#: ``staged(seq)``: how many intermediate states row ``seq``'s buffer holds now.
Staged = Callable[[int], int]


@attrs.frozen
class Names:
    """How a refusal names a batch (``batch``, the argument) and its elements (``of(k)``).

    ``unit`` is what "at most once per" counts: a ``batch`` for a pool's own
    call, a ``run of one kind`` (one pool call) inside ``apply_effects``.
    """

    batch: str
    unit: str = "batch"
    element: Callable[[int], str] | None = None

    def of(self, k: int) -> str:
        """Element ``k``'s name: ``batch[k]`` unless ``element`` says otherwise."""
        return f"{self.batch}[{k}]" if self.element is None else self.element(k)


SAVES, RESTORES, ACCEPTS = Names("saves"), Names("restores"), Names("accepts")


class CheckedSaves(NamedTuple):
    """Saves that passed rules 1-4: rows, flat slot indices, and the tags they give their slots.

    ``sources`` is ``None`` when every row saves its live state, else one
    int per row: ``LIVE`` or an intermediate index.
    """

    rows: list[int]
    flat: list[int]
    positions: Sequence[int]
    tickets: Sequence[int]
    sources: list[int] | None


class CheckedRestores(NamedTuple):
    """Restores that passed rules 1-3 and 5: the rows and the flat slot indices they copy from."""

    rows: list[int]
    flat: list[int]


class CheckedAccepts(NamedTuple):
    """Accepts that passed rules 1, 2, 4 and 7: rows, the index each makes live, their tickets."""

    rows: list[int]
    indices: list[int]
    tickets: list[int | None]


class IndexTable(Protocol):
    """``table[seq][slot]``: the flat index of ``(seq, slot)``; ``IndexError`` past the pool."""

    def __getitem__(self, seq: int, /) -> Sequence[int]: ...


def check_kinds(batch: object, kind: type, names: Names) -> None:
    """``batch`` is a sequence of exactly ``kind`` (C speed; the loop only names a stranger)."""
    if not isinstance(batch, Sequence):
        raise InvalidArgumentTypeError(
            f"'{names.batch}' must be a sequence of {kind.__name__}, got {type(batch).__name__}"
        )
    if batch and set(map(type, batch)) != {kind}:
        k = next(k for k, effect in enumerate(batch) if type(effect) is not kind)
        raise InvalidArgumentTypeError(
            f"'{names.of(k)}' must be a {kind.__name__}, got {shown(batch[k])}"
        )
