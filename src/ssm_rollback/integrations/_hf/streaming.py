"""A decoder's ``streamer``: the prompt, each kept token in order, ``end()`` exactly once.

``model.generate`` puts the prompt into its ``streamer`` itself and then calls
a callable ``custom_generate`` without it (``transformers`` 5.25 hands such a
function only the keywords of its own signature that ``_sample`` lacks), so a
consumer of a ``TextIteratorStreamer`` would wait for ``end()`` forever. The
decoders therefore read the arguments ``generate`` did not hand over from
its frame (``generate_call``), only when ``generate``'s own code called
them, itself or through a function of the caller's own given as
``custom_generate``; a direct call, or such a function, passes ``streamer=`` as a
keyword.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Mapping
from types import CodeType, FrameType
from typing import Protocol, final

import torch
from transformers.generation.utils import GenerationMixin

from ..._errors import InvalidArgumentError, InvalidArgumentTypeError
from .arguments import shown

__all__ = ["Streamer", "TokenStreamer", "generate_call", "open_stream"]

_GENERATE_CODE = inspect.unwrap(GenerationMixin.generate).__code__


class Streamer(Protocol):
    """What ``generate`` streams to (``transformers.BaseStreamer``): ``put`` ids, then ``end``."""

    def put(self, value: torch.Tensor) -> object: ...

    def end(self) -> object: ...


#: How many functions of the caller's own may stand between ``generate`` and a decoder.
_WRAPPERS = 4


def generate_call(frame: FrameType | None) -> Mapping[str, object] | None:
    """The arguments of the ``model.generate`` call that called the decoder running in
    ``frame``, or ``None`` for a direct call.

    ``generate`` calls its ``custom_generate``: the decoder itself (or a
    ``functools.partial`` of it), or a function of the caller's own that calls
    the decoder, perhaps through a few more. That function is found by the
    frame ``generate`` called, which must run ``custom_generate``'s code:
    a decoder called by some other code inside ``generate`` is a direct call.
    """
    if frame is None:
        return None
    below, caller = frame, frame.f_back
    for _ in range(_WRAPPERS + 1):
        if caller is None:
            return None
        if caller.f_code is _GENERATE_CODE:
            wrapper = caller.f_locals.get("custom_generate")
            if below is frame or below.f_code is _code_of(wrapper):
                return dict(caller.f_locals)
            return None
        below, caller = caller, caller.f_back
    return None


def _code_of(function: object) -> CodeType | None:
    """The code a call of ``function`` runs first: a function's, a partial's or a bound
    method's function's, a callable object's ``__call__``'s."""
    while isinstance(function, functools.partial):
        function = function.func
    if not callable(function):
        return None
    target = inspect.unwrap(getattr(function, "__func__", function))  # a bound method's too
    code = getattr(target, "__code__", None)
    if code is None:  # a callable object
        code = getattr(inspect.getattr_static(type(target), "__call__", None), "__code__", None)
    return code if isinstance(code, CodeType) else None


def open_stream(kwargs: Mapping[str, object], call: Mapping[str, object] | None) -> TokenStreamer:
    """The call's ``streamer``: the decoder's own keyword (which gets the prompt too), or
    ``generate``'s (which has put the prompt).

    A function of the caller's own given as ``custom_generate`` may pass the
    decoder a ``streamer=`` of its own. One given both there and to
    ``generate`` (two objects) is refused by name, after ``generate``'s is
    ended: it already holds the prompt, and its consumer must not wait.
    """
    own = kwargs.get("streamer")
    outer = None if call is None else call.get("streamer")
    if outer is None:
        return TokenStreamer(own, prompt_streamed=False)
    if own is None or own is outer:
        return TokenStreamer(outer, prompt_streamed=True)
    TokenStreamer(outer, prompt_streamed=True).end()
    raise InvalidArgumentError(
        f"'streamer' must be given once: model.generate got one and its custom_generate "
        f"function passed the decoder another (pass one of them), got {shown(own)}"
    )


@final
class TokenStreamer:
    """A checked ``streamer`` (or none): puts a prompt and tokens, and ends once - on leaving
    its ``with`` block, also by an error, so that a consumer never waits forever."""

    def __init__(self, streamer: object, *, prompt_streamed: bool) -> None:
        if streamer is not None and not (
            callable(getattr(streamer, "put", None)) and callable(getattr(streamer, "end", None))
        ):
            raise InvalidArgumentTypeError(
                f"'streamer' must have put(ids) and end() (a transformers streamer), "
                f"got {shown(streamer)}"
            )
        self._streamer: Streamer | None = streamer  # type: ignore[assignment]  # checked above
        #: Whether ``generate`` already put the prompt (it does so before calling a decoder).
        self._prompt_streamed = prompt_streamed
        self._ended = False

    @property
    def active(self) -> bool:
        return self._streamer is not None

    def prompt(self, ids: torch.Tensor) -> None:
        """The prompt, ``[batch, length]`` on the CPU as ``generate`` puts it (once)."""
        if self._streamer is not None and not self._prompt_streamed:
            self._streamer.put(ids.cpu())
            self._prompt_streamed = True

    def tokens(self, tokens: list[int]) -> None:
        """Kept tokens of a batch-1 row, one ``put`` each, as ``generate``'s sampling loop does."""
        if self._streamer is not None:
            for token in tokens:
                self._streamer.put(torch.tensor([token], dtype=torch.long))

    def __enter__(self) -> TokenStreamer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.end()

    def end(self) -> None:
        if self._streamer is not None and not self._ended:
            self._ended = True
            self._streamer.end()
