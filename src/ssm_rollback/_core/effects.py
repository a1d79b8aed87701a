"""The single effects: a save, a restore, and a verify step's accept.

Each is a frozen, slotted, hashable, picklable value with a dict form
(``_effects.effect_from_dict`` rebuilds it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import attrs

from .._errors import InvalidArgumentError, InvalidArgumentTypeError, check_non_negative_int, shown

__all__ = [
    "SsmPrefixRestore",
    "SsmPrefixSave",
    "SsmSnapshotRestore",
    "SsmSnapshotSave",
    "SsmStateAccept",
    "slot_setter",
    "trusted_save",
]


def _non_negative_int(_instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if type(value) is not int or value < 0:  # effects are made per boundary: fast path first
        check_non_negative_int(attribute.name, value)


def _positive_int(_instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    """A prefix's length: a shared state stands after at least one token (none is no prefix)."""
    if (type(value) is not int or value < 1) and check_non_negative_int(attribute.name, value) < 1:
        raise InvalidArgumentError(
            f"'{attribute.name}' must be an int >= 1 (a prefix of at least one token), got 0"
        )


def _source(_instance: object, attribute: attrs.Attribute[int | None], value: int | None) -> None:
    if value is not None and (type(value) is not int or value < 0):
        if type(value) is not int:
            raise InvalidArgumentTypeError(
                f"'source' must be None (the live state) or an intermediate index >= 0, "
                f"got {shown(value)} of type {type(value).__name__}"
            )
        check_non_negative_int(attribute.name, value)


def _optional_ticket(
    _instance: object, attribute: attrs.Attribute[int | None], value: int | None
) -> None:
    if value is not None and (type(value) is not int or value < 0):
        if type(value) is not int:
            raise InvalidArgumentTypeError(
                f"'ticket' must be None or a ticket (an int >= 0), got {shown(value)} of type "
                f"{type(value).__name__}"
            )
        check_non_negative_int(attribute.name, value)


@attrs.frozen
class _SnapshotEffect:
    """The fields and dict form both snapshot effects share; the subclass says which copy.

    ``ticket`` is the one the ring minted when it recorded the snapshot: a
    pool restores a slot only when the slot holds exactly this ticket.
    """

    seq: int = attrs.field(validator=_non_negative_int)
    slot: int = attrs.field(validator=_non_negative_int)
    token_position: int = attrs.field(validator=_non_negative_int)
    ticket: int = attrs.field(validator=_non_negative_int)

    kind: ClassVar[str]

    def to_dict(self) -> dict[str, int | str | None]:
        """A plain dict (with a ``"kind"`` key) that ``effect_from_dict`` turns back into this."""
        return {"kind": self.kind, **attrs.asdict(self, recurse=False)}


@attrs.frozen
class SsmSnapshotSave(_SnapshotEffect):
    """Copy row ``seq``'s SSM state after ``token_position`` tokens into ``slot``.

    ``source`` says where that state is: ``None``, the row's live state (the
    plain decode path); an ``int``, that index of the row's intermediate
    buffer (a verify step, SPEC 9: index ``j`` holds the state after
    ``first_position + j`` tokens). The slot is tagged with ``ticket`` once
    the copy succeeds.
    """

    source: int | None = attrs.field(default=None, validator=_source)

    kind: ClassVar[str] = "ssm_snapshot_save"


@attrs.frozen
class SsmSnapshotRestore(_SnapshotEffect):
    """Copy snapshot ``slot`` back into row ``seq``'s live state.

    Only when the slot holds exactly ``ticket`` (and ``token_position``):
    anything else is a ``StaleSnapshotError`` and nothing is copied.
    """

    kind: ClassVar[str] = "ssm_snapshot_restore"


@attrs.frozen
class SsmStateAccept:
    """Make intermediate state ``index`` of row ``seq`` its live state (after a verify step).

    Index ``j`` is the state after ``first_position + j`` tokens; a verify
    step that accepted ``n`` drafts accepts index ``n``. A pool refuses an
    index its intermediate buffer does not hold for the row.
    """

    seq: int = attrs.field(validator=_non_negative_int)
    index: int = attrs.field(validator=_non_negative_int)
    #: Minted by the verify step's plan (SPEC 15): a pool refuses an accept
    #: whose ticket is not newer than the last one it accepted on the row (a
    #: step applied twice, or an older step's), so the live state never moves
    #: back. ``None`` (an accept built by hand) is not checked.
    ticket: int | None = attrs.field(default=None, validator=_optional_ticket)

    kind: ClassVar[str] = "ssm_state_accept"

    def to_dict(self) -> dict[str, int | str | None]:
        """A plain dict (with a ``"kind"`` key) that ``effect_from_dict`` turns back into this."""
        return {"kind": self.kind, "seq": self.seq, "index": self.index, "ticket": self.ticket}


@attrs.frozen
class _PrefixEffect:
    """The fields and dict form both shared-slot effects share; the subclass says which copy.

    ``slot`` is a shared slot of the pool (a region apart from every row's
    ring slots), ``length`` the absolute token count (prompt included) the
    state stands after, and ``ticket`` the one ``PrefixSnapshotIndex`` minted
    when it placed the prefix there: a pool restores a shared slot only when
    it holds exactly this ticket.
    """

    seq: int = attrs.field(validator=_non_negative_int)
    slot: int = attrs.field(validator=_non_negative_int)
    length: int = attrs.field(validator=_positive_int)
    ticket: int = attrs.field(validator=_non_negative_int)

    kind: ClassVar[str]

    def to_dict(self) -> dict[str, int | str | None]:
        """A plain dict (with a ``"kind"`` key) that ``effect_from_dict`` turns back into this."""
        return {"kind": self.kind, **attrs.asdict(self, recurse=False)}


@attrs.frozen
class SsmPrefixSave(_PrefixEffect):
    """Share row ``seq``'s live state, standing after ``length`` tokens, in shared ``slot``.

    Apply it while the live state stands exactly there: right after the
    prefill chunk that ends at ``length``, or during decode at that length.
    """

    kind: ClassVar[str] = "ssm_prefix_save"


@attrs.frozen
class SsmPrefixRestore(_PrefixEffect):
    """Copy shared ``slot`` into row ``seq``'s live state: a prefix hit of ``length`` tokens.

    Only when the shared slot holds exactly ``ticket``: anything else is a
    ``StaleSnapshotError`` and nothing is copied.
    """

    kind: ClassVar[str] = "ssm_prefix_restore"


_new = object.__new__


def slot_setter(cls: type, name: str) -> Callable[[object, object], None]:
    """The setter of ``cls``'s slot ``name``, for building a frozen value the library checked."""
    # The slot's own descriptor: about a third cheaper than object.__setattr__,
    # which looks the name up again on every call.
    for klass in cls.__mro__:
        if name in vars(klass):
            setter: Callable[[object, object], None] = vars(klass)[name].__set__
            return setter
    raise AssertionError(f"{cls.__name__} has no slot {shown(name)}")  # pragma: no cover


_set_seq, _set_slot, _set_position, _set_ticket, _set_source = (
    slot_setter(SsmSnapshotSave, name)
    for name in ("seq", "slot", "token_position", "ticket", "source")
)


def trusted_save(
    seq: int, slot: int, position: int, ticket: int, source: int | None = None
) -> SsmSnapshotSave:
    """An ``SsmSnapshotSave`` from values the library already checked: no validators.

    The per-boundary path builds one per boundary row per step; the attrs
    validators would double its cost for ints that are known good.
    """
    save: SsmSnapshotSave = _new(SsmSnapshotSave)
    _set_seq(save, seq)
    _set_slot(save, slot)
    _set_position(save, position)
    _set_ticket(save, ticket)
    _set_source(save, source)
    return save
