"""Effects: the copies the core decides on and a pool performs.

The ring and rollback code never touch a tensor; they return these values,
and the scheduler hands them to a ``SnapshotPool`` (``apply_effects``). Each
is a frozen, slotted, hashable, picklable value, and round-trips through a
plain dict so a scheduler can broadcast a step's effects to tensor-parallel
workers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, TypeAlias

from .._errors import (
    InvalidArgumentError,
    InvalidArgumentTypeError,
    check_non_negative_int,
    describe,
    shown,
)
from .effects import (
    SsmPrefixRestore,
    SsmPrefixSave,
    SsmSnapshotRestore,
    SsmSnapshotSave,
    SsmStateAccept,
    trusted_save,
)
from .save_batch import COLUMNS, LIVE, SaveBatch, int_column

__all__ = [
    "Effect",
    "SaveBatch",
    "SsmPrefixRestore",
    "SsmPrefixSave",
    "SsmSnapshotRestore",
    "SsmSnapshotSave",
    "SsmStateAccept",
    "effect_from_dict",
    "trusted_save",
]

Effect: TypeAlias = (
    SsmSnapshotSave
    | SsmSnapshotRestore
    | SsmStateAccept
    | SaveBatch
    | SsmPrefixSave
    | SsmPrefixRestore
)
"""Any effect the core returns."""

_SNAPSHOT_FIELDS: Final = ("seq", "slot", "token_position", "ticket")
_PREFIX_FIELDS: Final = ("seq", "slot", "length", "ticket")


def _keys(d: Mapping[str, object], fields: tuple[str, ...]) -> None:
    keys = set(d) - {"kind"}
    if keys != set(fields):
        missing = sorted(set(fields) - keys)
        extra = sorted(map(shown, keys - set(fields)))  # keys of any type, as shown
        raise InvalidArgumentError(
            f"'d' must have exactly the keys 'kind', {', '.join(map(repr, fields))}; "
            f"missing {missing}, unexpected [{', '.join(extra)}]"
        )


def _ints(d: Mapping[str, object], fields: tuple[str, ...]) -> list[int]:
    return [check_non_negative_int(f'd["{name}"]', d[name]) for name in fields]


def _optional_index(d: Mapping[str, object], name: str) -> int | None:
    value = d[name]
    return None if value is None else check_non_negative_int(f'd["{name}"]', value)


def _save_batch(d: Mapping[str, object]) -> SaveBatch:
    _keys(d, (*COLUMNS, "sources"))
    columns = []
    for name in (*COLUMNS, "sources"):
        value = d[name]
        if name == "sources" and value is None:
            continue
        if not isinstance(value, list | tuple):
            raise InvalidArgumentTypeError(
                f"'d[\"{name}\"]' must be a list of ints, got {type(value).__name__}"
            )
        least = LIVE if name == "sources" else 0
        columns.append(int_column(f'd["{name}"]', value, least=least))
    return SaveBatch(*columns)


_KINDS: Final = (
    SsmSnapshotSave.kind,
    SsmSnapshotRestore.kind,
    SsmStateAccept.kind,
    SaveBatch.kind,
    SsmPrefixSave.kind,
    SsmPrefixRestore.kind,
)


def effect_from_dict(d: Mapping[str, object]) -> Effect:
    """Rebuild an effect from ``effect.to_dict()``; bad input: ``InvalidArgumentError``."""
    if not isinstance(d, Mapping):
        raise InvalidArgumentTypeError(
            f"'d' must be a mapping from effect.to_dict(), got {describe(d)}"
        )
    try:  # read once, into a plain dict: a mapping that fails to read is named as ours
        d = dict(d)
    except Exception as error:
        raise InvalidArgumentError(
            f"'d' must be a mapping from effect.to_dict(), but reading it raised "
            f"{type(error).__name__}: {error}"
        ) from error
    given = d.get("kind")
    # Read as a plain str (a StrEnum's value too): an array's == is no bool, never compared.
    kind = str.__str__(given) if isinstance(given, str) else None
    if kind not in _KINDS:
        raise InvalidArgumentError(
            f"'d[\"kind\"]' must be one of {sorted(_KINDS)}, got {shown(given)}"
        )
    if kind == SsmSnapshotSave.kind:
        _keys(d, (*_SNAPSHOT_FIELDS, "source"))
        seq, slot, position, ticket = _ints(d, _SNAPSHOT_FIELDS)
        return SsmSnapshotSave(seq, slot, position, ticket, _optional_index(d, "source"))
    if kind == SsmSnapshotRestore.kind:
        _keys(d, _SNAPSHOT_FIELDS)
        return SsmSnapshotRestore(*_ints(d, _SNAPSHOT_FIELDS))
    if kind == SsmStateAccept.kind:
        # A v0.2 dict has no ticket: the accept is then unticketed, as it was.
        _keys(d, ("seq", "index", "ticket") if "ticket" in d else ("seq", "index"))
        seq, index = _ints(d, ("seq", "index"))
        accepted = _optional_index(d, "ticket") if "ticket" in d else None
        return SsmStateAccept(seq, index, accepted)
    if kind == SaveBatch.kind:
        return _save_batch(d)
    _keys(d, _PREFIX_FIELDS)  # the two prefix kinds are left
    prefix = SsmPrefixSave if kind == SsmPrefixSave.kind else SsmPrefixRestore
    return prefix(*_ints(d, _PREFIX_FIELDS))
