"""The copies a ``HybridPrefixCache`` holds: one per index entry, within a byte budget.

Each entry of the prefix index has one copy of the cache after exactly its
tokens, kept with the ticket and tokens it was stored for (a hit is checked
against both before anything is restored). Entries grow with their length
(the KV), so bytes bound the store too: before a new copy is kept, the least
recently used copies other than those the caller keeps (the new entry, and
the hit a prefill stands on: pinned) are evicted, from the index too, until
it fits; one that cannot fit even alone is declined. Bytes held never exceed
``max_bytes``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import final

import attrs
from transformers.cache_utils import Cache

from ... import PrefixEntry, PrefixSnapshotIndex
from ..._errors import InvariantError
from .cache_copy import cache_nbytes, clone_cache

__all__ = ["PrefixCopies", "StoredPrefix"]


@attrs.frozen(eq=False)  # holds a cache: compare by identity
class StoredPrefix:
    """One entry's copy of the cache, with the ticket and tokens it was stored for."""

    entry: PrefixEntry
    tokens: tuple[int, ...]
    cache: Cache
    nbytes: int


@attrs.frozen
class Stored:
    """What ``PrefixCopies.store`` did: whether it kept the copy, and how many it evicted."""

    kept: bool
    evicted: int


@final
class PrefixCopies:
    """Copies by slot, the bytes they hold, and when each was last stored or hit."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.held = 0
        self._stored: dict[int, StoredPrefix] = {}
        self._used: dict[int, int] = {}  # slot -> clock at its last store or hit
        self._clock = 0

    def __len__(self) -> int:
        return len(self._stored)

    def get(self, slot: int) -> StoredPrefix | None:
        return self._stored.get(slot)

    def touch(self, slot: int) -> None:
        """Mark the copy in ``slot`` used now (the last to be evicted by bytes)."""
        self._clock += 1
        self._used[slot] = self._clock

    def touch_prefix(self, tokens: list[int], length: int) -> None:
        """Mark the copy of ``tokens[:length]`` used now, if one is held."""
        for slot, kept in self._stored.items():
            if kept.entry.length == length and list(kept.tokens) == tokens[:length]:
                self.touch(slot)

    def sync(self, live: Iterable[PrefixEntry]) -> int:
        """Forget the copies of entries no longer ``live`` (evicted by the index for a slot);
        how many."""
        kept = set(live)
        gone = [slot for slot, stored in self._stored.items() if stored.entry not in kept]
        for slot in gone:
            self._forget(slot)
        return len(gone)

    def store(
        self,
        index: PrefixSnapshotIndex,
        entry: PrefixEntry,
        tokens: list[int],
        cache: Cache,
        keep: set[int],
    ) -> Stored:
        """Keep a copy of ``cache`` for ``entry`` if it fits once the least recently used
        copies not in ``keep`` are evicted (from ``index`` too); else discard ``entry`` from
        ``index``, evicting nothing."""
        need = cache_nbytes(cache)
        kept = sum(self._stored[slot].nbytes for slot in keep if slot in self._stored)
        if kept + need > self.max_bytes:  # would not fit even alone: evict nothing for it
            index.discard(entry)
            return Stored(kept=False, evicted=0)
        evicted = 0
        while self.held + need > self.max_bytes:
            victims = [slot for slot in self._stored if slot not in keep]
            victim = min(victims, key=self._used.__getitem__)
            index.discard(self._stored[victim].entry)
            self._forget(victim)
            evicted += 1
        copied = clone_cache(cache)
        self._stored[entry.slot] = StoredPrefix(entry, tuple(tokens[: entry.length]), copied, need)
        self.held += need
        self.touch(entry.slot)
        return Stored(kept=True, evicted=evicted)

    def check(self, live: Iterable[PrefixEntry]) -> None:
        """Raise ``InvariantError`` unless the copies are exactly ``live``'s, within budget."""
        entries = {entry.slot: entry for entry in live}
        stored = {slot: kept.entry for slot, kept in self._stored.items()}
        if entries != stored:
            raise InvariantError(f"the index holds {entries} but the store {stored}")
        held = sum(kept.nbytes for kept in self._stored.values())
        if held != self.held or held > self.max_bytes:
            raise InvariantError(
                f"{held} bytes stored, {self.held} counted, {self.max_bytes} at most"
            )

    def _forget(self, slot: int) -> None:
        self.held -= self._stored.pop(slot).nbytes
        del self._used[slot]
