"""Tickets (the ring's rule 10): one process-wide counter, so no two records share one.

Every ``record``, batched row, accept and prefix placement mints its ticket
here; a pool restores a slot only when the slot holds exactly the ticket the
restore carries.
"""

from __future__ import annotations

import itertools

__all__ = ["mint_ticket", "mint_tickets"]

# Rule 10: one counter for the process, so no two records anywhere share a
# ticket. ``next`` on an ``itertools.count`` is atomic under the GIL. Each call
# hands out a block of _BLOCK tickets: a single record uses the first, a
# batch of rows uses one block per _BLOCK rows, so a step mints its tickets
# with one call instead of one per row. Later calls give larger tickets, so a
# ring's tickets still ascend with its positions.
_BLOCK = 1 << 16
_mint_ticket = itertools.count(_BLOCK, _BLOCK).__next__
#: One fresh ticket (the first of a fresh block).
mint_ticket = _mint_ticket


def mint_tickets(count: int) -> range | list[int]:
    """``count`` fresh tickets, ascending."""
    if count <= _BLOCK:
        first = _mint_ticket()
        return range(first, first + count)
    blocks = [_mint_ticket() for _ in range(-(-count // _BLOCK))]
    return [block + i for block in blocks for i in range(_BLOCK)][:count]
