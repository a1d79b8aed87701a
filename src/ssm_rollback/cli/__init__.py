"""The ``ssm-rollback`` console script: one module per subcommand, one error seam here.

A subcommand module has ``add_parser(commands)``, which registers its flags
and sets ``run`` (and ``flags``, the library parameter names its flags set),
and ``run(args, out) -> int``. Everything a user can get wrong ends here as
exit status 2 and one line on stderr that names the flag: argparse refuses
malformed values itself; ``main`` turns any ``SsmRollbackError`` raised
later into the same, with the library's parameter names replaced by flags.
"""

from __future__ import annotations

import argparse
import errno
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Final, NoReturn, TextIO

from .._errors import SsmRollbackError
from . import demo, plan, ring, simulate
from ._common import one_line, parse_size

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

__all__ = ["main", "parse_size"]

PROG: Final = "ssm-rollback"
#: Exit status for usage errors, as argparse uses.
USAGE_ERROR: Final = 2
# What CPython's signal docs recommend after a broken pipe: exit 1, no traceback.
BROKEN_PIPE: Final = 1
#: Exit status when the output cannot be written (a full disk, a closed stdout): one line.
OUTPUT_ERROR: Final = 1


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        super().error(one_line(message))

    def _print_message(self, message: str, file: SupportsWrite[str] | None = None) -> None:
        # argparse drops a failed write; --help and --version on stdout are the output, so
        # one that cannot be written (a full disk, a closed pipe) must say so (``_written``).
        # They pass stdout, None where it was closed (``>&-``); a usage error passes stderr,
        # None where that was closed, and is left to argparse (exit 2, nothing written).
        if message and file is None and sys.stdout is None:
            raise OSError(errno.EBADF, "standard output is closed")
        if message and file is sys.stdout:
            file.write(message)
        else:
            super()._print_message(message, file)


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description="Roll hybrid attention + SSM models back to an earlier boundary token.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in (demo, ring, plan, simulate):
        command.add_parser(commands)
    # Flags are spelled out: an abbreviation such as ``--g`` is a usage error,
    # not ``--grammar``, so a typo never starts a different (and slower) run.
    for command_parser in (parser, *commands.choices.values()):
        command_parser.allow_abbrev = False
    return parser


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(PROG)
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "(not installed)"


# A library message starts with the parameter it is about, quoted; the CLI user knows a flag.
_PARAMETER: Final = re.compile(r"'(\w+)'(?: \(the (--[\w-]+) flag\))?")


# A parameter named further on: a name with an underscore, as a word ("free_bytes is 10"),
# not part of a path or a file name. Quoted text is the user's own (a path, a value, a key
# of their file), kept as it is: the first alternative matches it whole.
_NAMED: Final = re.compile(r"""'[^']*'|"[^"]*"|(?<![\w/.-])[a-z]+(?:_[a-z]+)+(?![\w/-]|\.\w)""")


def flag_message(error: SsmRollbackError, flags: Mapping[str, str], source: str | None) -> str:
    """``error``'s message for a CLI user: flags for parameters, the config's source named."""
    message = str(error)
    if message.startswith("config"):  # about the config's own fields, not the flags
        return message if source is None else f"{source}: {message}"
    match = _PARAMETER.match(message)
    if match is not None and match[1] in flags:
        message = flags[match[1]] + message[match.end() :]
    return _NAMED.sub(lambda m: flags.get(m[0], m[0]), message)  # a quote maps to itself


def _run(args: argparse.Namespace, out: TextIO) -> int:
    try:
        status: int = args.run(args, out)
    except SsmRollbackError as error:
        flags: Mapping[str, str] = getattr(args, "flags", {})
        message = flag_message(error, flags, getattr(args, "source", None))
        _say(f"{PROG} {args.command}: error: {one_line(message)}")
        return USAGE_ERROR
    return status


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    """Run the console script; returns the process exit status (2: a usage error)."""
    parsed: argparse.Namespace | None = None

    def parse() -> int:
        nonlocal parsed
        try:
            parsed = _parser().parse_args(argv)
        except SystemExit as exit:  # argparse has printed the usage error, or --help
            if exit.code == 0 and out is None and sys.stdout is not None:
                sys.stdout.flush()  # --help, --version: the output, written or not
            return exit.code if isinstance(exit.code, int) else USAGE_ERROR
        return 0

    status = _written(PROG, parse)
    if parsed is None:
        return status
    args = parsed
    if out is not None:
        return _run(args, out)
    if sys.stdout is None:  # started with stdout closed (`>&-`): nowhere to write the output
        _say(f"{PROG} {args.command}: error: cannot write the output: standard output is closed")
        return OUTPUT_ERROR

    def run() -> int:
        status = _run(args, sys.stdout)
        sys.stdout.flush()  # a closed pipe shows here, not at interpreter exit
        return status

    return _written(f"{PROG} {args.command}", run)


def _written(who: str, write: Callable[[], int]) -> int:
    """Run ``write``, which writes to stdout: its exit status, or the output error's."""
    try:
        return write()
    except BrokenPipeError:
        # The reader (`| head`) has gone: exit without a traceback.
        _silence_stdout()
        return BROKEN_PIPE
    except OSError as error:  # a full disk (/dev/full), an I/O error: one line, not a traceback
        _silence_stdout()
        reason = error.strerror or type(error).__name__
        _say(f"{who}: error: cannot write the output: {reason}")
        return OUTPUT_ERROR


def _silence_stdout() -> None:
    """Point stdout at devnull, so the interpreter's own final flush cannot fail again."""
    if sys.stdout is None:  # closed from the start: nothing to flush
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def _say(line: str) -> None:
    """``line`` on stderr, if there is one (started with ``2>&-``, there is none)."""
    if sys.stderr is not None:
        print(line, file=sys.stderr)
