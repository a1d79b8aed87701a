"""``snapshot_boundaries``: one decode step's snapshot decisions for every row, in one call.

The rules are ``snapshot_boundary_if_ssm``'s (a boundary token outside
thinking on an enabled ring records a snapshot); this module only makes them
cheap for a batch of 256-4,096 rows. The columns are coerced and checked
once (``columns``), the recording rows chosen at C speed, and the ring's
batched ``record_rows`` records them all or raises having changed nothing.
Arguments may be Python sequences, ``array.array`` or anything with
``tolist()`` (numpy arrays, CPU torch tensors): the core imports neither.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import compress

from .._errors import InvalidArgumentError, shown
from .columns import flag_column, int_column, one_length, rings_for
from .ring import SsmDecodeRing, record_rows
from .save_batch import SaveBatch

__all__ = ["Column", "snapshot_boundaries"]

#: An argument of ``snapshot_boundaries``: a sequence, an ``array.array``, or ``tolist()``-able.
Column = Sequence[int] | Sequence[bool] | object


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
    position_list = int_column("positions", positions)
    boundary = flag_column("is_boundary", is_boundary)
    thinking = flag_column("in_thinking", in_thinking)
    n = len(position_list)
    row_list: Sequence[int] = range(n) if rows is None else int_column("rows", rows)
    one_length(
        {
            "positions": n,
            "is_boundary": len(boundary),
            "in_thinking": len(thinking),
            "rows": len(row_list),
        }
    )
    if rows is not None and len(set(row_list)) != n:
        seen: dict[int, int] = {}
        for k, row in enumerate(row_list):
            first = seen.setdefault(row, k)
            if first != k:
                raise InvalidArgumentError(
                    f"'rows' must name each row once, got {shown(row)} at rows[{first}] and "
                    f"rows[{k}]"
                )
    ring_list = rings_for(rings, row_list, in_order=rows is None)
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

    def describe(j: int) -> tuple[str, str]:
        return f"'positions[{chosen[j]}]'", f"row {row_list[chosen[j]]}"

    kept, slots, tickets = record_rows(chosen_rings, chosen_positions, describe)
    if kept is not None:  # some rows' rings are disabled: they recorded nothing
        chosen_rows = list(map(chosen_rows.__getitem__, kept))
        chosen_positions = list(map(chosen_positions.__getitem__, kept))
    # Rows are distinct (checked above), so are their states and slots.
    return SaveBatch._trusted(chosen_rows, slots, chosen_positions, tickets, distinct=True)
