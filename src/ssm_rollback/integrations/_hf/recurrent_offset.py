"""Where a cache's recurrent state stands against its attention KV, row by row.

A forward pass moves both by the same tokens. ``crop_attention`` moves the
KV back and leaves the recurrent state; a ``HybridCacheSnapshotPool``
restore moves a row's recurrent state to its snapshot and leaves the KV. A
rollback does both, in either order; between the two, or with one of them
left out, the cache holds recurrent state after other tokens than its KV
and token counts say. ``HybridPrefixCache.publish_state`` reads only those
counts, so it asks here and refuses such a cache rather than share a state
after other tokens.

The offset of a row is its recurrent state's token count less the KV's.
Caches are tracked by identity while they live; a cache never cropped nor
restored into has offset 0. A copy made outside the library
(``copy.deepcopy``) starts again at 0.
"""

from __future__ import annotations

import weakref

from transformers.cache_utils import Cache

__all__ = ["attention_length", "moved_attention", "offset", "restored"]


class _Offsets:
    """One cache's offsets: ``every`` for the rows never restored into, ``rows`` for the rest."""

    __slots__ = ("every", "rows")

    def __init__(self) -> None:
        self.every = 0
        self.rows: dict[int, int] = {}


_offsets: weakref.WeakKeyDictionary[Cache, _Offsets] = weakref.WeakKeyDictionary()


def attention_length(cache: Cache) -> int:
    """The most tokens a layer of the cache says it holds (``cache_lengths``' largest)."""
    lengths = [
        int(length())
        for layer in getattr(cache, "layers", ())
        if callable(length := getattr(layer, "get_seq_length", None))
    ]
    return max(lengths, default=0)


def offset(cache: Cache, row: int) -> int:
    """Row ``row``'s recurrent token count less its KV's (0: they agree)."""
    held = _offsets.get(cache)
    return 0 if held is None else held.rows.get(row, held.every)


def moved_attention(cache: Cache, by: int) -> None:
    """The KV went back ``by`` tokens and the recurrent state stayed (a crop)."""
    if not by:
        return
    held = _offsets.setdefault(cache, _Offsets())
    held.every += by
    for row in held.rows:
        held.rows[row] += by


def restored(cache: Cache, row: int, recurrent_length: int) -> None:
    """Row ``row``'s recurrent state now stands after ``recurrent_length`` tokens."""
    held = _offsets.setdefault(cache, _Offsets())
    held.rows[row] = recurrent_length - attention_length(cache)
