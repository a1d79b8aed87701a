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
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Final, final

from ... import PrefixEntry, PrefixHold, PrefixSnapshotIndex
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

    def resume(self, request: Request) -> None:
        """Before ``request``: release what its session held for it (its plan pins a hit)."""
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
        return demoted
