"""What several subcommands share: flag types, sizes, a progress bar."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from fractions import Fraction
from typing import Final, TextIO

from .._errors import InvalidArgumentError, shown

__all__ = [
    "FlagError",
    "human",
    "int_flag",
    "one_line",
    "parse_size",
    "progress_bar",
    "rate_flag",
    "size_flag",
]


class FlagError(InvalidArgumentError):
    """A flag's value was refused after parsing; the message starts with the flag."""

    def __init__(self, flag: str, message: str) -> None:
        super().__init__(f"{flag}: {message}")


# -- flag types (argparse prints "argument --flag: <message>" and exits 2) -------------------

# ASCII digits only: int() and float() also take Arabic-Indic and other Unicode digits,
# surrounding blanks and underscores, none of which a flag value should silently mean.
_INT: Final = re.compile(r"-?[0-9]+")
_RATE: Final = re.compile(r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")
# Longer than any count a flag could mean; also keeps int() far from its digit limit.
_MAX_DIGITS: Final = 30


def int_flag(least: int, most: int | None = None) -> Callable[[str], int]:
    """An argparse type: an int written in ASCII digits, ``least <= value <= most``."""
    expected = f"an int >= {least}" if most is None else f"an int from {least} to {most}"

    def parse(text: str) -> int:
        if not _INT.fullmatch(text) or len(text) > _MAX_DIGITS:
            raise argparse.ArgumentTypeError(f"must be {expected}, got {shown(text)}")
        value = int(text)
        if value < least or (most is not None and value > most):
            raise argparse.ArgumentTypeError(f"must be {expected}, got {shown(text)}")
        return value

    return parse


def rate_flag(text: str) -> float:
    """An argparse type: a probability in [0, 1] written as an ASCII decimal."""
    value = float(text) if _RATE.fullmatch(text) else -1.0
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be a number in [0, 1], got {shown(text)}")
    return value


_UNITS: Final = {
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
_SIZE: Final = re.compile(r"\s*([0-9]+(?:_[0-9]+)*)(?:\.([0-9]+))?\s*([a-zA-Z]*)\s*")
#: No machine has more; a larger figure is a typo, not a plan.
MAX_SIZE: Final = 2**64


def parse_size(text: str) -> int:
    """Bytes in ``"40GiB"``, ``"512MB"``, ``"1.5 GiB"`` or plain ``"1073741824"``.

    ASCII digits (``_`` between them allowed), an optional decimal part and an
    optional unit (B, kB, MB, GB, TB, KiB, MiB, GiB, TiB; any case). A decimal
    part is accepted only when the size comes out a whole number of bytes
    (``1.5GiB`` yes, ``0.1`` no); no exponents, ``inf`` or ``nan``.
    """
    match = _SIZE.fullmatch(text)
    if match is None or len(text) > 2 * _MAX_DIGITS or match[3].lower() not in _UNITS:
        raise InvalidArgumentError(
            f"must be a size such as 40GiB, 512MB, 1.5GiB or 1073741824, got {shown(text)}"
        )
    whole, fraction, unit = match[1].replace("_", ""), match[2] or "", match[3].lower()
    size = Fraction(int(whole + fraction), 10 ** len(fraction)) * _UNITS[unit]
    if size.denominator != 1:
        raise InvalidArgumentError(f"must be a whole number of bytes, got {shown(text)} = {size}")
    if size > MAX_SIZE:
        raise InvalidArgumentError(f"must be at most 16EiB (2**64 bytes), got {shown(text)}")
    return int(size)


def size_flag(text: str) -> int:
    """``parse_size`` as an argparse type."""
    try:
        return parse_size(text)
    except InvalidArgumentError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def one_line(text: str) -> str:
    """``text`` with newlines, other control characters and lone surrogates escaped.

    Flag values are echoed in error messages; one with a newline in it must not
    break the message's one line, nor a surrogate from a non-UTF-8 argv the stream.
    """
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


# -- output ---------------------------------------------------------------------------------


def human(size: float) -> str:
    """``size`` bytes in the largest binary unit that keeps it readable."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def progress_bar(stream: TextIO | None, unit: str, *, quiet: bool) -> Callable[[int, int], None]:
    """A one-line progress bar counting ``unit`` on an interactive ``stream``; else silent
    (also with no stream: a process started with stderr closed has none)."""
    if quiet or stream is None or not stream.isatty():
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
