"""``ssm-rollback demo --grammar``: the report as a table or one JSON object."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Final, TextIO

from .._apps.grammar_demo import DEFAULT_CALLS, DEFAULT_MAX_TOKENS, ENGINES, GrammarDemoOptions
from ._common import progress_bar

if TYPE_CHECKING:
    from .._apps.grammar_demo._report import GrammarDemoReport

__all__ = ["run_grammar"]

#: Calls printed under the table.
EXAMPLES: Final = 3

_GRAMMAR_HINT: Final = (
    "ssm-rollback demo --grammar also needs a grammar engine; install the grammar extra:\n"
    "    pip install 'ssm-rollback[transformers,grammar]'"
)


def run_grammar(args: argparse.Namespace, out: TextIO, install_hint: str) -> int:
    """Run the structured-output demo for parsed ``demo`` flags; exit 0 when every check holds."""
    options = GrammarDemoOptions(
        model_type=args.model_type,
        capacity=args.capacity,
        calls=DEFAULT_CALLS if args.calls is None else args.calls,
        max_tokens=DEFAULT_MAX_TOKENS if args.length is None else args.length,
        seed=args.seed,
        engine=ENGINES[0] if args.engine is None else args.engine,
    )
    try:
        import transformers  # noqa: F401

        from .._apps.grammar_demo._run import run_grammar_demo
    except ImportError:
        print(install_hint, file=sys.stderr)
        return 1
    try:
        __import__(options.engine)
    except ImportError:
        print(_GRAMMAR_HINT, file=sys.stderr)
        return 1
    report = run_grammar_demo(options, progress_bar(sys.stderr, "calls", quiet=args.json))
    if args.json:
        print(json.dumps(report.to_dict(), sort_keys=True), file=out)
    else:
        _print_table(report, out)
    if report.ok:
        return 0
    print(f"ssm-rollback demo: {_failed(report, options.max_tokens)}", file=sys.stderr)
    return 1


def _failed(report: GrammarDemoReport, length: int) -> str:
    """Which of the demo's checks failed, in one line."""
    every = len(report.calls)
    if report.mismatches or report.matcher_mismatches:
        return (
            f"a check failed: {report.mismatches} rollbacks and {report.matcher_mismatches} "
            f"matcher states differ from a fresh decode"
        )
    return (
        f"{report.schema_valid} of {every} tool calls came out schema-valid and "
        f"{report.approved} approved within --length {length} tokens (raise --length to give "
        f"every call room)"
    )


def _print_table(report: GrammarDemoReport, out: TextIO) -> None:
    every = len(report.calls)
    rows = [
        ("model", f"{report.model_type} (tiny, random weights, seed {report.seed})"),
        ("grammar", f"{report.engine}, JSON schema of a tool call, byte-level vocabulary"),
        ("ring capacity", str(report.capacity)),
        ("tool calls", str(every)),
        ("schema-valid", f"{report.schema_valid}/{every}"),
        ("validator-approved", f"{report.approved}/{every}"),
        ("values refused", f"{report.values_rejected} (kept after retries: {report.gave_up})"),
        ("rollbacks served", str(report.rollbacks_served)),
        ("rollbacks declined", str(report.rollbacks_declined)),
        ("tokens regenerated", str(report.tokens_regenerated)),
        ("mismatches vs fresh decode", str(report.mismatches)),
        ("matcher mismatches", f"{report.matcher_mismatches} of {report.matcher_checks} checks"),
        ("time", f"{report.seconds:.1f} s"),
    ]
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}", file=out)
    for call in report.calls[:EXAMPLES]:
        print(file=out)
        print(call.text, file=out)
        for rejection in call.rejections:
            print(f"  refused {rejection.value!r}: {rejection.reason}", file=out)
