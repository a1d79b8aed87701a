"""The ``ssm-rollback`` console script."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TextIO

from ._errors import InvalidArgumentError
from ._ring import SsmDecodeRing

if TYPE_CHECKING:
    from ._simulate import DepthResult
    from .reserve import SsmStateSpec

__all__ = ["main", "parse_size"]

_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}


def parse_size(text: str) -> int:
    """Bytes in ``"40GiB"``, ``"512MB"``, ``"1.5 GiB"`` or plain ``"1073741824"``."""
    stripped = text.strip().lower().replace("_", "")
    number = stripped.rstrip("kmgtib ")
    unit = stripped[len(number) :].strip()
    try:
        value = float(number)
    except ValueError:
        value = -1.0
    if unit not in _UNITS or value < 0 or value != value:
        raise InvalidArgumentError(
            f"'--free-memory' must be a size such as 40GiB, 512MB or 1073741824, got {text!r}"
        )
    return int(value * _UNITS[unit])


def _human(size: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


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


def _progress_bar(stream: TextIO, unit: str, *, quiet: bool) -> Callable[[int, int], None]:
    """A one-line progress bar counting ``unit`` on an interactive ``stream``; else silent."""
    if quiet or not stream.isatty():
        return lambda done, total: None

    def show(done: int, total: int) -> None:
        width = 30
        filled = width * done // max(total, 1)
        end = "\n" if done >= total else ""
        print(
            f"\r[{'#' * filled}{'.' * (width - filled)}] {done}/{total} {unit}",
            end=end,
            file=stream,
            flush=True,
        )

    return show


def _demo(args: argparse.Namespace, out: TextIO) -> int:
    try:
        from ._demo import DemoOptions, run_demo
        from .testing._tiny import TESTED_MODEL_TYPES
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
    report = run_demo(options, _progress_bar(sys.stderr, "tokens", quiet=args.json))
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


def _model_config(args: argparse.Namespace) -> tuple[str, dict[str, object]]:
    from .reserve import _load, shipped_config

    if args.config is not None:
        return str(args.config), dict(_load(args.config))
    return args.model, shipped_config(args.model)


def _spec(args: argparse.Namespace) -> tuple[str, SsmStateSpec]:
    from .reserve import state_spec_from_hf_config

    name, config = _model_config(args)
    spec = state_spec_from_hf_config(config, tp_size=args.tp, dtype=args.dtype, layout=args.layout)
    return name, spec


def _plan(args: argparse.Namespace, out: TextIO) -> int:
    from .reserve import decode_rollback_ring_slots

    name, spec = _spec(args)
    free = parse_size(args.free_memory)
    depth = decode_rollback_ring_slots(
        spec, max_sequences=args.max_seqs, free_bytes=free, override=args.ring_slots
    )
    if args.json:
        report = {
            "model": name,
            "model_type": spec.model_type,
            "layout": spec.layout,
            "tp_size": spec.tp_size,
            "num_layers": spec.num_layers,
            "layers": [
                {
                    "index": layer.index,
                    "kind": layer.kind,
                    "tensors": [
                        {
                            "name": t.name,
                            "shape": list(t.shape),
                            "dtype": t.dtype,
                            "bytes": t.nbytes,
                        }
                        for t in layer.tensors
                    ],
                    "bytes": layer.nbytes,
                }
                for layer in spec.layers
            ],
            "max_sequences": args.max_seqs,
            "free_bytes": free,
            "bytes_per_slot": depth.bytes_per_slot,
            "fit": depth.fit,
            "slots": depth.slots,
            "rule": depth.rule.value,
            "bytes_total": depth.bytes_total,
        }
        print(json.dumps(report), file=out)
        return 0
    print(
        f"{name}: {spec.model_type}, {len(spec.layers)} SSM layers of {spec.num_layers}, "
        f"layout {spec.layout}, tensor parallel {spec.tp_size}",
        file=out,
    )
    print(
        f"{'layer':>5}  {'kind':<15} {'state tensors (per sequence)':<44} {'bytes':>12}", file=out
    )
    for layer in spec.layers:
        tensors = ", ".join(
            f"{t.name} {'x'.join(map(str, t.shape))} {t.dtype}" for t in layer.tensors
        )
        print(f"{layer.index:>5}  {layer.kind:<15} {tensors:<44} {layer.nbytes:>12,}", file=out)
    rows = [
        (
            "bytes per slot (one sequence)",
            f"{depth.bytes_per_slot:,} ({_human(depth.bytes_per_slot)})",
        ),
        ("max sequences", f"{args.max_seqs:,}"),
        ("free memory", f"{free:,} ({_human(free)})"),
        ("slots that fit per sequence", f"{depth.fit:,}"),
        ("ring depth", f"{depth.slots} (rule: {depth.rule.value})"),
        ("bytes reserved", f"{depth.bytes_total:,} ({_human(depth.bytes_total)})"),
    ]
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}", file=out)
    return 0


def _simulate(args: argparse.Namespace, out: TextIO) -> int:
    from ._simulate import iter_depths, read_trace, replay, synthetic_trace

    depths = list(iter_depths(args.depths))
    _, spec = _spec(args)
    if args.trace is not None:
        events = read_trace(args.trace)
        source = f"trace {args.trace}"
    else:
        events = synthetic_trace(
            sequences=args.sequences,
            tokens=args.tokens,
            boundary_rate=args.boundary_rate,
            rollback_rate=args.rollback_rate,
            back=args.back,
            thinking_rate=args.thinking_rate,
            seed=args.seed,
        )
        source = (
            f"synthetic trace: {args.sequences} sequences x {args.tokens} tokens, boundary rate "
            f"{args.boundary_rate}, rollback rate {args.rollback_rate}, up to {args.back} "
            f"boundaries back, seed {args.seed}"
        )
    bar = _progress_bar(sys.stderr, "events", quiet=args.json)
    total = len(events) * len(depths)
    results = []
    for i, depth in enumerate(depths):

        def progress(done: int, base: int = i * len(events)) -> None:
            bar(base + done, total)

        results.append(replay(events, depth, progress))
    per_slot = spec.bytes_per_snapshot
    if args.plot is not None:
        _plot(args.plot, results, per_slot, spec.model_type)
    if args.json:
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
        report = {"model_type": spec.model_type, "source": source, "depths": rows}
        print(json.dumps(report), file=out)
        return 0
    print(f"{spec.model_type}: {source}", file=out)
    print(
        f"{'depth':>5} {'rollbacks':>9} {'served':>7} {'served %':>8} "
        f"{'recomputed tokens':>17} {'memory / sequence':>17}",
        file=out,
    )
    for r in results:
        print(
            f"{r.depth:>5} {r.rollbacks:>9} {r.served:>7} {100 * r.served_fraction:>7.1f}% "
            f"{r.tokens_recomputed:>17,} {_human(r.depth * per_slot):>17}",
            file=out,
        )
    if args.plot is not None:
        print(f"plot written to {args.plot}", file=out)
    return 0


def _plot(path: str, results: list[DepthResult], per_slot: int, model_type: str) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        from matplotlib import pyplot
    except ImportError:
        raise InvalidArgumentError(
            "'--plot' needs matplotlib: pip install 'ssm-rollback[plot]'"
        ) from None
    depths = [r.depth for r in results]
    figure, served_axis = pyplot.subplots(figsize=(7, 4))
    served_axis.plot(depths, [100 * r.served_fraction for r in results], "o-", color="tab:blue")
    served_axis.set_xlabel("ring depth (snapshot slots per sequence)")
    served_axis.set_ylabel("rollbacks served (%)", color="tab:blue")
    served_axis.set_ylim(0, 105)
    memory_axis = served_axis.twinx()
    memory = [d * per_slot / 2**20 for d in depths]
    memory_axis.plot(depths, memory, "s--", color="tab:orange")
    memory_axis.set_ylabel("snapshot memory per sequence (MiB)", color="tab:orange")
    served_axis.set_title(f"{model_type}: rollbacks served vs snapshot memory")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    pyplot.close(figure)


def _add_model_arguments(parser: argparse.ArgumentParser, *, required: bool) -> None:
    from .reserve import SHIPPED_MODELS

    source = parser.add_mutually_exclusive_group(required=required)
    source.add_argument("--config", metavar="PATH", help="a Hugging Face config.json")
    source.add_argument("--model", choices=SHIPPED_MODELS, help="a shipped full-size config")
    parser.add_argument("--tp", type=int, default=1, help="tensor-parallel ranks (default 1)")
    parser.add_argument("--dtype", default=None, help="state dtype (default: the config's)")
    parser.add_argument(
        "--layout",
        choices=["engine", "transformers"],
        default="engine",
        help="how the state is stored (default engine: vLLM / SGLang)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")


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

    plan = commands.add_parser(
        "plan",
        help="snapshot size per sequence and the ring depth that fits in memory",
        description="Size one snapshot slot from a model config and choose the ring depth: "
        "--ring-slots, else $SSM_ROLLBACK_RING_SLOTS, else what --free-memory allows.",
    )
    _add_model_arguments(plan, required=True)
    plan.add_argument(
        "--free-memory",
        required=True,
        metavar="SIZE",
        help="memory for snapshots: 40GiB, 512MB or bytes",
    )
    plan.add_argument("--max-seqs", type=int, default=256, help="sequences (default 256)")
    plan.add_argument(
        "--ring-slots",
        default=None,
        metavar="N",
        help="override the depth (beats $SSM_ROLLBACK_RING_SLOTS)",
    )

    simulate = commands.add_parser(
        "simulate",
        help="replay a decode trace at several ring depths: rollbacks served vs memory",
        description="Replay a synthetic or recorded decode trace through the real ring and "
        "rollback code at each depth.",
    )
    _add_model_arguments(simulate, required=False)
    simulate.add_argument("--depths", default="0,1,2,4,8,16", help="comma-separated depths")
    simulate.add_argument("--trace", metavar="FILE", help="a JSONL trace (default: synthetic)")
    simulate.add_argument("--sequences", type=int, default=64, help="synthetic: sequences")
    simulate.add_argument("--tokens", type=int, default=512, help="synthetic: tokens each")
    simulate.add_argument(
        "--boundary-rate",
        type=float,
        default=0.1,
        help="synthetic: chance a token is a boundary (default 0.1)",
    )
    simulate.add_argument(
        "--rollback-rate",
        type=float,
        default=0.01,
        help="synthetic: chance of a rollback after a token (default 0.01)",
    )
    simulate.add_argument(
        "--back",
        type=int,
        default=4,
        help="synthetic: a rollback wants 1 to BACK boundaries back (default 4)",
    )
    simulate.add_argument(
        "--thinking-rate",
        type=float,
        default=0.0,
        help="synthetic: chance a thinking span starts at a token",
    )
    simulate.add_argument("--seed", type=int, default=0, help="synthetic: random seed")
    simulate.add_argument("--plot", metavar="FILE", help="write a PNG (needs matplotlib)")
    return parser


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Run the console script; returns the process exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    stream = sys.stdout if out is None else out
    if args.command in ("plan", "simulate"):
        if args.command == "simulate" and args.config is None and args.model is None:
            args.model = "nemotron-h-8b"
        try:
            return _plan(args, stream) if args.command == "plan" else _simulate(args, stream)
        except InvalidArgumentError as error:
            print(f"ssm-rollback {args.command}: {error}", file=sys.stderr)
            return 2
    if args.capacity < 0:
        parser.error(f"--capacity must be an int >= 0, got {args.capacity}")
    if args.command == "ring":
        return _ring_walk(stream, args.capacity)
    if args.length < 1:
        parser.error(f"--length must be an int >= 1, got {args.length}")
    return _demo(args, stream)
