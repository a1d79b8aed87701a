"""A step's effects as a flat list of int64 words: the wire format of ``ssm_rollback.distributed``.

Pure Python, no torch: ``encode`` turns effects into words, ``decode`` turns
words back into effects, and the tensor plumbing lives in ``distributed``.
Rules of the format (version 1):

1. The payload starts with ``MAGIC`` (which carries ``VERSION``) and the
   record count; every record starts with its kind code and its row count
   ``n``, then holds ``n`` words per column: a record is columns, so a
   receiver checks and builds it at C speed, never word by word.
2. A run of consecutive single effects of one kind is one record:
   ``SAVES`` (columns ``seqs slots positions tickets sources``; a source of
   ``LIVE``, -1, is the live state), ``RESTORES`` (``seqs slots positions
   tickets``), ``ACCEPTS`` (``seqs indices``). They decode as that many
   single effects, in order.
3. A ``SaveBatch`` is one ``SAVE_BATCH`` record: ``n flags``, then its
   columns ``seqs slots positions tickets``, and ``sources`` when ``flags``
   is ``HAS_SOURCES``. It decodes as one ``SaveBatch``.
4. A payload decodes only if every word is used exactly once: a count, a
   length or a kind that does not fit raises ``WireError`` naming the word.
5. Every value is checked as the effect's own constructor checks it (ints
   ``>= 0``; sources ``>= -1``), so a decoded effect is one the sender could
   have built.

Every rank decodes the same words, so every rank raises the same error.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final, cast

from ._effect_values import SsmSnapshotRestore, SsmSnapshotSave, SsmStateAccept, trusted_save
from ._effects import Effect
from ._errors import InvalidArgumentTypeError, SsmRollbackError
from ._save_batch import LIVE, SaveBatch

__all__ = [
    "ACCEPTS",
    "HAS_SOURCES",
    "MAGIC",
    "RESTORES",
    "SAVES",
    "SAVE_BATCH",
    "VERSION",
    "WireError",
    "decode",
    "encode",
]

#: The format's version; a receiver refuses any other.
VERSION: Final = 1
#: ``b"SSMR"`` and the version: the first word of every payload.
MAGIC: Final = (0x53534D52 << 16) | VERSION

SAVES: Final = 1
RESTORES: Final = 2
ACCEPTS: Final = 3
SAVE_BATCH: Final = 4
#: ``SAVE_BATCH`` flags: the batch has a ``sources`` column.
HAS_SOURCES: Final = 1

_NAMES: Final = {SAVES: "saves", RESTORES: "restores", ACCEPTS: "accepts", SAVE_BATCH: "save batch"}
_WIDTH: Final = {SAVES: 5, RESTORES: 4, ACCEPTS: 2}
_MAX_WORD: Final = (1 << 63) - 1

_new = object.__new__
_set = object.__setattr__


class WireError(SsmRollbackError, ValueError):
    """A payload that is not a step's effects in this format (rule 4); nothing was decoded."""


def _kind_of(effect: object) -> int:
    kind = type(effect)
    if kind is SsmSnapshotSave:
        return SAVES
    if kind is SsmSnapshotRestore:
        return RESTORES
    if kind is SsmStateAccept:
        return ACCEPTS
    if kind is SaveBatch:
        return SAVE_BATCH
    return 0


def encode(effects: Iterable[Effect]) -> list[int]:
    """The payload words of ``effects`` (rules 1-3); a non-effect raises naming ``effects[i]``."""
    if isinstance(effects, str | bytes) or not isinstance(effects, Iterable):
        raise InvalidArgumentTypeError(
            f"'effects' must be an iterable of effects, got {type(effects).__name__}"
        )
    words = [MAGIC, 0]
    records = 0
    run: list[Effect] = []
    run_kind = 0
    for i, effect in enumerate(effects):
        kind = _kind_of(effect)
        if not kind:
            raise InvalidArgumentTypeError(
                f"'effects[{i}]' must be an SsmSnapshotSave, SsmSnapshotRestore, SsmStateAccept "
                f"or SaveBatch, got {effect!r} of type {type(effect).__name__}"
            )
        if kind != run_kind or kind == SAVE_BATCH:
            records += _flush(words, run_kind, run)
            run, run_kind = [], kind
        run.append(effect)
    records += _flush(words, run_kind, run)
    words[1] = records
    if max(words) > _MAX_WORD:  # a value int64 cannot carry: refuse before anything is sent
        at = next(k for k, word in enumerate(words) if word > _MAX_WORD)
        raise InvalidArgumentTypeError(
            f"'effects' must hold values that fit int64, got {words[at]} at word {at}"
        )
    return words


def _flush(words: list[int], kind: int, run: list[Effect]) -> int:
    """Append ``run`` (effects of one ``kind``) as one record; return the records written."""
    if not run:
        return 0
    n = len(run)
    if kind == SAVE_BATCH:
        (batch,) = run
        assert isinstance(batch, SaveBatch)
        words += (SAVE_BATCH, n := len(batch), 0 if batch.sources is None else HAS_SOURCES)
        words += batch.seqs
        words += batch.slots
        words += batch.positions
        words += batch.tickets
        if batch.sources is not None:
            words += batch.sources
        return 1
    words += (kind, n)
    if kind == ACCEPTS:
        accepts = cast("list[SsmStateAccept]", run)
        words += [a.seq for a in accepts]
        words += [a.index for a in accepts]
        return 1
    snapshots = cast("list[SsmSnapshotSave]", run)  # restores share these four fields
    words += [e.seq for e in snapshots]
    words += [e.slot for e in snapshots]
    words += [e.token_position for e in snapshots]
    words += [e.ticket for e in snapshots]
    if kind == SAVES:
        words += [LIVE if e.source is None else e.source for e in snapshots]
    return 1


def decode(words: Sequence[int]) -> tuple[Effect, ...]:
    """The effects a payload holds (rules 1-5); anything else raises ``WireError``."""
    size = len(words)
    if size < 2 or words[0] != MAGIC:
        first = hex(words[0]) if size else "nothing"
        raise WireError(
            f"the payload must start with the magic word {MAGIC:#x} (format version {VERSION}), "
            f"got {first} in {size} words"
        )
    count = words[1]
    if not 0 <= count <= size:
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


def _columns(
    words: Sequence[int], at: int, record: int, width: int, n: int, name: str
) -> list[Sequence[int]]:
    """``width`` columns of ``n`` words from word ``at``, checked ``>= 0`` (sources ``>= -1``)."""
    if n < 0 or n * width > len(words) - at:
        raise WireError(
            f"record {record} ({name}) of {n} rows needs {max(n, 0) * width} words from word "
            f"{at}, the payload has {len(words)} words"
        )
    columns = [words[at + c * n : at + (c + 1) * n] for c in range(width)]
    for c, column in enumerate(columns):
        least = LIVE if (c == 4 and name != "accepts") else 0
        if column and min(column) < least:
            bad = next(k for k, v in enumerate(column) if v < least)
            raise WireError(
                f"record {record} ({name}) must hold ints >= {least}, got {column[bad]} at word "
                f"{at + c * n + bad}"
            )
    return columns


def _record(words: Sequence[int], at: int, record: int, effects: list[Effect]) -> int:
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
        columns = _columns(words, at, record, width, n, name)
        effects.append(_batch(columns))
        return at + width * n
    columns = _columns(words, at, record, _WIDTH[kind], n, name)
    if kind == ACCEPTS:
        effects += map(_accept, *columns)
    elif kind == RESTORES:
        effects += map(_restore, *columns)
    else:
        effects += map(_save, *columns)
    return at + _WIDTH[kind] * n


# Rule 5 checked every column at C speed: build the values without their validators.


def _batch(columns: list[Sequence[int]]) -> SaveBatch:
    batch = _new(SaveBatch)
    sources = tuple(columns[4]) if len(columns) == 5 else None
    _set(batch, "seqs", tuple(columns[0]))
    _set(batch, "slots", tuple(columns[1]))
    _set(batch, "positions", tuple(columns[2]))
    _set(batch, "tickets", tuple(columns[3]))
    _set(batch, "sources", sources)
    return batch


def _save(seq: int, slot: int, position: int, ticket: int, source: int) -> SsmSnapshotSave:
    return trusted_save(seq, slot, position, ticket, None if source == LIVE else source)


def _restore(seq: int, slot: int, position: int, ticket: int) -> SsmSnapshotRestore:
    restore = _new(SsmSnapshotRestore)
    _set(restore, "seq", seq)
    _set(restore, "slot", slot)
    _set(restore, "token_position", position)
    _set(restore, "ticket", ticket)
    return restore


def _accept(seq: int, index: int) -> SsmStateAccept:
    accept = _new(SsmStateAccept)
    _set(accept, "seq", seq)
    _set(accept, "index", index)
    return accept
