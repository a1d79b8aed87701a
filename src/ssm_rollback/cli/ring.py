"""``ssm-rollback ring``: a bare ring walking through a scripted decode (core only)."""

from __future__ import annotations

import argparse
from typing import Final, TextIO

from .. import SsmDecodeRing
from ._common import int_flag

__all__ = ["add_parser", "run"]

# A scripted decode: ("token", boundary?) steps and ("rollback", keep_len) steps.
_SCRIPT: Final[tuple[tuple[str, int], ...]] = (
    ("token", 0),
    ("token", 1),
    ("token", 0),
    ("token", 1),
    ("token", 1),
    ("token", 0),
    ("token", 1),
    ("rollback", 4),
    ("token", 1),
    ("token", 1),
    ("token", 1),
)


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    ring = commands.add_parser("ring", help="walk a snapshot ring through a scripted decode")
    ring.add_argument("--capacity", type=int_flag(0), default=3, help="ring slots (default 3)")
    ring.set_defaults(run=run)


def run(args: argparse.Namespace, out: TextIO) -> int:
    capacity: int = args.capacity
    ring = SsmDecodeRing(capacity)
    length = 0
    print(f"A ring of {capacity} snapshot slots walking through a scripted decode.", file=out)
    print(f"{'step':>4}  {'event':<24} {'slot':>4}  {'cursor':>6}  live position@slot", file=out)
    for step, (kind, value) in enumerate(_SCRIPT, start=1):
        slot = ""
        if kind == "token":
            length += 1
            event = f"token {length}" + (" (boundary)" if value else "")
            if value:
                taken = ring.record(length)
                slot = "-" if taken is None else str(taken)
        else:
            target = ring.slot_for_position(value)
            event = f"roll back to {value}"
            if target is None:
                event += " (no snapshot)"
            else:
                slot = str(target)
                ring.truncate_after(value)
                length = value
        live = " ".join(f"{e.token_position}@{e.snapshot_slot}" for e in ring.entries)
        line = f"{step:>4}  {event:<24} {slot:>4}  {ring.next_slot:>6}  {live}"
        print(line.rstrip(), file=out)
    ring.check_valid()
    return 0
