"""The one exception family every misuse of ssm-rollback raises.

Two failure channels (an expected shortfall, such as no live snapshot, is a
return value; only misuse raises) keep a scheduler's hot loop free of
``try``. Every message reads like an attrs validator's: the argument's name,
what was expected, what was given.
"""

from __future__ import annotations

__all__ = [
    "InvalidArgumentError",
    "InvalidArgumentTypeError",
    "InvariantError",
    "OutOfOrderError",
    "SsmRollbackError",
    "StaleSnapshotError",
    "UnknownSnapshotError",
    "check_non_negative_int",
]


class SsmRollbackError(Exception):
    """Base of every error ssm-rollback raises; catch this to catch them all."""


class InvalidArgumentError(SsmRollbackError, ValueError):
    """An argument has the wrong type or value; nothing was changed."""


class InvalidArgumentTypeError(InvalidArgumentError, TypeError):
    """An argument has the wrong type (also a ``TypeError``); nothing was changed.

    Not exported by name: catch ``InvalidArgumentError`` or ``TypeError``.
    """


class OutOfOrderError(SsmRollbackError, ValueError):
    """A snapshot was recorded at or before the newest live one.

    After a rollback the scheduler must ``truncate_after`` the ring before it
    records again; anything else would give two live snapshots whose order no
    longer matches the token stream.
    """


class UnknownSnapshotError(SsmRollbackError, LookupError):
    """A snapshot was named that the ring (or pool) does not hold."""


class InvariantError(SsmRollbackError, AssertionError):
    """An internal invariant is broken; ``check_valid()`` names which."""


class StaleSnapshotError(SsmRollbackError, RuntimeError):
    """A restore named a slot that holds another position, or nothing.

    The pool copies nothing when it raises this: a bookkeeping bug can never
    silently restore the wrong state.
    """


#: The longest rendering of a given value an error message quotes.
_SHOWN = 200


def shown(value: object) -> str:
    """``repr(value)`` for an error message, cut at 200 characters; never raises.

    An int past ``str()``'s digit limit, a value nested past the recursion
    limit, or one whose ``__repr__`` raises is described instead: the refusal
    quoting it must not become another error.
    """
    try:
        text = repr(value)
    except RecursionError:
        return f"a {type(value).__name__} nested too deep to print"
    except Exception as error:  # an int past the digit limit, or a __repr__ that raises
        if isinstance(value, int):
            return f"{'a negative' if value < 0 else 'an'} int of {abs(value).bit_length():,} bits"
        return f"a {type(value).__name__} whose repr() raised {type(error).__name__}"
    return text if len(text) <= _SHOWN else f"{text[:_SHOWN]}..."


def grouped(value: int) -> str:
    """An int for an error message with thousands separators (``1,024``), or described as
    ``shown`` describes it when it is past ``str()``'s digit limit."""
    try:
        return f"{value:,}"
    except ValueError:
        return shown(value)


def describe(value: object) -> str:
    """Render a given value for an error message: its repr and, if telling, its type."""
    if isinstance(value, bool) or not isinstance(value, int):
        return f"{shown(value)} of type {type(value).__name__}"
    return shown(value)


def check_non_negative_int(name: str, value: object) -> int:
    """Return ``value`` if it is an ``int`` (not ``bool``) ``>= 0``; else raise naming ``name``."""
    if type(value) is int and value >= 0:  # the common case, at once
        return value
    return check_int_at_least(name, value, 0)


def check_int_at_least(name: str, value: object, least: int) -> int:
    """Return ``value`` if it is an ``int`` (not ``bool``) ``>= least`` - an int subclass (an
    IntEnum, say) as its plain value; else raise naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentTypeError(f"'{name}' must be an int >= {least}, got {describe(value)}")
    if value < least:
        raise InvalidArgumentError(f"'{name}' must be an int >= {least}, got {shown(value)}")
    return int(value)
