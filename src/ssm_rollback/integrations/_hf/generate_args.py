"""What ``model.generate(..., custom_generate=decoder)`` hands a decoder, taken or refused by name.

``transformers`` 5.25 calls a callable ``custom_generate`` as
``decoder(model, input_ids, logits_processor=, stopping_criteria=,
generation_config=, **model_kwargs)``, where ``model_kwargs`` holds what it
prepared (``attention_mask``, ``position_ids``, an empty ``cache``,
``use_cache``, ``logits_to_keep``) and any model keyword the caller passed;
keywords named in the decoder's own signature (``draft``, ``max_rollbacks``...)
come to it directly instead - except ``max_new_tokens``, ``eos_token_id`` and
``pad_token_id``, which the signature ``generate`` inspects leaves out
(``settings_in_config``) so that they reach the generation config, where
``generate`` builds its processors and the attention mask from them. Its
``streamer`` and ``assistant_model`` it does not hand over: those are read
from its frame (``streaming.generate_call``).

A direct call takes the same keywords, and generation settings as
``generate`` takes them (``temperature=``, ``do_sample=``...; a
``generation_config``, updated by them, over the model's own): the config
and the logits processors are prepared as ``generate`` prepares them
(``processors``); without ``attention_mask`` the pad id's positions are masked
as ``generate`` masks them.
Beam search and the other modes, stopping criteria other than the length and
EOS ones ``generate`` derives from the config, outputs the decoders do not
build (attentions, hidden states; ``output_scores`` and ``output_logits``
they build) and a cache that already holds tokens are refused; anything else is an
unknown keyword, refused by name.
"""

from __future__ import annotations

import copy
import inspect
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import ParamSpec, TypeVar, cast

import attrs
import torch
from transformers import GenerationConfig
from transformers.cache_utils import Cache, DynamicCache
from transformers.generation.logits_process import (
    LogitsProcessorList,
)
from transformers.generation.utils import GenerationMixin

from ..._errors import (
    InvalidArgumentError,
    InvalidArgumentTypeError,
    check_int_at_least,
    check_non_negative_int,
)
from .arguments import shown
from .decoding import Outputs
from .generate_checks import (
    check_criteria,
    check_modes,
    check_token_settings,
    given_processors,
)
from .processors import build_processors, generative_model
from .prompts import Prompts, read_prompts
from .result_cache import CacheUse, cache_use, passed_cache
from .scoring import Scoring

__all__ = ["GenerateArgs", "generate_args", "settings_in_config"]

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
    "streamer",
)


@attrs.frozen(eq=False)
class GenerateArgs:
    """The ``generate`` keywords a decoder uses: its config, the prompt's mask, EOS and pad ids,
    and the processors."""

    config: GenerationConfig
    #: In a direct call, the total length with no ``max_length`` set anywhere (not by keyword,
    #: the config given or the model's own), ``generate``'s default counted from the prompt: the
    #: model's ``max_position_embeddings`` (``sys.maxsize`` without one); else ``None``.
    default_length_cap: int | None
    attention_mask: object
    position_ids: object
    #: The EOS and pad ids of the config passed, else of the model's own generation config.
    eos_token_id: object
    pad_token_id: object
    processors: LogitsProcessorList
    #: Whether ``processors`` are ``generate``'s, built for this call (else to be built).
    prepared: bool
    #: The per-token outputs asked for (``output_scores``, ``output_logits``).
    outputs: Outputs = attrs.field(factory=Outputs)
    #: The empty cache passed (``cache`` or ``past_key_values``: ``cache_name``), if any.
    cache: Cache | None = None
    cache_name: str = "cache"

    def cache_use(self, model: torch.nn.Module, prompts: Prompts, *, prefixed: bool) -> CacheUse:
        """What the call does with a cache (``result_cache``): a passed one is the caller's
        in a direct call, and through ``generate`` when the caller gave it to ``generate``."""
        callers = not self.prepared or bool(getattr(self.cache, "_is_user_defined", False))
        returned = bool(self.config.return_dict_in_generate)

        def layers() -> list[type]:
            made = DynamicCache(config=getattr(model, "config", None))
            return [type(layer) for layer in made.layers]

        return cache_use(
            self.cache_name,
            self.cache,
            callers=callers,
            returned=returned,
            rows=len(prompts.rows),
            prefixed=prefixed,
            padded=prompts.padded > 0,
            layers=layers,
        )

    def max_new_tokens(self, value: object, width: int) -> int:
        """``max_new_tokens``, else the config's length as ``generate`` reads it (its
        ``_prepare_generated_length``): the config's ``max_new_tokens``, else its ``max_length``
        less the prompt; a ``max_length`` nobody set (the default, 20) counts new tokens, the
        whole capped at the model's ``max_position_embeddings``."""
        config = self.config
        if value is not None:
            return check_int_at_least("max_new_tokens", value, 1)  # generate() refuses 0
        if config.max_new_tokens is not None:
            return check_int_at_least("generation_config.max_new_tokens", config.max_new_tokens, 1)
        length = check_non_negative_int("generation_config.max_length", config.max_length)
        cap = self.default_length_cap
        if cap is not None:
            length = min(width + length, cap)
        if length <= width:
            capped = f" (the default length capped at max_position_embeddings {cap})" * (
                cap is not None
            )
            raise InvalidArgumentError(
                f"'generation_config.max_length'{capped} must exceed the prompt's length {width} "
                f"(or pass max_new_tokens), got {shown(length)}"
            )
        return length - width

    def prompts(
        self, input_ids: object, vocab: int, pad_token_id: object, eos: Sequence[int]
    ) -> Prompts:
        """The prompts with the call's mask. Without one, a direct call masks the positions
        of the pad id (``pad_token_id``, else the config's) as ``generate`` does when none is
        given, unless that id is also an EOS id (``generate`` then masks nothing);
        ``generate`` passes the mask it derived."""
        pad = self.pad_token_id if pad_token_id is None else pad_token_id
        pad_ok = isinstance(pad, int) and not isinstance(pad, bool) and pad not in eos
        masks = self.attention_mask is None and not self.prepared and pad_ok
        at = cast(int, pad) if masks else None
        return read_prompts(input_ids, self.attention_mask, self.position_ids, vocab, pad=at)

    def scoring(
        self,
        model: torch.nn.Module,
        prompts: Prompts,
        generator: torch.Generator | None,
        *,
        eos: Sequence[int],
        max_new_tokens: int,
    ) -> Scoring:
        """How the call turns logits into tokens: ``generate``'s processors (built here for a
        direct call, as ``generate`` builds them for the padded prompts and their mask, with
        the call's EOS ids and length), greedy or sampled."""
        config, processors = self.config, self.processors
        ids = torch.tensor(prompts.given, device=prompts.device)
        sampled = generator is not None or bool(config.do_sample)
        if not self.prepared:
            config = copy.deepcopy(config)
            config.do_sample = sampled  # a generator samples, with generate's sampling settings
            # What generate puts in its config before building them: min_new_tokens holds back
            # these EOS ids, forced_eos_token_id and the like read the whole length.
            config.eos_token_id = list(eos) or None
            config.max_length = ids.shape[-1] + max_new_tokens
            processors = build_processors(model, config, ids, prompts.mask(), processors)
        elif sampled and not config.do_sample:
            raise InvalidArgumentError(
                "'generator' samples, but model.generate was asked for greedy decoding and built "
                "no sampling processors: pass do_sample=True with a generator, got "
                "do_sample=False"
            )
        return Scoring(processors if len(processors) else None, sampled, generator)


def generate_args(
    decoder: str,
    kwargs: Mapping[str, object],
    *,
    model: torch.nn.Module,
    vocab: int,
    call: Mapping[str, object] | None,
) -> GenerateArgs:
    """Check what ``generate`` (``call``: its arguments) or a direct caller passed in
    ``**generate_kwargs``; refuse the rest by name, and token ids past ``vocab`` in the
    settings. (``streamer`` is the stream's.)"""
    if call is not None and call.get("assistant_model") is not None:
        hint = (
            "takes its assistant as draft=model" if "speculative" in decoder else "drafts nothing"
        )
        raise InvalidArgumentError(
            f"'assistant_model' must be None: {decoder} {hint}, got a "
            f"{type(call.get('assistant_model')).__name__}"
        )
    kwargs = dict(kwargs)
    given = kwargs.get("generation_config")
    cap = None if call is not None else _default_length_cap(model, given, kwargs.get("max_length"))
    taken = {name: kwargs.pop(name) for name in _TAKEN if name in kwargs}
    if call is None:
        config, kwargs = _direct_config(model, given, kwargs)
    else:  # generate passes the config it prepared
        config = _checked_config(given) or _direct_config(model, None, {})[0]
    unknown = sorted(kwargs)
    if unknown:
        names = ", ".join(repr(name) for name in unknown)
        raise InvalidArgumentError(
            f"{decoder} takes no keyword {names}: it takes its own keywords, generation settings "
            f"(GenerationConfig fields) and what model.generate passes a custom_generate "
            f"function ({', '.join(_TAKEN)})"
        )
    check_modes(config)
    check_token_settings(config, vocab)
    processors = given_processors(taken.get("logits_processor"))
    check_criteria(taken.get("stopping_criteria"), config, call is not None)
    cache_name, cache = passed_cache(taken.get("cache"), taken.get("past_key_values"))
    use_cache = taken.get("use_cache")
    if use_cache is not None and use_cache is not True:
        raise InvalidArgumentError(
            f"'use_cache' must be True or None: the decoders decode through a cache they roll "
            f"back, got {shown(use_cache)}"
        )
    # A config of the caller's asking for none, as generate reads it (a use_cache keyword
    # wins); the model's own config's use_cache=False only saves memory in generate: ignored.
    if call is None and use_cache is None and getattr(given, "use_cache", None) is False:
        raise InvalidArgumentError(
            "'generation_config.use_cache' must be True: the decoders decode through a cache "
            "they roll back, got False"
        )
    logits_to_keep = taken.get("logits_to_keep")
    if logits_to_keep is not None:  # a memory hint: the decoders compute the logits they need
        check_non_negative_int("logits_to_keep", logits_to_keep)
    return GenerateArgs(
        config,
        cap,
        taken.get("attention_mask"),
        taken.get("position_ids"),
        config.eos_token_id,
        config.pad_token_id,
        processors,
        call is not None,
        Outputs(bool(config.output_scores), bool(config.output_logits)),
        cache,
        cache_name,
    )


def _direct_config(
    model: torch.nn.Module, given: object, settings: dict[str, object]
) -> tuple[GenerationConfig, dict[str, object]]:
    """The config ``generate`` would prepare from ``given`` and keyword ``settings`` (over the
    model's own config); the keywords that are no config field."""
    config = _checked_config(given)
    try:
        prepared, rest = GenerationMixin._prepare_generation_config(
            generative_model(model), config, **settings
        )
    except (TypeError, ValueError) as error:
        raise InvalidArgumentError(f"generation settings must be valid: {error}") from None
    # generate copies output_attentions and the like into ``rest``: the config's, refused there
    return prepared, {name: settings[name] for name in rest if name in settings}


def _default_length_cap(model: torch.nn.Module, given: object, max_length: object) -> int | None:
    """``GenerateArgs.default_length_cap`` of a direct call (``generate``'s
    ``has_default_max_length``, then its cap)."""
    own = getattr(model, "generation_config", None)
    if max_length is not None or any(
        getattr(config, "max_length", None) is not None for config in (given, own)
    ):
        return None
    cap = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    return cap if isinstance(cap, int) and not isinstance(cap, bool) else sys.maxsize


def _checked_config(value: object) -> GenerationConfig | None:
    if value is None:
        return None
    if not isinstance(value, GenerationConfig):
        raise InvalidArgumentTypeError(
            f"'generation_config' must be a transformers GenerationConfig or None, "
            f"got {shown(value)}"
        )
    return value


#: A decoder's keywords that are generation settings: ``generate`` must keep them in its config.
_IN_CONFIG = ("max_new_tokens", "eos_token_id", "pad_token_id")


def settings_in_config(decoder: Callable[_P, _R]) -> Callable[_P, _R]:
    """``decoder`` with its generation settings (``_IN_CONFIG``) left out of the signature
    ``generate`` inspects.

    ``generate`` takes every keyword a callable ``custom_generate`` names (and
    ``_sample`` does not) out of its generation config and hands it over
    directly. Taken out that way, ``max_new_tokens`` leaves the config at the
    default ``max_length``; ``eos_token_id`` never reaches the processors
    built from the config (``min_new_tokens`` would not hold it back); and
    ``pad_token_id`` never reaches the attention mask ``generate`` derives
    from the padding. Left out of the signature, they stay in the config,
    which the decoder reads (``GenerateArgs``); a direct call passes them by
    name as before, and type checkers see the real signature.
    """
    signature = inspect.signature(decoder)
    kept = [p for p in signature.parameters.values() if p.name not in _IN_CONFIG]
    vars(decoder)["__signature__"] = signature.replace(parameters=kept)
    return decoder
