"""Columns: the one coercion of a batched argument into a plain list, checked once.

A batched call takes each argument as a column - a Python sequence, an
``array.array``, or anything with ``tolist()`` (numpy arrays, CPU torch
tensors: the core imports neither). Every batched entry point turns its
columns into plain lists here, checks them at C speed (``set(map(type,
...))``, ``min``; a per-element loop only to name a bad element), and
trusts them afterwards. A bad column raises naming the argument, or the
element (``name[i]``), and nothing has changed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import cast

from .._errors import (
    InvalidArgumentError,
    InvalidArgumentTypeError,
    check_int_at_least,
    describe,
    shown,
)
from .ring import SsmDecodeRing

__all__ = ["as_list", "flag_column", "int_column", "int_value", "one_length", "rings_for"]

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


#: The array types whose ``tolist()`` gives exactly the elements their dtype says; a subclass
#: may not (a numpy masked array lists ``None`` for a masked element), so its are checked.
_PLAIN_ARRAYS = frozenset({"numpy.ndarray", "torch.Tensor", "array.array"})


def as_list(name: str, values: object, what: str = "values") -> tuple[list[object], type | None]:
    """The column as a list, and the type every element is known to have (or ``None``).

    ``what`` says what the elements are, for the message when ``values`` is no
    sequence at all (a ``str``, ``bytes`` or a mapping is not a column).
    """
    known = None
    if hasattr(values, "tolist"):  # numpy arrays, CPU torch tensors, array.array
        kind = type(values)
        if f"{kind.__module__}.{kind.__qualname__}" in _PLAIN_ARRAYS:
            dtype = getattr(values, "dtype", None) or getattr(values, "typecode", None)
            known = _KNOWN_TYPES.get(str(dtype))
        try:
            values = values.tolist()
        except Exception as error:  # a meta tensor, a broken array: named as ours
            raise InvalidArgumentError(
                f"'{name}' must be a sequence of {what}, but its tolist() raised "
                f"{type(error).__name__}: {error}"
            ) from error
    if isinstance(values, str | bytes | Mapping) or not isinstance(values, Sequence):
        raise InvalidArgumentTypeError(
            f"'{name}' must be a sequence of {what} (a list, an array.array, or an array with "
            f"tolist()), got {type(values).__name__}"
        )
    if type(values) is not list:
        try:
            return list(values), None
        except Exception as error:  # a sequence that fails to read: named as ours
            raise InvalidArgumentError(
                f"'{name}' must be a sequence of {what}, but reading it raised "
                f"{type(error).__name__}: {error}"
            ) from error
    return values, known


def _one_dimensional(name: str, values: object) -> None:
    """Refuse an array of two or more dimensions: its dtype says nothing about the elements
    of its ``tolist()`` (an ``(n, 1)`` bool tensor lists ``[False]``, which is truthy). A 0-d
    one is no sequence (``as_list``)."""
    shape = getattr(values, "shape", None)
    if shape is not None and hasattr(values, "tolist") and len(shape) > 1:
        raise InvalidArgumentError(
            f"'{name}' must be one-dimensional, one element per entry, got an array of shape "
            f"{tuple(shape)}"
        )


def int_column(name: str, values: object, *, least: int = 0) -> list[int]:
    """``values`` as a list of ints ``>= least`` (``least`` is 0 or -1); else raise naming it."""
    _one_dimensional(name, values)
    column, known = as_list(name, values, f"ints >= {least}")
    # C-speed checks (none per element for an integer array); the element loop
    # runs only to name a bad one.
    if not column or (
        (known is int or set(map(type, column)) == {int}) and min(cast(list[int], column)) >= least
    ):
        return cast(list[int], column)
    for i, value in enumerate(column):
        check_int_at_least(f"{name}[{i}]", value, least)
    # Every element passed: some are int subclasses (an IntEnum), taken as their plain value
    # as a single int argument is.
    return [int(cast(int, value)) for value in column]


def flag_column(name: str, values: object) -> list[object]:
    """``values`` as a list of bools (or 0 and 1: ``array.array`` and some integer tensors
    cannot hold bools); anything else raises naming the element."""
    _one_dimensional(name, values)
    column, known = as_list(name, values, "bools")
    if known is bool:
        return column
    types = set(map(type, column))
    if types and types != {bool} and not (types <= {bool, int} and set(column) <= {0, 1}):
        for i, value in enumerate(column):
            if type(value) not in (bool, int) or value not in (0, 1):
                raise InvalidArgumentTypeError(
                    f"'{name}[{i}]' must be a bool (or 0 or 1), got {shown(value)} of type "
                    f"{type(value).__name__}"
                )
    return column


def int_value(name: str, value: object, least: int = 0) -> int:
    """One int argument ``>= least``; a bool, a float or a smaller int raises naming it."""
    if type(value) is not int or value < least:
        if type(value) is not int:
            raise InvalidArgumentTypeError(
                f"'{name}' must be an int >= {least}, got {describe(value)}"
            )
        raise InvalidArgumentError(f"'{name}' must be an int >= {least}, got {shown(value)}")
    return value


def one_length(lengths: Mapping[str, int]) -> int:
    """The columns' common length; columns of different lengths raise, listing them."""
    if len(set(lengths.values())) > 1:
        raise InvalidArgumentError(f"the step's columns must have one length, got {dict(lengths)}")
    return next(iter(lengths.values()), 0)


def rings_for(rings: object, rows: Sequence[int], in_order: bool) -> list[SsmDecodeRing]:
    """The ring of each row, checked: ``rings`` is a sequence indexed by row or a mapping."""
    found: list[object]
    if in_order and type(rings) is list and len(rings) >= len(rows):
        found = rings[: len(rows)]  # the common case: every row of a list, in order
    elif isinstance(rings, Mapping | Sequence) and not isinstance(rings, str | bytes):
        found = _look_up(rings, rows)
    else:
        raise InvalidArgumentTypeError(
            f"'rings' must be a sequence of SsmDecodeRing indexed by row, or a mapping from "
            f"row, got {type(rings).__name__}"
        )
    if set(map(type, found)) - {SsmDecodeRing}:
        k = next(k for k, ring in enumerate(found) if type(ring) is not SsmDecodeRing)
        raise InvalidArgumentTypeError(
            f"'rings[{rows[k]}]' must be an SsmDecodeRing, got {shown(found[k])}"
        )
    return cast(list[SsmDecodeRing], found)


def _look_up(rings: Mapping[int, object] | Sequence[object], rows: Sequence[int]) -> list[object]:
    """Each row's entry of ``rings``; a missing row, or a lookup that raises, names the row."""
    if isinstance(rings, Sequence) and rows and max(rows) >= len(rings):
        row = next(r for r in rows if r >= len(rings))
        raise InvalidArgumentError(
            f"'rings' must hold a ring for every row, got {len(rings)} rings and row {shown(row)}"
        )
    look = rings.get if isinstance(rings, Mapping) else rings.__getitem__
    try:
        return list(map(look, rows))  # C speed; the loop below only names a failing row
    except Exception:  # a user's container: its own failure, named as ours
        for row in rows:
            try:
                look(row)
            except Exception as error:
                raise InvalidArgumentError(
                    f"'rings' must give the ring of row {row}, but looking it up raised "
                    f"{type(error).__name__}: {error}"
                ) from error
        raise
