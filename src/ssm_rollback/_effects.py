"""Effects: the copies the core decides on and a pool performs.

The ring and rollback code never touch a tensor; they return these values,
and the scheduler hands them to a ``SnapshotPool`` (``apply_effects``). Each
is a frozen, slotted, hashable, picklable value, and round-trips through a
plain dict so a scheduler can broadcast a step's effects to tensor-parallel
workers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar, Final, TypeAlias

import attrs

from ._errors import InvalidArgumentError, InvalidArgumentTypeError, check_non_negative_int

__all__ = ["Effect", "SsmSnapshotRestore", "SsmSnapshotSave", "effect_from_dict"]

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


Effect: TypeAlias = SsmSnapshotSave | SsmSnapshotRestore
"""Any effect the core returns."""

_KINDS: Final[dict[str, type[SsmSnapshotSave] | type[SsmSnapshotRestore]]] = {
    "ssm_snapshot_save": SsmSnapshotSave,
    "ssm_snapshot_restore": SsmSnapshotRestore,
}


def effect_from_dict(d: Mapping[str, object]) -> Effect:
    """Rebuild an effect from ``effect.to_dict()``; bad input: ``InvalidArgumentError``."""
    if not isinstance(d, Mapping):
        raise InvalidArgumentTypeError(
            f"'d' must be a mapping from effect.to_dict(), got {d!r} of type {type(d).__name__}"
        )
    kind = d.get("kind")
    cls = _KINDS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise InvalidArgumentError(f"'d[\"kind\"]' must be one of {sorted(_KINDS)}, got {kind!r}")
    keys = set(d) - {"kind"}
    if keys != set(_FIELDS):
        missing = sorted(set(_FIELDS) - keys)
        extra = sorted(keys - set(_FIELDS))
        raise InvalidArgumentError(
            f"'d' must have exactly the keys 'kind', {', '.join(map(repr, _FIELDS))}; "
            f"missing {missing}, unexpected {extra}"
        )
    values = [check_non_negative_int(f'd["{name}"]', d[name]) for name in _FIELDS]
    return cls(*values)
