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
from collections.abc import Sequence

from transformers.cache_utils import Cache, DynamicLayer, DynamicSlidingWindowLayer

__all__ = ["attention_length", "moved_attention", "offset", "recurrent_lengths", "restored"]


class _Offsets:
    """One cache's offsets: ``every`` for the rows never restored into, ``rows`` for the rest."""

    __slots__ = ("every", "rows")

    def __init__(self) -> None:
        self.every = 0
        self.rows: dict[int, int] = {}


_offsets: weakref.WeakKeyDictionary[Cache, _Offsets] = weakref.WeakKeyDictionary()


def attention_length(cache: Cache) -> int:
    """The tokens the cache's KV holds, read on the host where a layer keeps them there: an
    attention layer's keys, a sliding window's count. Only a cache of linear-attention layers
    alone reads its layers' 0-d token counts (a device read each)."""
    layers = getattr(cache, "layers", ())
    for layer in layers:
        if isinstance(layer, DynamicSlidingWindowLayer):
            if layer.is_initialized:
                return int(layer.cumulative_length)
        elif isinstance(layer, DynamicLayer):  # a parallel attention + SSM layer's KV too
            held = DynamicLayer.get_seq_length(layer)
            if held:
                return held
    lengths = [
        int(length())
        for layer in layers
        if callable(length := getattr(layer, "get_seq_length", None))
    ]
    return max(lengths, default=0)


def offset(cache: Cache, row: int) -> int:
    """Row ``row``'s recurrent token count less its KV's (0: they agree)."""
    held = _offsets.get(cache)
    return 0 if held is None else held.rows.get(row, held.every)


def recurrent_lengths(cache: Cache, rows: Sequence[int]) -> list[int]:
    """Where each of ``rows``' recurrent state stands, in tokens (what a save of it holds)."""
    length, held = attention_length(cache), _offsets.get(cache)
    if held is None:  # never cropped nor restored into: every row where its KV is
        return [length] * len(rows)
    return [length + held.rows.get(row, held.every) for row in rows]


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
