"""The clairvoyant oracle at equal slots: Belady's eviction over the prefixes later requests reuse.

The unlimited bound (``replay_oracle``) keeps every position of every
request in unlimited slots, which no rule reaches at a finite slot count.
This oracle has exactly the shared slots a rule has (one snapshot each) and
knows the whole trace in advance:

- **Targets.** Request ``j``'s target is the longest prefix of its prompt
  that any earlier request fed (at most ``len(prompt) - 1``): where the
  unlimited bound starts it. Those prefixes are the positions it places.
- **Placement.** A request can snapshot only positions it feeds: past its
  hit, up to the end of its prompt plus its output but the last token
  (never fed), the constraint the rules have too. There it places the
  targets of later requests.
- **Eviction (Belady).** A snapshot's next use is the next request whose
  target it is. With every slot full, the snapshot used furthest in the
  future (or never) goes, and a position is not placed when its next use
  is no sooner than every held snapshot's.
- **Hits**, exactly like the rules: the index's longest live prefix of the
  prompt, at most ``len(prompt) - 1`` long, restored on the stand-in pool
  and checked against a fresh computation (``_replay``). The oracle only
  decides what to publish, and discards its own victim first, so the index
  never evicts by its policy.

Belady's rule is optimal for hit counts when every hit is worth the same.
Here a hit is worth its length, and a request whose target is gone may still
start from a shorter held prefix, so this is a strong clairvoyant baseline,
not a proven optimum: a rule may compute less somewhere.

Cost: the targets take the unlimited bound's pass over a radix tree of every
fed sequence; each request's candidate positions, one walk of its path in
the finished tree (a node per branch point). Both are shared by every slot
count; each slot count then replays with a heap of next uses.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

import attrs

from ... import PrefixEntry, PrefixSnapshotIndex
from ..._errors import InvariantError
from ._oracle import Bound, unlimited_bound
from ._replay import Progress, RuleResult, _StandInPool
from ._requests import Request

__all__ = ["Targets", "replay_clairvoyant", "targets"]


@attrs.frozen
class Targets:
    """What the oracle knows of a trace in advance; the same for every slot count."""

    #: Per request: the index of its target prefix, or -1 when no earlier request fed any.
    target: tuple[int, ...]
    #: Per target prefix: the requests whose target it is, in trace order.
    uses: tuple[tuple[int, ...], ...]
    #: Per request: ``(length, target prefix)`` for each target prefix of what it feeds.
    fed: tuple[tuple[tuple[int, int], ...], ...]


def targets(trace: Sequence[Request], bound: Bound | None = None) -> Targets:
    """Every request's target, and the targets each request feeds through (``bound``: the
    unlimited bound's pass over ``trace``, made already)."""
    bound = bound or unlimited_bound(trace)
    tree, depths = bound.fed, bound.starts
    # The tree is complete: a prefix is named by the edge it ends on and its length.
    names: dict[tuple[object, int], int] = {}
    marks: dict[object, list[tuple[int, int]]] = {}  # edge -> (length, target) ending on it
    uses: list[list[int]] = []
    target = []
    for j, (request, depth) in enumerate(zip(trace, depths, strict=True)):
        if not depth:
            target.append(-1)
            continue
        edge = tree.edges(request.tokens(), depth)[-1][0]
        name = names.setdefault((edge, depth), len(names))
        if name == len(uses):
            uses.append([])
            marks.setdefault(edge, []).append((depth, name))
        uses[name].append(j)
        target.append(name)
    fed = []
    for request in trace:
        tokens = request.tokens() + list(request.output[:-1])
        size = len(tokens)
        fed.append(
            tuple(
                mark
                for edge, _ in tree.edges(tokens, size)
                for mark in marks.get(edge, ())
                if mark[0] <= size
            )
        )
    return Targets(tuple(target), tuple(map(tuple, uses)), tuple(fed))


class _Belady:
    """The held targets and their next uses; the furthest found through a lazy max-heap."""

    def __init__(self, plan: Targets, never: int) -> None:
        self.uses = plan.uses
        self.seen = [0] * len(plan.uses)  # per target: its uses already behind
        self.never = never
        self.held: dict[int, PrefixEntry] = {}
        self.due: dict[int, int] = {}  # held target -> its next use
        self.heap: list[tuple[int, int]] = []  # (-next use, target); stale items skipped

    def next_use(self, name: int, now: int) -> int:
        """The first request after ``now`` whose target ``name`` is (``never``: none)."""
        uses, k = self.uses[name], self.seen[name]
        while k < len(uses) and uses[k] <= now:
            k += 1
        self.seen[name] = k
        return uses[k] if k < len(uses) else self.never

    def hold(self, name: int, entry: PrefixEntry, due: int) -> None:
        self.held[name] = entry
        self.refile(name, due)

    def refile(self, name: int, due: int) -> None:
        self.due[name] = due
        heapq.heappush(self.heap, (-due, name))
        if len(self.heap) > 2 * len(self.due) + 64:  # mostly stale: rebuild
            self.heap = [(-d, n) for n, d in self.due.items()]
            heapq.heapify(self.heap)

    def furthest(self) -> int:
        """The held target used furthest in the future (some target is held)."""
        while True:
            due, name = self.heap[0]
            if self.due.get(name) == -due:
                return name
            heapq.heappop(self.heap)

    def drop(self, name: int) -> PrefixEntry:
        del self.due[name]
        return self.held.pop(name)


def replay_clairvoyant(
    trace: Sequence[Request],
    plan: Targets,
    *,
    slots: int,
    progress: Progress | None = None,
) -> RuleResult:
    """Run ``trace`` with ``slots`` shared slots, placing and evicting by ``plan`` (Belady)."""
    index = PrefixSnapshotIndex(slots)
    pool = _StandInPool()
    cache = _Belady(plan, never=len(trace))
    prompt_tokens = prefill_tokens = mismatches = evicted = 0
    for now, request in enumerate(trace):
        tokens = request.tokens()
        length = len(tokens)
        hit = index.plan_prefill(0, tokens)  # no positions: the oracle publishes below
        live = pool.start(hit, tokens + list(request.output))
        mismatches += not live.exact
        index.release(hit)
        prompt_tokens += length
        prefill_tokens += length - hit.start
        mine = plan.target[now]
        if mine in cache.held:  # its use is behind: file it under its next one
            cache.refile(mine, cache.next_use(mine, now))
        wanted = sorted(
            (cache.next_use(name, now), depth, name)
            for depth, name in plan.fed[now]
            if depth > hit.start and name not in cache.held
        )
        for due, depth, name in wanted:
            if due == cache.never or not slots:
                break
            if len(cache.held) == slots:
                victim = cache.furthest()
                if cache.due[victim] <= due:
                    break  # every held snapshot is used sooner: the rest are used later still
                index.discard(cache.drop(victim))
                evicted += 1
            save = index.publish(0, live.tokens, depth)
            if save is None:
                raise InvariantError(f"the oracle's target of {depth} tokens is live twice")
            pool.save(save, live.at(depth))
            cache.hold(name, PrefixEntry(save.length, save.slot, save.ticket), due)
        if progress is not None and (now + 1) % 256 == 0:
            progress(now + 1)
    stats = index.stats
    if stats.evicted or len(index) != len(cache.held):
        raise InvariantError("the oracle's slots and the index's entries disagree")
    return RuleResult(
        rule="oracle",
        eviction=None,
        slots=slots,
        requests=len(trace),
        prompt_tokens=prompt_tokens,
        prefill_tokens=prefill_tokens,
        hits=stats.hits,
        tokens_reused=stats.tokens_reused,
        published=stats.published,
        evicted=evicted,
        mismatches=mismatches,
    )
