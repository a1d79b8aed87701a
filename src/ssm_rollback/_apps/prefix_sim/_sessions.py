"""What the application knows of its own sessions: the entries each placed for itself.

The application rules demote (``PrefixSnapshotIndex.demote``, SPEC 13 rule
9 here) the entries of a session that no request is expected to hit: they
stay matchable, but go before any other entry when slots run out. That is
the case

- after a chat turn, an edit, a regenerate, an agent step or a retry: the
  next request of that session extends this one, so what the session
  placed for itself before and this request did not place again (an older
  answer's end, an older prompt end minus one) will not be hit. The first
  request of a session and a best-of-n sample (a search keeps several
  branches alive) demote nothing here;
- for the branches a search dropped (``Request.abandons``): the entries
  past the prompt they branched from;
- for all of a session's entries once it ends, where the application
  knows it (``Request.ends_session``: an agent's final answer, a search's
  last depth; a chat never knows).

Entries at shared message ends (system prompts, tool schemas: other
sessions start there) are never a session's own.

And they hold (``PrefixSnapshotIndex.hold``) the one entry the application
knows its session's next request will hit: after a request that says the
session goes on from its output (``Request.resumes``: an agent whose tool
runs), the entry at that output's end, until the session's next request.
No placement evicts it meanwhile; with every slot held, others are
declined instead of evicting one another.

Where a session can end without the application learning it
(``Request.ends_silently``: a chat), the application also makes room itself
before a request that will place entries in a full index (``make_room``):
it demotes the entries of other such sessions that it expects least from,
by the tokens each would save its session's next request and the chance
that session comes back (``_liveness``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final, final

from ... import PrefixEntry, PrefixHold, PrefixSnapshotIndex
from ._liveness import Liveness, Reach
from ._requests import Request, RequestKind

__all__ = ["MOVES_ON", "SessionEntries"]

#: The request kinds after which a session only goes on from the request itself.
MOVES_ON: Final[frozenset[RequestKind]] = frozenset({"turn", "edit", "regenerate", "step", "retry"})


@final
class SessionEntries:
    """Each session's own live entries in one index, and the demotions after each request."""

    def __init__(self, index: PrefixSnapshotIndex) -> None:
        self._index = index
        self._own: dict[int, list[PrefixEntry]] = {}
        self._held: dict[int, PrefixHold] = {}
        self._liveness = Liveness()
        #: For each session that can end silently: its shared base (the longest shared
        #: message end of its latest request) and where its next request would reach.
        self._reach: dict[int, tuple[int, dict[Reach, int]]] = {}

    def resume(self, request: Request) -> None:
        """Before ``request``: count it where its session can end silently (the weighing's
        statistics), and release what its session held for it (its plan pins a hit)."""
        if request.ends_silently:
            self._liveness.observe(request)
        hold = self._held.pop(request.session, None)
        if hold is not None:
            self._index.release(hold)

    def abandon(self, request: Request) -> int:
        """Before ``request``: demote its session's entries on the branches it says were
        dropped; how many were demoted."""
        if not request.abandons:
            return 0
        live = set(self._index.entries())
        own = [entry for entry in self._own.get(request.session, []) if entry in live]
        dropped = set()
        for branch in request.abandons:
            tokens = branch.prefix()
            prompt = 0 if branch.parent is None else branch.parent.end  # where it branched
            for entry in own:
                on_branch = self._index.tokens_of(entry) == tuple(tokens[: entry.length])
                if entry.length > prompt and on_branch:
                    dropped.add(entry)
        for entry in dropped:
            self._index.demote(entry)
        self._own[request.session] = [entry for entry in own if entry not in dropped]
        return len(dropped)

    def settle(
        self,
        request: Request,
        tokens: Sequence[int],
        wanted: Iterable[int],
        placed: Iterable[PrefixEntry],
    ) -> int:
        """After ``request`` (its prompt and output ``tokens``) wanted its own entries at
        ``wanted`` and ``placed`` new ones: demote what its session placed before and it did
        not want, if it moves the session on; how many were demoted."""
        live = set(self._index.entries())
        shared = set(request.shared_ends())
        positions = set(wanted) - shared
        kept, demoted = [], 0
        for entry in self._own.get(request.session, []):
            if entry not in live:
                continue  # evicted since
            if entry.length in positions and self._index.tokens_of(entry) == tuple(
                tokens[: entry.length]
            ):
                kept.append(entry)  # placed again by this request: still its own
            elif request.kind in MOVES_ON:
                self._index.demote(entry)
                demoted += 1
            else:
                kept.append(entry)
        kept += [e for e in placed if e in live and e.length not in shared]
        if request.ends_silently:  # what it hit or placed again that no conversation owns
            kept += self._unowned(tokens, positions, kept)
        if request.resumes:  # the next request goes on from the end of the output
            end = self._index.match(tokens)
            if end is not None and end.length == len(tokens) - 1:
                self._held[request.session] = self._index.hold(end)
        if request.ends_session:  # nothing of it will be hit again
            for entry in kept:
                self._index.demote(entry)
            self._own.pop(request.session, None)
            return demoted + len(kept)
        self._own[request.session] = kept
        if request.ends_silently:
            self._reach[request.session] = _reach(request, len(tokens))
        return demoted

    def make_room(
        self,
        request: Request,
        tokens: Sequence[int],
        positions: Iterable[int],
        hit: PrefixEntry | None,
    ) -> tuple[tuple[int, ...], int]:
        """Before ``request`` (its prompt and output ``tokens``, whose plan will restore
        ``hit``) places entries at ``positions``: which of them to place, and how many entries
        were demoted for them.

        Only for a request of a silently ending session, and only where it would evict
        beyond the free slots and the entries demoted already. Then it does not place its
        own positions that would save its session's next request nothing (another of its
        entries serves each reach as far), and for the rest demotes as many entries of
        the other silently ending sessions as it would evict, those of least worth: the
        tokens an entry saves its session's next request over the next shorter one that
        request would fall back to, summed over how far the request may reach
        (``Liveness.share``), times the chance the session comes back
        (``Liveness.alive``).
        """
        wanted = tuple(sorted(set(positions)))
        if not request.ends_silently:
            return wanted, 0
        index = self._index
        start = 0 if hit is None else hit.length
        wanted = tuple(p for p in wanted if start < p < len(tokens))
        new = [p for p in wanted if _entry_at(index, tokens, p) is None]
        live = set(index.entries())
        demoted = [e for e in index.demoted() if e != hit]  # the plan pins it and uses it again
        short = len(new) - (index.capacity - len(live)) - len(demoted)
        if short <= 0:
            return wanted, 0
        base, reach = _reach(request, len(tokens))
        mine = [p for p in new if p not in request.shared_ends()]
        idle = {p for p in mine if not self._saves(p, mine, base, reach)}
        short = max(0, short - len(idle))
        worth: list[tuple[float, int, int, PrefixEntry]] = []
        for session, (their_base, their_reach) in list(self._reach.items()):
            entries = [e for e in self._own.get(session, ()) if e in live]
            if not entries:  # nothing of it left to weigh until it places again
                del self._reach[session]
            if session == request.session:
                continue
            lengths = [e.length for e in entries]
            alive = self._liveness.alive(session)
            worth += [
                (
                    alive * self._saves(e.length, lengths, their_base, their_reach),
                    e.ticket,
                    session,
                    e,
                )
                for e in entries
                if e != hit  # what this request restores stays
            ]
        worth.sort(key=lambda item: item[:2])
        for _, _, session, entry in worth[:short]:
            self._index.demote(entry)
            self._own[session].remove(entry)
        return tuple(p for p in wanted if p not in idle), min(short, len(worth))

    def _unowned(
        self, tokens: Sequence[int], positions: Iterable[int], kept: Sequence[PrefixEntry]
    ) -> list[PrefixEntry]:
        """The live entries at ``positions`` of ``tokens`` that no session owns: another
        conversation's that it moved past, hit or placed again by this one, now its own."""
        owned = {e for own in self._own.values() for e in own}.union(kept)
        found = (_entry_at(self._index, tokens, p) for p in positions if 0 < p < len(tokens))
        return [e for e in found if e is not None and e not in owned]

    def _saves(self, length: int, own: Sequence[int], base: int, reach: dict[Reach, int]) -> float:
        """The tokens an entry of ``length`` saves its session's next request, on average
        over how far that request reaches (``_margin``)."""
        return sum(
            self._liveness.share(far) * _margin(length, own, base, at) for far, at in reach.items()
        )


def _reach(request: Request, total: int) -> tuple[int, dict[Reach, int]]:
    """A silently ending session's shared base and where its next request would reach,
    after ``request`` fed ``total`` tokens of prompt and output."""
    shared = request.shared_ends()
    reach: dict[Reach, int] = {"on": total - 1, "again": request.prompt.end - 1}
    edit = [end for end in request.branch_points() if end not in shared]
    if edit:
        reach["edit"] = max(edit)
    return max(shared, default=0), reach


def _margin(length: int, own: Sequence[int], base: int, at: int) -> int:
    """What an entry of ``length`` among ``own`` saves a request reaching ``at``: the longest
    of ``own`` up to ``at`` with it, over the longest without it (``base`` when none is
    left)."""
    if length > at:
        return 0
    below = max((other for other in own if other <= at and other != length), default=base)
    return max(0, length - below)


def _entry_at(index: PrefixSnapshotIndex, tokens: Sequence[int], length: int) -> PrefixEntry | None:
    """The live entry of exactly ``tokens[:length]``, if any."""
    entry = index.match(tokens[: length + 1])  # the longest live prefix up to ``length``
    return entry if entry is not None and entry.length == length else None
