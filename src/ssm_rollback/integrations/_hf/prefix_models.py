"""Which models a ``HybridPrefixCache`` can serve: those that continue a prefill from a cache.

A hit restores the cache after a prefix and computes the rest of the prompt
in one forward pass from it; a model whose own multi-token cached forward
fails, or computes the wrong thing, cannot share prefixes and is refused
when the prefix cache is made.
"""

from __future__ import annotations

from typing import Final

import torch

from ..._errors import InvalidArgumentError
from .probe import _probe as probe_multi_token_forward

__all__ = ["SCAN_DROPS_STATE", "check_continues"]


#: Model types whose multi-token forward from a cache scans from a zero SSM state (transformers'
#: ``mamba_selective_scan`` takes no initial state; its own comment says so): the prefill after a
#: hit would be wrong (logits off by 0.2 on the tiny Falcon-Mamba, in float64 too).
SCAN_DROPS_STATE: Final = frozenset({"falcon_mamba", "mamba"})


def check_continues(model: torch.nn.Module, vocab: int) -> None:
    """Refuse a model that cannot continue a prefill from a cache: a hit could never be used."""
    model_type = getattr(getattr(model, "config", None), "model_type", type(model).__name__)
    if model_type in SCAN_DROPS_STATE:
        failure = "its scan starts from a zero state, not the cached one"
    else:
        failure = probe_multi_token_forward(model, vocab)
    if failure:
        raise InvalidArgumentError(
            f"'model' must run a multi-token forward pass from its own cache (a prefix hit "
            f"continues the prefill from there), got a {model_type} model whose own such pass "
            f"is broken in transformers ({failure}): it cannot share prefixes"
        )
