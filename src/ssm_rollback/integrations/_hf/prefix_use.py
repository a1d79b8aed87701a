"""``prefix_cache=`` of the decoders: checked once, each row's stream starts from it, and the
state after each row's output is published back to it."""

from __future__ import annotations

import torch

from ..._errors import InvalidArgumentError, InvalidArgumentTypeError
from .prefix_cache import HybridPrefixCache
from .stream import _Stream

__all__ = ["checked_prefix_cache", "publish_stream", "start_stream"]


def checked_prefix_cache(value: object, model: torch.nn.Module) -> HybridPrefixCache | None:
    """``prefix_cache=`` of a decoder: ``None``, or a ``HybridPrefixCache`` of ``model``."""
    if value is None:
        return None
    if not isinstance(value, HybridPrefixCache):
        raise InvalidArgumentTypeError(
            f"'prefix_cache' must be a HybridPrefixCache or None, got {type(value).__name__}"
        )
    if value.model is not model:
        raise InvalidArgumentError(
            "'prefix_cache' must hold prefixes of the model being decoded, got one made for "
            f"another model ({type(value.model).__name__})"
        )
    return value


def start_stream(
    prefix_cache: HybridPrefixCache | None, stream: _Stream, prompt: list[int]
) -> None:
    """Let a decoder's fresh stream hold the longest stored prefix of ``prompt`` (at most all
    but its last token): the decoder's first forward pass feeds the rest with the last token."""
    if prefix_cache is not None:
        cache, held = prefix_cache._prefill(prompt, set(), rest=False)  # its decoders' own
        if cache is not None:
            stream.cache = cache
            stream.fed = prompt[:held]


def publish_stream(
    prefix_cache: HybridPrefixCache | None, stream: _Stream, prompt: list[int], new: list[int]
) -> None:
    """Publish the state a decode ended on, under exactly the tokens its cache holds.

    The stream's cache stands after ``stream.fed`` (tokens a rewind queued are
    not fed, so not held): that prefix is stored when it is one of ``prompt +
    new``, where the next turn's prompt can extend it; a cache that stands past
    the output is not stored (``speculative_generate`` verifies no draft past an
    EOS, so its rows never leave one).
    """
    if prefix_cache is None or stream.cache is None:
        return
    fed, output = stream.fed, [*prompt, *new]
    if len(fed) > len(prompt) and fed == output[: len(fed)]:
        prefix_cache._publish_state(fed, stream.cache)  # ids the decoder checked already
