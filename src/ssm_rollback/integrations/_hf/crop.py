"""``crop_attention``: cut a hybrid cache's attention KV back to a length, checked first.

``DynamicCache.crop`` refuses caches with recurrent state; this crops every
attention layer (plain, sliding-window, parallel attention + SSM) and winds
a linear-attention layer's token count back, leaving the recurrent state to
a snapshot restore. ``plan_crop_attention`` checks every layer before any
changes and returns the crop to run.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from transformers.cache_utils import (
    Cache,
    DummyLayer,
    DynamicLayer,
    DynamicSlidingWindowLayer,
    LinearAttentionCacheLayerMixin,
)

from ..._errors import InvalidArgumentError, check_non_negative_int, shown
from .cache_pool import cache_layers
from .recurrent_offset import attention_length, moved_attention

__all__ = ["crop_attention", "plan_crop_attention"]


def crop_attention(cache: Cache, length: int) -> None:
    """Truncate every attention layer's KV to ``length`` positions (prompt included).

    Plain, sliding-window and parallel attention + SSM layers are cropped;
    recurrent state is left alone (restore it from a snapshot), but a
    linear-attention layer's token count, where transformers keeps one
    (5.25 on), is set to ``length``. Raises, and
    changes nothing, for a ``length`` beyond the cache, for a sliding-window
    layer that has already dropped tokens the cropped cache would need, or
    for a layer type it does not know.
    """
    plan_crop_attention(cache, length)()


def plan_crop_attention(cache: Cache, length: int) -> Callable[[], None]:
    """Check ``crop_attention(cache, length)`` without changing anything; the crop to run."""
    length = check_non_negative_int("length", length)
    layers = cache_layers(cache)
    plans = [_crop_plan(idx, layer, length) for idx, layer in enumerate(layers)]
    recurrent = any(isinstance(layer, LinearAttentionCacheLayerMixin) for layer in layers)

    def crop() -> None:
        held = attention_length(cache) if recurrent else length
        for plan in plans:  # every layer checked before any is changed
            if plan is not None:
                plan()
        moved_attention(cache, held - length)  # the recurrent state stays where it was

    return crop


def _crop_plan(idx: int, layer: object, length: int) -> Callable[[], None] | None:
    """Check one layer's crop and return it, to run once every layer has been checked."""
    if isinstance(layer, DynamicSlidingWindowLayer):
        return _sliding_crop(idx, layer, length)
    if isinstance(layer, DynamicLayer):
        return _both(_full_crop(idx, layer, length), _linear_count_plan(idx, layer, length))
    if isinstance(layer, LinearAttentionCacheLayerMixin):
        return _linear_count_plan(idx, layer, length)  # no attention KV: only its token count
    if isinstance(layer, DummyLayer):
        return None  # no attention KV in this layer
    raise InvalidArgumentError(
        f"'cache' layer {idx} is a {type(layer).__name__}, which crop_attention cannot crop"
    )


def _check_within(idx: int, held: int, length: int) -> None:
    """Refuse a ``length`` past the ``held`` tokens of layer ``idx``: a crop cannot grow it."""
    if length > held:
        raise InvalidArgumentError(
            f"'length' must be <= the cache's length {held} (layer {idx}), got {shown(length)}"
        )


def _full_crop(idx: int, layer: DynamicLayer, length: int) -> Callable[[], None]:
    held = DynamicLayer.get_seq_length(layer)
    _check_within(idx, held, length)
    # A parallel attention + SSM layer's own crop also refuses to touch its SSM
    # part, so crop its attention as a DynamicLayer; an attention-only layer
    # crops itself (an indexed layer crops its indexer keys too).
    hybrid = isinstance(layer, LinearAttentionCacheLayerMixin)
    crop = DynamicLayer.crop if hybrid else type(layer).crop
    return lambda: crop(layer, -(held - length)) if held > length else None


def _linear_count_plan(idx: int, layer: object, length: int) -> Callable[[], None] | None:
    """Set a linear-attention layer's token count to ``length``, where it keeps one.

    transformers >= 5.25 counts the tokens a linear-attention layer has seen
    (``cumulative_length_linear``, a 0-d tensor) and ``Cache.get_seq_length()``
    returns it when layer 0 is linear, so models derive position ids from it.
    A restored snapshot puts the state back at ``length``; the count must follow.
    """
    count = getattr(layer, "cumulative_length_linear", None)
    if not isinstance(count, torch.Tensor):
        return None  # transformers < 5.25: the layer keeps no count
    held = int(count)
    _check_within(idx, held, length)

    def set_count() -> None:
        count.fill_(length)  # in place: the tensor keeps its (static) address

    return set_count


def _both(first: Callable[[], None], then: Callable[[], None] | None) -> Callable[[], None]:
    if then is None:
        return first

    def both() -> None:
        first()
        then()

    return both


def _sliding_crop(idx: int, layer: DynamicSlidingWindowLayer, length: int) -> Callable[[], None]:
    total = layer.cumulative_length
    _check_within(idx, total, length)
    held = DynamicLayer.get_seq_length(layer)
    dropped = total - held  # positions the window already let go
    first_needed = max(0, length - (layer.sliding_window - 1))
    if first_needed < dropped:
        raise InvalidArgumentError(
            f"'length' {length} needs position {first_needed} in sliding-window layer {idx} "
            f"(window {layer.sliding_window}), which already dropped positions before "
            f"{dropped}: roll back less far"
        )

    def crop() -> None:
        if held:
            assert layer.keys is not None
            assert layer.values is not None
            layer.keys = layer.keys[..., first_needed - dropped : length - dropped, :]
            layer.values = layer.values[..., first_needed - dropped : length - dropped, :]
        layer.cumulative_length = length

    return crop
