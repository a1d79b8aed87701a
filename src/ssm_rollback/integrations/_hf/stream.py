"""One sequence decoding through a ``transformers`` cache, with a checkpoint it can go back to.

The decoders in ``_generation`` and ``_speculative`` drive one ``_Stream`` per
row. A stream feeds tokens (one forward pass per ``feed``), keeps a one-slot
checkpoint of the recurrent state in a ``HybridCacheSnapshotPool`` slot of its
own (after the ring's slots), and rewinds to it by restoring the slot and
cropping the attention KV. Tokens a rewind drops but the caller wants back
are queued and fed in front of the next ``feed``, in the same forward pass.
A cache without recurrent state (attention only) is just cropped. On CPU a
forward pass shorter than the Mamba2 scan's chunk scans only its own tokens
(``_scan_chunks``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import final

import torch
from transformers.cache_utils import Cache, LinearAttentionCacheLayerMixin

from ... import SsmDecodeRing, SsmSnapshotRestore, SsmSnapshotSave
from ..._errors import InvalidArgumentError
from ...pool import apply_effects
from .cache_pool import HybridCacheSnapshotPool
from .crop import plan_crop_attention
from .scan_chunks import ScanChunks

__all__ = ["CachedForward"]


def keeps_one_logit(model: torch.nn.Module) -> bool:
    """Whether the model's forward takes ``logits_to_keep``: a prompt's logits but the last are
    never read, and a long chunk's full logits cost about a tenth of its forward pass on CPU."""
    forward = getattr(model, "forward", None)
    if not callable(forward):
        return False
    try:
        return "logits_to_keep" in inspect.signature(forward).parameters
    except (TypeError, ValueError):  # no signature to read: pass nothing extra
        return False


@final
class CachedForward:
    """One model's forward passes over a cache: no gradients, the Mamba2 scan narrowed to the
    pass (``narrow_scans``, ``ScanChunks``), and with ``last_only`` one row of logits where
    the model takes ``logits_to_keep``."""

    def __init__(self, model: torch.nn.Module, *, narrow_scans: bool = True) -> None:
        self.model = model
        self._device = next(model.parameters()).device
        self._chunks = ScanChunks(model if narrow_scans else torch.nn.Module())
        self._keeps_one = keeps_one_logit(model)

    def __call__(
        self, cache: Cache | None, tokens: list[int], *, last_only: bool
    ) -> tuple[Cache, torch.Tensor]:
        """The cache after feeding ``tokens`` on ``cache``, and the logits (of the last token
        alone, where the model can, with ``last_only``)."""
        with torch.no_grad(), self._chunks.narrowed(len(tokens)):
            inputs = torch.tensor([tokens], dtype=torch.long, device=self._device)
            kwargs: dict[str, object] = {} if cache is None else {"cache": cache}
            if last_only and self._keeps_one:
                kwargs["logits_to_keep"] = 1
            out = self.model(inputs, use_cache=True, **kwargs)
        fed: Cache = out.cache
        logits: torch.Tensor = out.logits
        return fed, logits


def _has_recurrent_state(cache: Cache) -> bool:
    layers = getattr(cache, "layers", ())
    return any(isinstance(layer, LinearAttentionCacheLayerMixin) for layer in layers)


@final
class _Stream:
    """A batch-1 decode: the model, its cache, the tokens fed so far, and a checkpoint.

    ``ring_slots`` pool slots belong to the caller's ring (boundary
    snapshots); the checkpoint uses the slot after them, with tickets from a
    one-slot ring of its own so that a stale checkpoint can never be restored.
    """

    def __init__(
        self, model: torch.nn.Module, vocab: int, ring_slots: int, *, narrow_scans: bool = True
    ) -> None:
        self._vocab = vocab
        self._ring_slots = ring_slots
        self._forward = CachedForward(model, narrow_scans=narrow_scans)
        self.cache: Cache | None = None
        self.pool: HybridCacheSnapshotPool | None = None
        self.fed: list[int] = []  # tokens the cache holds, prompt included
        self.queued: list[int] = []  # tokens to feed in front of the next feed
        self.forward_passes = 0
        self._checkpoint_ring = SsmDecodeRing(1)
        self._checkpoint: SsmSnapshotSave | None = None

    @property
    def model(self) -> torch.nn.Module:
        """The model it decodes."""
        return self._forward.model

    def feed(self, ids: Sequence[int], *, last_only: bool = False) -> torch.Tensor:
        """Feed the queued tokens and ``ids`` in one forward pass; the logits of ``ids`` (of
        the last alone with ``last_only``: a prompt's others are never read)."""
        tokens = [*self.queued, *ids]
        cache, out = self._forward(self.cache, tokens, last_only=last_only)
        self.forward_passes += 1
        self.cache = cache
        self.fed += tokens
        self.queued = []
        if self.pool is None and _has_recurrent_state(cache):
            self.pool = HybridCacheSnapshotPool(cache, self._ring_slots + 1)
        first = -1 if last_only else len(tokens) - len(ids)
        logits: torch.Tensor = out[0, first:, : self._vocab]
        return logits

    def save(self, save: SsmSnapshotSave, ring: SsmDecodeRing) -> bool:
        """Snapshot the live state for the caller's ring; whether it was saved."""
        if self.pool is None:
            return False
        return apply_effects(self.pool, [save], [ring]).ok

    def restore(self, restore: SsmSnapshotRestore, length: int) -> None:
        """Put a ring snapshot back and crop the KV: the cache then holds ``length`` tokens."""
        if self.pool is not None:
            self.pool.restore([restore])
        self._truncate(length)

    def checkpoint(self) -> None:
        """Remember the state after ``len(self.fed)`` tokens (queued tokens are not fed yet)."""
        length = len(self.fed)
        if self.pool is None:
            return  # a KV crop needs no checkpoint
        if self._checkpoint is not None and self._checkpoint.token_position == length:
            return  # the slot already holds this state
        self._checkpoint_ring.record(length)
        entry = self._checkpoint_ring.entry_for(length)
        assert entry is not None
        save = SsmSnapshotSave(0, self._ring_slots, length, entry.ticket)
        if not self.pool.save([save]).ok:
            raise InvalidArgumentError("the checkpoint save failed: the pool refused to copy")
        self._checkpoint = save

    def rewind(self, keep: int) -> None:
        """Go back to ``keep`` tokens: restore the checkpoint and queue the held tokens from it up
        to ``keep`` to feed again. A cache without recurrent state is cropped to ``keep`` itself
        (a KV crop is exact at any length), and nothing is queued."""
        kept = [*self.fed, *self.queued][:keep]
        if self.pool is None:
            at = min(keep, len(self.fed))
        else:
            assert self._checkpoint is not None
            checkpoint = self._checkpoint
            at = checkpoint.token_position
            self.pool.restore([SsmSnapshotRestore(0, checkpoint.slot, at, checkpoint.ticket)])
        if keep < at:
            raise InvalidArgumentError(f"'keep' must be >= the checkpoint {at}, got {keep}")
        self._truncate(at)
        self.queued = kept[at:]

    def _truncate(self, length: int) -> None:
        self.plan_truncate(length)()

    def plan_truncate(self, length: int) -> Callable[[], None]:
        """Check a cut of the KV and the fed tokens to ``length``, changing nothing; the cut."""
        assert self.cache is not None
        crop = plan_crop_attention(self.cache, length)

        def cut() -> None:
            crop()
            del self.fed[length:]

        return cut
