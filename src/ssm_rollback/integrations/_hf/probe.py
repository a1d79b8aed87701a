"""Whether a model's own multi-token forward pass from a cache works, asked once per model.

Speculative decoding verifies ``k`` drafts in one forward pass over a cache.
Some ``transformers`` model code cannot do that at all: in 5.25,
``kimi_linear`` and ``bailing_hybrid`` fail inside attention ("The size of
tensor a (4) must match the size of tensor b (8)") for any forward of more
than one token after a cached one, while one-token steps and a prefill work.
A probe (one token, then two from its cache, in a throwaway cache) finds
that before any decoding and names the model; its verdict is kept per model
and attention implementation, so it costs two tiny forward passes per model.
"""

from __future__ import annotations

import threading
from typing import Final
from weakref import WeakKeyDictionary

import torch

from ..._errors import InvalidArgumentError
from .stream import _Stream

__all__ = ["check_multi_token_forward"]

#: Per model: the attention implementation probed, and what failed ("" when nothing did).
_VERDICTS: Final[WeakKeyDictionary[torch.nn.Module, tuple[object, str]]] = WeakKeyDictionary()
_LOCK: Final = threading.Lock()


def check_multi_token_forward(name: str, model: torch.nn.Module, vocab: int) -> None:
    """Raise, naming ``name``, if ``model`` cannot run a multi-token forward from its cache."""
    implementation = getattr(getattr(model, "config", None), "_attn_implementation", None)
    with _LOCK:
        known = _VERDICTS.get(model)
    if known is None or known[0] != implementation:
        known = (implementation, _probe(model, vocab))
        with _LOCK:
            _VERDICTS[model] = known
    failure = known[1]
    if failure:
        model_type = getattr(getattr(model, "config", None), "model_type", type(model).__name__)
        raise InvalidArgumentError(
            f"'{name}' is a {model_type} model whose own multi-token cached forward pass is "
            f"broken in transformers ({failure}): speculative decoding cannot verify drafts on "
            f"it. Decode it one token per forward pass (model.generate, backtracking_generate)"
        )


def _probe(model: torch.nn.Module, vocab: int) -> str:
    stream = _Stream(model, vocab, 0)
    try:
        stream.feed([0])
        stream.feed([0, 0])
    except torch.OutOfMemoryError:
        raise
    except (RuntimeError, IndexError, ValueError) as error:
        return f"{type(error).__name__}: {error}"
    return ""
