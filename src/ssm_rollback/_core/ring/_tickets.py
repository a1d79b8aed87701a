"""Tickets (the ring's rule 10): one process-wide counter, so no two records share one.

Every ``record``, batched row, accept and prefix placement mints its ticket
here; a pool restores a slot only when the slot holds exactly the ticket the
restore carries.

An object that holds tickets (a ring, a prefix index, a pool's tags) carries
the counter's high water when pickled, and unpickling it moves this process's
counter past it (``HoldsTickets``). Without that, a
ring or index unpickled in a fresh process would mint the tickets its pool's
slots already hold, and a restore would take another record's state.
"""

from __future__ import annotations

import copy
import itertools
import threading
from collections.abc import Mapping
from typing import Self, cast

import attrs

__all__ = ["HoldsTickets", "advance_past", "mint_ticket", "mint_tickets"]

# Rule 10: one counter for the process, so no two records anywhere share a
# ticket. ``next`` on an ``itertools.count`` is atomic under the GIL. Each call
# hands out a block of _BLOCK tickets: a single record uses the first, a
# batch of rows uses one block per _BLOCK rows, so a step mints its tickets
# with one call instead of one per row. Later calls give larger tickets, so a
# ring's tickets still ascend with its positions.
_BLOCK = 1 << 16
#: One fresh ticket (the first of a fresh block). Rebound by ``advance_past``, so other
#: modules call it as ``_tickets.mint_ticket()``, never through a name they imported.
mint_ticket = itertools.count(_BLOCK, _BLOCK).__next__
_advancing = threading.Lock()
#: The key of the high water in a pickled object's state.
_HIGH_WATER = "__ticket_high_water__"


def mint_tickets(count: int) -> range | list[int]:
    """``count`` fresh tickets, ascending."""
    if count <= _BLOCK:
        first = mint_ticket()
        return range(first, first + count)
    blocks = [mint_ticket() for _ in range(-(-count // _BLOCK))]
    return [block + i for block in blocks for i in range(_BLOCK)][:count]


def advance_past(ticket: int) -> None:
    """Make every ticket this process mints from now on larger than ``ticket``.

    Nothing changes when the counter is past it already (the usual case: the
    ticket was minted here). An unpickling that races a mint in another thread
    may let that one mint come from the old counter: unpickle while no other
    thread records.
    """
    global mint_ticket
    with _advancing:
        if mint_ticket() > ticket:  # uses up one block: harmless
            return
        mint_ticket = itertools.count((ticket // _BLOCK + 1) * _BLOCK, _BLOCK).__next__


class HoldsTickets:
    """Pickling and copying for a class whose objects hold tickets (a ring, a prefix index,
    a pool's tags): one home for both rules.

    Pickled, such an object carries the counter's high water, and unpickling
    it moves this process's counter past that and past ``_newest_held()``
    (the largest ticket it keeps: for a state pickled without a high water).
    ``copy.copy`` makes an independent copy, as ``copy.deepcopy`` does: a
    shallow one would share the object's tables but not its counters, and
    each copy would corrupt the other. The class must be an attrs class
    defined with ``getstate_setstate=False``.
    """

    __slots__ = ()

    def __getstate__(self) -> object:
        fields = attrs.fields(cast("type[attrs.AttrsInstance]", type(self)))
        state = {field.name: getattr(self, field.name) for field in fields}
        state[_HIGH_WATER] = mint_ticket()  # above every ticket minted here so far
        return state

    def __setstate__(self, state: Mapping[str, object]) -> None:
        high = state.get(_HIGH_WATER, -1)
        for name, value in state.items():
            if name != _HIGH_WATER:
                object.__setattr__(self, name, value)
        advance_past(max(high if type(high) is int else -1, self._newest_held()))

    def __copy__(self) -> Self:
        return copy.deepcopy(self)

    def _newest_held(self) -> int:
        """The largest ticket the object keeps (-1: none)."""
        raise NotImplementedError
