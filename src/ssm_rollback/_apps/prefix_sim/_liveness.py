"""What a chat application expects of each conversation it holds entries for: ``Liveness``.

A chat application never learns that a conversation is over: people leave
without saying so. All it knows of an idle conversation is how long it has
been idle. From its own traffic it learns, with no setting to tune:

- how often a request is followed by another of its session: the share of
  requests that are not a session's first (``q``);
- how long the gaps between two requests of one session are (``S(a)``, the
  share of the gaps seen that were longer than ``a`` requests);
- what a session's next request does: go on from the answer (a turn), ask
  for the same prompt again (a regenerate) or rewrite the newest message (an
  edit), by how often each was seen.

A session idle for ``a`` requests is then still alive with chance
``q S(a) / (q S(a) + 1 - q)`` (Bayes: it either ended after its last request
or has a gap longer than ``a`` still running). ``SessionEntries.make_room``
weighs each entry by the tokens it would save that session's next request
(over the next shorter entry the request would fall back to), times what the
request reaches how often, times that chance; the least of them go first.
Before the first gap is seen every session counts as alive.
"""

from __future__ import annotations

import bisect
from collections import Counter
from typing import Final, Literal, final

from ._requests import Request, RequestKind

__all__ = ["REACHES", "Liveness", "Reach"]

#: How far a session's next request goes along its previous one: on from the end of its
#: output, the same prompt again (one token short of it), or up to the history before the
#: newest message, which it rewrites.
Reach = Literal["on", "again", "edit"]
REACHES: Final[dict[RequestKind, Reach]] = {
    "turn": "on",
    "step": "on",
    "regenerate": "again",
    "retry": "again",
    "sample": "again",
    "edit": "edit",
}


@final
class Liveness:
    """The statistics above, learnt from the requests seen so far (``observe``)."""

    def __init__(self) -> None:
        self._clock = 0
        self._firsts = 0
        self._last: dict[int, int] = {}  # session -> the number of its latest request
        self._gaps: list[int] = []  # sorted
        self._reached: Counter[Reach] = Counter()

    def observe(self, request: Request) -> None:
        """Count ``request``, which arrives now."""
        self._clock += 1
        last = self._last.get(request.session)
        if last is None:
            self._firsts += 1
        else:
            bisect.insort(self._gaps, self._clock - last)
            reach = REACHES.get(request.kind)
            if reach is not None:
                self._reached[reach] += 1
        self._last[request.session] = self._clock

    def alive(self, session: int) -> float:
        """The chance ``session`` sends another request, from how long it has been idle."""
        gaps = len(self._gaps)
        if not gaps:
            return 1.0
        idle = self._clock - self._last[session]
        longer = (gaps - bisect.bisect_right(self._gaps, idle)) / gaps
        q = 1 - self._firsts / self._clock
        chance = q * longer
        return chance / (chance + 1 - q) if chance else 0.0

    def share(self, reach: Reach) -> float:
        """How often a session's next request reaches that far (one more of each assumed)."""
        return (self._reached[reach] + 1) / (self._reached.total() + len(_ALL))


_ALL: Final = frozenset(REACHES.values())
