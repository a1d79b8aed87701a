"""Mamba2 scans sized to the forward pass: no padding of a short verify forward to a whole chunk.

``transformers``' PyTorch Mamba2 scan (the path on CPU, where the CUDA
kernels cannot run) pads every multi-token forward pass to a multiple of the
mixer's ``chunk_size``: a 5-token verify forward of a Nemotron-H (chunk 128)
computes a 128-token scan. A forward no longer than the chunk is one chunk
whatever the chunk size, and the padded positions add exact zeros, so
``narrowed(width)`` sets each Mamba2 mixer's ``chunk_size`` to the forward's
width for that forward and puts it back after: the same scan, over the
tokens the forward has. Wider forwards (a long prompt) keep the model's chunk,
and a one-token step is left alone (with a cache it is the recurrent update,
no scan at all).

The mixers are found by what the scan reads: an ``int`` ``chunk_size`` and an
``A_log`` parameter (Mamba2, Bamba, Nemotron-H, Falcon-H1, Granite-4.0-H,
Zamba2). Models on CUDA are left alone: there the kernels take any width at
the cost of its tokens.

The chunk is an attribute of the shared module, so a narrowed forward holds a
lock of its model: two decoders on one model in two threads narrow one at a
time, and each forward scans in its own width. A forward pass that does not
come through the decoders takes no lock; run in another thread on the same
model meanwhile, it would scan in the narrowed chunk: the same result to
rounding, but a long one in many more chunks, so more time and memory.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final, final
from weakref import WeakKeyDictionary

import torch

__all__ = ["ScanChunks"]

# One lock per model, created under _LOCK: a narrowed forward holds its model's.
_MODEL_LOCKS: Final[WeakKeyDictionary[torch.nn.Module, threading.RLock]] = WeakKeyDictionary()
_LOCK: Final = threading.Lock()


def _model_lock(model: torch.nn.Module) -> threading.RLock:
    with _LOCK:
        lock = _MODEL_LOCKS.get(model)
        if lock is None:
            lock = _MODEL_LOCKS[model] = threading.RLock()
        return lock


def _is_mamba2_mixer(module: torch.nn.Module) -> bool:
    chunk = getattr(module, "chunk_size", None)
    return (
        isinstance(chunk, int)
        and not isinstance(chunk, bool)
        and chunk > 0
        and isinstance(getattr(module, "A_log", None), torch.nn.Parameter)
    )


def _chunk(mixer: torch.nn.Module) -> int:
    chunk: int = getattr(mixer, "chunk_size")  # noqa: B009 (typed here, not on nn.Module)
    return chunk


def _set_chunk(mixer: torch.nn.Module, chunk: int) -> None:
    setattr(mixer, "chunk_size", chunk)  # noqa: B010


@final
class ScanChunks:
    """A model's Mamba2 mixers (none on CUDA, or in a model without them), and its lock."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.mixers: tuple[torch.nn.Module, ...] = tuple(
            module
            for module in model.modules()
            if _is_mamba2_mixer(module) and getattr(module, "A_log").device.type != "cuda"  # noqa: B009
        )
        self.lock = _model_lock(model)

    @contextmanager
    def narrowed(self, width: int) -> Iterator[None]:
        """Within: every mixer whose chunk is wider than ``width`` scans in chunks of ``width``."""
        if not self.mixers or width <= 1:
            yield
            return
        with self.lock:
            narrowed = [(mixer, chunk) for mixer in self.mixers if width < (chunk := _chunk(mixer))]
            for mixer, _ in narrowed:
                _set_chunk(mixer, width)
            try:
                yield
            finally:
                for mixer, chunk in narrowed:
                    _set_chunk(mixer, chunk)
