"""The values ``PrefixSnapshotIndex`` hands out: entries, hits, prefill plans, counters."""

from __future__ import annotations

import attrs

from ..effects import SsmPrefixRestore, SsmPrefixSave

__all__ = ["PrefillChunk", "PrefillPlan", "PrefixEntry", "PrefixHit", "PrefixHold", "PrefixStats"]


@attrs.frozen
class PrefixEntry:
    """A live shared snapshot: the SSM state after the first ``length`` tokens, in ``slot``.

    ``length`` counts tokens from the start of the prompt (unlike a ring's
    output positions); ``ticket`` is what the shared slot must hold for a
    restore to copy.
    """

    length: int
    slot: int
    ticket: int


@attrs.frozen
class PrefixHit:
    """A request's reuse of a live entry: ``restore`` copies it into the request's row."""

    entry: PrefixEntry
    restore: SsmPrefixRestore


@attrs.frozen
class PrefillChunk:
    """Feed the prompt up to ``end`` tokens, then apply ``save`` (``None``: nothing to share)."""

    end: int
    save: SsmPrefixSave | None


@attrs.frozen
class PrefillPlan:
    """A new request's prefill: restore ``hit`` (if any), then compute from ``start`` in ``chunks``.

    Hand it back to ``PrefixSnapshotIndex.release`` once the prefill has
    run: until then its hit and the entries it publishes stay pinned.
    """

    seq: int
    hit: PrefixHit | None
    start: int
    chunks: tuple[PrefillChunk, ...]
    #: Which of the index's outstanding plans this is (for ``release``).
    pin: int

    @property
    def saves(self) -> tuple[SsmPrefixSave, ...]:
        """The chunks' saves, in prompt order."""
        return tuple(chunk.save for chunk in self.chunks if chunk.save is not None)


@attrs.frozen
class PrefixHold:
    """The application's pin on a live entry (``PrefixSnapshotIndex.hold``): until
    ``release(hold)`` no placement evicts it - an agent holding its answer's end while its
    tool runs, for the next step that extends it."""

    entry: PrefixEntry
    #: Which of the index's outstanding pins this is (for ``release``).
    pin: int


@attrs.frozen
class PrefixStats:
    """What a ``PrefixSnapshotIndex`` has done so far."""

    #: Plans that reused a live entry, and those that did not.
    hits: int = 0
    misses: int = 0
    #: Prompt tokens the hits did not compute.
    tokens_reused: int = 0
    #: Entries placed, entries evicted to make room, publishes declined (every slot pinned).
    published: int = 0
    evicted: int = 0
    declined: int = 0
