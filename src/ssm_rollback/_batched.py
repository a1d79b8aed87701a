"""``snapshot_boundaries``: one decode step's snapshot decisions for every row, in one call.

The rules are ``snapshot_boundary_if_ssm``'s (a boundary token outside
thinking on an enabled ring records a snapshot); this module only makes them
cheap for a batch of 256-4,096 rows. The whole batch is validated first -
mostly at C speed, over the columns at once - and only then do the rings
change, in one tight loop over the rows that record (``SsmDecodeRing._record_rows``).
Arguments may be Python sequences, ``array.array`` or anything with
``tolist()`` (numpy arrays, CPU torch tensors): the core imports neither.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import compress
from operator import attrgetter, le
from typing import cast

from ._effects import SaveBatch
from ._errors import (
    InvalidArgumentError,
    InvalidArgumentTypeError,
    OutOfOrderError,
    check_non_negative_int,
)
from ._ring import SsmDecodeRing

__all__ = ["snapshot_boundaries"]

#: An argument of ``snapshot_boundaries``: a sequence, an ``array.array``, or ``tolist()``-able.
Column = Sequence[int] | Sequence[bool] | object


def _as_list(name: str, values: object) -> list[object]:
    if hasattr(values, "tolist"):  # numpy arrays, CPU torch tensors, array.array
        values = values.tolist()
    if isinstance(values, str | bytes | Mapping) or not isinstance(values, Sequence):
        raise InvalidArgumentTypeError(
            f"'{name}' must be a sequence (a list, an array.array, or an array with tolist()), "
            f"got {type(values).__name__}"
        )
    return values if type(values) is list else list(values)


def _ints(name: str, values: list[object]) -> list[int]:
    # One pass of C-speed checks; the element loop runs only to name a bad one.
    if values and set(map(type, values)) == {int}:
        ints = cast(list[int], values)
        if min(ints) >= 0:
            return ints
    return [check_non_negative_int(f"{name}[{i}]", value) for i, value in enumerate(values)]


def _flags(name: str, values: list[object]) -> list[object]:
    # bool, or 0/1: ``array.array`` and some integer tensors cannot hold bools.
    types = set(map(type, values))
    if types and types != {bool} and not (types <= {bool, int} and set(values) <= {0, 1}):
        for i, value in enumerate(values):
            if type(value) not in (bool, int) or value not in (0, 1):
                raise InvalidArgumentTypeError(
                    f"'{name}[{i}]' must be a bool (or 0 or 1), got {value!r} of type "
                    f"{type(value).__name__}"
                )
    return values


def _rings_for(rings: object, rows: list[int], in_order: bool) -> list[SsmDecodeRing]:
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
    row_list = list(range(n)) if rows is None else _ints("rows", _as_list("rows", rows))
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
    # The rows that record: boundary tokens outside thinking (C-speed selection).
    chosen = [k for k in compress(range(n), boundary) if not thinking[k]]
    pick = list if len(chosen) == n else lambda column: list(map(column.__getitem__, chosen))
    chosen_rings, chosen_positions = pick(ring_list), pick(position_list)
    # Rule 3 of the ring for every chosen row, before any ring changes. A
    # disabled ring's newest position is always -1, so it never trips this.
    newest = list(map(_NEWEST, chosen_rings))
    if any(map(le, chosen_positions, newest)):
        j = next(j for j, (p, q) in enumerate(zip(chosen_positions, newest, strict=True)) if p <= q)
        raise OutOfOrderError(
            f"'positions[{chosen[j]}]' must be greater than row {row_list[chosen[j]]}'s newest "
            f"live snapshot position {newest[j]}, got {chosen_positions[j]}; "
            f"truncate_after() its ring after a rollback"
        )
    seqs, slots, saved, tickets = SsmDecodeRing._record_rows(
        chosen_rings, chosen_positions, pick(row_list)
    )
    return SaveBatch._trusted(seqs, slots, saved, tickets)


_NEWEST = attrgetter("_newest")
