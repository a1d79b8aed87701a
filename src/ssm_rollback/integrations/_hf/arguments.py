"""The decoders' own arguments, checked once where they enter: token ids, predicates, a generator.

Every token id a caller hands in (``ban``, ``eos_token_id``, ``is_boundary``,
what a ``draft`` function returns) is an integer in ``[0, vocab)``: ``-1``
would index from the end, ``1.7`` would be truncated, ``True`` would be id 1,
so all three are refused by name, as is a mask of the wrong length.
"""

from __future__ import annotations

import operator
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Final, cast

import torch

from ..._errors import InvalidArgumentError, InvalidArgumentTypeError, describe

__all__ = [
    "TokenPredicate",
    "as_predicate",
    "ban_mask",
    "check_callable",
    "check_flag",
    "check_generator",
    "eos_ids",
    "pad_id",
    "shown",
    "text_vocab_size",
    "token_id",
    "token_ids",
]

#: A boundary predicate: a function of one token id, or the set of boundary ids.
TokenPredicate = Callable[[int], bool] | Iterable[int]

_IDS = "token ids (ints)"


def shown(value: object) -> str:
    """``value`` for an error message: a tensor by its shape and dtype, anything else briefly."""
    if isinstance(value, torch.Tensor):
        return f"a {tuple(value.shape)} {str(value.dtype).removeprefix('torch.')} tensor"
    text = describe(value)
    return text if len(text) <= 120 else text[:117] + "..."


def text_vocab_size(model: object, name: str = "model") -> int:
    """The vocabulary the embedding has; a padded LM head may score ids beyond it."""
    text_config = getattr(getattr(model, "config", None), "get_text_config", None)
    if not isinstance(model, torch.nn.Module) or not callable(text_config):
        raise InvalidArgumentTypeError(
            f"'{name}' must be a transformers causal LM with a config, got {type(model).__name__}"
        )
    vocab = getattr(text_config(decoder=True), "vocab_size", None)
    if type(vocab) is not int or vocab < 1:
        raise InvalidArgumentError(
            f"'{name}' config must give a vocab_size >= 1, got {shown(vocab)}"
        )
    return vocab


def token_id(name: str, value: object, vocab: int, verb: str = "be") -> int:
    """``value`` as a token id in ``[0, vocab)``; a bool, a float or anything else is refused."""
    if isinstance(value, bool) or (
        isinstance(value, torch.Tensor) and (value.dtype == torch.bool or value.is_meta)
    ):
        raise InvalidArgumentTypeError(f"'{name}' must {verb} {_IDS}, got {shown(value)}")
    try:
        token = operator.index(value)  # type: ignore[arg-type]  # refused just below if not
    except TypeError:
        raise InvalidArgumentTypeError(f"'{name}' must {verb} {_IDS}, got {shown(value)}") from None
    if not 0 <= token < vocab:
        raise InvalidArgumentError(
            f"'{name}' must {verb} token ids in [0, {vocab}), got {shown(token)}"
        )
    return token


def token_ids(
    name: str, value: object, vocab: int, *, ordered: bool = False, verb: str = "be"
) -> list[int]:
    """A collection of token ids (``ordered``: a sequence or a 1-D tensor), each checked."""
    if not isinstance(value, torch.Tensor) and hasattr(value, "__array__"):
        value = _from_array(name, value, verb)  # a NumPy array: as a tensor
    if isinstance(value, torch.Tensor):
        if value.dim() > 1 or (ordered and value.dim() != 1):
            raise InvalidArgumentTypeError(
                f"'{name}' must {verb} a 1-D tensor of {_IDS}, got {shown(value)}"
            )
        items: list[object] = list(value.reshape(-1))
    elif (
        isinstance(value, str | bytes | Mapping)
        or not isinstance(value, Iterable)
        or (ordered and not isinstance(value, Sequence))
    ):
        kind = "a list, tuple or 1-D tensor" if ordered else "a collection"
        raise InvalidArgumentTypeError(f"'{name}' must {verb} {kind} of {_IDS}, got {shown(value)}")
    else:
        items = list(value)
    return [token_id(name, item, vocab, verb) for item in items]


def _from_array(name: str, value: object, verb: str) -> torch.Tensor:
    try:
        return torch.as_tensor(value)
    except (TypeError, ValueError, RuntimeError):
        raise InvalidArgumentTypeError(f"'{name}' must {verb} {_IDS}, got {shown(value)}") from None


def ban_mask(ban: object, vocab: int) -> torch.Tensor | None:
    """``ban`` (ids, or a bool mask of exactly ``vocab`` entries) as a bool mask, or ``None``."""
    if ban is None:
        return None
    if not isinstance(ban, torch.Tensor) and hasattr(ban, "__array__"):
        ban = _from_array("ban", ban, "be")
    if isinstance(ban, torch.Tensor) and ban.dtype == torch.bool:
        if ban.shape != (vocab,):
            raise InvalidArgumentError(
                f"'ban' as a bool mask must have shape ({vocab},) (one entry per token id), "
                f"got {shown(ban)}"
            )
        return ban.cpu().clone()
    mask = torch.zeros(vocab, dtype=torch.bool)
    mask[token_ids("ban", ban, vocab)] = True
    return mask


def as_predicate(name: str, value: object, vocab: int) -> Callable[[int], bool]:
    """``value`` as a function of a token id whose answers are checked to be bools."""
    if callable(value):
        return _checked_predicate(name, value)
    if isinstance(value, str | bytes) or not isinstance(value, Iterable | torch.Tensor):
        raise InvalidArgumentTypeError(
            f"'{name}' must be a function of a token id or a collection of token ids, "
            f"got {shown(value)}"
        )
    ids = frozenset(token_ids(name, value, vocab))
    return ids.__contains__


def _checked_predicate(name: str, predicate: Callable[[int], object]) -> Callable[[int], bool]:
    def checked(token: int) -> bool:
        answer = predicate(token)
        if isinstance(answer, bool):
            return answer
        if isinstance(answer, torch.Tensor) and answer.dtype == torch.bool and answer.numel() == 1:
            return bool(answer)
        if type(answer).__name__ == "bool_":  # a NumPy bool
            return bool(answer)
        raise InvalidArgumentTypeError(
            f"'{name}' must return a bool for a token id, got {shown(answer)} for {token}"
        )

    return checked


def check_callable(name: str, value: object, *, optional: bool = False) -> None:
    if (value is None and optional) or callable(value):
        return
    raise InvalidArgumentTypeError(f"'{name}' must be callable, got {shown(value)}")


def check_flag(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise InvalidArgumentTypeError(f"'{name}' must be a bool, got {shown(value)}")
    return value


def check_generator(generator: object, model: torch.nn.Module) -> torch.Generator | None:
    """``None``, or a ``torch.Generator`` on the model's kind of device (it samples there)."""
    if generator is None:
        return None
    if not isinstance(generator, torch.Generator):
        raise InvalidArgumentTypeError(
            f"'generator' must be a torch.Generator or None, got {shown(generator)}"
        )
    device = _device(model)
    if generator.device.type != device.type:
        raise InvalidArgumentError(
            f"'generator' must be on the model's device ({device.type}), "
            f"got one on {generator.device.type}"
        )
    return generator


def _device(model: torch.nn.Module) -> torch.device:
    for parameter in model.parameters():
        return parameter.device
    raise InvalidArgumentError(f"'model' must have parameters, got a {type(model).__name__}")


def eos_ids(eos_token_id: object, configured: object, vocab: int) -> tuple[int, ...]:
    """The ids that end a row, in the order given (the first pads, as in ``generate``):
    ``eos_token_id``, or the generation config's when it is None.

    A config's id past the vocabulary is the model's own business: it never ends a row, as in
    ``generate``. One passed here is a mistake, and refused."""
    name = "eos_token_id"
    if eos_token_id is None:
        name, eos_token_id, vocab = "generation_config.eos_token_id", configured, sys.maxsize
        if eos_token_id is None:
            return ()
    if isinstance(eos_token_id, int) and not isinstance(eos_token_id, bool):
        return (token_id(name, eos_token_id, vocab),)
    return tuple(dict.fromkeys(token_ids(name, eos_token_id, vocab)))


#: A pad id goes into an int64 tensor, as in ``generate``.
_MAX_PAD: Final = (1 << 63) - 1


def pad_id(pad_token_id: object, configured: object, eos: Sequence[int]) -> int:
    """The id that pads rows that ended early: ``pad_token_id``, the config's, the first EOS
    (as ``generate`` pads), or 0."""
    if pad_token_id is not None:
        if isinstance(pad_token_id, bool) or not isinstance(pad_token_id, int):
            raise InvalidArgumentTypeError(
                f"'pad_token_id' must be an int >= 0 or None, got {shown(pad_token_id)}"
            )
        if not 0 <= pad_token_id <= _MAX_PAD:
            raise InvalidArgumentError(
                f"'pad_token_id' must be an int in [0, 2**63) (an int64, as generate's output "
                f"holds it) or None, got {shown(pad_token_id)}"
            )
        return int(pad_token_id)
    configured_int = isinstance(configured, int) and not isinstance(configured, bool)
    if configured_int and 0 <= cast(int, configured) <= _MAX_PAD:  # else generate's business
        return cast(int, configured)
    return eos[0] if eos else 0
