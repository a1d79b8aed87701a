"""``ssm-rollback demo``: boundary-rollback decoding on a tiny hybrid model, checked bit for bit.

``--grammar`` runs the structured-output form instead: tool calls decoded
under a JSON schema, with a run-time validator sending values back
(``_grammar_demo``).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Final, TextIO

from .._apps.grammar_demo import DEFAULT_CALLS, DEFAULT_MAX_TOKENS, ENGINES, MAX_CALLS
from ..testing import DEMO_MODEL_TYPES
from ._common import FlagError, int_flag, progress_bar
from ._grammar_demo import run_grammar

__all__ = ["MODEL_TYPES", "add_parser", "run"]

MODEL_TYPES: Final = DEMO_MODEL_TYPES

# The pool allocates every slot up front, and the check re-decodes each kept prefix from
# the prompt: bounds that keep a demo a demo (the tiny models also stop at 512 positions).
MAX_CAPACITY: Final = 1024
MAX_LENGTH: Final = 256
DEFAULT_LENGTH: Final = 64

#: The grammar demo's parameter names, for error messages.
GRAMMAR_FLAGS: Final = {
    "model_type": "--model-type",
    "capacity": "--capacity",
    "calls": "--calls",
    "max_tokens": "--length",
    "seed": "--seed",
    "engine": "--engine",
}

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
        "rollback against a fresh decode. With --grammar: decode JSON tool calls under a "
        "schema and a run-time validator, rolling refused values back.",
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
        default=None,
        help=f"tokens to generate, 1 to {MAX_LENGTH} (default {DEFAULT_LENGTH}; with "
        f"--grammar: the most per call, default {DEFAULT_MAX_TOKENS})",
    )
    demo.add_argument(
        "--seed", type=int_flag(0, 2**32 - 1), default=0, help="random seed (default 0)"
    )
    demo.add_argument("--json", action="store_true", help="print the report as one JSON object")
    grammar = demo.add_argument_group("structured output")
    grammar.add_argument(
        "--grammar",
        action="store_true",
        help="decode JSON tool calls under a schema; a run-time validator rejects values "
        "and the row rolls back to the boundary in front of them",
    )
    grammar.add_argument(
        "--calls",
        type=int_flag(1, MAX_CALLS),
        default=None,
        help=f"with --grammar: tool calls to decode, 1 to {MAX_CALLS} (default {DEFAULT_CALLS})",
    )
    grammar.add_argument(
        "--engine",
        choices=ENGINES,
        default=None,
        help=f"with --grammar: the grammar engine (default {ENGINES[0]})",
    )
    demo.set_defaults(run=run, flags=GRAMMAR_FLAGS)


def run(args: argparse.Namespace, out: TextIO) -> int:
    if args.grammar:
        return run_grammar(args, out, _INSTALL_HINT)
    for flag, value in (("--calls", args.calls), ("--engine", args.engine)):
        if value is not None:
            raise FlagError(flag, "only with --grammar")
    try:
        from .._apps.demo import DemoOptions, run_demo
    except ImportError:
        print(_INSTALL_HINT, file=sys.stderr)
        return 1
    length = DEFAULT_LENGTH if args.length is None else args.length
    options = DemoOptions(args.model_type, args.capacity, length, args.seed)
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
