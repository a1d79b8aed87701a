"""``ssm-rollback plan``: bytes per snapshot and the ring depth that fits in memory."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, TextIO

from ._common import human, int_flag, size_flag
from ._model import MODEL_FLAGS, add_model_arguments, load_spec

if TYPE_CHECKING:
    from ..reserve import RingDepth, SsmStateSpec

__all__ = ["add_parser", "run"]


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    plan = commands.add_parser(
        "plan",
        help="snapshot size per sequence and the ring depth that fits in memory",
        description="Size one snapshot slot from a model config and choose the ring depth: "
        "--ring-slots, else $SSM_ROLLBACK_RING_SLOTS, else what --free-memory allows.",
    )
    add_model_arguments(plan, required=True)
    plan.add_argument(
        "--free-memory",
        required=True,
        type=size_flag,
        metavar="SIZE",
        help="memory for snapshots: 40GiB, 512MB, 1.5GiB or a whole number of bytes",
    )
    plan.add_argument("--max-seqs", type=int_flag(1), default=256, help="sequences (default 256)")
    plan.add_argument(
        "--ring-slots",
        type=int_flag(0),
        default=None,
        metavar="N",
        help="override the depth (beats $SSM_ROLLBACK_RING_SLOTS)",
    )
    plan.add_argument(
        "--prefix-slots",
        type=int_flag(0),
        default=0,
        metavar="N",
        help="shared prefix snapshot slots for the whole engine, one snapshot each, taken "
        "from --free-memory before the rings (default 0)",
    )
    flags = {
        **MODEL_FLAGS,
        "max_sequences": "--max-seqs",
        "free_bytes": "--free-memory",
        "override": "--ring-slots",
        "prefix_slots": "--prefix-slots",
    }
    plan.set_defaults(run=run, flags=flags)


def run(args: argparse.Namespace, out: TextIO) -> int:
    from ..reserve import decode_rollback_ring_slots

    name, spec = load_spec(args)
    depth = decode_rollback_ring_slots(
        spec,
        max_sequences=args.max_seqs,
        free_bytes=args.free_memory,
        override=args.ring_slots,
        prefix_slots=args.prefix_slots,
    )
    if args.json:
        import json

        print(json.dumps(_report(name, spec, depth, args)), file=out)
    else:
        _print_table(name, spec, depth, args, out)
    return 0


def _report(
    name: str, spec: SsmStateSpec, depth: RingDepth, args: argparse.Namespace
) -> dict[str, object]:
    return {
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
                        "dtype_rule": t.dtype_rule,
                        "bytes": t.nbytes,
                    }
                    for t in layer.tensors
                ],
                "bytes": layer.nbytes,
                "speculative_bytes": layer.speculative_nbytes,
            }
            for layer in spec.layers
        ],
        "spec_tokens": spec.num_speculative_tokens,
        "speculative_bytes_per_sequence": spec.speculative_bytes_per_sequence,
        "speculative_bytes": depth.speculative_bytes,
        "max_sequences": args.max_seqs,
        "free_bytes": args.free_memory,
        "bytes_per_slot": depth.bytes_per_slot,
        "prefix_slots": depth.prefix_slots,
        "prefix_bytes": depth.prefix_bytes,
        "fit": depth.fit,
        "slots": depth.slots,
        "rule": depth.rule.value,
        "bytes_total": depth.bytes_total,
    }


def _print_table(
    name: str, spec: SsmStateSpec, depth: RingDepth, args: argparse.Namespace, out: TextIO
) -> None:
    print(
        f"{name}: {spec.model_type}, {len(spec.layers)} SSM layers of {spec.num_layers}, "
        f"layout {spec.layout}, tensor parallel {spec.tp_size}",
        file=out,
    )
    for tensor in spec.layers[0].tensors:
        print(f"  {tensor.name} dtype {tensor.dtype}: {tensor.dtype_rule}", file=out)
    print(
        f"{'layer':>5}  {'kind':<15} {'state tensors (per sequence)':<44} {'bytes':>12}", file=out
    )
    for layer in spec.layers:
        tensors = ", ".join(
            f"{t.name} {'x'.join(map(str, t.shape))} {t.dtype}" for t in layer.tensors
        )
        print(f"{layer.index:>5}  {layer.kind:<15} {tensors:<44} {layer.nbytes:>12,}", file=out)
    free: int = args.free_memory
    rows = [
        (
            "bytes per slot (one sequence)",
            f"{depth.bytes_per_slot:,} ({human(depth.bytes_per_slot)})",
        ),
        ("max sequences", f"{args.max_seqs:,}"),
        ("free memory", f"{free:,} ({human(free)})"),
        *_speculative_rows(spec, depth),
        *_prefix_rows(depth),
        ("slots that fit per sequence", f"{depth.fit:,}"),
        ("ring depth", f"{depth.slots} (rule: {depth.rule.value})"),
        ("bytes reserved", f"{depth.bytes_total:,} ({human(depth.bytes_total)})"),
    ]
    if depth.prefix_slots:
        both = depth.bytes_total + depth.prefix_bytes
        rows.append(("bytes reserved with shared slots", f"{both:,} ({human(both)})"))
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}", file=out)
    if depth.slots == 0 and depth.rule.value == "memory":
        print(_no_slot_fits(depth, args.max_seqs, free), file=out)


def _no_slot_fits(depth: RingDepth, sequences: int, free: int) -> str:
    # A bare "ring depth 0" reads like a bug; say what it costs and which flags move it.
    needed = depth.bytes_per_slot * sequences
    left = max(0, free - depth.speculative_bytes - depth.prefix_bytes)
    taken = ["the speculative buffers"] if depth.speculative_bytes else []
    taken += ["the shared prefix slots"] if depth.prefix_bytes else []
    where = f"free after {' and '.join(taken)}" if taken else "free"
    lower = ["--max-seqs"]
    lower += ["--spec-tokens"] if depth.speculative_bytes else []
    lower += ["--prefix-slots"] if depth.prefix_bytes else []
    flags = ", ".join(lower[:-1]) + " or " + lower[-1] if len(lower) > 1 else lower[0]
    return (
        f"depth 0 serves no rollback: one slot for each of {sequences:,} sequences needs "
        f"{needed:,} bytes ({human(needed)}), {left:,} ({human(left)}) {where}; "
        f"lower {flags} or raise --free-memory"
    )


def _speculative_rows(spec: SsmStateSpec, depth: RingDepth) -> list[tuple[str, str]]:
    if not spec.num_speculative_tokens:
        return []
    per_sequence = spec.speculative_bytes_per_sequence
    return [
        ("draft tokens per step", f"{spec.num_speculative_tokens}"),
        ("speculative bytes per sequence", f"{per_sequence:,} ({human(per_sequence)})"),
        (
            "speculative bytes (all sequences)",
            f"{depth.speculative_bytes:,} ({human(depth.speculative_bytes)})",
        ),
    ]


def _prefix_rows(depth: RingDepth) -> list[tuple[str, str]]:
    if not depth.prefix_slots:
        return []
    return [
        ("shared prefix slots", f"{depth.prefix_slots:,}"),
        ("shared prefix bytes", f"{depth.prefix_bytes:,} ({human(depth.prefix_bytes)})"),
    ]
