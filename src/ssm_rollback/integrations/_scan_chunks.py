"""Mamba2 scans sized to the forward pass: no padding of a short verify forward to a whole chunk.

``transformers``' PyTorch Mamba2 scan (the path on CPU, where the CUDA
kernels cannot run) pads every multi-token forward pass to a multiple of the
mixer's ``chunk_size``: a 5-token verify forward of a Nemotron-H (chunk 128)
computes a 128-token scan. A forward no longer than the chunk is one chunk
whatever the chunk size, and the padded positions add exact zeros, so
``narrowed(width)`` sets each Mamba2 mixer's ``chunk_size`` to the forward's
width for that forward and puts it back after: the same scan, over the
tokens the forward has. Wider forwards (a long prompt) keep the model's chunk.

The mixers are found by what the scan reads: an ``int`` ``chunk_size`` and an
``A_log`` parameter (Mamba2, Bamba, Nemotron-H, Falcon-H1, Granite-4.0-H,
Zamba2). Models on CUDA are left alone: there the kernels take any width at
the cost of its tokens. Another thread's forward pass on the same model in the
meantime computes the same values (the chunk size splits the scan, it does not
change it); the model's own chunk comes back when the last narrowing ends.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final, final
from weakref import WeakKeyDictionary

import torch

__all__ = ["ScanChunks"]

# Each narrowed mixer: its own chunk size, and how many narrowings hold it now.
_HELD: Final[WeakKeyDictionary[torch.nn.Module, list[int]]] = WeakKeyDictionary()
_LOCK: Final = threading.Lock()


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
    """A model's Mamba2 mixers (none on CUDA, or in a model without them)."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.mixers: tuple[torch.nn.Module, ...] = tuple(
            module
            for module in model.modules()
            if _is_mamba2_mixer(module) and getattr(module, "A_log").device.type != "cuda"  # noqa: B009
        )

    @contextmanager
    def narrowed(self, width: int) -> Iterator[None]:
        """Within: every mixer whose chunk is wider than ``width`` scans in chunks of ``width``."""
        if not self.mixers or width < 1:
            yield
            return
        with _LOCK:
            held = []
            for mixer in self.mixers:
                entry = _HELD.get(mixer)
                own = _chunk(mixer) if entry is None else entry[0]
                if width < own:
                    if entry is None:
                        entry = _HELD[mixer] = [own, 0]
                    entry[1] += 1
                    held.append(mixer)
                    _set_chunk(mixer, width)
        try:
            yield
        finally:
            with _LOCK:
                for mixer in held:
                    entry = _HELD[mixer]
                    entry[1] -= 1
                    if entry[1] == 0:
                        _set_chunk(mixer, entry[0])
                        del _HELD[mixer]
