"""Whole-cache copies for ``HybridPrefixCache``: tensors cloned compactly, bytes counted exactly.

A shared prefix is the whole cache after exactly its tokens - recurrent and
conv state, attention KV (a sliding-window layer's window), token counts -
so a copy keeps the cache's own class and layer objects and clones every
tensor they hold. ``copy.deepcopy`` alone would copy each tensor's whole
storage (a view of a larger buffer keeps the buffer); here each tensor is
cloned into a contiguous tensor of its own, so an entry holds exactly
``numel * element_size`` bytes per tensor and ``cache_nbytes`` says how many
before the copy is made.
"""

from __future__ import annotations

import copy

import torch
from transformers.cache_utils import Cache

from .cache_pool import cache_layers

__all__ = ["cache_lengths", "cache_nbytes", "clone_cache"]


def _tensors(cache: Cache) -> list[torch.Tensor]:
    """Every tensor the cache and its layers hold, in attributes or dicts and lists of them."""
    found: dict[int, torch.Tensor] = {}

    def walk(value: object) -> None:
        if isinstance(value, torch.Tensor):
            found[id(value)] = value
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list | tuple):
            for item in value:
                walk(item)

    walk(list(vars(cache).values()))
    for layer in cache_layers(cache):
        walk(list(getattr(layer, "__dict__", {}).values()))
    return list(found.values())


def cache_nbytes(cache: Cache) -> int:
    """The bytes ``clone_cache(cache)`` will hold: the sum of its tensors' sizes."""
    return sum(tensor.numel() * tensor.element_size() for tensor in _tensors(cache))


def clone_cache(cache: Cache) -> Cache:
    """A copy of ``cache`` sharing no tensor with it: same class and layers, tensors cloned."""
    # deepcopy takes an object it finds in the memo as already copied: pre-seeded with
    # compact clones, it rebuilds the cache's structure around them.
    memo: dict[int, object] = {
        id(tensor): tensor.detach().clone(memory_format=torch.contiguous_format)
        for tensor in _tensors(cache)
    }
    copied: Cache = copy.deepcopy(cache, memo)
    return copied


def cache_lengths(cache: Cache) -> set[int]:
    """The token counts the cache's layers say they hold (one, if they agree; a layer that
    keeps nothing, as a Nemotron-H MLP's, says nothing)."""
    lengths: set[int] = set()
    for layer in cache_layers(cache):
        length = getattr(layer, "get_seq_length", None)
        if callable(length):
            lengths.add(int(length()))
    return lengths
