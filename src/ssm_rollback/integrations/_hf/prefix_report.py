"""``PrefixCacheReport``: what a ``HybridPrefixCache`` has done so far, and what it holds."""

from __future__ import annotations

import attrs

__all__ = ["PrefixCacheReport"]


@attrs.frozen
class PrefixCacheReport:
    """What a ``HybridPrefixCache`` has done so far, and what it holds."""

    #: ``prepare`` calls that started from a stored prefix, and those that did not.
    hits: int = 0
    misses: int = 0
    #: Prompt tokens the hits did not compute, and those computed here (``prepare``'s prefills
    #: and ``publish_generated``'s ``followed_by``; not what ``generate`` or a decoder computes
    #: after them: the last token, or with ``prefill_rest=False`` the rest of the prompt).
    tokens_reused: int = 0
    tokens_computed: int = 0
    #: Prefixes stored, evicted (for slots or for bytes), declined (would not fit).
    published: int = 0
    evictions: int = 0
    declined: int = 0
    #: Prefixes held now, their bytes, and the budget.
    entries: int = 0
    bytes_held: int = 0
    max_bytes: int = 0
