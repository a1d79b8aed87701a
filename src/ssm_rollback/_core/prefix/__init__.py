"""Prefix snapshots: SSM state shared across requests, at exact token prefixes (SPEC 13).

``_index`` holds ``PrefixSnapshotIndex`` and its numbered rules,
``_eviction`` the order its rules 7 and 9 evict in, ``_trie`` the exact
radix tree it matches with, ``_values`` what it hands out.
"""

from __future__ import annotations

from ._index import EVICTIONS, MAX_CAPACITY, Eviction, PrefixSnapshotIndex
from ._values import (
    PrefillChunk,
    PrefillPlan,
    PrefixEntry,
    PrefixHit,
    PrefixHold,
    PrefixStats,
)

__all__ = [
    "EVICTIONS",
    "MAX_CAPACITY",
    "Eviction",
    "PrefillChunk",
    "PrefillPlan",
    "PrefixEntry",
    "PrefixHit",
    "PrefixHold",
    "PrefixSnapshotIndex",
    "PrefixStats",
]
