"""A decoder's ``streamer``: the prompt, each kept token in order, ``end()`` exactly once.

``model.generate`` puts the prompt into its ``streamer`` itself and then calls
a callable ``custom_generate`` without it (``transformers`` 5.25 hands such a
function only the keywords of its own signature that ``_sample`` lacks), so a
consumer of a ``TextIteratorStreamer`` would wait for ``end()`` forever. The
decoders therefore read the arguments ``generate`` did not hand over from
its frame (``generate_call``), only when ``generate``'s own code called
them; a direct call passes ``streamer=`` as a keyword.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from types import FrameType
from typing import Protocol, final

import torch
from transformers.generation.utils import GenerationMixin

from ..._errors import InvalidArgumentTypeError
from .arguments import shown

__all__ = ["Streamer", "TokenStreamer", "generate_call", "open_stream"]

_GENERATE_CODE = inspect.unwrap(GenerationMixin.generate).__code__


class Streamer(Protocol):
    """What ``generate`` streams to (``transformers.BaseStreamer``): ``put`` ids, then ``end``."""

    def put(self, value: torch.Tensor) -> object: ...

    def end(self) -> object: ...


def generate_call(frame: FrameType | None) -> Mapping[str, object] | None:
    """The arguments of the ``model.generate`` call that called a decoder from ``frame``'s
    caller, or ``None`` for a direct call."""
    caller = frame.f_back if frame is not None else None
    if caller is None or caller.f_code is not _GENERATE_CODE:
        return None
    return dict(caller.f_locals)


def open_stream(kwargs: Mapping[str, object], call: Mapping[str, object] | None) -> TokenStreamer:
    """The call's ``streamer``: ``generate``'s (which has put the prompt), or the keyword's."""
    if call is None:
        return TokenStreamer(kwargs.get("streamer"), prompt_streamed=False)
    return TokenStreamer(call.get("streamer"), prompt_streamed=True)


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
