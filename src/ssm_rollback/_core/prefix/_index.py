"""``PrefixSnapshotIndex``: which shared slot holds the SSM state after which exact prefix.

The rules, which every method cites:

1. **Capacity.** ``capacity`` shared slots, ``[0, capacity)``, fixed at
   construction; 0 disables the index: every lookup misses, every publish
   is declined.
2. **Exact.** An entry is the state after exactly ``tokens[:length]``; a
   lookup compares token ids (never only a hash), so no collision can hit.
3. **One token left.** A hit on ``tokens`` is at most ``len(tokens) - 1``
   long: the engine needs the last token's logits.
4. **One entry per prefix, one per slot.** Publishing a live prefix
   refreshes it; every live entry owns its slot.
5. **Tickets.** Every placement mints a ticket (the ring's process-wide
   counter), carried by the save and every restore: a pool restores a
   shared slot only when it holds exactly that ticket, so a slot reused for
   another prefix is never restored for the old one.
6. **Pins.** A plan's hit, and every entry a plan publishes, is pinned
   until ``release(plan)``, and an entry the application holds
   (``hold(entry)``) until ``release(hold)``; a pinned entry is never
   evicted by anyone else. A plan may evict what it published itself for a later position
   (the save of the earlier one is then left out; the later chunk's save
   overwrites the slot): a plan of more positions than slots keeps the
   ones the policy prefers, not the first few and a flood of declines.
7. **Eviction.** A full index evicts an unpinned entry by its policy:
   ``"lru"`` (least recently published or hit) or ``"benefit"``; with
   every slot pinned, a publish is declined. ``"benefit"`` keeps what
   saves the most tokens, aged the GreedyDual way: an entry's priority is
   the index's level ``L`` at its last use plus its value; the lowest
   priority goes (the least recently used among equals) and ``L`` rises
   to it. The value is the entry's *margin* times its *uses*. The margin
   is what evicting it costs a request that would hit it: its length less
   that of its longest live proper prefix, where that request then hits
   (its whole length when none is live). Its uses are one plus its hits
   at a *branch*: hits by a request that leaves the traffic the index
   knows there, because a longer live entry extends the hit and the
   request does not follow it (a regenerated answer, an edit, another
   session on a shared system prompt). A hit on a *frontier* (no longer
   entry extends it: the next turn of a conversation) is the traffic
   moving on, not a sign the entry will be hit again; when the plan then
   places a longer entry on the hit's path, the hit passes through: the
   entry keeps the age it had, and the new entry carries the traffic. So
   while a longer live entry extends an entry, its first use is only as
   likely as a hit at a branch: it is worth the index's rate of hits at a
   branch per entry that came to be extended so far (Laplace's rule,
   ``(hits + 1) / (entries + 2)``, fixed when it comes to be extended), at
   most a whole use. The next step of an agent hits the answer end, not
   the prompt end below it; best-of-n samples, branching at the prompt
   end, raise the rate to a whole use. An evicted prefix placed again gets
   back the uses it had (remembered for ``GHOSTS`` x capacity evicted
   prefixes, by hash: statistics only, never a match). So a message end
   one token before the prompt end is worth one token per use, the lone
   copy of a system prompt its whole length per use, and an entry whose
   shorter neighbour goes is worth more at once.
8. **Failed saves.** ``discard(entry)`` drops an entry whose save failed
   (``apply_effects(..., prefix_index=)`` calls it), so nothing points at a
   slot that was not written.
9. **Demoted.** ``demote(entry)``: the application says no request is
   expected to hit the entry (its conversation moved past it). A demoted
   unpinned entry is evicted before any other (among demoted ones, in the
   policy's order: the least recently used under ``"lru"``, the lowest
   priority under ``"benefit"``; without raising ``L``); it stays matchable
   until then, and a hit or a publish of it makes it an ordinary entry
   again. ``demoted()`` lists those still demoted.

The order rules 7 and 9 evict in is ``_eviction.EvictionOrder``'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, final

import attrs

from ..._errors import (
    InvalidArgumentError,
    InvariantError,
    check_non_negative_int,
    grouped,
    shown,
)
from ..columns import int_column
from ..effects import SsmPrefixRestore, SsmPrefixSave
from ..ring import tickets
from ._eviction import EVICTIONS, Eviction, EvictionOrder, Live
from ._trie import Trie
from ._values import PrefillChunk, PrefillPlan, PrefixEntry, PrefixHit, PrefixHold, PrefixStats

__all__ = ["EVICTIONS", "MAX_CAPACITY", "Eviction", "PrefixSnapshotIndex"]

#: How many left entries per slot the index remembers, for a save applied after its entry left.
GONE: Final = 64


#: The most shared slots an index keeps: each holds a whole SSM state (megabytes), so more
#: than this is a mistake, not a machine (and the free list alone would not fit).
MAX_CAPACITY: Final = 1 << 24


def _capacity(value: int) -> int:
    capacity = check_non_negative_int("capacity", value)
    if capacity > MAX_CAPACITY:
        raise InvalidArgumentError(
            f"'capacity' must be at most {MAX_CAPACITY:,} shared slots, got {grouped(capacity)}"
        )
    return capacity


@final
@attrs.define(eq=False, repr=False, getstate_setstate=False)
class PrefixSnapshotIndex(tickets.HoldsTickets):
    """The shared SSM snapshots of prompt prefixes: exact matching, pins, eviction (rules above).

    No tensors: ``plan_prefill`` and ``publish`` return the effects
    (``SsmPrefixSave``, ``SsmPrefixRestore``) that a pool with shared slots
    performs.
    """

    _capacity: int = attrs.field(converter=_capacity)
    _eviction: Eviction = attrs.field(default="lru", kw_only=True)
    _trie: Trie[Live] = attrs.field(init=False, factory=Trie)
    _by_slot: dict[int, Live] = attrs.field(init=False, factory=dict)
    #: Slots freed since placed, popped lowest first; from ``_fresh`` on, slots never used.
    _free: list[int] = attrs.field(init=False, factory=list)
    _fresh: int = attrs.field(init=False, default=0)
    #: The outstanding plans and holds by ``pin``, and what each pinned.
    _plans: dict[int, tuple[PrefillPlan | PrefixHold, tuple[Live, ...]]] = attrs.field(
        init=False, factory=dict
    )
    _order: EvictionOrder = attrs.field(init=False)  # rules 7 and 9
    _stats: dict[str, int] = attrs.field(init=False)
    #: The tickets of the entries that left lately, oldest first (``_left_lately``).
    _gone: dict[int, None] = attrs.field(init=False, factory=dict)

    def __attrs_post_init__(self) -> None:
        if self._eviction not in EVICTIONS:
            raise InvalidArgumentError(
                f"'eviction' must be one of {', '.join(map(repr, EVICTIONS))}, "
                f"got {shown(self._eviction)}"
            )
        self._order = EvictionOrder(self._eviction, self._capacity, self._by_slot)
        self._stats = dict.fromkeys(attrs.fields_dict(PrefixStats), 0)

    def _newest_held(self) -> int:
        """The largest ticket the index keeps: its entries', its plans' and holds', the gone."""
        held = [live.entry.ticket for live in self._by_slot.values()]
        return max([*held, *self._plans, *self._gone], default=-1)

    @property
    def capacity(self) -> int:
        """Shared slots the index places prefixes in (rule 1)."""
        return self._capacity

    @property
    def eviction(self) -> Eviction:
        """The eviction policy (rule 7)."""
        return self._eviction

    @property
    def stats(self) -> PrefixStats:
        """Hits, misses, tokens reused, published, evicted, declined: so far."""
        return PrefixStats(**self._stats)

    def __len__(self) -> int:
        return len(self._by_slot)

    def __repr__(self) -> str:
        return (
            f"PrefixSnapshotIndex(capacity={self._capacity}, eviction={self._eviction!r}, "
            f"live={len(self._by_slot)}, pinned={sum(1 for e in self._by_slot.values() if e.pins)})"
        )

    def entries(self) -> tuple[PrefixEntry, ...]:
        """The live entries, by slot."""
        return tuple(self._by_slot[slot].entry for slot in sorted(self._by_slot))

    def demoted(self) -> tuple[PrefixEntry, ...]:
        """The live entries demoted and neither hit nor published since (rule 9), by slot."""
        return tuple(
            self._by_slot[slot].entry
            for slot in sorted(self._by_slot)
            if self._by_slot[slot].demoted
        )

    def tokens_of(self, entry: PrefixEntry) -> tuple[int, ...]:
        """The exact token ids of a live entry's prefix."""
        return self._live(entry).tokens

    def match(self, tokens: Sequence[int]) -> PrefixEntry | None:
        """The longest live prefix of ``tokens`` leaving one token to compute; changes nothing.

        Rules 2 and 3: exact token ids, ``length <= len(tokens) - 1``.
        """
        token_list = _token_list(tokens)  # checked even where nothing is live to match
        found = self._trie.longest(token_list, len(token_list) - 1) if self._by_slot else None
        return None if found is None else found.entry

    def plan_prefill(
        self, seq: int, tokens: Sequence[int], *, publish_at: Sequence[int] = ()
    ) -> PrefillPlan:
        """The whole decision for a new request on row ``seq``: its hit, chunks and saves.

        ``publish_at`` are the positions to share (each ``< len(tokens)``;
        any order, duplicates ignored); those at or below the hit, or live
        already, need no save. The hit and every entry published here are
        pinned until ``release(plan)`` (rule 6).
        """
        seq = check_non_negative_int("seq", seq)
        token_list = _token_list(tokens)
        if not token_list:
            raise InvalidArgumentError(
                "'tokens' must hold at least one token: the last is always computed (rule 3)"
            )
        positions = sorted(set(int_column("publish_at", publish_at)))
        if positions and positions[-1] >= len(token_list):
            raise InvalidArgumentError(
                f"'publish_at' must hold positions < len(tokens) {len(token_list)}, "
                f"got {shown(positions[-1])}"
            )
        found = self._trie.longest(token_list, len(token_list) - 1) if self._by_slot else None
        pinned: list[Live] = []
        hit = None
        if found is None:
            self._stats["misses"] += 1
        else:
            self._stats["hits"] += 1
            self._stats["tokens_reused"] += found.entry.length
            # Rule 7: a hit counts as a use where the request leaves the traffic the index
            # knows (a longer entry extends the hit); on a frontier it may only pass through.
            frontier = not found.kids
            last_use = self._order.last_use(found)
            if not frontier:
                self._order.hit_at_branch(found)
            self._order.touch(found)
            found.pins += 1
            pinned.append(found)
            e = found.entry
            hit = PrefixHit(e, SsmPrefixRestore(seq, e.slot, e.length, e.ticket))
        start = 0 if hit is None else hit.entry.length
        chunks: list[PrefillChunk] = []
        own: dict[int, Live] = {}  # what this plan placed and still holds, by id, in order
        for position in positions:
            if position <= start or position == 0:
                continue
            live = self._trie.get(token_list, position)
            if live is not None:
                self._order.touch(live)
                continue
            placed = self._place(token_list, position, own)
            if placed is None:
                continue
            placed.pins += 1
            own[id(placed)] = placed
        if found is not None and frontier and found.kids and self._eviction == "benefit":
            # Passed through (rule 7): the plan placed a longer entry on the hit's path, where
            # the traffic goes on; the hit keeps the age it had.
            self._order.pass_through(found, last_use)
        for live in own.values():  # those evicted for a later position left ``own``
            pinned.append(live)
            e = live.entry
            save = SsmPrefixSave(seq, e.slot, e.length, e.ticket)
            chunks.append(PrefillChunk(e.length, save))
        chunks.append(PrefillChunk(len(token_list), None))
        plan = PrefillPlan(seq, hit, start, tuple(chunks), tickets.mint_ticket())
        self._plans[plan.pin] = (plan, tuple(pinned))
        return plan

    def hold(self, entry: PrefixEntry) -> PrefixHold:
        """Pin a live entry for the application until ``release(hold)`` (rule 6).

        For a request the application knows will come and extend the entry
        (an agent's next step, once its tool returns): no placement evicts
        it meanwhile, so others are evicted or declined instead. Not a use:
        the entry keeps its place in the eviction order.
        """
        live = self._live(entry)
        live.pins += 1
        hold = PrefixHold(entry, tickets.mint_ticket())
        self._plans[hold.pin] = (hold, (live,))
        return hold

    def release(self, plan: PrefillPlan | PrefixHold) -> None:
        """Unpin what ``plan`` (or a ``hold``) pinned (rule 6): once, after its prefill has run."""
        handed = type(plan) is PrefillPlan or type(plan) is PrefixHold
        pin = plan.pin if handed and type(plan.pin) is int else -1
        outstanding = self._plans.get(pin)
        if outstanding is None or outstanding[0] != plan:  # not one handed out, as handed out
            raise InvalidArgumentError(
                f"'plan' must be a PrefillPlan or PrefixHold of this index not yet released, "
                f"got {shown(plan)}"
            )
        del self._plans[pin]
        for live in outstanding[1]:
            if self._by_slot.get(live.entry.slot) is live:  # not discarded since
                live.pins -= 1

    def publish(self, seq: int, tokens: Sequence[int], length: int) -> SsmPrefixSave | None:
        """Share row ``seq``'s live state at ``length`` during decode; the save to apply now.

        Apply it while the live state stands after ``tokens[:length]``.
        ``None`` when that prefix is live already (refreshed, rule 4) or every
        slot is pinned (declined, rule 7).
        """
        seq = check_non_negative_int("seq", seq)
        token_list = _token_list(tokens)
        length = check_non_negative_int("length", length)
        if not 1 <= length <= len(token_list):
            raise InvalidArgumentError(
                f"'length' must be in [1, len(tokens) {len(token_list)}], got {shown(length)}"
            )
        live = self._trie.get(token_list, length)
        if live is not None:
            self._order.touch(live)
            return None
        placed = self._place(token_list, length)
        if placed is None:
            return None
        e = placed.entry
        return SsmPrefixSave(seq, e.slot, e.length, e.ticket)

    def discard(self, entry: PrefixEntry) -> None:
        """Drop a live entry whose save failed (rule 8); pins on it are void."""
        self._drop(self._live(entry))

    def demote(self, entry: PrefixEntry) -> None:
        """Evict a live entry before any other, once unpinned, until its next use (rule 9)."""
        self._order.demote(self._live(entry))

    def check_valid(self) -> None:
        """Raise ``InvariantError`` naming the first broken invariant; for tests."""
        try:
            self._trie.check()
        except AssertionError as error:
            raise InvariantError(f"the prefix tree is inconsistent: {error}") from None
        in_tree = {id(live) for _, live in self._trie.items()}
        if in_tree != {id(live) for live in self._by_slot.values()}:
            raise InvariantError("the prefix tree and the slot table hold different entries")
        for slot, live in self._by_slot.items():
            if live.entry.slot != slot or live.entry.length != len(live.tokens):
                raise InvariantError(f"slot {slot} holds {live.entry} of {len(live.tokens)} tokens")
        used = sorted(self._free + list(self._by_slot))
        if used != list(range(self._fresh)) or self._fresh > self._capacity:
            raise InvariantError("every shared slot must be either free or owned by one entry")
        held = sum(live.pins for live in self._by_slot.values())
        outstanding = sum(
            1
            for _, pins in self._plans.values()
            for live in pins
            if live.entry.slot in self._by_slot and self._by_slot[live.entry.slot] is live
        )
        if held != outstanding or any(live.pins < 0 for live in self._by_slot.values()):
            raise InvariantError(f"{held} pins held, {outstanding} by unreleased plans and holds")
        self._order.check()

    # -- placement and eviction ------------------------------------------------------

    def _place(
        self, tokens: list[int], length: int, own: dict[int, Live] | None = None
    ) -> Live | None:
        """A new entry at ``tokens[:length]`` in a free or evicted slot; ``None``: declined.

        ``own``: what the plan placing it has placed and still holds, by id, which it may
        evict (rule 6); one evicted leaves it.
        """
        if not self._free and self._fresh == self._capacity:  # full
            victim = self._order.victim(own or {})
            if victim is None:
                self._stats["declined"] += 1
                return None
            self._order.evicted(victim)
            self._drop(victim)
            if own:
                own.pop(id(victim), None)
            self._stats["evicted"] += 1
        if self._free:
            slot = self._free.pop()
        else:  # a free slot was never used: the lowest of those is next
            slot, self._fresh = self._fresh, self._fresh + 1
        live = Live(PrefixEntry(length, slot, tickets.mint_ticket()), tuple(tokens[:length]))
        live.uses = self._order.uses_of(live.tokens)
        self._trie.put(tokens, length, live)
        self._by_slot[slot] = live
        parent = self._trie.longest(tokens, length - 1)
        self._order.adopt(live, parent, self._trie.nearest_below(live.tokens, length))
        self._order.touch(live)
        self._stats["published"] += 1
        return live

    def _drop(self, live: Live) -> None:
        self._order.detach(live)
        self._trie.remove(live.tokens, live.entry.length)
        del self._by_slot[live.entry.slot]
        self._free.append(live.entry.slot)
        self._free.sort(reverse=True)
        live.pins = 0
        self._gone[live.entry.ticket] = None
        if len(self._gone) > GONE * max(self._capacity, 16):
            del self._gone[next(iter(self._gone))]

    def _left_lately(self, ticket: int) -> bool:
        """Whether the entry placed under ``ticket`` left this index (evicted or discarded)
        among the last ``GONE`` x capacity (at least 16) that left: a save of it is superseded.
        ``False`` for a live entry's, another index's, or one long gone."""
        return ticket in self._gone

    def _live(self, entry: PrefixEntry) -> Live:
        known = type(entry) is PrefixEntry and type(entry.slot) is int
        live = self._by_slot.get(entry.slot) if known else None
        if live is None or live.entry != entry:
            raise InvalidArgumentError(
                f"'entry' must be a live entry of this index, got {shown(entry)}"
            )
        return live


def _token_list(tokens: Sequence[int]) -> list[int]:
    """The token ids as a list of ints >= 0 (a sequence, an array or a tensor's ``tolist()``)."""
    return int_column("tokens", tokens)
