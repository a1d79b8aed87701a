"""``snapshot_boundaries``: one decode step's snapshot decisions for every row, in one call.

The rules are ``snapshot_boundary_if_ssm``'s (a boundary token outside
thinking on an enabled ring records a snapshot); this module only makes them
cheap for a batch of 256-4,096 rows. The whole batch is validated first -
mostly at C speed, over the columns at once, then one plain loop over the
rows that record (``SsmDecodeRing._rows_ready``, which puts back what it
moved if it refuses) - and only then do the rings change, in one tight loop
(``SsmDecodeRing._record_rows``).
Arguments may be Python sequences, ``array.array`` or anything with
``tolist()`` (numpy arrays, CPU torch tensors): the core imports neither.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import compress
from operator import attrgetter, le
from typing import NoReturn, cast

from .._errors import (
    InvalidArgumentError,
    InvalidArgumentTypeError,
    OutOfOrderError,
    check_non_negative_int,
)
from .effect_dict import SaveBatch
from .ring import SsmDecodeRing

__all__ = ["snapshot_boundaries"]

#: An argument of ``snapshot_boundaries``: a sequence, an ``array.array``, or ``tolist()``-able.
Column = Sequence[int] | Sequence[bool] | object


# Element types a typed array's ``tolist()`` is known to give, by its dtype
# (numpy, torch) or typecode (``array.array``): a column of one of these skips
# the per-element type scan.
_INT_TYPES = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64")
_KNOWN_TYPES: dict[str, type] = {
    **dict.fromkeys(_INT_TYPES, int),
    **{f"torch.{name}": int for name in _INT_TYPES},
    **dict.fromkeys("bBhHiIlLqQ", int),
    "bool": bool,
    "torch.bool": bool,
}


def _as_list(name: str, values: object) -> tuple[list[object], type | None]:
    """The column as a list, and the type every element is known to have (or ``None``)."""
    known = None
    if hasattr(values, "tolist"):  # numpy arrays, CPU torch tensors, array.array
        dtype = getattr(values, "dtype", None) or getattr(values, "typecode", None)
        known = _KNOWN_TYPES.get(str(dtype))
        values = values.tolist()
    if isinstance(values, str | bytes | Mapping) or not isinstance(values, Sequence):
        raise InvalidArgumentTypeError(
            f"'{name}' must be a sequence (a list, an array.array, or an array with tolist()), "
            f"got {type(values).__name__}"
        )
    if type(values) is not list:
        return list(values), None
    return values, known


def _ints(name: str, column: tuple[list[object], type | None]) -> list[int]:
    values, known = column
    # C-speed checks (none per element for an integer array); the element loop
    # runs only to name a bad one.
    if values and (known is int or set(map(type, values)) == {int}):
        ints = cast(list[int], values)
        if min(ints) >= 0:
            return ints
    return [check_non_negative_int(f"{name}[{i}]", value) for i, value in enumerate(values)]


def _flags(name: str, column: tuple[list[object], type | None]) -> list[object]:
    # bool, or 0/1: ``array.array`` and some integer tensors cannot hold bools.
    values, known = column
    if known is bool:
        return values
    types = set(map(type, values))
    if types and types != {bool} and not (types <= {bool, int} and set(values) <= {0, 1}):
        for i, value in enumerate(values):
            if type(value) not in (bool, int) or value not in (0, 1):
                raise InvalidArgumentTypeError(
                    f"'{name}[{i}]' must be a bool (or 0 or 1), got {value!r} of type "
                    f"{type(value).__name__}"
                )
    return values


def _rings_for(rings: object, rows: Sequence[int], in_order: bool) -> list[SsmDecodeRing]:
    found: list[object]
    if isinstance(rings, Mapping):
        found = list(map(rings.get, rows))
    elif in_order and type(rings) is list and len(rings) >= len(rows):
        found = rings[: len(rows)]  # the common case: every row of a list, in order
    elif isinstance(rings, Sequence) and not isinstance(rings, str | bytes):
        count = len(rings)
        if rows and max(rows) >= count:
            row = next(r for r in rows if r >= count)
            raise InvalidArgumentError(
                f"'rings' must hold a ring for every row, got {count} rings and row {row}"
            )
        found = list(map(rings.__getitem__, rows))
    else:
        raise InvalidArgumentTypeError(
            f"'rings' must be a sequence of SsmDecodeRing indexed by row, or a mapping from "
            f"row, got {type(rings).__name__}"
        )
    if set(map(type, found)) - {SsmDecodeRing}:
        k = next(k for k, ring in enumerate(found) if type(ring) is not SsmDecodeRing)
        raise InvalidArgumentTypeError(
            f"'rings[{rows[k]}]' must be an SsmDecodeRing, got {found[k]!r}"
        )
    return cast(list[SsmDecodeRing], found)


def snapshot_boundaries(
    rings: Sequence[SsmDecodeRing] | Mapping[int, SsmDecodeRing],
    *,
    positions: Column,
    is_boundary: Column,
    in_thinking: Column,
    rows: Column | None = None,
) -> SaveBatch:
    """``snapshot_boundary_if_ssm`` for many rows at once: the saves of one decode step.

    Element ``k`` of ``positions``, ``is_boundary`` and ``in_thinking``
    belongs to row ``rows[k]`` (``rows`` defaults to ``0..n-1``), whose ring
    is ``rings[rows[k]]``. Rings change exactly as the per-row calls would
    change them, and the returned ``SaveBatch`` holds the same saves in row
    order. The whole batch is checked before any ring changes: a bad element
    raises naming its index (``positions[k]``, ``rows[k]``...), and nothing
    changed.
    """
    position_list = _ints("positions", _as_list("positions", positions))
    boundary = _flags("is_boundary", _as_list("is_boundary", is_boundary))
    thinking = _flags("in_thinking", _as_list("in_thinking", in_thinking))
    n = len(position_list)
    row_list: Sequence[int] = range(n) if rows is None else _ints("rows", _as_list("rows", rows))
    lengths = {
        "positions": n,
        "is_boundary": len(boundary),
        "in_thinking": len(thinking),
        "rows": len(row_list),
    }
    if len(set(lengths.values())) > 1:
        raise InvalidArgumentError(f"the step's columns must have one length, got {lengths}")
    if rows is not None and len(set(row_list)) != n:
        seen: dict[int, int] = {}
        for k, row in enumerate(row_list):
            first = seen.setdefault(row, k)
            if first != k:
                raise InvalidArgumentError(
                    f"'rows' must name each row once, got {row} at rows[{first}] and rows[{k}]"
                )
    ring_list = _rings_for(rings, row_list, in_order=rows is None)
    # The rows that record: boundary tokens outside thinking (C-speed selection;
    # no selection at all when every row records).
    thinking_rows = any(thinking)
    if not thinking_rows and boundary.count(True) == n:
        chosen: Sequence[int] = range(n)
        chosen_rings, chosen_positions, chosen_rows = ring_list, position_list, row_list
    else:
        if thinking_rows:
            chosen = [k for k in compress(range(n), boundary) if not thinking[k]]
        else:
            chosen = list(compress(range(n), boundary))
        chosen_rings = list(map(ring_list.__getitem__, chosen))
        chosen_positions = list(map(position_list.__getitem__, chosen))
        chosen_rows = chosen if rows is None else list(map(row_list.__getitem__, chosen))
    if not SsmDecodeRing._rows_ready(chosen_rings, chosen_positions):
        chosen, chosen_rings, chosen_positions, chosen_rows = _ready_rows(
            chosen, chosen_rings, chosen_positions, chosen_rows, row_list
        )
        if not SsmDecodeRing._rows_ready(chosen_rings, chosen_positions):
            _refuse_shared_rings(chosen, chosen_rings, chosen_positions, row_list)
    slots, tickets = SsmDecodeRing._record_rows(chosen_rings, chosen_positions)
    return SaveBatch._trusted(chosen_rows, slots, chosen_positions, tickets)


def _ready_rows(
    chosen: Sequence[int],
    rings: list[SsmDecodeRing],
    positions: list[int],
    rows: Sequence[int],
    row_list: Sequence[int],
) -> tuple[list[int], list[SsmDecodeRing], list[int], list[int]]:
    """The slow path of ``_rows_ready``: name a late position, or drop the disabled rings.

    Rule 3 for every chosen row before any ring changes (a disabled ring's
    newest position is always -1, so it never trips this); then the rows
    whose ring is disabled record nothing (rule 1).
    """
    newest = list(map(_NEWEST, rings))
    if any(map(le, positions, newest)):
        j = next(j for j, (p, q) in enumerate(zip(positions, newest, strict=True)) if p <= q)
        raise OutOfOrderError(
            f"'positions[{chosen[j]}]' must be greater than row {row_list[chosen[j]]}'s newest "
            f"live snapshot position {newest[j]}, got {positions[j]}; "
            f"truncate_after() its ring after a rollback"
        )
    enabled = list(map(_CAPACITY, rings))
    return (
        list(compress(chosen, enabled)),
        list(compress(rings, enabled)),
        list(compress(positions, enabled)),
        list(compress(rows, enabled)),
    )


def _refuse_shared_rings(
    chosen: Sequence[int],
    rings: list[SsmDecodeRing],
    positions: list[int],
    row_list: Sequence[int],
) -> NoReturn:
    """Name the row that records into a ring an earlier row of this step records into, at a
    position not past that row's: what is left once every row is past its ring's newest and
    every ring is enabled. The per-row calls would raise at that row; nothing changed here.
    """
    last: dict[SsmDecodeRing, tuple[int, int]] = {}  # ring -> (position, j) of its last row
    for j, (ring, position) in enumerate(zip(rings, positions, strict=True)):
        before = last.get(ring)
        if before is not None and position <= before[0]:
            k, earlier = chosen[j], chosen[before[1]]
            raise OutOfOrderError(
                f"'positions[{k}]' must be greater than {before[0]}, which row "
                f"{row_list[earlier]} records into the same ring earlier in this step "
                f"(positions[{earlier}]), got {position}; give every row its own ring"
            )
        last[ring] = (position, j)
    raise AssertionError("_rows_ready refused rows that _ready_rows passed")  # pragma: no cover


_NEWEST = attrgetter("_newest")
_CAPACITY = attrgetter("_capacity")
