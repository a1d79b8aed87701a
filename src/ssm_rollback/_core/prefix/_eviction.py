"""Which unpinned entry a full ``PrefixSnapshotIndex`` evicts: its rules 7 and 9.

``EvictionOrder`` keeps the live entries in a heap by their key: demoted
first (rule 9), then by priority: ``"lru"`` by last use alone,
``"benefit"`` by GreedyDual (the index's level at the last use plus the
entry's value: its margin over the longest live entry it extends, times its
uses, the first of them discounted while longer live entries extend it;
rule 7), in ``SCALE``-ths of a token. The margins come from the forest of
live entries, each filed under the longest live entry it extends
(``adopt``, ``detach``): when an entry comes or goes, the margins of the
entries nearest above it change and they are filed again, and so is an
entry that comes to have kids or has none left. Stale heap items (an entry
re-filed since, or gone) are skipped when met and dropped in bulk.
"""

from __future__ import annotations

import heapq
from collections.abc import Container, Iterable
from typing import Final, Literal, final, get_args

import attrs

from ..._errors import InvariantError
from ._values import PrefixEntry

__all__ = ["EVICTIONS", "GHOSTS", "Eviction", "EvictionOrder", "Live"]

Eviction = Literal["lru", "benefit"]
EVICTIONS: Final = get_args(Eviction)
#: Evicted prefixes whose uses "benefit" remembers, per shared slot (rule 7).
GHOSTS: Final = 4
#: Values and levels count ``SCALE``-ths of a token: an interior entry's first use is a fraction.
SCALE: Final = 16


@attrs.define(eq=False)
class Live:
    """One live entry and what the index keeps about it."""

    entry: PrefixEntry
    tokens: tuple[int, ...]
    pins: int = 0
    #: One, plus its hits at a branch (rule 7), remembered across evictions.
    uses: int = 1
    used: int = 0  # the index's clock at the last publish or hit
    base: int = 0  # the index's level at the last publish or hit ("benefit", rule 7)
    #: The longest live entry it extends, and the live entries whose longest such entry it is.
    parent: Live | None = None
    kids: dict[int, Live] = attrs.field(factory=dict)  # by slot
    demoted: bool = False  # rule 9: evicted first, until its next use
    #: What its first use is worth, in ``SCALE``-ths, while longer live entries extend it
    #: (rule 7): the index's rate of hits at a branch when it last became so.
    first_use: int = SCALE
    #: Its eviction order (rank, priority, last use) as last filed in the heap.
    key: tuple[int, int, int] = (1, 0, 0)

    def value(self) -> int:
        """``SCALE``-ths of tokens it is expected to save (rule 7): its margin over its parent
        per use, the first use discounted while it has kids."""
        below = 0 if self.parent is None else self.parent.entry.length
        first = self.first_use if self.kids else SCALE
        return (self.entry.length - below) * (SCALE * (self.uses - 1) + first)


@final
class EvictionOrder:
    """The eviction order of the live entries ``lives`` (the index's own table, by slot)."""

    def __init__(self, policy: Eviction, capacity: int, lives: dict[int, Live]) -> None:
        self.policy = policy
        self._capacity = capacity
        self._lives = lives
        self._clock = 0
        self._level = 0  # GreedyDual's L (rule 7)
        #: The uses of recently evicted prefixes, by hash (rule 7): oldest first.
        self._ghosts: dict[int, int] = {}
        #: (rank, priority, last use, serial, entry): a min-heap.
        self._heap: list[tuple[int, int, int, int, Live]] = []
        self._serial = 0
        #: Hits at a branch, and entries that came to have kids (rule 7's rate).
        self._branch_hits = 0
        self._interiors = 0
        #: Entries extending no live entry: the forest's roots, by slot.
        self.roots: dict[int, Live] = {}

    def touch(self, live: Live) -> None:
        """``live`` was published or hit now: used again, no longer demoted (rule 9)."""
        self._clock += 1
        live.used = self._clock
        live.base = self._level
        live.demoted = False
        self.file(live)

    def last_use(self, live: Live) -> tuple[int, int]:
        return live.used, live.base

    def pass_through(self, live: Live, last_use: tuple[int, int]) -> None:
        """A frontier hit the traffic moved on from keeps the age it had (rule 7)."""
        live.used, live.base = last_use
        self.file(live)

    def hit_at_branch(self, live: Live) -> None:
        """A hit on ``live`` left the traffic the index knows (rule 7): a use of it, and one
        more hit at a branch for the rate."""
        live.uses += 1
        self._branch_hits += 1

    def demote(self, live: Live) -> None:
        live.demoted = True
        self.file(live)

    def victim(self, own: Container[int]) -> Live | None:
        """The unpinned entry the policy evicts, or ``None`` when all are pinned; ``own``
        (the ids of what the plan placing now has placed) may go though pinned (rule 6).

        The heap's least current item; pinned entries met on the way are filed back.
        """
        heap, pinned, victim = self._heap, [], None
        while heap:
            item = heapq.heappop(heap)
            live = item[4]
            if self._lives.get(live.entry.slot) is not live or live.key != item[:3]:
                continue  # stale
            if live.pins and id(live) not in own:
                pinned.append(item)
                continue
            victim = live
            break
        for item in pinned:
            heapq.heappush(heap, item)
        return victim

    def evicted(self, victim: Live) -> None:
        """Raise the level to the victim's priority (rule 7: not a demoted one's, rule 9) and
        remember its uses."""
        if not victim.demoted:
            self._level = max(self._level, victim.base + victim.value())
        if self.policy == "lru":
            return
        key = hash(victim.tokens)  # statistics only: a collision misjudges, never matches
        self._ghosts.pop(key, None)
        self._ghosts[key] = victim.uses
        if len(self._ghosts) > GHOSTS * self._capacity:
            del self._ghosts[next(iter(self._ghosts))]

    def uses_of(self, tokens: tuple[int, ...]) -> int:
        """A prefix placed again gets back the uses it had when evicted (rule 7)."""
        return self._ghosts.pop(hash(tokens), 1)

    def key(self, live: Live) -> tuple[int, int, int]:
        """Its eviction order: demoted first (rule 9), then by priority (rule 7; ``"lru"`` by
        last use alone)."""
        rank = 0 if live.demoted else 1
        if self.policy == "lru":
            return (rank, 0, live.used)
        return (rank, live.base + live.value(), live.used)

    def file(self, live: Live) -> None:
        """File ``live`` in the heap under its current key, unless it is filed so already."""
        key = self.key(live)
        if key == live.key:
            return
        live.key = key
        self._serial += 1
        heapq.heappush(self._heap, (*key, self._serial, live))
        if len(self._heap) > 2 * len(self._lives) + 64:  # mostly stale: rebuild, amortised
            self._heap = [
                (*e.key, n, e) for n, e in enumerate(self._lives.values(), self._serial + 1)
            ]
            self._serial += len(self._heap)
            heapq.heapify(self._heap)

    # -- the forest of live entries (their margins) -------------------------------------

    def adopt(self, live: Live, parent: Live | None, nearest_above: Iterable[Live]) -> None:
        """File a new entry under ``parent`` (the longest live entry it extends); the entries
        ``nearest_above`` it, filed under ``parent`` until now, go under it."""
        siblings = self.roots if parent is None else parent.kids
        # Before its kids move: a parent that gives all of them to ``live`` had kids already.
        first_kid = parent is not None and not parent.kids
        for kid in nearest_above:  # their margin shrinks (rule 7)
            del siblings[kid.entry.slot]
            kid.parent = live
            live.kids[kid.entry.slot] = kid
            self.file(kid)
        live.parent = parent
        siblings[live.entry.slot] = live
        if live.kids:  # placed between an entry and its kids
            self._extended(live)
        if first_kid and parent is not None:  # its first use is discounted now (rule 7)
            self._extended(parent)
            self.file(parent)

    def _extended(self, live: Live) -> None:
        """``live`` has kids now, and had none (rule 7): its first use is worth the rate of
        hits at a branch per entry that came to have kids, so far (Laplace's rule: one half
        before any), at most a whole use."""
        rate = SCALE * (self._branch_hits + 1) // (self._interiors + 2)
        live.first_use = min(SCALE, rate)
        self._interiors += 1

    def detach(self, live: Live) -> None:
        """Take a leaving entry out of the forest: its kids go under its parent."""
        parent = live.parent
        siblings = self.roots if parent is None else parent.kids
        del siblings[live.entry.slot]
        live.parent = None
        for slot, kid in live.kids.items():  # their margin grows (rule 7)
            kid.parent = parent
            siblings[slot] = kid
            self.file(kid)
        live.kids = {}
        if parent is not None and not parent.kids:  # a whole first use again (rule 7)
            self.file(parent)

    def check(self) -> None:
        """Raise ``InvariantError`` unless every live entry is filed under its current key and
        in the right place of the forest."""
        filed = {(rank, p, used, id(live)) for rank, p, used, _, live in self._heap}
        lives = list(self._lives.values())
        for live in lives:
            key = self.key(live)
            if live.key != key or (*key, id(live)) not in filed:
                raise InvariantError(f"{live.entry} is filed for eviction as {live.key}, not {key}")
            n = live.entry.length
            below = [
                o for o in lives if o.entry.length < n and live.tokens[: o.entry.length] == o.tokens
            ]
            expected = max(below, key=lambda o: o.entry.length, default=None)
            if live.parent is not expected:
                raise InvariantError(f"{live.entry} is filed under the wrong entry")
            siblings = self.roots if expected is None else expected.kids
            if siblings.get(live.entry.slot) is not live:
                raise InvariantError(f"{live.entry} is missing from its parent's entries")
        if sum(len(live.kids) for live in lives) + len(self.roots) != len(lives):
            raise InvariantError("the forest of live entries holds entries no longer live")
