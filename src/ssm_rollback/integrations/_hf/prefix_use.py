"""``prefix_cache=`` of the decoders: checked once, then each row's stream starts from it."""

from __future__ import annotations

import torch

from ..._errors import InvalidArgumentError, InvalidArgumentTypeError
from .prefix_cache import HybridPrefixCache
from .stream import _Stream

__all__ = ["checked_prefix_cache", "start_stream"]


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
    """Let a decoder's fresh stream hold ``prompt`` but its last token, from the prefix cache."""
    if prefix_cache is not None:
        stream.cache = prefix_cache.prepare(prompt)
        stream.fed = prompt[:-1]
