"""``ssm-rollback demo``: boundary-rollback decoding on a tiny hybrid model, checked bit for bit."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Final, TextIO

from ..testing._model_types import DEMO_MODEL_TYPES
from ._common import int_flag, progress_bar

__all__ = ["MODEL_TYPES", "add_parser", "run"]

MODEL_TYPES: Final = DEMO_MODEL_TYPES

# The pool allocates every slot up front, and the check re-decodes each kept prefix from
# the prompt: bounds that keep a demo a demo (the tiny models also stop at 512 positions).
MAX_CAPACITY: Final = 1024
MAX_LENGTH: Final = 256

_INSTALL_HINT: Final = (
    "ssm-rollback demo runs a tiny hybrid model with Hugging Face transformers, which is not "
    "installed; install it with:\n"
    "    pip install torch==2.13.0 && pip install 'ssm-rollback[transformers]'\n"
    "(or pip install -e '.[transformers]' in a clone). `ssm-rollback ring` needs nothing."
)


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = commands.add_parser(
        "demo",
        help="boundary-rollback decoding on a tiny hybrid model, verified bit for bit",
        description="Decode with a tiny random-weight hybrid model; when a banned token is "
        "sampled, roll back to the last boundary with a snapshot, resample, and check every "
        "rollback against a fresh decode.",
    )
    demo.add_argument(
        "--model-type",
        choices=MODEL_TYPES,
        default="nemotron_h",
        metavar="TYPE",
        help=f"transformers model type of the tiny model (default nemotron_h): "
        f"{', '.join(MODEL_TYPES)}",
    )
    demo.add_argument(
        "--capacity",
        type=int_flag(0, MAX_CAPACITY),
        default=4,
        help=f"ring slots, 0 to {MAX_CAPACITY} (default 4)",
    )
    demo.add_argument(
        "--length",
        type=int_flag(1, MAX_LENGTH),
        default=64,
        help=f"tokens to generate, 1 to {MAX_LENGTH} (default 64)",
    )
    demo.add_argument(
        "--seed", type=int_flag(0, 2**32 - 1), default=0, help="random seed (default 0)"
    )
    demo.add_argument("--json", action="store_true", help="print the report as one JSON object")
    demo.set_defaults(run=run)


def run(args: argparse.Namespace, out: TextIO) -> int:
    try:
        from .._demo import DemoOptions, run_demo
    except ImportError:
        print(_INSTALL_HINT, file=sys.stderr)
        return 1
    options = DemoOptions(args.model_type, args.capacity, args.length, args.seed)
    report = run_demo(options, progress_bar(sys.stderr, "tokens", quiet=args.json))
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
