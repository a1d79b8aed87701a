"""The ``ssm-rollback`` console script."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TextIO

from ._ring import SsmDecodeRing

__all__ = ["main"]

# A scripted decode: ("token", boundary?) steps and ("rollback", keep_len) steps.
_SCRIPT: tuple[tuple[str, int], ...] = (
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


def _demo(out: TextIO, capacity: int) -> int:
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


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ssm-rollback",
        description="Roll hybrid attention + SSM models back to an earlier boundary token.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo = commands.add_parser("demo", help="walk a snapshot ring through a scripted decode")
    demo.add_argument("--capacity", type=int, default=3, help="ring slots (default 3)")
    return parser


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Run the console script; returns the process exit status."""
    args = _parser().parse_args(argv)
    stream = sys.stdout if out is None else out
    if args.capacity < 0:
        print(f"ssm-rollback: --capacity must be an int >= 0, got {args.capacity}", file=sys.stderr)
        return 2
    return _demo(stream, args.capacity)
