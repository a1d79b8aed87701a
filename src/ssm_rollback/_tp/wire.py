"""A step's effects as int64 words: the wire format of ``ssm_rollback.distributed``.

Pure Python, no torch: ``encode`` turns effects into words, ``decode`` turns
words back into effects, and the tensor plumbing lives in ``_wire_channel``.
Rules of the format (version 5):

1. The payload starts with ``MAGIC`` (which carries ``VERSION``) and the
   record count; every record starts with its kind code and its row count
   ``n``, then holds ``n`` words per column: a record is columns, so a
   receiver checks and builds it at C speed, never word by word.
2. A run of consecutive single effects of one kind is one record:
   ``SAVES`` (columns ``seqs slots positions tickets sources``),
   ``RESTORES`` (``seqs slots positions tickets``), ``ACCEPTS`` (``seqs
   indices tickets``), ``PREFIX_SAVES`` and ``PREFIX_RESTORES`` (``seqs slots
   lengths tickets``: shared slots, SPEC 13). They decode as that many
   single effects, in order.
3. A ``SaveBatch`` is one ``SAVE_BATCH`` record: ``n flags``, then its
   columns ``seqs slots positions tickets``, and ``sources`` when ``flags``
   is ``HAS_SOURCES``. It decodes as one ``SaveBatch``.
4. A payload decodes only if every word is used exactly once: a count, a
   length or a kind that does not fit raises ``WireError`` naming the word.
5. Every word is ``>= 0``: a source travels as ``source + 1`` (the live
   state, ``None`` or ``LIVE``, as 0), an accept's ticket as ``ticket + 1``
   (``None`` as 0). One check of the whole payload -
   ``min``, or the caller's own on its tensor (``checked=True``) - is then
   every effect constructor's check but one, so a decoded effect is one the
   sender could have built: a prefix record's lengths are ``>= 1``, checked
   with the record (its column's ``min``).

Every rank decodes the same words, so every rank raises the same error.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import partial
from itertools import groupby
from operator import add
from typing import Final, cast

from .._core.effect_dict import Effect
from .._core.effects import (
    SsmPrefixRestore,
    SsmPrefixSave,
    SsmSnapshotRestore,
    SsmSnapshotSave,
    SsmStateAccept,
)
from .._core.save_batch import SaveBatch
from .._errors import InvalidArgumentError, InvalidArgumentTypeError, SsmRollbackError, shown
from . import wire_values as values

__all__ = [
    "ACCEPTS",
    "HAS_SOURCES",
    "MAGIC",
    "PREFIX_RESTORES",
    "PREFIX_SAVES",
    "RESTORES",
    "SAVES",
    "SAVE_BATCH",
    "VERSION",
    "WireError",
    "decode",
    "encode",
    "out_of_range",
    "refusal",
    "sender_words",
]

#: The format's version; a receiver refuses any other. 3: the words of 2, but on gloo they
#: travel as sends, which a rank of version 2 (waiting on a broadcast) would never take.
#: 4: the words of 3, but a group's first step also gathers every rank's ``src``, and on
#: NCCL a step is an ``all_reduce`` with every rank's ``src``, not a broadcast.
#: 5: the records of 4 and two more kinds, ``PREFIX_SAVES`` and ``PREFIX_RESTORES``; a rank
#: of version 4 would refuse them word by word, so the handshake refuses it first.
VERSION: Final = 5
#: ``b"SSMR"`` and the version: the first word of every payload.
MAGIC: Final = (0x53534D52 << 16) | VERSION

SAVES: Final = 1
RESTORES: Final = 2
ACCEPTS: Final = 3
SAVE_BATCH: Final = 4
PREFIX_SAVES: Final = 5
PREFIX_RESTORES: Final = 6
#: ``SAVE_BATCH`` flags: the batch has a ``sources`` column.
HAS_SOURCES: Final = 1

_NAMES: Final = {
    SAVES: "saves",
    RESTORES: "restores",
    ACCEPTS: "accepts",
    SAVE_BATCH: "save batch",
    PREFIX_SAVES: "prefix saves",
    PREFIX_RESTORES: "prefix restores",
}
_WIDTH: Final = {SAVES: 5, RESTORES: 4, ACCEPTS: 3, PREFIX_SAVES: 4, PREFIX_RESTORES: 4}
_CODES: Final[dict[type, int]] = {
    SsmSnapshotSave: SAVES,
    SsmSnapshotRestore: RESTORES,
    SsmStateAccept: ACCEPTS,
    SaveBatch: SAVE_BATCH,
    SsmPrefixSave: PREFIX_SAVES,
    SsmPrefixRestore: PREFIX_RESTORES,
}
_SHIFTED: Final = partial(add, 1)  # a source on the wire: LIVE (-1) -> 0, index i -> i + 1
_MAX_WORD: Final = (1 << 63) - 1


class WireError(SsmRollbackError, ValueError):
    """A payload that is not a step's effects in this format (rule 4); nothing was decoded."""


def encode(effects: Iterable[Effect], *, ranged: bool = True) -> list[int]:
    """The payload words of ``effects`` (rules 1-3); a non-effect raises naming ``effects[i]``.

    A value past int64 raises too, unless ``ranged`` is false: then the
    caller's packing refuses it (``out_of_range`` names it).
    """
    if isinstance(effects, str | bytes) or not isinstance(effects, Iterable):
        raise InvalidArgumentTypeError(
            f"'effects' must be an iterable of effects, got {type(effects).__name__}"
        )
    words = [MAGIC, 0]
    records = at = 0
    # groupby cuts the step into runs of one type at C speed: rule 2's records.
    for kind, group in groupby(effects, type):
        run = list(group)
        code = _CODES.get(kind, 0)
        if not code:
            raise InvalidArgumentTypeError(
                f"'effects[{at}]' must be an SsmSnapshotSave, SsmSnapshotRestore, SsmStateAccept, "
                f"SaveBatch, SsmPrefixSave or SsmPrefixRestore, got {shown(run[0])} of type "
                f"{kind.__name__}"
            )
        for record in run if code == SAVE_BATCH else (run,):
            _put(words, code, record)
            records += 1
        at += len(run)
    words[1] = records
    if ranged:
        error = out_of_range(words)
        if error is not None:
            raise error
    return words


def encode_given(effects: Iterable[Effect] | None, *, ranged: bool = True) -> list[int]:
    """``encode`` of the caller's effects (``None``: none); an iterable that breaks is named."""
    try:
        return encode(() if effects is None else effects, ranged=ranged)
    except SsmRollbackError:
        raise
    except Exception as error:  # the caller's iterable broke: refused on every rank, no hang
        kind = type(error).__name__
        raise InvalidArgumentError(f"iterating 'effects' raised {kind}: {error}") from error


def sender_words(
    effects: Iterable[Effect] | None, limit: int
) -> tuple[SsmRollbackError | None, list[int]]:
    """A sender's payload: ``(None, words)``, or its refusal and the refusal's message bytes.

    Never raises, whatever the effects do: the sender's peers are waiting to
    hear of it. The range check is left to the caller's packing (``out_of_range``).
    """
    try:
        words = encode_given(effects, ranged=False)
    except SsmRollbackError as error:
        return refusal(error)
    if len(words) > limit:
        return refusal(
            InvalidArgumentError(
                f"'effects' must encode to at most {limit} words, got {len(words)}"
            )
        )
    return None, words


def refusal(error: SsmRollbackError) -> tuple[SsmRollbackError, list[int]]:
    """A refused step's payload: the error's message, one byte a word."""
    return error, list(str(error).encode("utf-8"))


def out_of_range(words: list[int]) -> InvalidArgumentTypeError | None:
    """The refusal of words that int64 cannot carry (nothing is sent), or ``None``."""
    if not words or (max(words) <= _MAX_WORD and min(words) >= ~_MAX_WORD):
        return None
    at = next(k for k, word in enumerate(words) if not ~_MAX_WORD <= word <= _MAX_WORD)
    return InvalidArgumentTypeError(
        f"'effects' must hold values that fit int64, got {shown(words[at])} at word {at}"
    )


def _put(words: list[int], code: int, record: object) -> None:
    """Append one record: a ``SaveBatch`` (rule 3), or a run of single effects (rule 2)."""
    if isinstance(record, SaveBatch):
        words += (SAVE_BATCH, len(record), 0 if record.sources is None else HAS_SOURCES)
        words += record.seqs
        words += record.slots
        words += record.positions
        words += record.tickets
        if record.sources is not None:
            words += map(_SHIFTED, record.sources)
        return
    assert isinstance(record, list)
    # A run holds one type (``encode`` cuts them by type), so each comprehension's
    # attribute read is specialised to that type's slot: cheaper than map(attrgetter).
    words += (code, len(record))
    if code == ACCEPTS:
        accepts = cast(list[SsmStateAccept], record)
        words += [a.seq for a in accepts]
        words += [a.index for a in accepts]
        words += [0 if a.ticket is None else a.ticket + 1 for a in accepts]
        return
    if code in (PREFIX_SAVES, PREFIX_RESTORES):
        shared = cast(list[SsmPrefixSave] | list[SsmPrefixRestore], record)
        words += [e.seq for e in shared]
        words += [e.slot for e in shared]
        words += [e.length for e in shared]
        words += [e.ticket for e in shared]
        return
    snapshots = cast(list[SsmSnapshotSave] | list[SsmSnapshotRestore], record)
    words += [e.seq for e in snapshots]
    words += [e.slot for e in snapshots]
    words += [e.token_position for e in snapshots]
    words += [e.ticket for e in snapshots]
    if code == SAVES:
        saves = cast(list[SsmSnapshotSave], record)
        words += [0 if save.source is None else save.source + 1 for save in saves]


def decode(words: Sequence[int], *, checked: bool = False) -> tuple[Effect, ...]:
    """The effects a payload holds (rules 1-5); anything else raises ``WireError``.

    ``checked``: the caller has seen that every word is ``>= 0`` (rule 5).
    """
    words = tuple(words)  # slices of a tuple are the SaveBatch columns as they stand
    size = len(words)
    if size < 2 or words[0] != MAGIC:
        first = hex(words[0]) if size else "nothing"
        raise WireError(
            f"the payload must start with the magic word {MAGIC:#x} (format version {VERSION}), "
            f"got {first} in {size} words"
        )
    if not checked and min(words) < 0:
        at = next(k for k, word in enumerate(words) if word < 0)
        raise WireError(f"the payload must hold ints >= 0, got {words[at]} at word {at}")
    count = words[1]
    if count > size:
        raise WireError(f"the payload's record count (word 1) must be in [0, {size}], got {count}")
    effects: list[Effect] = []
    at = 2
    for record in range(count):
        at = _record(words, at, record, effects)
    if at != size:
        raise WireError(
            f"the payload must end after its {count} records, at word {at}, got {size} words"
        )
    return tuple(effects)


def _record(words: tuple[int, ...], at: int, record: int, effects: list[Effect]) -> int:
    """Decode the record at word ``at`` into ``effects``; return the word after it."""
    if at + 2 > len(words):
        raise WireError(
            f"record {record} needs a kind and a row count at word {at}, the payload has "
            f"{len(words)} words"
        )
    kind, n = words[at], words[at + 1]
    name = _NAMES.get(kind)
    if name is None:
        raise WireError(
            f"record {record} at word {at} must have a kind in {sorted(_NAMES)} "
            f"({', '.join(_NAMES.values())}), got {kind}: a sender of another format version?"
        )
    at += 2
    if kind == SAVE_BATCH:
        flags = words[at] if at < len(words) else None
        if flags not in (0, HAS_SOURCES):
            raise WireError(
                f"record {record} (save batch) at word {at} must have flags 0 or {HAS_SOURCES}, "
                f"got {flags}"
            )
        at += 1
        width = 5 if flags else 4
    else:
        width = _WIDTH[kind]
    if n * width > len(words) - at:
        raise WireError(
            f"record {record} ({name}) of {n} rows needs {n * width} words from word {at}, the "
            f"payload has {len(words)} words"
        )
    columns = [words[at + c * n : at + (c + 1) * n] for c in range(width)]
    if kind in (PREFIX_SAVES, PREFIX_RESTORES) and n and min(columns[2]) < 1:
        raise WireError(
            f"record {record} ({name}) at word {at} must hold lengths >= 1 (a prefix of at "
            f"least one token) in its third column, got 0"
        )
    if kind == SAVE_BATCH:
        effects.append(values.save_batch(*columns))
    elif kind == ACCEPTS:
        effects += values.accepts(*columns)
    elif kind == RESTORES:
        effects += values.restores(*columns)
    elif kind == PREFIX_SAVES:
        effects += values.prefix_saves(*columns)
    elif kind == PREFIX_RESTORES:
        effects += values.prefix_restores(*columns)
    else:
        effects += map(values.save, *columns)
    return at + width * n
