"""What ``model.generate(..., custom_generate=decoder)`` hands a decoder, taken or refused by name.

``transformers`` 5.25 calls a callable ``custom_generate`` as
``decoder(model, input_ids, logits_processor=, stopping_criteria=,
generation_config=, **model_kwargs)``, where ``model_kwargs`` holds what it
prepared (``attention_mask``, ``position_ids``, an empty ``cache``,
``use_cache``, ``logits_to_keep``) and any model keyword the caller passed;
keywords named in the decoder's own signature (``draft``, ``max_rollbacks``...)
come to it directly instead - except ``max_new_tokens``, which the signature
``generate`` inspects leaves out (``length_in_config``) so that it reaches the
generation config. The decoders use these
keywords or refuse them, never drop one: logits processors, stopping
criteria other than the length and EOS ones ``generate`` derives from the
config, beam search and the other modes, extra outputs and a cache that
already holds tokens are refused; anything else is an unknown keyword.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import ParamSpec, TypeVar

import attrs
from transformers import GenerationConfig
from transformers.cache_utils import Cache
from transformers.generation.configuration_utils import GenerationMode
from transformers.generation.stopping_criteria import EosTokenCriteria, MaxLengthCriteria

from ..._errors import InvalidArgumentError, InvalidArgumentTypeError, check_non_negative_int
from .arguments import shown

__all__ = ["GenerateArgs", "generate_args", "length_in_config"]

_P = ParamSpec("_P")
_R = TypeVar("_R")

#: The keywords ``generate`` passes a ``custom_generate`` function besides the decoder's own.
_TAKEN = (
    "attention_mask",
    "position_ids",
    "generation_config",
    "logits_processor",
    "stopping_criteria",
    "cache",
    "past_key_values",
    "use_cache",
    "logits_to_keep",
)

#: Settings that ask for outputs a ``GenerationResult`` does not have.
_OUTPUTS = (
    "return_dict_in_generate",
    "output_scores",
    "output_logits",
    "output_attentions",
    "output_hidden_states",
)


@attrs.frozen(eq=False)
class GenerateArgs:
    """The ``generate`` keywords a decoder uses: its config, the prompt's mask, EOS and pad ids."""

    config: GenerationConfig | None
    attention_mask: object
    position_ids: object
    #: The EOS and pad ids of the config passed, else of the model's own generation config.
    eos_token_id: object
    pad_token_id: object

    def max_new_tokens(self, value: object, width: int) -> int:
        """``max_new_tokens``, else the config's (its ``max_new_tokens``, or ``max_length``)."""
        config = self.config
        if value is not None or config is None:
            return check_non_negative_int("max_new_tokens", value)
        if config.max_new_tokens is not None:
            return check_non_negative_int("generation_config.max_new_tokens", config.max_new_tokens)
        length = check_non_negative_int("generation_config.max_length", config.max_length)
        if length <= width:
            raise InvalidArgumentError(
                f"'generation_config.max_length' must exceed the prompt's length {width} "
                f"(or pass max_new_tokens), got {length}"
            )
        return length - width


def generate_args(
    decoder: str, kwargs: Mapping[str, object], *, sampled: bool, model: object
) -> GenerateArgs:
    """Check what ``generate`` (or a caller) passed in ``**generate_kwargs``; refuse the rest."""
    unknown = sorted(set(kwargs) - set(_TAKEN))
    if unknown:
        names = ", ".join(repr(name) for name in unknown)
        raise InvalidArgumentError(
            f"{decoder} takes no keyword {names}: it takes its own keywords and what "
            f"model.generate passes a custom_generate function ({', '.join(_TAKEN)})"
        )
    config = _config(kwargs.get("generation_config"), sampled)
    _no_processors(decoder, kwargs.get("logits_processor"))
    _generates_own_criteria(kwargs.get("stopping_criteria"), config)
    for name in ("cache", "past_key_values"):
        _empty_cache(name, kwargs.get(name))
    use_cache = kwargs.get("use_cache")
    if use_cache is not None and use_cache is not True:
        raise InvalidArgumentError(
            f"'use_cache' must be True or None: the decoders decode through a cache they roll "
            f"back, got {shown(use_cache)}"
        )
    logits_to_keep = kwargs.get("logits_to_keep")
    if logits_to_keep is not None:  # a memory hint: the decoders compute the logits they need
        check_non_negative_int("logits_to_keep", logits_to_keep)
    ids = config if config is not None else getattr(model, "generation_config", None)
    return GenerateArgs(
        config,
        kwargs.get("attention_mask"),
        kwargs.get("position_ids"),
        getattr(ids, "eos_token_id", None),
        getattr(ids, "pad_token_id", None),
    )


def _config(value: object, sampled: bool) -> GenerationConfig | None:
    if value is None:
        return None
    if not isinstance(value, GenerationConfig):
        raise InvalidArgumentTypeError(
            f"'generation_config' must be a transformers GenerationConfig or None, "
            f"got {shown(value)}"
        )
    mode = value.get_generation_mode()
    if mode not in (GenerationMode.GREEDY_SEARCH, GenerationMode.SAMPLE):
        raise InvalidArgumentError(
            f"'generation_config' must ask for greedy decoding or sampling (num_beams=1, no "
            f"assistant_model or prompt lookup, no DoLa or contrastive search), got {mode.value}"
        )
    if mode is GenerationMode.SAMPLE and not sampled:
        raise InvalidArgumentError(
            "'generation_config.do_sample' is True but no 'generator' was given: the decoders "
            "sample with a generator (pass generator=torch.Generator()) and decode greedily "
            "without one"
        )
    if value.num_return_sequences not in (None, 1):
        raise InvalidArgumentError(
            f"'generation_config.num_return_sequences' must be 1, got {value.num_return_sequences}"
        )
    for name in _OUTPUTS:
        if getattr(value, name, None):
            raise InvalidArgumentError(
                f"'generation_config.{name}' must be False: the decoders return a "
                f"GenerationResult (sequences and a report), got True"
            )
    return value


def _no_processors(decoder: str, value: object) -> None:
    if value is None:
        return
    if not isinstance(value, Sequence):
        raise InvalidArgumentTypeError(
            f"'logits_processor' must be a list of logits processors, got {shown(value)}"
        )
    if len(value):
        names = ", ".join(type(p).__name__ for p in value)
        raise InvalidArgumentError(
            f"{decoder} applies no logits processors, got {len(value)}: {names} (from "
            f"generation settings such as temperature, top_k with do_sample, repetition_penalty)"
        )


def _generates_own_criteria(value: object, config: GenerationConfig | None) -> None:
    """Only the length and EOS criteria ``generate`` derives from the config: the decoders
    apply ``max_new_tokens`` and ``eos_token_id`` themselves."""
    if value is None:
        return
    if not isinstance(value, Sequence):
        raise InvalidArgumentTypeError(
            f"'stopping_criteria' must be a list of stopping criteria, got {shown(value)}"
        )
    own = (MaxLengthCriteria, EosTokenCriteria) if config is not None else ()
    other = [type(c).__name__ for c in value if not isinstance(c, own)]
    if other:
        raise InvalidArgumentError(
            f"'stopping_criteria' may hold only the length and EOS criteria model.generate "
            f"derives from its generation_config, got {', '.join(other)} (from max_time, "
            f"stop_strings or criteria of your own)"
        )


def _empty_cache(name: str, value: object) -> None:
    if value is None:
        return
    if not isinstance(value, Cache):
        raise InvalidArgumentTypeError(
            f"'{name}' must be an empty transformers Cache or None, got {shown(value)}"
        )
    held = value.get_seq_length()
    if held:
        raise InvalidArgumentError(
            f"'{name}' must be empty: the decoders prefill a cache of their own from input_ids "
            f"(pass the whole prompt), got a {type(value).__name__} holding {held} tokens"
        )


def length_in_config(decoder: Callable[_P, _R]) -> Callable[_P, _R]:
    """``decoder`` with ``max_new_tokens`` left out of the signature ``generate`` inspects.

    ``generate`` takes every keyword a callable ``custom_generate`` names (and
    ``_sample`` does not) out of its generation config and hands it over
    directly; ``max_new_tokens`` taken out that way leaves the config at the
    default ``max_length``, and ``generate`` warns that it is using it. Left
    out of the signature, ``max_new_tokens`` stays in the config, which the
    decoder reads (``GenerateArgs.max_new_tokens``); a direct call passes it
    by name as before, and type checkers see the real signature.
    """
    signature = inspect.signature(decoder)
    kept = [p for p in signature.parameters.values() if p.name != "max_new_tokens"]
    vars(decoder)["__signature__"] = signature.replace(parameters=kept)
    return decoder
