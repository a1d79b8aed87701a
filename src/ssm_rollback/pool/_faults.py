"""Fault injection: the predicates ``fail_when`` and ``fail_shared_when`` take, checked."""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from .._core.effect_dict import SsmPrefixSave, SsmSnapshotSave
from .._errors import InvalidArgumentTypeError, shown

__all__ = ["FailPredicate", "SharedFailPredicate", "check_fail_predicate"]

#: A fault predicate: saves for which it returns true fail.
FailPredicate = Callable[[SsmSnapshotSave], bool]
#: The same for shared saves.
SharedFailPredicate = Callable[[SsmPrefixSave], bool]


def check_fail_predicate(
    predicate: object, takes: str = "SsmSnapshotSave"
) -> Callable[[object], bool] | None:
    """``predicate`` if it is callable or ``None``; else ``InvalidArgumentError``."""
    if predicate is None:
        return None
    if not callable(predicate):
        raise InvalidArgumentTypeError(
            f"'predicate' must be a callable taking an {takes}, or None, got "
            f"{shown(predicate)} of type {type(predicate).__name__}"
        )
    return cast(Callable[[object], bool], predicate)
