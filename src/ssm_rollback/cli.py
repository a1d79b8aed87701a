"""The ``ssm-rollback`` console script."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import TextIO

from ._ring import SsmDecodeRing

__all__ = ["main"]

_INSTALL_HINT = (
    "ssm-rollback demo runs a tiny hybrid model with Hugging Face transformers, which is not "
    "installed; install it with:\n"
    "    pip install torch==2.13.0 && pip install 'ssm-rollback[transformers]'\n"
    "(or pip install -e '.[transformers]' in a clone). `ssm-rollback ring` needs nothing."
)

# A scripted decode for `ring`: ("token", boundary?) steps and ("rollback", keep_len) steps.
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


def _ring_walk(out: TextIO, capacity: int) -> int:
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


def _progress_bar(stream: TextIO) -> Callable[[int, int], None]:
    """A one-line progress bar on an interactive ``stream``; silent otherwise."""
    if not stream.isatty():
        return lambda done, total: None

    def show(done: int, total: int) -> None:
        width = 30
        filled = width * done // max(total, 1)
        end = "\n" if done >= total else ""
        print(
            f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} tokens",
            end=end,
            file=stream,
            flush=True,
        )

    return show


def _demo(args: argparse.Namespace, out: TextIO) -> int:
    try:
        from ._demo import DemoOptions, run_demo
        from .integrations._tiny import TESTED_MODEL_TYPES
    except ImportError:
        print(_INSTALL_HINT, file=sys.stderr)
        return 1
    if args.model_type not in TESTED_MODEL_TYPES:
        print(
            f"ssm-rollback demo: --model-type must be one of {', '.join(TESTED_MODEL_TYPES)}; "
            f"got {args.model_type!r}",
            file=sys.stderr,
        )
        return 2
    options = DemoOptions(args.model_type, args.capacity, args.length, args.seed)
    report = run_demo(options, _progress_bar(sys.stderr) if not args.json else lambda d, t: None)
    if args.json:
        print(json.dumps(report.to_dict(), sort_keys=True), file=out)
        return 0 if report.mismatches == 0 else 1
    rows = [
        ("model", f"{report.model_type} (tiny, random weights, seed {report.seed})"),
        ("ring capacity", str(report.capacity)),
        ("tokens generated", str(report.tokens)),
        ("boundaries", str(report.boundaries)),
        ("snapshots saved", str(report.snapshots)),
        ("rollbacks served", str(report.rollbacks_served)),
        ("rollbacks declined", str(report.rollbacks_declined)),
        ("tokens regenerated", str(report.tokens_regenerated)),
        ("rollback (restore + crop)", f"{report.rollback_seconds * 1e3:.1f} ms"),
        ("recompute from the prompt", f"{report.recompute_seconds * 1e3:.1f} ms"),
        ("time saved", f"{report.time_saved_seconds * 1e3:.1f} ms"),
        ("mismatches vs fresh decode", str(report.mismatches)),
    ]
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}", file=out)
    return 0 if report.mismatches == 0 else 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ssm-rollback",
        description="Roll hybrid attention + SSM models back to an earlier boundary token.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    demo = commands.add_parser(
        "demo",
        help="boundary-rollback decoding on a tiny hybrid model, verified bit for bit",
        description="Decode with a tiny random-weight hybrid model; when a banned token is "
        "sampled, roll back to the last boundary with a snapshot, resample, and check every "
        "rollback against a fresh decode.",
    )
    demo.add_argument(
        "--model-type",
        default="nemotron_h",
        help="transformers model type of the tiny model (default nemotron_h)",
    )
    demo.add_argument("--capacity", type=int, default=4, help="ring slots (default 4)")
    demo.add_argument("--length", type=int, default=64, help="tokens to generate (default 64)")
    demo.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    demo.add_argument("--json", action="store_true", help="print the report as one JSON object")
    ring = commands.add_parser("ring", help="walk a snapshot ring through a scripted decode")
    ring.add_argument("--capacity", type=int, default=3, help="ring slots (default 3)")
    return parser


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Run the console script; returns the process exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    stream = sys.stdout if out is None else out
    if args.capacity < 0:
        parser.error(f"--capacity must be an int >= 0, got {args.capacity}")
    if args.command == "ring":
        return _ring_walk(stream, args.capacity)
    if args.length < 1:
        parser.error(f"--length must be an int >= 1, got {args.length}")
    return _demo(args, stream)
