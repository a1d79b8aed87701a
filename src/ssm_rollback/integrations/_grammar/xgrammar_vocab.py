"""The vocabulary an ``xgrammar.GrammarMatcher`` was compiled for, which xgrammar keeps private.

The matcher holds its grammar's ``TokenizerInfo`` (the size of its token
mask, a padded model head included when it was declared there) but offers
no way to read it: a bitmask check only sees the number of 32-bit words. The
one place the size shows is the warning its C++ core writes to fd 2 when a
token id lies past it - ``The token id N is out of range [0, V). Rejecting
the token.`` - so a reset fork of the matcher (a terminated one would warn
about that instead) is offered an id past any vocabulary, with fd 2 pointed
at a temporary file for that one call. Anything else written to fd 2 in
that moment is passed on. A lock keeps two probes from swapping fd 2 under
each other.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from ..._errors import InvalidArgumentError, shown
from .bitmask import allocate_token_bitmask

if TYPE_CHECKING:
    import xgrammar

__all__ = ["check_vocab_size", "engine_vocab_size"]

#: Past any vocabulary, and still an int32 (xgrammar's token id type).
_PROBE_ID: Final = 2**31 - 1
_OUT_OF_RANGE: Final = re.compile(
    rb"[^\n]*The token id 2147483647 is out of range \[0, (\d+)\)[^\n]*\n?"
)
_LOCK: Final = threading.Lock()


def check_vocab_size(matcher: xgrammar.GrammarMatcher, vocab_size: int) -> None:
    """``vocab_size`` is the one xgrammar compiled the matcher's grammar for, exactly.

    Larger would let a mask allow ids the matcher refuses to accept (xgrammar
    sets the spare bits of a row's last word); smaller would cut ids it may
    need, its stop token among them. A padded model head is declared to
    xgrammar (``TokenizerInfo(..., vocab_size=...)``), not here.
    """
    engine = engine_vocab_size(matcher)
    if engine is not None:
        if vocab_size != engine:
            raise InvalidArgumentError(
                f"'vocab_size' must be the matcher's vocabulary size {engine} (the vocab_size "
                f"of the xgrammar.TokenizerInfo its grammar was compiled with), "
                f"got {shown(vocab_size)}"
            )
        return
    # xgrammar did not say: its bitmask check still refuses another number of words.
    if not matcher.is_terminated():
        try:
            matcher.fill_next_token_bitmask(allocate_token_bitmask(1, vocab_size))
        except RuntimeError as error:
            raise InvalidArgumentError(
                f"'vocab_size' must be the matcher's tokenizer vocabulary size, got "
                f"{vocab_size}, which xgrammar refuses: {str(error).strip()}"
            ) from None


def engine_vocab_size(matcher: xgrammar.GrammarMatcher) -> int | None:
    """The vocabulary size ``matcher`` refuses token ids at, or ``None`` if xgrammar did not say.

    ``None`` when fd 2 cannot be swapped (closed) or the warning reads
    otherwise (another xgrammar release); the matcher itself never moves.
    """
    probe = matcher.fork()
    probe.reset()
    with _LOCK:
        try:
            captured = _captured_stderr(lambda: probe.accept_token(_PROBE_ID))
        except OSError:
            return None
    match = _OUT_OF_RANGE.search(captured)
    rest = captured if match is None else captured[: match.start()] + captured[match.end() :]
    if rest:
        with contextlib.suppress(OSError):  # stderr is gone: nothing to pass it on to
            os.write(2, rest)
    return None if match is None else int(match[1])


def _captured_stderr(call: Callable[[], object]) -> bytes:
    """What ``call()`` (and anything else in that moment) wrote to fd 2."""
    if sys.stderr is not None:
        with contextlib.suppress(OSError, ValueError):  # closed: nothing pending to send
            sys.stderr.flush()  # Python's pending output goes where it was meant to
    saved = os.dup(2)
    try:
        with tempfile.TemporaryFile() as sink:
            os.dup2(sink.fileno(), 2)
            try:
                call()
            finally:
                os.dup2(saved, 2)
            sink.seek(0)
            return sink.read()
    finally:
        os.close(saved)
