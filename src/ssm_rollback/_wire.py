"""A step's effects as a flat list of int64 words: the wire format of ``ssm_rollback.distributed``.

Pure Python, no torch: ``encode`` turns effects into words, ``decode`` turns
words back into effects, and the tensor plumbing lives in ``distributed``.
Rules of the format (version 1):

1. The payload starts with ``MAGIC`` (which carries ``VERSION``) and the
   record count; every record starts with its kind code.
2. ``SAVE``: ``seq slot position ticket source`` (``source`` is ``LIVE``, -1,
   for the live state). ``RESTORE``: ``seq slot position ticket``.
   ``ACCEPT``: ``seq index``.
3. ``SAVE_BATCH``: ``n flags`` then the columns ``seqs slots positions
   tickets`` of ``n`` words each, and ``sources`` too when ``flags`` is
   ``HAS_SOURCES``: a batch travels as columns, never row by row.
4. A payload decodes only if every word is used exactly once: a count, a
   length or a kind that does not fit raises ``WireError`` naming the word.
5. Every value is checked as the effect's own constructor checks it, so a
   decoded effect is one the sender could have built.

Every rank decodes the same words, so every rank raises the same error.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final

from ._effect_values import SsmSnapshotRestore, SsmSnapshotSave, SsmStateAccept
from ._effects import Effect
from ._errors import InvalidArgumentTypeError, SsmRollbackError
from ._save_batch import LIVE, SaveBatch

__all__ = [
    "ACCEPT",
    "HAS_SOURCES",
    "MAGIC",
    "RESTORE",
    "SAVE",
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

SAVE: Final = 1
RESTORE: Final = 2
ACCEPT: Final = 3
SAVE_BATCH: Final = 4
#: ``SAVE_BATCH`` flags: the batch has a ``sources`` column.
HAS_SOURCES: Final = 1

_NAMES: Final = {SAVE: "save", RESTORE: "restore", ACCEPT: "accept", SAVE_BATCH: "save batch"}
_MAX_WORD: Final = (1 << 63) - 1


class WireError(SsmRollbackError, ValueError):
    """A payload that is not a step's effects in this format (rule 4); nothing was decoded."""


def encode(effects: Iterable[Effect]) -> list[int]:
    """The payload words of ``effects`` (rules 1-3); a non-effect raises naming ``effects[i]``."""
    if isinstance(effects, str | bytes) or not isinstance(effects, Iterable):
        raise InvalidArgumentTypeError(
            f"'effects' must be an iterable of effects, got {type(effects).__name__}"
        )
    words = [MAGIC, 0]
    count = 0
    for i, effect in enumerate(effects):
        kind = type(effect)
        if kind is SaveBatch:
            assert isinstance(effect, SaveBatch)
            n = len(effect)
            words += (SAVE_BATCH, n, 0 if effect.sources is None else HAS_SOURCES)
            words += effect.seqs
            words += effect.slots
            words += effect.positions
            words += effect.tickets
            if effect.sources is not None:
                words += effect.sources
        elif kind is SsmSnapshotSave:
            assert isinstance(effect, SsmSnapshotSave)
            source = LIVE if effect.source is None else effect.source
            words += (SAVE, effect.seq, effect.slot, effect.token_position, effect.ticket, source)
        elif kind is SsmSnapshotRestore:
            assert isinstance(effect, SsmSnapshotRestore)
            words += (RESTORE, effect.seq, effect.slot, effect.token_position, effect.ticket)
        elif kind is SsmStateAccept:
            assert isinstance(effect, SsmStateAccept)
            words += (ACCEPT, effect.seq, effect.index)
        else:
            raise InvalidArgumentTypeError(
                f"'effects[{i}]' must be an SsmSnapshotSave, SsmSnapshotRestore, SsmStateAccept "
                f"or SaveBatch, got {effect!r} of type {kind.__name__}"
            )
        count += 1
    words[1] = count
    if max(words) > _MAX_WORD:  # a value int64 cannot carry: refuse before anything is sent
        at = next(k for k, word in enumerate(words) if word > _MAX_WORD)
        raise InvalidArgumentTypeError(
            f"'effects' must hold values that fit int64, got {words[at]} at word {at}"
        )
    return words


def decode(words: Sequence[int]) -> tuple[Effect, ...]:
    """The effects a payload holds (rules 1-5); anything else raises ``WireError``."""
    size = len(words)
    if size < 2 or words[0] != MAGIC:
        first = words[0] if size else "nothing"
        raise WireError(
            f"the payload must start with the magic word {MAGIC:#x} (format version {VERSION}), "
            f"got {first if isinstance(first, str) else hex(first)} in {size} words"
        )
    count = words[1]
    if not 0 <= count <= size:
        raise WireError(f"the payload's record count (word 1) must be in [0, {size}], got {count}")
    effects: list[Effect] = []
    at = 2
    try:
        for record in range(count):
            at = _record(words, at, record, effects)
    except WireError:
        raise
    except SsmRollbackError as error:  # a value the effect's own validator refuses (rule 5)
        raise WireError(
            f"record {len(effects)} of the payload is not a valid effect: {error}"
        ) from None
    if at != size:
        raise WireError(
            f"the payload must end after its {count} records, at word {at}, got {size} words"
        )
    return tuple(effects)


def _take(words: Sequence[int], at: int, n: int, record: int, what: str) -> Sequence[int]:
    if n < 0 or at + n > len(words):
        raise WireError(
            f"record {record} ({what}) needs {n} words from word {at}, the payload has "
            f"{len(words)} words"
        )
    return words[at : at + n]


def _record(words: Sequence[int], at: int, record: int, effects: list[Effect]) -> int:
    """Decode the record at word ``at`` into ``effects``; return the word after it."""
    kind = _take(words, at, 1, record, "kind")[0]
    name = _NAMES.get(kind)
    if name is None:
        raise WireError(
            f"record {record} at word {at} must have a kind in {sorted(_NAMES)} "
            f"({', '.join(_NAMES.values())}), got {kind}: a sender of another format version?"
        )
    at += 1
    if kind == SAVE:
        seq, slot, position, ticket, source = _take(words, at, 5, record, name)
        effects.append(
            SsmSnapshotSave(seq, slot, position, ticket, None if source == LIVE else source)
        )
        return at + 5
    if kind == RESTORE:
        effects.append(SsmSnapshotRestore(*_take(words, at, 4, record, name)))
        return at + 4
    if kind == ACCEPT:
        effects.append(SsmStateAccept(*_take(words, at, 2, record, name)))
        return at + 2
    n, flags = _take(words, at, 2, record, name)
    if flags not in (0, HAS_SOURCES):
        raise WireError(
            f"record {record} (save batch) at word {at + 1} must have flags 0 or {HAS_SOURCES}, "
            f"got {flags}"
        )
    at += 2
    width = 5 if flags else 4
    if n < 0 or n * width > len(words) - at:
        raise WireError(
            f"record {record} (save batch) of {n} rows needs {max(n, 0) * width} words from "
            f"word {at}, the payload has {len(words)} words"
        )
    columns = [words[at + c * n : at + (c + 1) * n] for c in range(width)]
    seqs, slots, positions, tickets = columns[:4]
    sources = columns[4] if flags else None
    effects.append(SaveBatch(seqs, slots, positions, tickets, sources))
    return at + width * n
