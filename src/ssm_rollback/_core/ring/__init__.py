"""The SSM decode ring: which snapshot slot each boundary goes into (rules in ``_ring``).

``_ring`` holds ``SsmDecodeRing`` and its numbered rules, with the per-row
entry points the planners use; ``_rows`` the batched record; ``_tickets``
rule 10's process-wide counter. Nothing outside
this package reads a ring's private fields.
"""

from __future__ import annotations

from . import _tickets as tickets
from ._ring import (
    SsmDecodeRing,
    SsmRingEntry,
    newest_first,
    newest_position,
    record_ticketed,
)
from ._rows import RowNames, record_rows

__all__ = [
    "RowNames",
    "SsmDecodeRing",
    "SsmRingEntry",
    "newest_first",
    "newest_position",
    "record_rows",
    "record_ticketed",
    "tickets",
]
