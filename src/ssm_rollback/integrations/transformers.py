"""Exact rollback for Hugging Face ``transformers`` hybrid and SSM models.

``transformers`` keeps a hybrid model's recurrent state in the linear-attention
layers of its ``DynamicCache`` (``conv_states`` and ``recurrent_states``, one
or more per layer) and its attention KV in the attention layers. Its own
``DynamicCache.crop`` refuses to roll such a cache back. Here:

- ``HybridCacheSnapshotPool`` snapshots the recurrent state of every batch row
  (a ``SnapshotPool``, built on ``TorchSnapshotPool``);
- ``crop_attention`` truncates every attention layer's KV to a length and
  leaves the recurrent state alone.

A rollback is then: restore the snapshot at ``keep_len`` (``apply_effects``),
``crop_attention(cache, prompt_len + keep_len)``, and decode on. One cache has
one length: the rows of a batch roll back to the same length, or are decoded
as separate caches.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import final

import attrs
import torch
from transformers.cache_utils import (
    Cache,
    DummyLayer,
    DynamicLayer,
    DynamicSlidingWindowLayer,
    LinearAttentionCacheLayerMixin,
)

from .._effects import SaveBatch, SsmSnapshotRestore, SsmSnapshotSave
from .._errors import InvalidArgumentError, InvalidArgumentTypeError, check_non_negative_int
from ..backends.torch import TorchSnapshotPool
from ..pool import SaveOutcome

__all__ = [
    "GenerationReport",
    "GenerationResult",
    "HybridCacheSnapshotPool",
    "backtracking_generate",
    "crop_attention",
    "speculative_generate",
]


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


def _layers(cache: Cache) -> Sequence[object]:
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
    for idx, layer in enumerate(_layers(cache)):
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
                    f"'num_sequences' must match the cache's batch size {batch}, got {expected}"
                )
        self._cache = cache
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
        return self._pool.save(saves)

    def restore(self, restores: Sequence[SsmSnapshotRestore], /) -> None:
        """Put each restore's snapshot back into the cache's recurrent state of its row."""
        self._check_unchanged()
        self._pool.restore(restores)

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
    _plan_crop_attention(cache, length)()


def _plan_crop_attention(cache: Cache, length: int) -> Callable[[], None]:
    """Check ``crop_attention(cache, length)`` without changing anything; the crop to run."""
    length = check_non_negative_int("length", length)
    plans = [_crop_plan(idx, layer, length) for idx, layer in enumerate(_layers(cache))]

    def crop() -> None:
        for plan in plans:  # every layer checked before any is changed
            if plan is not None:
                plan()

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
            f"'length' must be <= the cache's length {held} (layer {idx}), got {length}"
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


# The decoders build on the pool above; imported last, as they import it from here.
from ._generation import (  # noqa: E402
    GenerationReport,
    GenerationResult,
    backtracking_generate,
)
from ._speculative import speculative_generate  # noqa: E402
