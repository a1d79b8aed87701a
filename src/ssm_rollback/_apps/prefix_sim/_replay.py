"""Replay a trace under one placement rule, using the index exactly as a scheduler would.

Per request: ``match`` (pure) tells where the prefill will start, the rule
says which positions to share, ``plan_prefill`` decides, the prefill runs
(restore the hit, feed each chunk, apply its save), ``release`` unpins, and
decoding ``publish``-es the rule's decode positions. Under the application's
rules the application also demotes what it knows no request will hit
(``_sessions``): before a request, the branches its search dropped; after
it, what its session moved past, or all of the session's own entries once
it is known to be over. And it holds the end of an output its session
will go on from (an agent's tool call) until the session's next request.
Where its sessions end silently (a chat), it makes the room a request's
placements need itself: it demotes the entries it expects least from,
weighing each conversation by its chance to come back (``_liveness``).
Requests run one after another (one per scheduler step), the conservative
case for the engine rules' step-end placement.

Exactness is checked on a stand-in pool: the SSM state after a prefix is
simulated as that prefix's token tuple. A save stores the state the
simulated engine holds at that moment (restored state plus what it fed
since); a restore copies only when the slot holds the restore's exact
ticket, and must give exactly the state a fresh computation of the
restored prefix gives. Anything else counts as a mismatch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import attrs

from ... import PrefillPlan, PrefixEntry, PrefixSnapshotIndex, SsmPrefixRestore, SsmPrefixSave
from ...prefix import Eviction
from ._oracle import Bound, unlimited_bound
from ._requests import Request
from ._rules import APP_RULES, EngineSettings, RuleName
from ._sessions import SessionEntries

__all__ = ["RuleResult", "replay", "replay_oracle"]

Progress = Callable[[int], None]


@attrs.frozen(kw_only=True)
class RuleResult:
    """What one rule did with a trace: prefill computed, hits, and the index's counters."""

    rule: str
    #: ``None`` for the oracles: ``oracle`` with ``slots`` ``None`` (every position kept,
    #: unlimited slots) and the clairvoyant one at ``slots`` (``_clairvoyant``).
    eviction: Eviction | None
    slots: int | None
    requests: int
    prompt_tokens: int
    prefill_tokens: int
    hits: int
    tokens_reused: int
    published: int = 0
    evicted: int = 0
    declined: int = 0
    #: Entries the application demoted once its session moved past them (``_sessions``).
    demoted: int = 0
    mismatches: int = 0

    @property
    def label(self) -> str:
        """``rule/eviction``; ``oracle`` (unlimited slots), ``oracle@N`` (clairvoyant, N slots)."""
        if self.eviction is not None:
            return f"{self.rule}/{self.eviction}"
        return self.rule if self.slots is None else f"{self.rule}@{self.slots}"

    @property
    def hit_rate(self) -> float:
        """Requests that reused a prefix, over all requests."""
        return self.hits / self.requests if self.requests else 0.0


class _StandInPool:
    """Shared slots holding ``(ticket, state)``; a restore of another ticket is refused."""

    def __init__(self) -> None:
        self.slots: dict[int, tuple[int, tuple[int, ...]]] = {}

    def save(self, save: SsmPrefixSave, state: tuple[int, ...]) -> None:
        self.slots[save.slot] = (save.ticket, state)

    def restore(self, restore: SsmPrefixRestore) -> tuple[int, ...] | None:
        held = self.slots.get(restore.slot)
        return held[1] if held is not None and held[0] == restore.ticket else None

    def start(self, plan: PrefillPlan, full: list[int]) -> _Live:
        """The row of ``full`` (prompt and output) once ``plan``'s hit is restored; ``exact``
        says whether the restore gave the state a fresh computation of that prefix gives."""
        if plan.hit is not None:
            restored = self.restore(plan.hit.restore)
            if restored is None or restored != tuple(full[: plan.start]):
                return _Live(full, plan.start, restored or (), False)
        return _Live(full, plan.start, (), True)


@attrs.define
class _Live:
    """A row's simulated live state: ``base`` restored, then ``tokens[start:]`` fed on top."""

    tokens: list[int]
    start: int
    base: tuple[int, ...]
    exact: bool

    def at(self, length: int) -> tuple[int, ...]:
        """The state once the row has fed up to ``length``."""
        if self.exact:  # the restore was checked: base == tokens[:start]
            return tuple(self.tokens[:length])
        return self.base + tuple(self.tokens[self.start : length])


def replay(
    trace: Sequence[Request],
    rule: RuleName,
    *,
    slots: int,
    eviction: Eviction,
    engines: EngineSettings,
    progress: Progress | None = None,
) -> RuleResult:
    """Run ``trace`` under ``rule`` with ``slots`` shared slots evicting by ``eviction``."""
    index = PrefixSnapshotIndex(slots, eviction=eviction)
    pool = _StandInPool()
    sessions = SessionEntries(index) if rule in APP_RULES else None
    prompt_tokens = prefill_tokens = mismatches = demoted = 0
    for done, request in enumerate(trace, start=1):
        if sessions is not None:  # the application demotes the branches it dropped
            sessions.resume(request)
            demoted += sessions.abandon(request)
        tokens = request.tokens()
        length = len(tokens)
        found = index.match(tokens)
        start = 0 if found is None else found.length
        at = engines.prefill(rule, length, start, request.message_ends(), request.branch_points())
        full = tokens + list(request.output)
        decoded = engines.decode(rule, length, len(full))
        if sessions is not None:  # the application makes room for what it will place
            placing, made = sessions.make_room(request, full, [*at, *decoded], found)
            at = tuple(p for p in at if p in placing or p <= start)
            decoded = tuple(p for p in decoded if p in placing)
            demoted += made
        plan = index.plan_prefill(0, tokens, publish_at=at)
        live = pool.start(plan, full)
        mismatches += not live.exact
        saves = []
        for chunk in plan.chunks:  # fed up to chunk.end: now its save
            if chunk.save is not None:
                pool.save(chunk.save, live.at(chunk.end))
                saves.append(chunk.save)
        index.release(plan)
        prompt_tokens += length
        prefill_tokens += length - plan.start
        for position in decoded:
            save = index.publish(0, live.tokens, position)
            if save is not None:
                pool.save(save, live.at(position))
                saves.append(save)
        if sessions is not None:  # the application demotes what its session moved past
            placed = [PrefixEntry(save.length, save.slot, save.ticket) for save in saves]
            demoted += sessions.settle(request, live.tokens, [*at, *decoded], placed)
        if progress is not None and done % 256 == 0:
            progress(done)
    stats = index.stats
    return RuleResult(
        rule=rule,
        eviction=eviction,
        slots=slots,
        requests=len(trace),
        prompt_tokens=prompt_tokens,
        prefill_tokens=prefill_tokens,
        hits=stats.hits,
        tokens_reused=stats.tokens_reused,
        published=stats.published,
        evicted=stats.evicted,
        declined=stats.declined,
        demoted=demoted,
        mismatches=mismatches,
    )


def replay_oracle(
    trace: Sequence[Request], progress: Progress | None = None, *, bound: Bound | None = None
) -> RuleResult:
    """The least any placement can compute: reuse the longest prefix any earlier request fed
    (``bound``: that pass, made already)."""
    starts = (bound or unlimited_bound(trace, progress)).starts
    prompt_tokens = sum(request.prompt.end for request in trace)  # the prompts' lengths
    reused = sum(starts)
    return RuleResult(
        rule="oracle",
        eviction=None,
        slots=None,
        requests=len(trace),
        prompt_tokens=prompt_tokens,
        prefill_tokens=prompt_tokens - reused,
        hits=sum(start > 0 for start in starts),
        tokens_reused=reused,
    )
