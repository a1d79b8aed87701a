"""``ssm-rollback simulate --workload W``: where to place prefix snapshots (SPEC 13).

Replays a synthetic multi-request trace under the application's placement
rule and each engine's, at equal shared slots, beside the oracles (the
unlimited bound, and the clairvoyant one at each slot count); prints the
generator's parameters with the result.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Final, TextIO

from .._apps.prefix_sim import WORKLOADS, SimulationOptions, TraceParams, plot, simulate
from .._errors import shown
from ._common import FlagError, int_flag, one_line, progress_bar

__all__ = [
    "DEFAULT_PREFIX_SLOTS",
    "MAX_JOBS",
    "MAX_REQUESTS",
    "add_arguments",
    "check_depth_only",
    "run",
]

DEFAULT_PREFIX_SLOTS: Final = (16, 64, 256)
#: A trace past this many requests is a typo: it would run for hours.
MAX_REQUESTS: Final = 1_000_000
#: Past this many replay processes, a typo: no simulation has that many replays.
MAX_JOBS: Final = 1024
#: No index needs more shared slots than a trace has positions; past this, a typo.
MAX_PREFIX_SLOTS: Final = 1_000_000


def _slots(text: str) -> tuple[int, ...]:
    parse = int_flag(0, MAX_PREFIX_SLOTS)
    try:
        values = tuple(parse(part.strip()) for part in text.split(","))
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"must be comma-separated ints from 0 to {MAX_PREFIX_SLOTS}, got {shown(text)}"
        ) from None
    if len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"must not repeat a slot count, got {shown(text)}")
    return values


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The prefix mode's flags, on ``simulate``'s parser."""
    add = parser.add_argument
    add(
        "--workload",
        choices=WORKLOADS,
        help="prefix-snapshot placement instead of ring depths: replay a synthetic "
        "multi-request trace of this kind under each placement rule, beside the oracle "
        "(unlimited slots) and the clairvoyant oracle@N (N slots, Belady's eviction)",
    )
    add(
        "--prefix-slots",
        metavar="N[,N...]",
        type=_slots,
        default=None,
        help="with --workload: shared slots, equal for every rule and the clairvoyant "
        f"oracle (default {','.join(map(str, DEFAULT_PREFIX_SLOTS))})",
    )
    add(
        "--requests",
        type=int_flag(1, MAX_REQUESTS),
        default=None,
        help="with --workload: requests in the trace (default: the workload's)",
    )
    add(
        "--jobs",
        type=int_flag(1, MAX_JOBS),
        default=None,
        help="with --workload: replay in this many processes (default 1); the results "
        "are the same at any count",
    )


def run(args: argparse.Namespace, out: TextIO) -> int:
    """Simulate, then print the table (or ``--json``) and write ``--plot``."""
    if args.trace is not None:
        raise FlagError("--trace", "replays a decode trace; --workload generates its own")
    params = TraceParams.default(args.workload, requests=args.requests, seed=args.seed)
    slots = DEFAULT_PREFIX_SLOTS if args.prefix_slots is None else args.prefix_slots
    bar = progress_bar(sys.stderr, "requests", quiet=args.json)
    jobs = 1 if args.jobs is None else args.jobs
    report = simulate(SimulationOptions(params=params, slots=slots, jobs=jobs), bar)
    if args.plot is not None:
        plot(report, args.plot)
    if args.json:
        print(json.dumps(report.to_dict()), file=out)
        return 0
    print(report.render(), file=out)
    if args.plot is not None:
        print(f"plot written to {one_line(args.plot)}", file=out)
    return 0


def check_depth_only(args: argparse.Namespace) -> None:
    """Refuse prefix flags without ``--workload``: they would be silently ignored."""
    flags = (("prefix_slots", "--prefix-slots"), ("requests", "--requests"), ("jobs", "--jobs"))
    for name, flag in flags:
        if getattr(args, name) is not None:
            raise FlagError(flag, "needs --workload chat|agentic|branching")
