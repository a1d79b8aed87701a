"""``HybridCacheSnapshotPool``: a ``SnapshotPool`` over a ``transformers`` cache's recurrent state.

Every linear-attention layer of a ``DynamicCache`` keeps conv and recurrent
state tensors (one or more per layer), a row per batch entry; the pool
snapshots them through ``TorchSnapshotPool`` and refuses to copy once the
cache has replaced a tensor it was made with.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import final

import attrs
import torch
from transformers.cache_utils import (
    Cache,
    LinearAttentionCacheLayerMixin,
)

from ... import SaveBatch, SsmSnapshotRestore, SsmSnapshotSave
from ..._errors import InvalidArgumentError, InvalidArgumentTypeError, check_non_negative_int, shown
from ...backends.torch import TorchSnapshotPool
from ...pool import SaveOutcome
from . import recurrent_offset

__all__ = ["HybridCacheSnapshotPool", "cache_layers"]


@attrs.frozen(eq=False)  # holds tensors: compare by identity
class _StateRef:
    """Where one recurrent state tensor lives in the cache, and the tensor it was."""

    name: str
    layer: LinearAttentionCacheLayerMixin
    kind: str  # "conv_states" or "recurrent_states"
    index: int
    tensor: torch.Tensor

    def current(self) -> torch.Tensor | None:
        states: dict[int, torch.Tensor | None] = getattr(self.layer, self.kind)
        return states.get(self.index)


def cache_layers(cache: Cache) -> Sequence[object]:
    """The cache's layers; anything but a layered cache (a DynamicCache) is refused."""
    layers = getattr(cache, "layers", None)
    if not isinstance(layers, Sequence):
        raise InvalidArgumentTypeError(
            f"'cache' must be a transformers Cache with a list of layers (a DynamicCache), "
            f"got {type(cache).__name__}"
        )
    return layers


def _state_refs(cache: Cache) -> list[_StateRef]:
    refs: list[_StateRef] = []
    linear_layers = 0
    for idx, layer in enumerate(cache_layers(cache)):
        if not isinstance(layer, LinearAttentionCacheLayerMixin):
            continue
        linear_layers += 1
        if layer.record_past:
            raise InvalidArgumentError(
                f"'cache' layer {idx} records past conv states (activate_past_recording), "
                f"which replaces its tensors at every step; snapshots need the states "
                f"updated in place: use a cache without past recording"
            )
        for i in range(layer.number_of_states):
            for kind, ready in (
                ("conv_states", layer.is_conv_states_initialized),
                ("recurrent_states", layer.is_recurrent_states_initialized),
            ):
                tensor = getattr(layer, kind)[i]
                if ready[i] and tensor is not None:
                    refs.append(_StateRef(f"layers[{idx}].{kind}[{i}]", layer, kind, i, tensor))
    if not linear_layers:
        raise InvalidArgumentError(
            "'cache' must have linear-attention (SSM) layers, got none: a pure-attention "
            "model needs no snapshots (roll it back with hybrid=False and crop_attention)"
        )
    if not refs:
        raise InvalidArgumentError(
            f"'cache' holds no recurrent state yet ({linear_layers} linear-attention layers, "
            f"none initialised): create the pool after the prefill forward pass"
        )
    return refs


@final
class HybridCacheSnapshotPool:
    """A ``SnapshotPool`` over a ``transformers`` cache's recurrent state, a row per batch entry.

    Create it after prefill, once the cache holds its state; it snapshots
    every conv and recurrent state tensor of every linear-attention layer
    (parallel attention + SSM layers included) with one batched copy per
    tensor. If the cache's state tensors are replaced afterwards (a reorder,
    an offload, a new batch size), ``save`` and ``restore`` refuse to run and
    say which tensor changed: make a new pool.
    """

    def __init__(
        self, cache: Cache, slots_per_sequence: int, *, num_sequences: int | None = None
    ) -> None:
        refs = _state_refs(cache)
        rows = {ref.tensor.shape[0] for ref in refs}
        if len(rows) > 1:
            raise InvalidArgumentError(
                "'cache' recurrent states must share one batch size, got "
                + ", ".join(f"{ref.name}: {ref.tensor.shape[0]}" for ref in refs)
            )
        batch = rows.pop()
        if num_sequences is not None:
            expected = check_non_negative_int("num_sequences", num_sequences)
            if expected != batch:
                raise InvalidArgumentError(
                    f"'num_sequences' must match the cache's batch size {batch}, "
                    f"got {shown(expected)}"
                )
        self._cache = cache
        #: The tokens each saved slot's state stands after (``recurrent_offset``).
        self._lengths: dict[tuple[int, int], int] = {}
        self._refs = tuple(refs)
        self._pool = TorchSnapshotPool([ref.tensor for ref in refs], slots_per_sequence)

    @property
    def num_sequences(self) -> int:
        """The cache's batch size."""
        return self._pool.num_sequences

    @property
    def slots_per_sequence(self) -> int:
        """Snapshot slots per batch row."""
        return self._pool.slots_per_sequence

    @property
    def nbytes(self) -> int:
        """Bytes of snapshot storage."""
        return self._pool.nbytes

    @property
    def state_names(self) -> tuple[str, ...]:
        """The cache state tensors snapshotted, as ``layers[i].conv_states[j]`` and the like."""
        return tuple(ref.name for ref in self._refs)

    @property
    def torch_pool(self) -> TorchSnapshotPool:
        """The torch pool doing the copies."""
        return self._pool

    def __repr__(self) -> str:
        return (
            f"HybridCacheSnapshotPool(num_sequences={self.num_sequences}, "
            f"slots_per_sequence={self.slots_per_sequence}, states={len(self._refs)}, "
            f"nbytes={self.nbytes})"
        )

    def save(self, saves: Sequence[SsmSnapshotSave] | SaveBatch, /) -> SaveOutcome:
        """Snapshot each save's row of every recurrent state tensor into its slot."""
        self._check_unchanged()
        if not isinstance(saves, SaveBatch | Sequence):  # an iterator: read once, here
            saves = list(saves)
        outcome = self._pool.save(saves)
        if isinstance(saves, SaveBatch):  # its columns: no value built per row
            seqs, slots = saves.seqs, saves.slots
        else:
            seqs, slots = tuple(s.seq for s in saves), tuple(s.slot for s in saves)
        # After how many tokens each saved state stands: what a restore of it puts back.
        lengths = recurrent_offset.recurrent_lengths(self._cache, seqs)
        self._lengths.update(zip(zip(seqs, slots, strict=True), lengths, strict=True))
        return outcome

    def restore(self, restores: Sequence[SsmSnapshotRestore], /) -> None:
        """Put each restore's snapshot back into the cache's recurrent state of its row."""
        self._check_unchanged()
        # Read before the copy: a slot saved around this pool (``torch_pool.save``) has no
        # length here, and its row's offset is left as it was (publish_state may refuse).
        lengths = [self._lengths.get((r.seq, r.slot)) for r in restores]
        self._pool.restore(restores)
        for restore, length in zip(restores, lengths, strict=True):
            if length is not None:
                recurrent_offset.restored(self._cache, restore.seq, length)

    def stored_position(self, seq: int, slot: int) -> int | None:
        """The position snapshot ``(seq, slot)`` holds, or ``None``."""
        return self._pool.stored_position(seq, slot)

    def stored_ticket(self, seq: int, slot: int) -> int | None:
        """The ticket of the save snapshot ``(seq, slot)`` holds, or ``None``."""
        return self._pool.stored_ticket(seq, slot)

    def fail_when(self, predicate: Callable[[SsmSnapshotSave], bool] | None) -> None:
        """Fault injection, as ``TorchSnapshotPool.fail_when``."""
        self._pool.fail_when(predicate)

    def _check_unchanged(self) -> None:
        for ref in self._refs:
            current = ref.current()
            if current is not ref.tensor:
                now = "gone" if current is None else _describe(current)
                raise InvalidArgumentError(
                    f"'cache' changed since the pool was made: {ref.name} was "
                    f"{_describe(ref.tensor)} and is now {now} (a new tensor); the pool copies "
                    f"into the tensors it was made with, so make a new HybridCacheSnapshotPool"
                )


def _describe(tensor: torch.Tensor) -> str:
    dtype = str(tensor.dtype).removeprefix("torch.")
    return f"a {tuple(tensor.shape)} {dtype} tensor on {tensor.device}"
