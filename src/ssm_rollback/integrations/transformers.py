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

``HybridPrefixCache`` keeps shared prompt prefixes (SSM state and attention
KV) within a byte budget and starts each prompt's cache from the longest;
``message_boundaries`` says where a chat's messages end, the positions to
share.
"""

from ._hf.cache_pool import HybridCacheSnapshotPool
from ._hf.chat import message_boundaries
from ._hf.crop import crop_attention
from ._hf.decoding import GenerationResult
from ._hf.generation import GenerationReport, backtracking_generate
from ._hf.prefix_cache import HybridPrefixCache
from ._hf.prefix_report import PrefixCacheReport
from ._hf.speculative import speculative_generate

__all__ = [
    "GenerationReport",
    "GenerationResult",
    "HybridCacheSnapshotPool",
    "HybridPrefixCache",
    "PrefixCacheReport",
    "backtracking_generate",
    "crop_attention",
    "message_boundaries",
    "speculative_generate",
]
