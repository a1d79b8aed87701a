"""Which models a ``HybridPrefixCache`` can serve, and which caches are that model's to store.

A hit restores the cache after a prefix and computes the rest of the prompt
in one forward pass from it; a model whose own multi-token cached forward
fails, or computes the wrong thing, cannot share prefixes and is refused
when the prefix cache is made.

A published cache is handed out to the next prompt that extends its tokens,
so it must be one the model can continue: one row, and the layers its own
forward pass makes (their count and kinds, each state tensor's shape but
the dims that grow with the tokens, its dtype and device). ``CacheLayout``
reads that off the model's own caches after one token and after two, and
refuses any other cache by name before anything is stored. A cache of
another model of the very same layout (other weights) cannot be told apart.
"""

from __future__ import annotations

from typing import Final, final

import attrs
import torch
from transformers.cache_utils import Cache

from ..._errors import InvalidArgumentError, shown
from .cache_pool import cache_layers
from .probe import _probe as probe_multi_token_forward

__all__ = ["SCAN_DROPS_STATE", "CacheLayout", "check_continues"]


#: Model types whose multi-token forward from a cache scans from a zero SSM state (transformers'
#: ``mamba_selective_scan`` takes no initial state; its own comment says so): the prefill after a
#: hit would be wrong (logits off by 0.2 on the tiny Falcon-Mamba, in float64 too).
SCAN_DROPS_STATE: Final = frozenset({"falcon_mamba", "mamba"})

_NOTHING_STORED: Final = ": nothing stored"


def check_continues(model: torch.nn.Module, vocab: int) -> None:
    """Refuse a model that cannot continue a prefill from a cache: a hit could never be used."""
    model_type = _model_type(model)
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


def _model_type(model: torch.nn.Module) -> str:
    return str(getattr(getattr(model, "config", None), "model_type", type(model).__name__))


@attrs.frozen
class _Tensor:
    """One state tensor of a layer: its shape (``None`` where it grows with the tokens)."""

    shape: tuple[int | None, ...]
    dtype: torch.dtype
    device: torch.device

    def fits(self, tensor: torch.Tensor) -> bool:
        return (
            tensor.dim() == len(self.shape)
            and all(w is None or w == g for w, g in zip(self.shape, tensor.shape, strict=True))
            and (tensor.dtype, tensor.device) == (self.dtype, self.device)
        )

    def __str__(self) -> str:
        dims = ", ".join("*" if dim is None else str(dim) for dim in self.shape)
        return (
            f"({dims}{',' if len(self.shape) == 1 else ''}) {_dtype(self.dtype)} on {self.device}"
        )


@final
@attrs.frozen(eq=False)  # holds dicts: compare by identity
class CacheLayout:
    """The layers a model's own forward pass makes: ``check`` refuses any other cache."""

    model_type: str
    kinds: tuple[type[object], ...]
    tensors: tuple[dict[str, _Tensor], ...]  # per layer, by attribute path

    @classmethod
    def of(cls, model: torch.nn.Module, one: Cache, two: Cache) -> CacheLayout:
        """The layout of ``model``'s caches ``one`` and ``two``, after one and two tokens."""
        kinds: list[type[object]] = []
        tensors: list[dict[str, _Tensor]] = []
        for first, second in zip(cache_layers(one), cache_layers(two), strict=True):
            kinds.append(type(first))
            grown = _state_tensors(second)
            tensors.append(
                {
                    where: _Tensor(_fixed(t.shape, grown.get(where)), t.dtype, t.device)
                    for where, t in _state_tensors(first).items()
                }
            )
        return cls(_model_type(model), tuple(kinds), tuple(tensors))

    def check(self, cache: Cache) -> None:
        """Refuse a ``cache`` of more than one row, or not of the layout of the model's own."""
        layers = cache_layers(cache)
        if len(layers) != len(self.kinds):
            raise self._refused(f"{len(self.kinds)} layers", f"{len(layers)}")
        for i, (kind, wanted, layer) in enumerate(
            zip(self.kinds, self.tensors, layers, strict=True)
        ):
            if type(layer) is not kind:
                raise self._refused(f"a {kind.__name__} as layer {i}", f"a {type(layer).__name__}")
            given = _state_tensors(layer)
            if set(given) != set(wanted):
                raise self._refused(
                    f"state tensors {sorted(wanted)} in layer {i}", shown(sorted(given))
                )
            for where, want in wanted.items():
                if not want.fits(tensor := given[where]):
                    raise self._misfit(f"layers[{i}].{where}", want, tensor)

    def _misfit(self, where: str, want: _Tensor, tensor: torch.Tensor) -> InvalidArgumentError:
        got = f"{tuple(tensor.shape)} {_dtype(tensor.dtype)} on {tensor.device}"
        if want.shape[:1] == (1,) and tensor.dim() and tensor.shape[0] != 1:
            return InvalidArgumentError(
                f"'cache' must hold one row (batch size 1: a prefix is one prompt's state), "
                f"got batch size {tensor.shape[0]} ({where} is {got}){_NOTHING_STORED}"
            )
        return self._refused(f"{where} shaped {want}", got)

    def _refused(self, expected: str, got: str) -> InvalidArgumentError:
        return InvalidArgumentError(
            f"'cache' must be a cache of the {self.model_type} model this prefix cache serves, "
            f"with {expected}, got {got}{_NOTHING_STORED}"
        )


def _state_tensors(layer: object) -> dict[str, torch.Tensor]:
    """The tensors a cache layer holds, by attribute path (``conv_states[0]``)."""
    found: dict[str, torch.Tensor] = {}

    def walk(where: str, value: object) -> None:
        if isinstance(value, torch.Tensor):
            found[where] = value
        elif isinstance(value, dict):
            for key, item in value.items():
                walk(f"{where}[{key}]", item)
        elif isinstance(value, list | tuple):
            for key, item in enumerate(value):
                walk(f"{where}[{key}]", item)

    for name, value in getattr(layer, "__dict__", {}).items():
        walk(name, value)
    return found


def _fixed(one: torch.Size, two: torch.Tensor | None) -> tuple[int | None, ...]:
    """The dims of a tensor after one token that stay after two; ``None`` for one that grew
    (all kept as they are where the two do not even agree on the dims)."""
    if two is None or two.dim() != len(one):
        return tuple(one)
    return tuple(a if a == b else None for a, b in zip(one, two.shape, strict=True))


def _dtype(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")
