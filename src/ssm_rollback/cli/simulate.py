"""``ssm-rollback simulate``: replay a decode trace at several ring depths.

With ``--workload``, the prefix-snapshot placement simulation instead (``_prefix_sim``).
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Final, TextIO

from .._apps.decode_trace import MAX_SPEC_TOKENS
from .._errors import InvalidArgumentError, grouped, shown
from . import _prefix_sim
from ._common import FlagError, human, int_flag, one_line, progress_bar, rate_flag
from ._files import MAX_TRACE_BYTES, read_file
from ._model import MODEL_FLAGS, add_model_arguments, load_spec
from ._plot import check_plot, plot_depths

if TYPE_CHECKING:
    from .._apps.decode_trace import TraceEvent

__all__ = [
    "DEFAULT_ACCEPT_RATE",
    "MAX_DEPTHS",
    "MAX_EVENTS",
    "MAX_SEQUENCES",
    "add_parser",
    "run",
]

#: Synthetic traces are built in memory: --sequences x --tokens at most this.
MAX_EVENTS: Final = 10_000_000
#: And --sequences at most this: a sequence (its ring, its finish) costs about what five
#: tokens do, so 10,000,000 one-token sequences ran five times as long as the token cap's
#: 10,000,000 tokens (24 s and 1.4 GB per depth at 2,000,000).
MAX_SEQUENCES: Final = MAX_EVENTS // 5
#: --depths lists at most this many: each replays the whole trace, and each is a row of
#: the report and a point of the plot.
MAX_DEPTHS: Final = 64
#: --accept-rate when --spec-tokens is given without it.
DEFAULT_ACCEPT_RATE: Final = 0.7
#: Snapshot bytes one sequence may need at most: the bound sizing puts on a config too.
MAX_BYTES_PER_SEQUENCE: Final = 2**50


def _depths(text: str) -> list[int]:
    parse = int_flag(0)
    try:
        depths = [parse(part.strip()) for part in text.split(",")]
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"must be comma-separated ints >= 0, got {shown(text)}"
        ) from None
    if len(set(depths)) != len(depths):
        raise argparse.ArgumentTypeError(f"must not repeat a depth, got {shown(text)}")
    if len(depths) > MAX_DEPTHS:
        raise argparse.ArgumentTypeError(
            f"must list at most {MAX_DEPTHS} depths (each replays the whole trace), "
            f"got {len(depths)}"
        )
    return depths


class _NotGiven:
    """The value of a depth-only flag the command line did not give (``_given_depth_flags``)."""

    def __repr__(self) -> str:
        return "not given"


_NOT_GIVEN: Final = _NotGiven()


#: The flags of the depth simulation only (``dest``: flag), refused beside ``--workload``.
_DEPTH_ONLY: Final = {
    "config": "--config",
    "model": "--model",
    "tp": "--tp",
    "dtype": "--dtype",
    "layout": "--layout",
    "conv_dtype": "--conv-dtype",
    "ssm_dtype": "--ssm-dtype",
    "spec_tokens": "--spec-tokens",
    "depths": "--depths",
    "sequences": "--sequences",
    "tokens": "--tokens",
    "boundary_rate": "--boundary-rate",
    "rollback_rate": "--rollback-rate",
    "back": "--back",
    "thinking_rate": "--thinking-rate",
    "accept_rate": "--accept-rate",
}


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    simulate = commands.add_parser(
        "simulate",
        help="replay a decode trace at several ring depths: rollbacks served vs memory; "
        "with --workload, prefix-snapshot placement rules at equal shared slots",
        description="Replay a synthetic or recorded decode trace through the real ring and "
        "rollback code at each depth. With --workload, replay a synthetic multi-request "
        "trace through the prefix-snapshot index under each placement rule instead.",
    )
    add_model_arguments(simulate, required=False)
    add = simulate.add_argument
    add(
        "--depths",
        type=_depths,
        default=[0, 1, 2, 4, 8, 16],
        help=f"comma-separated depths, at most {MAX_DEPTHS} (default 0,1,2,4,8,16)",
    )
    add("--trace", metavar="FILE", help="a JSONL trace (default: synthetic)")
    add("--sequences", type=int_flag(1), default=64, help="synthetic: sequences")
    add("--tokens", type=int_flag(1), default=512, help="synthetic: tokens each")
    add(
        "--boundary-rate",
        type=rate_flag,
        default=0.1,
        help="synthetic: chance a token is a boundary (default 0.1)",
    )
    add(
        "--rollback-rate",
        type=rate_flag,
        default=0.01,
        help="synthetic: chance of a rollback after a token (default 0.01)",
    )
    add(
        "--back",
        type=int_flag(1),
        default=4,
        help="synthetic: a rollback wants 1 to BACK boundaries back (default 4)",
    )
    add(
        "--thinking-rate",
        type=rate_flag,
        default=0.0,
        help="synthetic: chance a thinking span starts at a token",
    )
    add("--seed", type=int_flag(0), default=0, help="synthetic: random seed")
    add(
        "--accept-rate",
        metavar="R",
        type=rate_flag,
        default=None,
        help="synthetic, with --spec-tokens K: verify steps of K drafts, each accepted with "
        f"chance R until the first rejection (default {DEFAULT_ACCEPT_RATE})",
    )
    add("--plot", metavar="FILE", help="write a PNG (needs matplotlib)")
    _prefix_sim.add_arguments(simulate)
    flags = {
        **MODEL_FLAGS,
        "boundary_rate": "--boundary-rate",
        "rollback_rate": "--rollback-rate",
        "thinking_rate": "--thinking-rate",
        "back": "--back",
        "spec_tokens": "--spec-tokens",
        "accept_rate": "--accept-rate",
        "workload": "--workload",
        "requests": "--requests",
        "slots": "--prefix-slots",
        "jobs": "--jobs",
        "seed": "--seed",
        "path": "--plot",
    }
    simulate.set_defaults(run=run, flags=flags, model="nemotron-h-8b")
    # What --workload would ignore, with the value each has when not given: parsed as
    # _NOT_GIVEN, so that a flag given its default value is still seen as given.
    depth_only = {dest: (flag, simulate.get_default(dest)) for dest, flag in _DEPTH_ONLY.items()}
    simulate.set_defaults(depth_only=depth_only, **dict.fromkeys(_DEPTH_ONLY, _NOT_GIVEN))


def run(args: argparse.Namespace, out: TextIO) -> int:
    from .._apps.simulate import replay

    if args.plot is not None:
        check_plot(args.plot)
    given = _given_depth_flags(args)
    if args.workload is not None:
        if given:
            raise FlagError(given[0], "sets the depth simulation; --workload runs the prefix one")
        return _prefix_sim.run(args, out)
    _prefix_sim.check_depth_only(args)
    _check_speculation(args)  # before load_spec sizes the engine's buffers for K
    _, spec = load_spec(args)
    per_slot = spec.bytes_per_snapshot
    _check_depths(args.depths, per_slot)
    events, source = _events(args)
    speculation = _speculation(args, events)
    depths: list[int] = args.depths
    bar = progress_bar(sys.stderr, "events", quiet=args.json)
    total = len(events) * len(depths)
    results = []
    for i, depth in enumerate(depths):

        def progress(done: int, base: int = i * len(events)) -> None:
            bar(base + done, total)

        results.append(replay(events, depth, progress))
    if args.plot is not None:
        plot_depths(args.plot, results, per_slot, spec.model_type)
    if args.json:
        import json

        rows = [
            {
                "depth": r.depth,
                "rollbacks": r.rollbacks,
                "served": r.served,
                "served_fraction": r.served_fraction,
                "tokens_regenerated": r.tokens_regenerated,
                "tokens_recomputed": r.tokens_recomputed,
                "bytes_per_sequence": r.depth * per_slot,
            }
            for r in results
        ]
        report = {
            "model_type": spec.model_type,
            "source": source,
            **speculation,
            "depths": rows,
        }
        print(json.dumps(report), file=out)
        return 0
    print(f"{spec.model_type}: {source}", file=out)
    per_step = speculation["tokens_per_step"]
    if per_step is not None:
        print(f"mean tokens committed per verify step: {per_step:.2f}", file=out)
    print(
        f"{'depth':>5} {'rollbacks':>9} {'served':>7} {'served %':>8} "
        f"{'recomputed tokens':>17} {'memory / sequence':>17}",
        file=out,
    )
    for r in results:
        print(
            f"{r.depth:>5} {r.rollbacks:>9} {r.served:>7} {100 * r.served_fraction:>7.1f}% "
            f"{r.tokens_recomputed:>17,} {human(r.depth * per_slot):>17}",
            file=out,
        )
    if args.plot is not None:
        print(f"plot written to {one_line(args.plot)}", file=out)
    return 0


def _check_depths(depths: list[int], per_slot: int) -> None:
    """A depth whose snapshots no machine could hold is a typo: the report would price it."""
    deepest = max(depths)
    if deepest * per_slot > MAX_BYTES_PER_SEQUENCE:
        raise FlagError(
            "--depths",
            f"depth {deepest} needs {deepest * per_slot:,} bytes of snapshots per sequence "
            f"({per_slot:,} a slot), more than the 2**50 bytes (1 PiB) a machine holds",
        )


def _spec_tokens(args: argparse.Namespace) -> int:
    # --spec-tokens is a model flag (it also sizes the engine's speculative buffers);
    # getattr: a parser without it simulates plain decoding.
    tokens: int = getattr(args, "spec_tokens", 0)
    return tokens


def _speculation(
    args: argparse.Namespace, events: list[TraceEvent]
) -> dict[str, int | float | None]:
    """The report's speculative parameters (``None`` without --spec-tokens) and tokens per step."""
    if not _spec_tokens(args):
        return {"spec_tokens": None, "accept_rate": None, "tokens_per_step": None}
    steps = [1 + event.accepted for event in events if event.kind == "verify"]
    return {
        "spec_tokens": _spec_tokens(args),
        "accept_rate": args.accept_rate,
        "tokens_per_step": sum(steps) / len(steps) if steps else None,
    }


def _check_speculation(args: argparse.Namespace) -> None:
    spec_tokens = _spec_tokens(args)
    if not spec_tokens:
        if args.accept_rate is not None:
            raise FlagError("--accept-rate", "needs --spec-tokens K >= 1 (the drafts per step)")
        return
    if spec_tokens > MAX_SPEC_TOKENS:
        raise FlagError(
            "--spec-tokens",
            f"must be an int from 0 to {MAX_SPEC_TOKENS} to simulate verify steps, got "
            f"{spec_tokens}",
        )
    if args.trace is not None:
        raise FlagError(
            "--spec-tokens",
            "shapes the synthetic trace into verify steps; a --trace is replayed as recorded",
        )
    if args.accept_rate is None:
        args.accept_rate = DEFAULT_ACCEPT_RATE


def _events(args: argparse.Namespace) -> tuple[list[TraceEvent], str]:
    from .._apps.decode_trace import parse_trace, synthetic_trace

    if args.trace is not None:
        path, data = read_file("--trace", args.trace, limit=MAX_TRACE_BYTES)
        try:
            return parse_trace(data, path), f"trace {one_line(path)}"
        except InvalidArgumentError as error:
            raise FlagError("--trace", str(error)) from None
    if args.sequences > MAX_SEQUENCES:
        raise FlagError(
            "--sequences",
            f"must be at most {MAX_SEQUENCES:,} (each is a ring of its own, replayed at every "
            f"depth), got {grouped(args.sequences)}",
        )
    if args.sequences * args.tokens > MAX_EVENTS:
        raise FlagError(
            "--sequences",
            f"--sequences x --tokens must be at most {MAX_EVENTS:,}, got "
            f"{args.sequences} x {args.tokens}",
        )
    events = synthetic_trace(
        sequences=args.sequences,
        tokens=args.tokens,
        boundary_rate=args.boundary_rate,
        rollback_rate=args.rollback_rate,
        back=args.back,
        thinking_rate=args.thinking_rate,
        seed=args.seed,
        spec_tokens=_spec_tokens(args),
        accept_rate=args.accept_rate if args.accept_rate is not None else DEFAULT_ACCEPT_RATE,
    )
    source = (
        f"synthetic trace: {args.sequences} sequences x {args.tokens} tokens, boundary rate "
        f"{args.boundary_rate}, rollback rate {args.rollback_rate}, up to {args.back} "
        f"boundaries back, seed {args.seed}"
    )
    if _spec_tokens(args):
        source += (
            f"; speculative: {_spec_tokens(args)} drafts per verify step, accept rate "
            f"{args.accept_rate}"
        )
    return events, source


def _given_depth_flags(args: argparse.Namespace) -> list[str]:
    """The depth-only flags the command line gave, in ``_DEPTH_ONLY``'s order; each of the
    others takes its default now."""
    given = []
    for dest, (flag, default) in args.depth_only.items():
        if getattr(args, dest) is _NOT_GIVEN:
            setattr(args, dest, default)
        else:
            given.append(flag)
    return given
