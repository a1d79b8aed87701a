"""The ``cache`` of a decoder call: decoded into when passed, returned as ``generate`` returns it.

``model.generate`` decodes into a ``cache=`` passed to it, and with
``return_dict_in_generate`` returns the cache it decoded with under the key
``cache``, standing after every token of ``sequences`` but the last (it
never feeds the last). The decoders decode each row in a batch-1 cache of
its own, so for one row they do the same: the row decodes in the cache
passed (the caller's, or the one ``generate`` prepared), and is left after
all its tokens but the last. A batch of several rows, or a left-padded row
(decoded without its padding, which ``generate``'s cache holds), has no
cache as ``generate``'s to decode in or return: a cache of the caller's is
refused by name for it (as it is with ``prefix_cache``, where the row
starts in a copy of a stored prefix, and as one not made for the model is),
and the result carries none.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import attrs
from transformers.cache_utils import Cache, DynamicCache

from ..._errors import InvalidArgumentError
from .cache_pool import cache_layers
from .generate_checks import check_empty_cache
from .stream import _Stream

__all__ = ["CacheUse", "cache_use", "passed_cache", "stand_before_last"]


@attrs.frozen(eq=False)  # holds a cache: compare by identity
class CacheUse:
    """What a call does with a cache: the one its single row decodes in, whether to leave it
    where ``generate`` leaves its cache, and whether the result carries it."""

    start: Cache | None = None
    stand: bool = False
    returned: bool = False

    def finish(self, stream: _Stream, tokens: list[int]) -> tuple[Cache | None, int]:
        """After the single row decoded ``tokens`` (its unpadded prompt and output) in
        ``stream``: the cache the result carries, and the forward passes it took to leave
        that cache where ``generate`` leaves its (``stand_before_last``; 0 or 1)."""
        passes = stand_before_last(stream, tokens) if self.stand else 0
        return (stream.cache if self.returned else None), passes


def cache_use(
    name: str,
    cache: Cache | None,
    *,
    callers: bool,
    returned: bool,
    rows: int,
    prefixed: bool,
    padded: bool = False,
    layers: Callable[[], list[type]] | None = None,
) -> CacheUse:
    """Check a passed ``cache`` (``name``; ``callers``: the caller's own, not one ``generate``
    prepared) against ``rows`` rows, a ``prefix_cache`` (``prefixed``), a left-padded row
    (``padded``) and the layer types of a cache made for the model (``layers``), before any
    work."""
    if cache is not None and callers:
        if padded and rows == 1:
            raise InvalidArgumentError(
                f"'{name}' must be None for a left-padded row: the decoders decode the row "
                f"without its padding, where generate's cache holds the padded positions too"
            )
        if rows != 1:
            raise InvalidArgumentError(
                f"'{name}' must be None for a batch of {rows} rows: the decoders decode each row "
                f"in a cache of its own, and fill a cache passed for one row only"
            )
        if prefixed:
            raise InvalidArgumentError(
                f"'{name}' must be None with prefix_cache: the row starts in a copy of the "
                f"stored prefix, which the result returns with return_dict_in_generate=True"
            )
    if rows != 1 or padded:  # no one cache as generate's to decode in or return
        return CacheUse()
    if prefixed:  # generate's own cache goes unused: the row decodes in the prefix's copy
        return CacheUse(None, returned, returned)
    if cache is not None and not isinstance(cache, DynamicCache):
        raise InvalidArgumentError(
            f"'{name}' must be an empty DynamicCache or None (no cache_implementation): the "
            f"decoders crop and restore a DynamicCache, got a {type(cache).__name__}"
        )
    if cache is not None and callers and layers is not None:
        given, wanted = [type(layer) for layer in cache_layers(cache)], layers()
        if given != wanted:  # DynamicCache() without a config: no layer for the SSM state
            raise InvalidArgumentError(
                f"'{name}' must be an empty cache made for this model, as "
                f"DynamicCache(config=model.config) makes it ({len(wanted)} layers), got "
                f"{len(given)} layers" + (f" ({_first_difference(given, wanted)})" * bool(given))
            )
    return CacheUse(cache, returned or (cache is not None and callers), returned)


def _first_difference(given: list[type], wanted: list[type]) -> str:
    for i, (one, other) in enumerate(zip(given, wanted, strict=False)):
        if one is not other:
            return f"layer {i} is a {one.__name__}, not a {other.__name__}"
    return "another count"


def stand_before_last(stream: _Stream, tokens: list[int]) -> int:
    """Leave the stream's cache after ``tokens[:-1]`` (the row's unpadded prompt and output),
    as ``generate`` leaves its cache; the forward passes that took (0 or 1).

    Tokens fed past that (the last token: backtracking feeds it, and an
    accepted EOS draft is fed in its verify step) are undone from the
    stream's checkpoint, taken before them; tokens missing (a rewind's queued
    replay) are fed.
    """
    want = tokens[:-1]
    fed = stream.fed
    if len(fed) > len(want) or fed != want[: len(fed)]:
        stream.rewind(len(want))
    stream.queued = want[len(stream.fed) :]
    if not stream.queued:
        return 0
    stream.feed([])
    return 1


def passed_cache(cache: object, past_key_values: object) -> tuple[str, Cache | None]:
    """The empty cache passed as ``cache`` or ``past_key_values`` (one of them), and its name."""
    check_empty_cache("cache", cache)
    check_empty_cache("past_key_values", past_key_values)
    if cache is not None and past_key_values is not None and cache is not past_key_values:
        raise InvalidArgumentError(
            "'past_key_values' must be None when 'cache' is given (its name before transformers "
            "5.x): pass one cache"
        )
    if cache is not None:
        return "cache", cast(Cache, cache)
    return "past_key_values", cast(Cache | None, past_key_values)
